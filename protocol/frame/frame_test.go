package frame

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// A breakCase sets (or deletes) one value of a valid frame and states the
// exact outcome: code "" means the frame must still pass.
type breakCase struct {
	name  string
	path  string
	value any
	code  string
	field string // defaults to path
}

func ok(name, path string, v any) breakCase { return breakCase{name: name, path: path, value: v} }

func bad(name, path string, v any, code string) breakCase {
	return breakCase{name: name, path: path, value: v, code: code}
}

func badAt(name, path string, v any, code, field string) breakCase {
	return breakCase{name: name, path: path, value: v, code: code, field: field}
}

const (
	missing  = CodeFieldMissing
	invalidC = CodeFieldInvalid
	unknown  = CodeFieldUnknown
	mismatch = CodePayloadKindMismatch
)

// envelopeCases break the envelope; they run against a frame of every kind.
var envelopeCases = []breakCase{
	bad("version 1.1", "envelope_version", "1.1", CodeEnvelopeVersionUnsupported),
	bad("version 1", "envelope_version", "1", CodeEnvelopeVersionUnsupported),
	bad("version number", "envelope_version", 1.0, invalidC),
	bad("version missing", "envelope_version", del, missing),

	ok("frame_id upper case", "frame_id", strings.ToUpper(frameID)),
	bad("frame_id missing", "frame_id", del, missing),
	bad("frame_id not uuid", "frame_id", "frame-1", invalidC),
	bad("frame_id no hyphens", "frame_id", strings.ReplaceAll(frameID, "-", ""), invalidC),
	bad("frame_id braces", "frame_id", "{"+frameID[1:35]+"}", invalidC),
	bad("frame_id non-hex", "frame_id", "6f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5g", invalidC),
	bad("frame_id version 1", "frame_id", "6f1c2d3e-4b5a-1c6d-9e8f-0a1b2c3d4e5f", invalidC),
	bad("frame_id variant 7", "frame_id", "6f1c2d3e-4b5a-4c6d-7e8f-0a1b2c3d4e5f", invalidC),
	bad("frame_id variant c", "frame_id", "6f1c2d3e-4b5a-4c6d-ce8f-0a1b2c3d4e5f", invalidC),
	bad("frame_id number", "frame_id", 42, invalidC),

	bad("kind unknown", "kind", "agent_advisories", CodeKindUnknown),
	bad("kind upper case", "kind", "AGENT_ADVISORY", CodeKindUnknown),
	bad("kind missing", "kind", del, missing),
	bad("kind number", "kind", 3, invalidC),

	bad("sender bare", "sender_handle", "alice", invalidC),
	bad("sender tilde", "sender_handle", "~alice", invalidC),
	bad("sender no dot", "sender_handle", "@alice", invalidC),
	bad("sender upper case", "sender_handle", "@Alice.cc", invalidC),
	bad("sender two dots", "sender_handle", "@alice.cc.x", invalidC),
	bad("sender too long", "sender_handle", "@"+strings.Repeat("a", 60)+".ccc", invalidC),
	bad("sender missing", "sender_handle", del, missing),
	ok("recipient other handle", "recipient_handle", "@bob.cursor"),
	bad("recipient empty", "recipient_handle", "", invalidC),
	bad("recipient missing", "recipient_handle", del, missing),

	ok("created_at lower-case t and z", "created_at", "2026-05-10t11:59:30z"),
	ok("created_at offset and fraction", "created_at", "2026-05-10T13:59:30.123+02:00"),
	ok("created_at 23h ago", "created_at", "2026-05-09T13:00:00Z"),
	ok("created_at 4m ahead", "created_at", "2026-05-10T12:04:00Z"),
	bad("created_at no zone", "created_at", "2026-05-10T11:59:30", invalidC),
	bad("created_at space", "created_at", "2026-05-10 11:59:30Z", invalidC),
	bad("created_at comma fraction", "created_at", "2026-05-10T11:59:30,5Z", invalidC),
	bad("created_at offset +24:00", "created_at", "2026-05-11T11:59:30+24:00", invalidC),
	bad("created_at offset no colon", "created_at", "2026-05-10T13:59:30+0200", invalidC),
	bad("created_at day 32", "created_at", "2026-05-32T11:59:30Z", invalidC),
	bad("created_at unix", "created_at", 1778414370, invalidC),
	bad("created_at 25h ago", "created_at", "2026-05-09T11:00:00Z", invalidC),
	bad("created_at 6m ahead", "created_at", "2026-05-10T12:06:00Z", invalidC),
	bad("created_at missing", "created_at", del, missing),

	ok("ttl_ms absent", "ttl_ms", del),
	ok("ttl_ms zero", "ttl_ms", 0),
	ok("ttl_ms 2^53-1", "ttl_ms", json.Number("9007199254740991")),
	bad("ttl_ms negative", "ttl_ms", -1, invalidC),
	bad("ttl_ms fraction", "ttl_ms", 1.5, invalidC),
	bad("ttl_ms 1.0", "ttl_ms", json.Number("1.0"), invalidC),
	bad("ttl_ms exponent", "ttl_ms", json.Number("1e3"), invalidC),
	bad("ttl_ms 2^53", "ttl_ms", json.Number("9007199254740992"), invalidC),
	bad("ttl_ms huge", "ttl_ms", json.Number("123456789012345678901234567890"), invalidC),
	bad("ttl_ms string", "ttl_ms", "60000", invalidC),
	bad("ttl_ms null", "ttl_ms", nil, invalidC),

	bad("acted_by bare", "acted_by", "alice", invalidC),
	bad("acted_by ASP handle", "acted_by", "@alice.cc", invalidC),
	bad("acted_by upper case", "acted_by", "~Alice", invalidC),
	bad("acted_by tilde only", "acted_by", "~", invalidC),
	bad("acted_by missing", "acted_by", del, missing),
	bad("drafted_with space", "drafted_with", "~cc example", invalidC),
	bad("drafted_with missing", "drafted_with", del, missing),

	bad("compute_location other", "provenance_compute_location", "cloud", invalidC),
	bad("compute_location missing", "provenance_compute_location", del, missing),
	ok("method two tags", "provenance_method", []any{"session-context-snapshot", "pre-compaction-snapshot"}),
	bad("method empty", "provenance_method", []any{}, invalidC),
	bad("method string", "provenance_method", "snapshot", invalidC),
	badAt("method number tag", "provenance_method", []any{"a", 1}, invalidC, "provenance_method[1]"),
	badAt("method empty tag", "provenance_method", []any{""}, invalidC, "provenance_method[0]"),
	bad("method missing", "provenance_method", del, missing),
	ok("return_ref present", "provenance_return_ref", "ret-1"),
	bad("return_ref empty", "provenance_return_ref", "", invalidC),
	bad("return_ref number", "provenance_return_ref", 1, invalidC),
	bad("context_check failed", "provenance_context_check", "failed", invalidC),
	bad("context_check missing", "provenance_context_check", del, missing),
	bad("basis empty", "provenance_basis", "", invalidC),
	bad("basis missing", "provenance_basis", del, missing),

	bad("unknown top-level field", "priority", "high", unknown),
	bad("nested provenance object", "provenance", map[string]any{"basis": "x"}, unknown),
	bad("payload member at top level", "advisory_text", "x", unknown),

	bad("payload missing", "payload", del, missing),
	bad("payload array", "payload", []any{}, invalidC),
	bad("payload null", "payload", nil, invalidC),
	bad("payload string", "payload", "{}", invalidC),
	bad("unknown payload field", "payload.bogus", true, unknown),
	ok("content_type", "payload.content_type", "application/json"),
	bad("content_type empty", "payload.content_type", "", invalidC),
	bad("content_type number", "payload.content_type", 7, invalidC),
}

