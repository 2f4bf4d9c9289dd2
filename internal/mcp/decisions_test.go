package mcp_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
)

// envelope is a well-formed binding-moment envelope (docs/decisions.md),
// as a client would send it.
func envelope() map[string]any {
	return map[string]any{
		"synopsis":        "Ship the release today: every check is green.",
		"findings":        []any{"CI is green.", "No open blockers."},
		"recommendations": []any{"Tag v1.2.", "Announce it."},
		"offer":           "Ask for detail on any item.",
		"question": map[string]any{
			"stem": "When should v1.2 ship?",
			"options": []any{
				map[string]any{"label": "Today", "reasoning": "Nothing blocks it."},
				map[string]any{"label": "Monday", "reasoning": "More soak time."},
			},
			"recommended_idx": json.Number("0"),
			"hatches":         map[string]any{"free_text": true, "dialogue": true},
		},
	}
}

// sameJSON fails unless got and want encode to the same JSON value.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	norm := func(v any) any {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var out any
		unmarshal(t, b, &out)
		return out
	}
	if g, w := norm(got), norm(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: %v, want %v", what, g, w)
	}
}

type decision struct {
	MomentID      string               `json:"moment_id"`
	SessionID     string               `json:"session_id"`
	Sequence      int64                `json:"sequence"`
	Emitter       string               `json:"emitter"`
	Resolver      string               `json:"resolver"`
	Status        string               `json:"status"`
	BindingMoment any                  `json:"binding_moment"`
	Resolution    *protocol.Resolution `json:"resolution"`
}

type pending struct {
	Decisions     []decision `json:"decisions"`
	BindingMoment any        `json:"binding_moment"`
}

