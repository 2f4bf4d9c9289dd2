package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
)

func envelopeJSON(t testing.TB, freeText, dialogue bool) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"synopsis":        "Ship the release today: every check is green.",
		"findings":        []string{"CI is green.", "No open blockers."},
		"recommendations": []string{"Tag v1.2.", "Announce it."},
		"offer":           "Ask for detail on any item.",
		"question": map[string]any{
			"stem": "When should v1.2 ship?",
			"options": []any{
				map[string]any{"label": "Today", "reasoning": "Nothing blocks it."},
				map[string]any{"label": "Monday", "reasoning": "More soak time."},
			},
			"recommended_idx": 0,
			"hatches":         map[string]any{"free_text": freeText, "dialogue": dialogue},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantAnswer fails unless err answers status, code and (when field is not
// "") the field.
func wantAnswer(t *testing.T, err error, status int, code, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want %d %s", status, code)
	}
	pe := Answer(err)
	if pe.Status != status || pe.Code != code || field != "" && pe.Field != field {
		t.Fatalf("error %d %s at %q (%v), want %d %s at %q", pe.Status, pe.Code, pe.Field, err, status, code, field)
	}
}

func resolutionBody(t testing.TB, res map[string]any) protocol.SendMessageRequest {
	t.Helper()
	b, err := json.Marshal([]any{map[string]any{"type": "data", "data": map[string]any{"binding_resolution": res}}})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.SendMessageRequest{Content: b}
}

// TestBindingPartShape: what can be told about a binding part without its
// moment is refused before the store, with the path of the member at fault.
func TestBindingPartShape(t *testing.T) {
	a := &App{cfg: Config{Limits: protocol.DefaultLimits(), Frames: DefaultFramesConfig()}}
	env := string(envelopeJSON(t, true, true))
	const m = `"moment":"msg_01J0000000000000000000000A"`
	res := `content[0].data.binding_resolution`
	for _, tt := range []struct {
		data        string
		code, field string
	}{
		{`{"binding_moment":{"synopsis":"x"}}`, frame.CodeFieldMissing, "content[0].data.binding_moment.findings"},
		{`{"binding_moment":` + strings.Replace(env, `"recommended_idx":0`, `"recommended_idx":2`, 1) + `}`, frame.CodeFieldInvalid, "content[0].data.binding_moment.question.recommended_idx"},
		{`{"binding_moment":` + env + `,"resolver":"nick"}`, frame.CodeFieldInvalid, "content[0].data.resolver"},
		{`{"binding_moment":` + env + `,"resolver":["@acme.nick"]}`, frame.CodeFieldInvalid, "content[0].data.resolver"},
		{`{"binding_moment":` + env + `,"resolver":"@acme.alice"}`, frame.CodeFieldInvalid, "content[0].data.resolver"},
		{`{"binding_moment":` + env + `,"binding_resolution":{}}`, frame.CodeFieldInvalid, "content[0].data"},
		{`{"binding_resolution":[]}`, frame.CodeFieldInvalid, res},
		{`{"binding_resolution":{"outcome":"selected","option_idx":0}}`, frame.CodeFieldMissing, res + ".moment"},
		{`{"binding_resolution":{"moment":"sess_01J","outcome":"selected","option_idx":0}}`, frame.CodeFieldInvalid, res + ".moment"},
		{`{"binding_resolution":{` + m + `}}`, frame.CodeFieldMissing, res + ".outcome"},
		{`{"binding_resolution":{` + m + `,"outcome":"vetoed"}}`, frame.CodeFieldInvalid, res + ".outcome"},
		{`{"binding_resolution":{` + m + `,"outcome":"selected","why":1}}`, frame.CodeFieldUnknown, res + ".why"},
		{`{"binding_resolution":{` + m + `,"outcome":"selected"}}`, frame.CodeFieldMissing, res + ".option_idx"},
		{`{"binding_resolution":{` + m + `,"outcome":"selected","option_idx":-1}}`, frame.CodeFieldInvalid, res + ".option_idx"},
		{`{"binding_resolution":{` + m + `,"outcome":"selected","option_idx":1.5}}`, frame.CodeFieldInvalid, res + ".option_idx"},
		{`{"binding_resolution":{` + m + `,"outcome":"selected","option_idx":"1"}}`, frame.CodeFieldInvalid, res + ".option_idx"},
		{`{"binding_resolution":{` + m + `,"outcome":"selected","option_idx":1,"answer":"x"}}`, frame.CodeFieldInvalid, res + ".answer"},
		{`{"binding_resolution":{` + m + `,"outcome":"answered"}}`, frame.CodeFieldMissing, res + ".answer"},
		{`{"binding_resolution":{` + m + `,"outcome":"answered","answer":""}}`, frame.CodeFieldInvalid, res + ".answer"},
		{`{"binding_resolution":{` + m + `,"outcome":"answered","answer":7}}`, frame.CodeFieldInvalid, res + ".answer"},
		{`{"binding_resolution":{` + m + `,"outcome":"answered","answer":"x","option_idx":0}}`, frame.CodeFieldInvalid, res + ".option_idx"},
		{`{"binding_resolution":{` + m + `,"outcome":"referred_back","answer":"x"}}`, frame.CodeFieldInvalid, res + ".answer"},
		{`{"binding_resolution":{` + m + `,"outcome":"referred_back","objection":false}}`, frame.CodeFieldInvalid, res + ".objection"},
		{`{"binding_resolution":{` + m + `,"outcome":"referred_back","objection":null}}`, frame.CodeFieldInvalid, res + ".objection"},
		{`{"binding_resolution":{"moment":null,"outcome":"referred_back"}}`, frame.CodeFieldInvalid, res + ".moment"},
	} {
		_, err := a.messageBinding(json.RawMessage(`[{"type":"data","data":`+tt.data+`}]`), "@acme.alice")
		if err == nil {
			t.Errorf("%s: accepted", tt.data)
			continue
		}
		pe := Answer(err)
		if pe.Status != http.StatusBadRequest || pe.Code != tt.code || pe.Field != tt.field {
			t.Errorf("%s: %d %s at %q, want %s at %q", tt.data, pe.Status, pe.Code, pe.Field, tt.code, tt.field)
		}
	}
	// Two binding parts in one message.
	two := `[{"type":"text","text":"hi"},{"type":"data","data":{"binding_moment":` + env + `}},{"type":"data","data":{"binding_resolution":{` + m + `,"outcome":"referred_back"}}}]`
	_, err := a.messageBinding(json.RawMessage(two), "@acme.alice")
	if pe := Answer(err); err == nil || pe.Field != "content[2].data" {
		t.Errorf("two binding parts: %v", err)
	}
	// Well-formed parts, however the key is written; nested keys are not parts.
	for _, data := range []string{
		`{"binding_moment":` + env + `,"resolver":"@acme.nick","note":"conventional payload beside it"}`,
		`{"binding\u005fmoment":` + env + `}`,
		`{"binding_resolution":{` + m + `,"outcome":"referred_back","objection":"wrong question"}}`,
		`{"binding_resolution":{` + m + `,"outcome":"answered","answer":"Tuesday"}}`,
	} {
		b, err := a.messageBinding(json.RawMessage(`[{"type":"data","data":`+data+`}]`), "@acme.alice")
		if err != nil || b == nil {
			t.Errorf("%s: %v, %v", data, b, err)
		}
	}
	for _, c := range []string{`"binding_moment"`, `[{"type":"data","data":{"x":{"binding_moment":{}}}}]`, `[{"type":"text","text":"binding_moment"}]`} {
		if b, err := a.messageBinding(json.RawMessage(c), "@acme.alice"); b != nil || err != nil {
			t.Errorf("%s: %v, %v", c, b, err)
		}
	}
}

// decisionSession sets up @acme.alice (the agent), @acme.nick (its
// principal) and @acme.carol joined in one session, and @acme.dave outside.
func decisionSession(t *testing.T, a *App) string {
	t.Helper()
	for _, h := range []string{"@acme.alice", "@acme.nick", "@acme.carol", "@acme.dave"} {
		mkAgent(t, a, h)
	}
	s, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.nick", "@acme.carol"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"@acme.nick", "@acme.carol"} {
		if err := a.Join(ctx, h, s.SessionID); err != nil {
			t.Fatal(err)
		}
	}
	return s.SessionID
}