// kindCases break each payload. requiredFields adds a field-missing case
// for every required member.
var requiredFields = map[string][]string{
	KindAgentAdvisory:          {"advisory_text"},
	KindAgentBroadcast:         {"broadcast_text", "event_class"},
	KindAgentHandover:          {"previous_session_id", "handover_body"},
	KindAgentLockRequest:       {"resource", "lease_id", "ttl_ms"},
	KindAgentLockRelease:       {"lease_id", "resource"},
	KindAgentLeaseExtend:       {"lease_id", "additional_ttl_ms"},
	KindAgentQuery:             {"query_text", "query_id", "response_scope", "timeout_ms"},
	KindAgentResponse:          {"query_id", "response_text", "responder"},
	KindAgentReturnEvent:       {"return_event_ref", "summary"},
	KindAgentBindingMoment:     {"synopsis", "findings", "recommendations", "offer", "question", "question.stem", "question.options", "question.recommended_idx", "question.options[1].label", "question.options[2].reasoning"},
	KindPeerDiagnosticRequest:  {"symptom", "diagnostic_id", "severity"},
	KindPeerDiagnosticResponse: {"diagnostic_id", "finding"},
	KindIntentDeclare:          {"convergence_class", "payload_ref", "acted_by", "drafted_with", "declared_at", "ttl", "withdrawable"},
	KindIntentWithdraw:         {"convergence_class", "intent_ref", "withdrawn_at"},
	KindFlushExecuted:          {"convergence_class", "result_ref", "executed_at"},
}