// TestDecisionRoundTrip: an agent asks its principal with request_decision,
// the principal finds it with pending_decisions (and read_events carries
// the envelope beside the events), resolves it with resolve_decision, the
// agent's pending await_decision returns the resolution, and a second
// resolution is refused with already_resolved.
func TestDecisionRoundTrip(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *app.App) {
		mkAgent(t, a, "@acme.bot")
		mkAgent(t, a, "@acme.nick")
		bot := connect(t, a, "@acme.bot")
		nick := connect(t, a, "@acme.nick")
		var s protocol.CreateSessionResponse
		bot.ok("create_session", map[string]any{"invite": []string{"@acme.nick"}}, &s)
		nick.ok("join_session", map[string]any{"session_id": s.SessionID}, nil)

		// A malformed envelope is refused, naming the member relative to
		// the tool's arguments, and nothing is sent.
		bad := envelope()
		q := bad["question"].(map[string]any)
		q["options"] = q["options"].([]any)[:1]
		body := bot.fail(frame.CodeFieldInvalid, "request_decision", map[string]any{"session_id": s.SessionID, "binding_moment": bad})
		if body.Error.Field != "binding_moment.question.options" {
			t.Fatalf("malformed envelope: field %q, want binding_moment.question.options", body.Error.Field)
		}
		// A resolver who is not a participant is refused too.
		bot.fail(frame.CodeFieldInvalid, "request_decision", map[string]any{"session_id": s.SessionID, "binding_moment": envelope(), "resolver": "@acme.bot"})

		var req struct {
			MomentID      string `json:"moment_id"`
			Sequence      int64  `json:"sequence"`
			BindingMoment any    `json:"binding_moment"`
		}
		bot.ok("request_decision", map[string]any{"session_id": s.SessionID, "binding_moment": envelope(), "resolver": "@acme.nick"}, &req)
		if !strings.HasPrefix(req.MomentID, "msg_") || req.Sequence < 1 {
			t.Fatalf("request_decision answered %+v", req)
		}
		sameJSON(t, "request_decision's binding_moment", req.BindingMoment, envelope())

		// The emitter may not resolve its own moment, so it is not pending
		// for it; it is for the named resolver.
		var mine pending
		bot.ok("pending_decisions", nil, &mine)
		if len(mine.Decisions) != 0 || mine.BindingMoment != nil {
			t.Fatalf("the emitter's pending decisions: %+v", mine)
		}
		var p pending
		nick.ok("pending_decisions", nil, &p)
		if len(p.Decisions) != 1 {
			t.Fatalf("the resolver's pending decisions: %+v", p)
		}
		d := p.Decisions[0]
		if d.MomentID != req.MomentID || d.SessionID != s.SessionID || d.Sequence != req.Sequence ||
			d.Emitter != "@acme.bot" || d.Resolver != "@acme.nick" || d.Status != "open" || d.Resolution != nil {
			t.Fatalf("pending decision %+v", d)
		}
		sameJSON(t, "pending decision's envelope", d.BindingMoment, envelope())
		sameJSON(t, "pending_decisions' binding_moment", p.BindingMoment, envelope())

		// read_events carries the envelope beside the events.
		var page struct {
			Events        []event `json:"events"`
			BindingMoment any     `json:"binding_moment"`
		}
		nick.ok("read_events", map[string]any{"session_id": s.SessionID}, &page)
		sameJSON(t, "read_events' binding_moment", page.BindingMoment, envelope())

		var open decision
		bot.ok("await_decision", map[string]any{"moment_id": req.MomentID, "timeout_seconds": 0}, &open)
		if open.Status != "open" || open.Resolution != nil {
			t.Fatalf("await_decision before any resolution: %+v", open)
		}

		bot.fail(protocol.CodeNotResolver, "resolve_decision", map[string]any{"moment_id": req.MomentID, "outcome": "selected", "option_idx": 0})
		nick.fail(frame.CodeFieldInvalid, "resolve_decision", map[string]any{"moment_id": req.MomentID, "outcome": "selected", "option_idx": 5})
		nick.fail(protocol.CodeNotFound, "resolve_decision", map[string]any{"moment_id": "msg_00000000000000000000000000", "outcome": "selected", "option_idx": 0})

		// The agent waits; the principal's resolution ends the wait long
		// before its timeout (a wake-up, or at worst the one-second re-read).
		awaitArgs := map[string]any{"moment_id": req.MomentID, "timeout_seconds": 20}
		start := time.Now()
		done := bot.start("await_decision", awaitArgs)
		time.Sleep(200 * time.Millisecond)
		var res protocol.SendMessageResponse
		nick.ok("resolve_decision", map[string]any{"moment_id": req.MomentID, "outcome": "selected", "option_idx": 1}, &res)
		if !strings.HasPrefix(res.MessageID, "msg_") || res.Sequence <= req.Sequence {
			t.Fatalf("resolve_decision answered %+v", res)
		}
		var got decision
		select {
		case res := <-done:
			bot.check("await_decision", awaitArgs, res, &got)
		case <-time.After(15 * time.Second):
			t.Fatal("a pending await_decision did not return the resolution")
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("await_decision returned the resolution after %v, want well before its 20 s timeout", el)
		}
		r := got.Resolution
		if got.Status != "resolved" || r == nil || r.Outcome != "selected" || r.OptionIdx == nil || *r.OptionIdx != 1 ||
			r.ResolvedBy != "@acme.nick" || r.ResolutionID != res.MessageID || r.Sequence != res.Sequence {
			t.Fatalf("await_decision after the resolution: %+v (resolution %+v)", got, r)
		}

		// The first resolution wins; the moment is no longer pending.
		nick.fail(protocol.CodeAlreadyResolved, "resolve_decision", map[string]any{"moment_id": req.MomentID, "outcome": "answered", "answer": "Friday"})
		var left pending
		nick.ok("pending_decisions", nil, &left)
		if len(left.Decisions) != 0 || left.BindingMoment != nil {
			t.Fatalf("pending decisions after the resolution: %+v", left)
		}
	})
}
