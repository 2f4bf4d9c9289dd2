package frame

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testNow is the fixed clock of every test: frames are created 30s before it.
var testNow = time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)

func testOptions() Options {
	o := DefaultOptions()
	o.Now = func() time.Time { return testNow }
	return o
}

const (
	frameID = "6f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f"
	leaseID = "0b7e3f0a-9c1d-4e2f-a3b4-c5d6e7f8a9b0"
	queryID = "1c2d3e4f-5a6b-4c7d-8e9f-a0b1c2d3e4f5"
	diagID  = "d4c3b2a1-0f9e-4d8c-b7a6-958473625140"
)

// validPayloads holds one valid payload per kind; the tests break them one
// rule at a time.
func validPayloads() map[string]map[string]any {
	return map[string]map[string]any{
		KindAgentAdvisory: {
			"advisory_text": "Editing protocol/frame/envelope.go for the next hour.",
			"file_refs":     []any{"protocol/frame/envelope.go"},
			"worktree":      "/src/aspd",
			"branch":        "feat/frame",
			"content_type":  "text/plain",
		},
		KindAgentBroadcast: {
			"broadcast_text": "feat/frame merged into main.",
			"event_class":    "merged",
			"refs":           []any{"feat/frame", "a1b2c3d"},
		},
		KindAgentHandover: {
			"previous_session_id": "sess-7f3a",
			"next_session_id":     "sess-8a21",
			"handover_body":       "Filter parser done; scope parser needs tests.",
			"pointer_refs":        []any{"protocol/frame/scope.go"},
		},
		KindAgentLockRequest: {
			"resource": "protocol/frame/payload.go",
			"lease_id": leaseID,
			"ttl_ms":   600000,
			"intent":   "Rewriting the schema table.",
		},
		KindAgentLockRelease: {
			"lease_id": leaseID,
			"resource": "protocol/frame/payload.go",
		},
		KindAgentLeaseExtend: {
			"lease_id":          leaseID,
			"additional_ttl_ms": 300000,
		},
		KindAgentQuery: {
			"query_text":     "Who is editing go.mod?",
			"query_id":       queryID,
			"response_scope": "@alice.cc/cc-*",
			"timeout_ms":     30000,
		},
		KindAgentResponse: {
			"query_id":      queryID,
			"response_text": "Nobody; it is free.",
			"responder":     "cc@sess-8a21",
		},
		KindAgentReturnEvent: {
			"return_event_ref": "ret-2026-05-10-001",
			"query_id":         queryID,
			"summary":          "Two sessions answered.",
		},
		KindAgentBindingMoment: {
			"synopsis":        "Merge the frame package now: every kind validates and fuzzing is clean.",
			"findings":        []any{"All fifteen kinds validate.", "A 60s fuzz run found nothing."},
			"recommendations": []any{"Merge to main.", "Wire Validate into the submit handler."},
			"offer":           "Ask for detail on any item.",
			"question": map[string]any{
				"stem": "Should the frame package be merged now?",
				"options": []any{
					map[string]any{"label": "Merge now", "reasoning": "Tests and fuzzing are green."},
					map[string]any{"label": "Wait a day", "reasoning": "A second review may find gaps."},
					map[string]any{"label": "Split it", "reasoning": "Smaller changes review faster."},
				},
				"recommended_idx": 0,
				"hatches":         map[string]any{"free_text": true, "dialogue": true},
			},
			"meta": map[string]any{"decision_class": "merge", "calibration_note": "Earlier I said it needed another day."},
		},
		KindPeerDiagnosticRequest: {
			"symptom":        "SSE stream drops every 30s.",
			"diagnostic_id":  diagID,
			"substrate_refs": []any{"log:stream-42"},
			"severity":       "degraded",
		},
		KindPeerDiagnosticResponse: {
			"diagnostic_id": diagID,
			"finding":       "The proxy idle timeout is 30s.",
			"remediation":   "Send a keepalive every 15s.",
		},
		KindIntentDeclare: {
			"convergence_class": "vcs.change_request",
			"payload_ref":       "cr:draft-17",
			"acted_by":          "~alice",
			"drafted_with":      "~cc-example-model",
			"declared_at":       "2026-05-10T11:59:00Z",
			"ttl":               900000,
			"withdrawable":      true,
			"urgency":           "normal",
		},
		KindIntentWithdraw: {
			"convergence_class": "vcs.change_request",
			"intent_ref":        "intent:17",
			"withdrawn_at":      "2026-05-10T11:59:10+02:00",
		},
		KindFlushExecuted: {
			"convergence_class": "vcs.change_request",
			"result_ref":        "cr:1234",
			"batch_refs":        []any{"intent:17", "intent:18"},
			"executed_at":       "2026-05-10T11:59:20.123Z",
		},
	}
}

// validFrame returns a valid frame of kind as a generic JSON document.
func validFrame(kind string) map[string]any {
	return map[string]any{
		"envelope_version":            "1.0",
		"frame_id":                    frameID,
		"kind":                        kind,
		"sender_handle":               "@alice.cc",
		"recipient_handle":            "@alice.cc",
		"created_at":                  "2026-05-10T11:59:30Z",
		"ttl_ms":                      60000,
		"acted_by":                    "~alice",
		"drafted_with":                "~cc-example-model",
		"provenance_compute_location": "local-only",
		"provenance_method":           []any{"session-context-snapshot"},
		"provenance_context_check":    "passed",
		"provenance_basis":            "agent-channel",
		"payload":                     validPayloads()[kind],
	}
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// del, as a value for setPath, deletes the member.
type deleteMarker struct{}

var del = deleteMarker{}

// setPath sets (or, with del, deletes) the value at a path such as
// "payload.question.options[2].label" in a generic JSON document.
func setPath(t testing.TB, doc map[string]any, path string, v any) {
	t.Helper()
	type step struct {
		key string
		idx int // -1: key step
	}
	var steps []step
	for _, part := range strings.Split(path, ".") {
		key, rest, _ := strings.Cut(part, "[")
		steps = append(steps, step{key, -1})
		for rest != "" {
			num, after, _ := strings.Cut(rest, "]")
			n, err := strconv.Atoi(num)
			if err != nil {
				t.Fatalf("bad path %q", path)
			}
			steps = append(steps, step{idx: n})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	var cur any = doc
	for i, s := range steps {
		last := i == len(steps)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if v == del {
					delete(c, s.key)
				} else {
					c[s.key] = v
				}
				return
			}
			cur = c[s.key]
		case []any:
			if last {
				c[s.idx] = v
				return
			}
			cur = c[s.idx]
		default:
			t.Fatalf("path %q: cannot descend into %T", path, cur)
		}
	}
}

// deepCopy returns an independent copy of a generic JSON document.
func deepCopy(t testing.TB, doc map[string]any) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(marshal(t, doc)))
	d.UseNumber()
	var out map[string]any
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// octets returns a string of exactly n UTF-8 octets made of two-octet
// characters (and one 'a' when n is odd): about n/2 characters, so a
// validator counting runes instead of octets lets it through.
func octets(n int) string {
	return strings.Repeat("é", n/2) + strings.Repeat("a", n%2)
}