var kindCases = map[string][]breakCase{
	KindAgentAdvisory: {
		ok("text 2048 octets", "payload.advisory_text", octets(2048)),
		bad("text 2049 octets in 1025 runes", "payload.advisory_text", octets(2049), invalidC),
		bad("text empty", "payload.advisory_text", "", invalidC),
		bad("text number", "payload.advisory_text", 42, invalidC),
		bad("text null", "payload.advisory_text", nil, invalidC),
		ok("worktree 512 octets", "payload.worktree", octets(512)),
		bad("worktree 513 octets", "payload.worktree", octets(513), invalidC),
		ok("worktree empty", "payload.worktree", ""),
		ok("branch 256 octets", "payload.branch", octets(256)),
		bad("branch 257 octets", "payload.branch", octets(257), invalidC),
		ok("file_refs absent", "payload.file_refs", del),
		ok("file_refs empty", "payload.file_refs", []any{}),
		bad("file_refs string", "payload.file_refs", "a.go", invalidC),
		badAt("file_refs number", "payload.file_refs", []any{"a.go", 1}, invalidC, "payload.file_refs[1]"),
		badAt("file_refs empty ref", "payload.file_refs", []any{""}, invalidC, "payload.file_refs[0]"),
		bad("broadcast member", "payload.event_class", "merged", mismatch),
	},
	KindAgentBroadcast: {
		ok("text 2048 octets", "payload.broadcast_text", octets(2048)),
		bad("text 2049 octets", "payload.broadcast_text", octets(2049), invalidC),
		ok("event_class other", "payload.event_class", "other"),
		bad("event_class unknown", "payload.event_class", "deleted", invalidC),
		bad("event_class upper case", "payload.event_class", "MERGED", invalidC),
		bad("event_class array", "payload.event_class", []any{"merged"}, invalidC),
		badAt("refs number", "payload.refs", []any{2}, invalidC, "payload.refs[0]"),
		bad("advisory member", "payload.advisory_text", "x", mismatch),
	},
	KindAgentHandover: {
		ok("previous 128 octets", "payload.previous_session_id", octets(128)),
		bad("previous 129 octets", "payload.previous_session_id", octets(129), invalidC),
		bad("previous empty", "payload.previous_session_id", "", invalidC),
		ok("next absent", "payload.next_session_id", del),
		ok("next empty", "payload.next_session_id", ""),
		bad("next 129 octets", "payload.next_session_id", octets(129), invalidC),
		ok("body empty", "payload.handover_body", ""),
		bad("body number", "payload.handover_body", 7, invalidC),
		bad("pointer_refs object", "payload.pointer_refs", map[string]any{}, invalidC),
		bad("query member", "payload.query_id", queryID, mismatch),
	},
	KindAgentLockRequest: {
		ok("resource 512 octets", "payload.resource", octets(512)),
		bad("resource 513 octets", "payload.resource", octets(513), invalidC),
		bad("lease_id not uuid", "payload.lease_id", "lease-1", invalidC),
		bad("lease_id version 5", "payload.lease_id", "0b7e3f0a-9c1d-5e2f-a3b4-c5d6e7f8a9b0", invalidC),
		ok("ttl_ms upper bound", "payload.ttl_ms", 3600000),
		ok("ttl_ms 1", "payload.ttl_ms", 1),
		bad("ttl_ms zero", "payload.ttl_ms", 0, invalidC),
		bad("ttl_ms over an hour", "payload.ttl_ms", 3600001, invalidC),
		bad("ttl_ms string", "payload.ttl_ms", "600000", invalidC),
		bad("ttl_ms fraction", "payload.ttl_ms", json.Number("600000.0"), invalidC),
		ok("intent 2048 octets", "payload.intent", octets(2048)),
		bad("intent 2049 octets", "payload.intent", octets(2049), invalidC),
		bad("lease_extend member", "payload.additional_ttl_ms", 1000, mismatch),
	},
	KindAgentLockRelease: {
		bad("lease_id variant 0", "payload.lease_id", "0b7e3f0a-9c1d-4e2f-03b4-c5d6e7f8a9b0", invalidC),
		bad("resource 513 octets", "payload.resource", octets(513), invalidC),
		bad("resource empty", "payload.resource", "", invalidC),
		bad("lock_request member", "payload.ttl_ms", 1000, mismatch),
	},
	KindAgentLeaseExtend: {
		ok("lease_id upper case", "payload.lease_id", strings.ToUpper(leaseID)),
		bad("lease_id number", "payload.lease_id", 12, invalidC),
		ok("additional 3600000", "payload.additional_ttl_ms", 3600000),
		bad("additional zero", "payload.additional_ttl_ms", 0, invalidC),
		bad("additional negative", "payload.additional_ttl_ms", -5, invalidC),
		bad("additional over an hour", "payload.additional_ttl_ms", 3600001, invalidC),
		bad("additional bool", "payload.additional_ttl_ms", true, invalidC),
		bad("lock member", "payload.resource", "x", mismatch),
	},
	KindAgentQuery: {
		bad("text 2049 octets", "payload.query_text", octets(2049), invalidC),
		bad("query_id version 3", "payload.query_id", "1c2d3e4f-5a6b-3c7d-8e9f-a0b1c2d3e4f5", invalidC),
		ok("scope handle", "payload.response_scope", "@alice.cc"),
		ok("scope session", "payload.response_scope", "@alice.cc/cc@sess-1"),
		ok("scope org role", "payload.response_scope", "org:acme/members/eng/*"),
		ok("scope accord", "payload.response_scope", "accord:globex/grant:support"),
		bad("scope bare name", "payload.response_scope", "alice", invalidC),
		bad("scope tilde form", "payload.response_scope", "~alice/*", invalidC),
		bad("scope empty", "payload.response_scope", "", invalidC),
		bad("scope 513 octets", "payload.response_scope", "@alice.cc/"+strings.Repeat("a", 502)+"*", invalidC),
		ok("timeout 1", "payload.timeout_ms", 1),
		ok("timeout 2^53-1", "payload.timeout_ms", json.Number("9007199254740991")),
		bad("timeout zero", "payload.timeout_ms", 0, invalidC),
		bad("timeout 2^53", "payload.timeout_ms", json.Number("9007199254740992"), invalidC),
		bad("response member", "payload.responder", "x", mismatch),
	},
	KindAgentResponse: {
		bad("query_id missing hyphen", "payload.query_id", "1c2d3e4f5a6b-4c7d-8e9f-a0b1c2d3e4f5a", invalidC),
		bad("text empty", "payload.response_text", "", invalidC),
		bad("text 2049 octets", "payload.response_text", octets(2049), invalidC),
		ok("responder 128 octets", "payload.responder", octets(128)),
		bad("responder 129 octets", "payload.responder", octets(129), invalidC),
		bad("query member", "payload.timeout_ms", 5, mismatch),
	},
	KindAgentReturnEvent: {
		ok("ref 256 octets", "payload.return_event_ref", octets(256)),
		bad("ref 257 octets", "payload.return_event_ref", octets(257), invalidC),
		ok("query_id absent", "payload.query_id", del),
		bad("query_id not uuid", "payload.query_id", "q1", invalidC),
		bad("summary 2049 octets", "payload.summary", octets(2049), invalidC),
		bad("diagnostic member", "payload.finding", "x", mismatch),
	},
	KindAgentBindingMoment: {
		ok("meta absent", "payload.meta", del),
		ok("meta empty", "payload.meta", map[string]any{}),
		ok("findings empty", "payload.findings", []any{}),
		ok("two options", "payload.question.options", []any{
			map[string]any{"label": "a", "reasoning": "b"}, map[string]any{"label": "c", "reasoning": "d"}}),
		ok("four options", "payload.question.options", []any{
			map[string]any{"label": "a", "reasoning": "b"}, map[string]any{"label": "c", "reasoning": "d"},
			map[string]any{"label": "e", "reasoning": "f"}, map[string]any{"label": "g", "reasoning": "h"}}),
		bad("one option", "payload.question.options", []any{map[string]any{"label": "a", "reasoning": "b"}}, invalidC),
		bad("five options", "payload.question.options", []any{
			map[string]any{"label": "a", "reasoning": "b"}, map[string]any{"label": "c", "reasoning": "d"},
			map[string]any{"label": "e", "reasoning": "f"}, map[string]any{"label": "g", "reasoning": "h"},
			map[string]any{"label": "i", "reasoning": "j"}}, invalidC),
		bad("option label number", "payload.question.options[2].label", 3, invalidC),
		bad("option not object", "payload.question.options[1]", "Wait a day", invalidC),
		bad("option extra member", "payload.question.options[0].score", 0.9, unknown),
		ok("recommended last", "payload.question.recommended_idx", 2),
		bad("recommended out of range", "payload.question.recommended_idx", 3, invalidC),
		bad("recommended negative", "payload.question.recommended_idx", -1, invalidC),
		bad("recommended 1.0", "payload.question.recommended_idx", json.Number("1.0"), invalidC),
		bad("recommended string", "payload.question.recommended_idx", "0", invalidC),
		bad("recommended list", "payload.question.recommended_idx", []any{0, 1}, invalidC),
		ok("hatches absent defaults open", "payload.question.hatches", del),
		ok("hatches empty defaults open", "payload.question.hatches", map[string]any{}),
		ok("free_text closed", "payload.question.hatches", map[string]any{"free_text": false}),
		ok("dialogue closed", "payload.question.hatches", map[string]any{"free_text": true, "dialogue": false}),
		bad("both hatches closed", "payload.question.hatches", map[string]any{"free_text": false, "dialogue": false}, invalidC),
		bad("hatch string", "payload.question.hatches.free_text", "yes", invalidC),
		bad("hatch unknown", "payload.question.hatches.escape", true, unknown),
		bad("question string", "payload.question", "Merge?", invalidC),
		bad("question extra member", "payload.question.context", "x", unknown),
		badAt("finding number", "payload.findings", []any{"a", 2}, invalidC, "payload.findings[1]"),
		bad("recommendations string", "payload.recommendations", "merge", invalidC),
		bad("synopsis number", "payload.synopsis", 1, invalidC),
		bad("meta decision_class number", "payload.meta.decision_class", 5, invalidC),
		bad("meta extra member", "payload.meta.owner", "x", unknown),
		bad("options flattened into payload", "payload.options", []any{}, mismatch),
		bad("hatches at payload level", "payload.hatches", map[string]any{}, mismatch),
	},
	KindPeerDiagnosticRequest: {
		bad("symptom 2049 octets", "payload.symptom", octets(2049), invalidC),
		bad("diagnostic_id all zero", "payload.diagnostic_id", "00000000-0000-0000-0000-000000000000", invalidC),
		ok("severity blocked", "payload.severity", "blocked"),
		bad("severity critical", "payload.severity", "critical", invalidC),
		badAt("substrate_refs null", "payload.substrate_refs", []any{nil}, invalidC, "payload.substrate_refs[0]"),
		bad("response member", "payload.remediation", "x", mismatch),
	},
	KindPeerDiagnosticResponse: {
		bad("finding 2049 octets", "payload.finding", octets(2049), invalidC),
		ok("remediation absent", "payload.remediation", del),
		ok("remediation 2048 octets", "payload.remediation", octets(2048)),
		bad("remediation 2049 octets", "payload.remediation", octets(2049), invalidC),
		bad("request member", "payload.severity", "info", mismatch),
	},
	KindIntentDeclare: {
		bad("class empty", "payload.convergence_class", "", invalidC),
		bad("payload_ref number", "payload.payload_ref", 1, invalidC),
		bad("acted_by bare", "payload.acted_by", "alice", invalidC),
		bad("drafted_with ASP", "payload.drafted_with", "@alice.cc", invalidC),
		bad("declared_at no zone", "payload.declared_at", "2026-05-10T11:59:00", invalidC),
		ok("declared_at old (no window)", "payload.declared_at", "2020-01-01T00:00:00Z"),
		ok("ttl zero", "payload.ttl", 0),
		bad("ttl negative", "payload.ttl", -1, invalidC),
		bad("withdrawable string", "payload.withdrawable", "true", invalidC),
		ok("urgency absent", "payload.urgency", del),
		ok("urgency urgent", "payload.urgency", "urgent"),
		bad("urgency high", "payload.urgency", "high", invalidC),
		bad("withdraw member", "payload.intent_ref", "intent:1", mismatch),
	},
	KindIntentWithdraw: {
		bad("intent_ref empty", "payload.intent_ref", "", invalidC),
		bad("withdrawn_at date only", "payload.withdrawn_at", "2026-05-10", invalidC),
		bad("flush member", "payload.result_ref", "cr:1", mismatch),
	},
	KindFlushExecuted: {
		ok("batch_refs absent", "payload.batch_refs", del),
		badAt("batch_refs empty ref", "payload.batch_refs", []any{"intent:1", ""}, invalidC, "payload.batch_refs[1]"),
		bad("executed_at prose", "payload.executed_at", "yesterday", invalidC),
		bad("declare member", "payload.withdrawable", false, mismatch),
	},
}