func lastSeq(t *testing.T, a *App, caller, sid string) int {
	t.Helper()
	page, err := a.Events(ctx, caller, sid, Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Events)
}

func idx(i int) *int { return &i }

// TestDecisionRules: every resolution rule, on both stores.
func TestDecisionRules(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		sid := decisionSession(t, a)
		env := envelopeJSON(t, true, true)

		// Not in an initial message; a resolver outside the session; a
		// malformed envelope: 400, and nothing written.
		before := lastSeq(t, a, "@acme.alice", sid)
		data, _ := json.Marshal([]any{map[string]any{"type": "data", "data": map[string]any{"binding_moment": env}}})
		_, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{InitialMessage: &protocol.InitialMessage{Content: data}})
		wantAnswer(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest, "")
		_, err = a.RequestDecision(ctx, "@acme.alice", sid, env, "@acme.dave")
		wantAnswer(t, err, http.StatusBadRequest, frame.CodeFieldInvalid, "resolver")
		bad := json.RawMessage(strings.Replace(string(env), `"options":[`, `"options":[{"label":"Only"}],"x":[`, 1))
		_, err = a.RequestDecision(ctx, "@acme.alice", sid, bad, "")
		wantAnswer(t, err, http.StatusBadRequest, frame.CodeFieldUnknown, "binding_moment.question.x")
		if after := lastSeq(t, a, "@acme.alice", sid); after != before {
			t.Fatalf("a refused moment wrote events: %d -> %d", before, after)
		}

		// A moment for the principal alone.
		r, err := a.RequestDecision(ctx, "@acme.alice", sid, env, "@acme.nick")
		if err != nil {
			t.Fatal(err)
		}
		m1 := r.MessageID
		for h, want := range map[string]int{"@acme.nick": 1, "@acme.carol": 0, "@acme.alice": 0, "@acme.dave": 0} {
			p, err := a.PendingDecisions(ctx, h)
			if err != nil || len(p.Decisions) != want {
				t.Fatalf("%s pending: %+v, %v; want %d", h, p, err, want)
			}
		}
		d, err := a.AwaitDecision(ctx, "@acme.alice", m1, idx(0))
		if err != nil || d.Status != protocol.DecisionOpen || d.Resolver != "@acme.nick" || d.SessionID != sid {
			t.Fatalf("await(0) on an open moment: %+v, %v", d, err)
		}
		sel := protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: idx(1)}
		_, err = a.ResolveDecision(ctx, "@acme.carol", m1, sel)
		wantAnswer(t, err, http.StatusForbidden, protocol.CodeNotResolver, "")
		_, err = a.ResolveDecision(ctx, "@acme.alice", m1, sel)
		wantAnswer(t, err, http.StatusForbidden, protocol.CodeNotResolver, "")
		_, err = a.ResolveDecision(ctx, "@acme.dave", m1, sel)
		wantAnswer(t, err, http.StatusNotFound, protocol.CodeNotFound, "")
		_, err = a.ResolveDecision(ctx, "@acme.nick", m1, protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: idx(2)})
		wantAnswer(t, err, http.StatusBadRequest, frame.CodeFieldInvalid, "option_idx")
		before = lastSeq(t, a, "@acme.alice", sid)
		// Idempotent: the same key and resolution answer the same message.
		key := "res-1"
		req := resolutionBody(t, map[string]any{"moment": m1, "outcome": "selected", "option_idx": 1})
		req.IdempotencyKey = &key
		first, err := a.SendMessage(ctx, "@acme.nick", sid, req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := a.SendMessage(ctx, "@acme.nick", sid, req)
		if err != nil || again != first {
			t.Fatalf("retry: %+v, %v; want %+v", again, err, first)
		}
		if after := lastSeq(t, a, "@acme.alice", sid); after != before+1 {
			t.Fatalf("one resolution and its retry appended %d events", after-before)
		}
		_, err = a.ResolveDecision(ctx, "@acme.nick", m1, protocol.ResolveRequest{Outcome: protocol.OutcomeReferredBack})
		wantAnswer(t, err, http.StatusConflict, protocol.CodeAlreadyResolved, "")
		d, err = a.AwaitDecision(ctx, "@acme.alice", m1, nil)
		if err != nil || d.Status != protocol.DecisionResolved || d.Resolution.Outcome != protocol.OutcomeSelected ||
			*d.Resolution.OptionIdx != 1 || d.Resolution.ResolvedBy != "@acme.nick" || d.Resolution.ResolutionID != first.MessageID {
			t.Fatalf("await on a resolved moment: %+v, %v", d, err)
		}
		if _, err := a.Decision(ctx, "@acme.dave", m1); err == nil {
			t.Fatal("an outsider read the moment")
		}

		// No resolver named, answer-space hatch closed: any joined
		// participant but the emitter; answered is refused.
		r, err = a.RequestDecision(ctx, "@acme.alice", sid, envelopeJSON(t, false, true), "")
		if err != nil {
			t.Fatal(err)
		}
		m2 := r.MessageID
		_, err = a.ResolveDecision(ctx, "@acme.alice", m2, protocol.ResolveRequest{Outcome: protocol.OutcomeReferredBack})
		wantAnswer(t, err, http.StatusForbidden, protocol.CodeNotResolver, "")
		_, err = a.ResolveDecision(ctx, "@acme.nick", m2, protocol.ResolveRequest{Outcome: protocol.OutcomeAnswered, Answer: "Tuesday"})
		wantAnswer(t, err, http.StatusBadRequest, frame.CodeFieldInvalid, "outcome")
		if _, err := a.ResolveDecision(ctx, "@acme.carol", m2, protocol.ResolveRequest{Outcome: protocol.OutcomeReferredBack, Objection: "Ask after the retro."}); err != nil {
			t.Fatal(err)
		}
		d, _ = a.Decision(ctx, "@acme.nick", m2)
		if d.Resolution == nil || d.Resolution.Outcome != protocol.OutcomeReferredBack || d.Resolution.Objection != "Ask after the retro." {
			t.Fatalf("referred back: %+v", d)
		}

		// Question-space hatch closed: referred_back is refused, answered works.
		r, err = a.RequestDecision(ctx, "@acme.alice", sid, envelopeJSON(t, true, false), "@acme.nick")
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.ResolveDecision(ctx, "@acme.nick", r.MessageID, protocol.ResolveRequest{Outcome: protocol.OutcomeReferredBack})
		wantAnswer(t, err, http.StatusBadRequest, frame.CodeFieldInvalid, "outcome")
		// A resolution sent in another session than its moment's: not found there.
		other, err := a.CreateSession(ctx, "@acme.nick", protocol.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.SendMessage(ctx, "@acme.nick", other.SessionID, resolutionBody(t, map[string]any{"moment": r.MessageID, "outcome": "answered", "answer": "x"}))
		wantAnswer(t, err, http.StatusNotFound, protocol.CodeNotFound, "")
		// A waiting await is woken by the resolution: with polling and the
		// await's own timeout far longer than the bound below, only the
		// wake-up can end it in time.
		defer func(p time.Duration) { awaitPollInterval = p }(awaitPollInterval)
		awaitPollInterval = time.Hour
		done := make(chan *protocol.Decision, 1)
		go func() {
			d, _ := a.AwaitDecision(ctx, "@acme.alice", r.MessageID, idx(60))
			done <- d
		}()
		for i := 0; a.decided.waiters() == 0; i++ { // until it waits (bounded)
			if i == 1000 {
				t.Fatal("AwaitDecision never started waiting")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := a.ResolveDecision(ctx, "@acme.nick", r.MessageID, protocol.ResolveRequest{Outcome: protocol.OutcomeAnswered, Answer: "Tuesday"}); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-done:
			if d == nil || d.Status != protocol.DecisionResolved || d.Resolution.Answer != "Tuesday" {
				t.Fatalf("await: %+v", d)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the resolution did not wake AwaitDecision")
		}
		if n := a.decided.waiters(); n != 0 {
			t.Fatalf("%d awaited moments left registered after every await returned", n)
		}
		_, err = a.AwaitDecision(ctx, "@acme.alice", r.MessageID, idx(61))
		wantAnswer(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest, "")
	})
}

// TestDecisionRace: of many concurrent resolutions of one moment, exactly
// one wins and every other is already_resolved; only the winner's message is
// written.
func TestDecisionRace(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		sid := decisionSession(t, a)
		r, err := a.RequestDecision(ctx, "@acme.alice", sid, envelopeJSON(t, true, true), "")
		if err != nil {
			t.Fatal(err)
		}
		before := lastSeq(t, a, "@acme.alice", sid)
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[string]int{}
		for i := range 16 {
			who := []string{"@acme.nick", "@acme.carol"}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := a.ResolveDecision(ctx, who, r.MessageID, protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: idx(i % 2)})
				code := "ok"
				if err != nil {
					code = Answer(err).Code
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes["ok"] != 1 || codes[protocol.CodeAlreadyResolved] != 15 {
			t.Fatalf("outcomes %v, want one ok and 15 already_resolved", codes)
		}
		if after := lastSeq(t, a, "@acme.alice", sid); after != before+1 {
			t.Fatalf("%d resolution messages written, want 1", after-before)
		}
	})
}

// BenchmarkMessageBinding is what binding-moment detection adds to every
// message on the send path: for most messages two byte scans; for a
// binding part, the decode and the envelope check.
func BenchmarkMessageBinding(b *testing.B) {
	a := &App{cfg: Config{Limits: protocol.DefaultLimits(), Frames: DefaultFramesConfig()}}
	env := string(envelopeJSON(b, true, true))
	for _, tc := range []struct{ name, content string }{
		{"text", `"Looking into it"`},
		{"parts", `[{"type":"text","text":"Here's the report you asked for."},{"type":"data","data":{"action":"review_complete","doc_id":"abc123"}}]`},
		{"moment", `[{"type":"data","data":{"binding_moment":` + env + `,"resolver":"@acme.nick"}}]`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.messageBinding(json.RawMessage(tc.content), "@acme.alice"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