func runBreak(t *testing.T, kind string, bc breakCase) {
	t.Helper()
	doc := deepCopy(t, validFrame(kind))
	setPath(t, doc, bc.path, bc.value)
	fr, err := Validate(marshal(t, doc), testOptions())
	if bc.code == "" {
		if err != nil {
			t.Fatalf("want valid, got %v", err)
		}
		if fr == nil {
			t.Fatal("nil frame without error")
		}
		return
	}
	if err == nil {
		t.Fatalf("want %s at %s, got a valid frame", bc.code, bc.path)
	}
	field := bc.field
	if field == "" {
		field = bc.path
	}
	if err.Code != bc.code || err.Field != field {
		t.Fatalf("want %s at %s, got %s at %s (%s)", bc.code, field, err.Code, err.Field, err.Message)
	}
	if fr != nil {
		t.Fatal("frame returned with an error")
	}
	if err.Message == "" {
		t.Fatal("empty message")
	}
}

func TestValidateEveryKind(t *testing.T) {
	if len(validPayloads()) != 15 || len(kindCases) != 15 || len(requiredFields) != 15 {
		t.Fatal("the tables must cover all fifteen kinds")
	}
	for _, kind := range Kinds() {
		t.Run(kind, func(t *testing.T) {
			t.Run("valid", func(t *testing.T) {
				fr, err := Validate(marshal(t, validFrame(kind)), testOptions())
				if err != nil {
					t.Fatal(err)
				}
				if fr.Kind != kind {
					t.Fatalf("Kind = %q", fr.Kind)
				}
			})
			var cases []breakCase
			for _, f := range requiredFields[kind] {
				cases = append(cases, bad("missing "+f, "payload."+f, del, missing))
			}
			cases = append(cases, kindCases[kind]...)
			cases = append(cases, envelopeCases...)
			for _, bc := range cases {
				t.Run(bc.name, func(t *testing.T) { runBreak(t, kind, bc) })
			}
		})
	}
}

// TestValidateRaw covers what a generic JSON document cannot express.
func TestValidateRaw(t *testing.T) {
	valid := string(marshal(t, validFrame(KindAgentAdvisory)))
	// withText replaces the advisory text with a raw JSON string literal.
	withText := func(lit string) string {
		return strings.Replace(valid, `"Editing protocol/frame/envelope.go for the next hour."`, lit, 1)
	}
	if withText(`"x"`) == valid {
		t.Fatal("fixture did not change")
	}
	cases := []struct {
		name, raw, code, field string
	}{
		{"surrogate pair", withText(`"\ud83d\ude00"`), "", ""},
		{"escaped backslash then u", withText(`"\\ud800"`), "", ""},
		{"lone high surrogate", withText(`"\ud800"`), invalidC, "payload.advisory_text"},
		{"high surrogate then letter", withText(`"\ud800x"`), invalidC, "payload.advisory_text"},
		{"two high surrogates", withText(`"\ud800\ud800"`), invalidC, "payload.advisory_text"},
		{"lone low surrogate", withText(`"a\uDC00"`), invalidC, "payload.advisory_text"},
		{"invalid UTF-8", withText("\"caf\xe9\""), invalidC, ""},
		{"escaped multi-byte within bound", withText(`"` + strings.Repeat(`\u00e9`, 1024) + `"`), "", ""},
		{"escaped multi-byte over bound", withText(`"` + strings.Repeat(`\u00e9`, 1024) + `a"`), invalidC, "payload.advisory_text"},
		{"duplicate top-level member", strings.Replace(valid, `{`, `{"frame_id":"`+frameID+`",`, 1), invalidC, "frame_id"},
		{"duplicate last member", strings.TrimSuffix(valid, "}") + `,"ttl_ms":60000}`, invalidC, "ttl_ms"},
		{"duplicate payload member", strings.Replace(valid, `"advisory_text":`, `"advisory_text":"a","advisory_text":`, 1), invalidC, "payload.advisory_text"},
		{"duplicate differing only in case is unknown", strings.Replace(valid, `"advisory_text":`, `"Advisory_text":"a","advisory_text":`, 1), unknown, "payload.Advisory_text"},
		{"member name with a dot", strings.Replace(valid, `{`, `{"a.b":1,`, 1), unknown, `["a.b"]`},
		{"trailing data", valid + ` x`, invalidC, ""},
		{"two objects", valid + valid, invalidC, ""},
		{"trailing whitespace", valid + " \n", "", ""},
		{"top-level array", "[" + valid + "]", invalidC, ""},
		{"top-level string", `"frame"`, invalidC, ""},
		{"empty input", ``, invalidC, ""},
		{"truncated inside the payload", valid[:len(valid)/2], invalidC, "payload.content_type"},
		{"final brace missing", strings.TrimSuffix(valid, "}"), invalidC, ""},
		{"trailing comma", strings.TrimSuffix(valid, "}") + ",}", invalidC, ""},
		{"deep nesting", strings.Replace(valid, `"payload":{`, `"payload":{"deep":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`,`, 1), invalidC, "payload.deep" + strings.Repeat("[0]", 14)},
		{"version checked before anything else", `{"envelope_version":"2.0","kind":"nope","extra":1}`, CodeEnvelopeVersionUnsupported, "envelope_version"},
		{"kind checked before stray members", `{"envelope_version":"1.0","kind":"nope","extra":1}`, CodeKindUnknown, "kind"},
		{"stray member before missing fields", `{"envelope_version":"1.0","kind":"agent_advisory","extra":1}`, unknown, "extra"},
		{"missing fields in section order", `{"envelope_version":"1.0","kind":"agent_advisory"}`, missing, "frame_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Validate([]byte(c.raw), testOptions())
			switch {
			case c.code == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case c.code == "":
			case err == nil:
				t.Fatalf("want %s at %q, got a valid frame", c.code, c.field)
			case err.Code != c.code || err.Field != c.field:
				t.Fatalf("want %s at %q, got %s at %q (%s)", c.code, c.field, err.Code, err.Field, err.Message)
			}
		})
	}
}

func TestValidateFrameFields(t *testing.T) {
	doc := validFrame(KindAgentAdvisory)
	doc["frame_id"] = strings.ToUpper(frameID)
	doc["provenance_return_ref"] = "ret-9"
	raw := []byte(strings.Replace(string(marshal(t, doc)), `"payload":{`, `"payload": {  `, 1))
	fr, err := Validate(raw, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := Frame{
		EnvelopeVersion: "1.0",
		FrameID:         frameID,
		Kind:            KindAgentAdvisory,
		SenderHandle:    "@alice.cc",
		RecipientHandle: "@alice.cc",
		ActedBy:         "~alice",
		DraftedWith:     "~cc-example-model",
		CreatedAt:       time.Date(2026, 5, 10, 11, 59, 30, 0, time.UTC),
		Provenance: Provenance{
			ComputeLocation: "local-only",
			Method:          []string{"session-context-snapshot"},
			ReturnRef:       "ret-9",
			ContextCheck:    "passed",
			Basis:           "agent-channel",
		},
		ContentType: "text/plain",
	}
	if fr.TTLms == nil || *fr.TTLms != 60000 {
		t.Fatalf("TTLms = %v", fr.TTLms)
	}
	got := *fr
	got.TTLms, got.Payload = nil, nil
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("CreatedAt = %v", got.CreatedAt)
	}
	got.CreatedAt = want.CreatedAt
	if g, w := marshal(t, got), marshal(t, want); !bytes.Equal(g, w) {
		t.Fatalf("frame\n got %s\nwant %s", g, w)
	}
	wantPayload := marshal(t, validPayloads()[KindAgentAdvisory])
	if !bytes.HasPrefix(fr.Payload, []byte("{  ")) || !bytes.Equal(compact(t, fr.Payload), wantPayload) {
		t.Fatalf("Payload is not the sender's bytes: %s", fr.Payload)
	}
	// The payload is a copy: changing the input afterwards does not reach it.
	before := slices.Clone(fr.Payload)
	clear(raw)
	if !bytes.Equal(fr.Payload, before) {
		t.Fatal("Payload aliases the input")
	}

	delete(doc, "ttl_ms")
	delete(doc["payload"].(map[string]any), "content_type")
	fr, err = Validate(marshal(t, doc), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if fr.TTLms != nil || fr.ContentType != "" {
		t.Fatalf("absent ttl_ms/content_type: %v %q", fr.TTLms, fr.ContentType)
	}
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestValidateOptions(t *testing.T) {
	raw := marshal(t, validFrame(KindAgentAdvisory))
	for name, o := range map[string]Options{
		"zero":          {},
		"negative skew": {Now: time.Now, MaxSkewPast: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Validate accepted invalid Options")
				}
			}()
			Validate(raw, o)
		})
	}
	d := DefaultOptions()
	if d.MaxSkewPast != 24*time.Hour || d.MaxSkewFuture != 5*time.Minute || d.Now == nil {
		t.Fatalf("DefaultOptions = %+v", d)
	}
	// A tighter window refuses what the default admits.
	o := testOptions()
	o.MaxSkewPast = 10 * time.Second
	if _, err := Validate(raw, o); err == nil || err.Field != "created_at" {
		t.Fatalf("10s window: got %v", err)
	}
}

func TestKinds(t *testing.T) {
	k := Kinds()
	if len(k) != 15 {
		t.Fatalf("%d kinds", len(k))
	}
	seen := map[string]bool{}
	for _, kind := range k {
		if seen[kind] {
			t.Fatalf("duplicate kind %s", kind)
		}
		seen[kind] = true
		if _, ok := payloadSchemas[kind]; !ok {
			t.Fatalf("no payload shape for %s", kind)
		}
	}
	k[0] = "changed"
	if Kinds()[0] != KindAgentAdvisory {
		t.Fatal("Kinds exposes the catalogue")
	}
}

func TestIsFrame(t *testing.T) {
	for _, c := range []struct {
		data map[string]json.RawMessage
		want bool
	}{
		{map[string]json.RawMessage{"envelope_version": json.RawMessage(`"1.0"`)}, true},
		{map[string]json.RawMessage{"envelope_version": json.RawMessage(`null`)}, true},
		{map[string]json.RawMessage{"kind": json.RawMessage(`"agent_advisory"`)}, false},
		{map[string]json.RawMessage{}, false},
		{nil, false},
	} {
		if got := IsFrame(c.data); got != c.want {
			t.Errorf("IsFrame(%v) = %v", c.data, got)
		}
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{Code: CodeFieldInvalid, Field: "payload.options", Message: "bad"}
	if got := e.Error(); got != "frame: field-invalid at payload.options: bad" {
		t.Fatal(got)
	}
	e.Field = ""
	if got := e.Error(); got != "frame: field-invalid: bad" {
		t.Fatal(got)
	}
	b := marshal(t, e)
	if string(b) != `{"code":"field-invalid","message":"bad"}` {
		t.Fatal(string(b))
	}
}

func TestErrorCodes(t *testing.T) {
	// The draft's section 10 list, verbatim.
	want := []string{
		"envelope-version-unsupported", "kind-unknown", "payload-kind-mismatch",
		"field-missing", "field-invalid", "field-unknown", "sender-identity-mismatch",
		"scope-unauthorised", "scope-unimplemented", "filter-axis-unknown", "filter-value-invalid",
	}
	got := []string{
		CodeEnvelopeVersionUnsupported, CodeKindUnknown, CodePayloadKindMismatch,
		CodeFieldMissing, CodeFieldInvalid, CodeFieldUnknown, CodeSenderIdentityMismatch,
		CodeScopeUnauthorised, CodeScopeUnimplemented, CodeFilterAxisUnknown, CodeFilterValueInvalid,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("codes %v", got)
	}
}

func BenchmarkValidate(b *testing.B) {
	for _, kind := range []string{KindAgentAdvisory, KindAgentBindingMoment} {
		raw := marshal(b, validFrame(kind))
		opts := testOptions()
		b.Run(kind, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Validate(raw, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestParserEscapes checks the string and number scanner against
// encoding/json on inputs a fuzzer finds only slowly.
func TestParserEscapes(t *testing.T) {
	for _, in := range []string{
		`{"s":"\"\\\/\b\f\n\r\t"}`,
		`{"s":"\u0000\u001f\u00e9\u20ac\uD83D\uDE00\uffff"}`,
		`{"s":"é€😀 plain"}`,
		`{"n":[0,-0,1,-1,1.5,-1.5e-3,1E+2,12345678901234567890]}`,
		`{"":{"a":[[],{},true,false,null]}}`,
		" \t\r\n{ \"a\" : [ 1 , 2 ] } \n",
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10}`,
	} {
		checkParser(t, []byte(in))
		if _, err := decode([]byte(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
	for _, in := range []string{
		`{"s":"\x"}`, `{"s":"\u12"}`, `{"s":"\u12G4"}`, "{\"s\":\"a\tb\"}", `{"s":"abc`, `{"s":"abc\`,
		`{"n":01}`, `{"n":1.}`, `{"n":.5}`, `{"n":-}`, `{"n":1e}`, `{"n":+1}`, `{"n":0x10}`, `{"n":NaN}`,
		`{"a":tru}`, `{"a":nul}`, `{"a":True}`, `{a:1}`, `{"a" 1}`, `{"a":1,}`, `{"a":[1,]}`, `{"a":[1 2]}`,
		`{"a":1}}`, `{"a":{}`, `{'a':1}`, `{"a":1}/*c*/`,
	} {
		checkParser(t, []byte(in))
		if _, err := decode([]byte(in)); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
	// Duplicates are found in small and large objects alike.
	for _, in := range []string{
		`{"a":1,"a":2}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"a":10}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"j":11}`,
		`{"\u0061":1,"a":2}`,
	} {
		if _, err := decode([]byte(in)); err == nil || !strings.HasPrefix(err.Message, "duplicate member") {
			t.Errorf("%s: %v", in, err)
		}
	}
}
