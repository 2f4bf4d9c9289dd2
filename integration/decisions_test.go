package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binding moments end to end (docs/decisions.md): an agent asks over MCP,
// its principal's surface (REST, aspctl) resolves, and await_decision
// returns the outcome.

// testEnvelope is a well-formed envelope; tag makes each one distinct.
func testEnvelope(tag string) map[string]any {
	return map[string]any{
		"synopsis":        "Renew the " + tag + " contract with Acme: the new terms cost 4% less.",
		"findings":        []any{"Acme's offer for " + tag + " is 4% below last year.", "No competing bid is cheaper."},
		"recommendations": []any{"Sign the renewal for " + tag + ".", "Calendar a review in six months."},
		"offer":           "Ask for detail on any item.",
		"question": map[string]any{
			"stem": "Should the " + tag + " contract be renewed?",
			"options": []any{
				map[string]any{"label": "Renew " + tag, "reasoning": "Cheaper, and no disruption."},
				map[string]any{"label": "Tender " + tag, "reasoning": "A tender might find better terms."},
				map[string]any{"label": "Let " + tag + " lapse", "reasoning": "Only if the service is no longer needed."},
			},
			"recommended_idx": 0,
			"hatches":         map[string]any{"free_text": true, "dialogue": true},
		},
		"meta": map[string]any{"decision_class": "consent"},
	}
}

var (
	aspctlOnce sync.Once
	aspctlPath string
	aspctlErr  error
)

// aspctlBin builds aspctl once per test binary.
func aspctlBin(t testing.TB) string {
	t.Helper()
	aspctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aspctl")
		if err != nil {
			aspctlErr = err
			return
		}
		aspctlPath = filepath.Join(dir, "aspctl")
		out, err := exec.Command("go", "build", "-o", aspctlPath, "github.com/aspd/aspd/cmd/aspctl").CombinedOutput()
		if err != nil {
			aspctlErr = err
			t.Logf("%s", out)
		}
	})
	if aspctlErr != nil {
		t.Fatalf("building aspctl: %v", aspctlErr)
	}
	return aspctlPath
}

// aspctl runs aspctl as a, bounded, and returns its stdout, stderr and
// exit status.
func (a *agent) aspctl(args ...string) (string, string, int) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, aspctlBin(a.t), args...)
	cmd.Env = append(os.Environ(), "ASPCTL_SERVER="+a.s.url, "ASPCTL_TOKEN="+a.token)
	cmd.Stdin = strings.NewReader("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		a.t.Fatalf("aspctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

type decisionDoc struct {
	MomentID      string         `json:"moment_id"`
	SessionID     string         `json:"session_id"`
	Emitter       string         `json:"emitter"`
	Resolver      string         `json:"resolver"`
	Status        string         `json:"status"`
	BindingMoment map[string]any `json:"binding_moment"`
	Resolution    *struct {
		Outcome    string `json:"outcome"`
		OptionIdx  *int   `json:"option_idx"`
		Answer     string `json:"answer"`
		Objection  string `json:"objection"`
		ResolvedBy string `json:"resolved_by"`
	} `json:"resolution"`
}

func (a *agent) eventCount(sid string) int { return len(a.events(sid)) }

func TestDecisionsRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		bot := s.provision("@nick.assistant", "open")
		nick := s.provision("@nick.human", "open")
		carol := s.provision("@acme.carol", "open")
		dave := s.provision("@acme.dave", "open")
		mBot := mcpConnect(t, s, bot)
		mNick := mcpConnect(t, s, nick)

		// The decision tools are listed, request_decision advertising
		// emits_binding_moment in its _meta (draft section 7.2).
		tools, err := mBot.cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, tl := range tools.Tools {
			switch tl.Name {
			case "request_decision", "await_decision", "pending_decisions", "resolve_decision":
				found++
				if tl.InputSchema == nil || tl.OutputSchema == nil || tl.Annotations == nil || tl.Description == "" {
					t.Errorf("tool %s lacks a schema, annotations or a description", tl.Name)
				}
			}
			if emits, _ := tl.Meta["emits_binding_moment"].(bool); emits != (tl.Name == "request_decision" || tl.Name == "pending_decisions" ||
				tl.Name == "read_events" || tl.Name == "wait_for_events") {
				t.Errorf("tool %s: emits_binding_moment %v", tl.Name, tl.Meta["emits_binding_moment"])
			}
		}
		if found != 4 {
			t.Fatalf("%d of the 4 decision tools listed", found)
		}

		sid := bot.createSession(map[string]any{"invite": []string{nick.handle, carol.handle}, "topic": "contracts"})
		nick.join(sid)
		carol.join(sid)

		// A malformed envelope: 400 with the path of the first bad member,
		// over REST and over MCP, and nothing is written.
		before := bot.eventCount(sid)
		bad := testEnvelope("bad")
		bad["question"].(map[string]any)["options"] = []any{map[string]any{"label": "Only", "reasoning": "No choice."}}
		code, body := bot.do("POST", "/sessions/"+sid+"/messages",
			map[string]any{"content": []any{map[string]any{"type": "text", "text": "see below"}, map[string]any{"type": "data", "data": map[string]any{"binding_moment": bad}}}})
		var eb struct {
			Error struct{ Code, Field, Message string } `json:"error"`
		}
		mustUnmarshal(t, body, &eb)
		if code != http.StatusBadRequest || eb.Error.Code != "field-invalid" || eb.Error.Field != "content[1].data.binding_moment.question.options" || eb.Error.Message == "" {
			t.Fatalf("malformed envelope: %d %s", code, body)
		}
		delete(bad, "offer")
		text := mBot.fail("field-missing", "request_decision", map[string]any{"session_id": sid, "binding_moment": bad})
		if !strings.Contains(text, `"field":"binding_moment.offer"`) {
			t.Fatalf("request_decision malformed: %s", text)
		}
		if after := bot.eventCount(sid); after != before {
			t.Fatalf("malformed envelopes wrote %d events", after-before)
		}
		// A resolver who is not a participant is refused too.
		mBot.fail("field-invalid", "request_decision", map[string]any{"session_id": sid, "binding_moment": testEnvelope("x"), "resolver": dave.handle})

		// One moment per outcome; each resolved by the principal's
		// surface, and the agent's await_decision returns the outcome.
		for _, tc := range []struct {
			tag, outcome string
			resolve      func(momentID string)
			check        func(d decisionDoc) bool
		}{
			{"selected", "selected", func(id string) {
				out, errOut, code := nick.aspctl("decide", "--choice", "2")
				if code != 0 || !strings.Contains(out, `"message_id"`) {
					t.Fatalf("aspctl decide --choice 2: exit %d: %s %s", code, out, errOut)
				}
			}, func(d decisionDoc) bool { return d.Resolution.OptionIdx != nil && *d.Resolution.OptionIdx == 1 }},
			{"answered", "answered", func(id string) {
				nick.must(http.StatusCreated, "POST", "/sessions/"+sid+"/messages", map[string]any{"content": []any{
					map[string]any{"type": "data", "data": map[string]any{"binding_resolution": map[string]any{"moment": id, "outcome": "answered", "answer": "Renew for one year only."}}}}},
					"PostSessionsMessagesResponse")
			}, func(d decisionDoc) bool {
				return d.Resolution.Answer == "Renew for one year only." && d.Resolution.OptionIdx == nil
			}},
			{"referred_back", "referred_back", func(id string) {
				out, errOut, code := nick.aspctl("decide", "--refer-back", "We are moving off Acme entirely.")
				if code != 0 {
					t.Fatalf("aspctl decide --refer-back: exit %d: %s %s", code, out, errOut)
				}
			}, func(d decisionDoc) bool { return d.Resolution.Objection == "We are moving off Acme entirely." }},
		} {
			var req struct {
				MomentID      string         `json:"moment_id"`
				BindingMoment map[string]any `json:"binding_moment"`
			}
			mBot.ok("request_decision", map[string]any{"session_id": sid, "binding_moment": testEnvelope(tc.tag), "resolver": nick.handle}, &req)
			if !strings.HasPrefix(req.MomentID, "msg_") || req.BindingMoment["synopsis"] == nil {
				t.Fatalf("request_decision: %+v", req)
			}
			// The principal sees it pending; the bot and carol do not.
			var pending struct {
				Decisions     []decisionDoc  `json:"decisions"`
				BindingMoment map[string]any `json:"binding_moment"`
			}
			mNick.ok("pending_decisions", map[string]any{}, &pending)
			if len(pending.Decisions) != 1 || pending.Decisions[0].MomentID != req.MomentID || pending.BindingMoment["offer"] == nil {
				t.Fatalf("%s: nick's pending %+v", tc.tag, pending)
			}
			var none struct {
				Decisions []decisionDoc `json:"decisions"`
			}
			mustUnmarshal(t, carol.must(http.StatusOK, "GET", "/decisions/pending", nil, ""), &none)
			if len(none.Decisions) != 0 {
				t.Fatalf("carol sees %d pending", len(none.Decisions))
			}
			// The envelope reaches the principal's event reads with a
			// top-level binding_moment beside the events (section 7.1).
			var page struct {
				Events        []json.RawMessage `json:"events"`
				BindingMoment map[string]any    `json:"binding_moment"`
			}
			mNick.ok("read_events", map[string]any{"session_id": sid, "after_sequence": before}, &page)
			if page.BindingMoment == nil || len(page.Events) == 0 {
				t.Fatalf("read_events carries no binding_moment: %+v", page)
			}
			var waited struct {
				Events        []json.RawMessage `json:"events"`
				BindingMoment map[string]any    `json:"binding_moment"`
			}
			mNick.ok("wait_for_events", map[string]any{"timeout_seconds": 5, "max_events": 500}, &waited)
			if waited.BindingMoment["synopsis"] != testEnvelope(tc.tag)["synopsis"] {
				t.Fatalf("wait_for_events: binding_moment %v beside %d events", waited.BindingMoment, len(waited.Events))
			}
			before = bot.eventCount(sid)

			// REST reads: the decision, open, and a bounded await.
			var open decisionDoc
			mustUnmarshal(t, bot.must(http.StatusOK, "GET", "/decisions/"+req.MomentID+"/await?timeout_seconds=0", nil, ""), &open)
			if open.Status != "open" || open.Resolution != nil || open.Emitter != bot.handle || open.Resolver != nick.handle || open.BindingMoment["question"] == nil {
				t.Fatalf("%s: open decision %+v", tc.tag, open)
			}
			bot.mustFail(http.StatusBadRequest, "invalid_request", "GET", "/decisions/"+req.MomentID+"/await?timeout_seconds=61", nil)
			bot.mustFail(http.StatusBadRequest, "invalid_request", "GET", "/decisions/"+req.MomentID+"/await?wait=1", nil)
			bot.mustFail(http.StatusNotFound, "not_found", "GET", "/decisions/msg_NOSUCHMOMENT", nil)

			// Not the resolver: 403 not_resolver; not a participant: 404.
			carol.mustFail(http.StatusForbidden, "not_resolver", "POST", "/decisions/"+req.MomentID+"/resolve", map[string]any{"outcome": "selected", "option_idx": 0})
			dave.mustFail(http.StatusNotFound, "not_found", "POST", "/decisions/"+req.MomentID+"/resolve", map[string]any{"outcome": "selected", "option_idx": 0})
			dave.mustFail(http.StatusNotFound, "not_found", "GET", "/decisions/"+req.MomentID, nil)

			// The agent waits while the principal decides.
			got := make(chan decisionDoc, 1)
			go func() {
				var d decisionDoc
				mBot.ok("await_decision", map[string]any{"moment_id": req.MomentID, "timeout_seconds": 30}, &d)
				got <- d
			}()
			tc.resolve(req.MomentID)
			var d decisionDoc
			select {
			case d = <-got:
			case <-time.After(45 * time.Second):
				t.Fatalf("%s: await_decision did not return", tc.tag)
			}
			if d.Status != "resolved" || d.Resolution == nil || d.Resolution.Outcome != tc.outcome || d.Resolution.ResolvedBy != nick.handle || !tc.check(d) {
				t.Fatalf("%s: await_decision returned %+v (resolution %+v)", tc.tag, d, d.Resolution)
			}
			// The first resolution won: a second one is refused, and writes nothing.
			if after := bot.eventCount(sid); after != before+1 {
				t.Fatalf("%s: %d events for one resolution", tc.tag, after-before)
			}
			nick.mustFail(http.StatusConflict, "already_resolved", "POST", "/decisions/"+req.MomentID+"/resolve", map[string]any{"outcome": "referred_back"})
			mNick.fail("already_resolved", "resolve_decision", map[string]any{"moment_id": req.MomentID, "outcome": "selected", "option_idx": 0})
			if after := bot.eventCount(sid); after != before+1 {
				t.Fatalf("%s: a refused resolution wrote events", tc.tag)
			}
			before = after(bot, sid)
		}
		// The resolution messages are ordinary session.message events
		// in the schema.
		for _, e := range nick.events(sid) {
			validate(t, "events.json", e.Raw)
		}
	})
}

func after(a *agent, sid string) int { return a.eventCount(sid) }

// TestDecisionsHatchesDefault: an envelope with no hatches object has both
// hatches open (draft 5.8, "SHALL default to true"), over REST and MCP: the
// principal may answer in its own words on one such moment and refer the
// question back on another. A moment whose envelope closes free_text shows
// that the hatch check is live.
func TestDecisionsHatchesDefault(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		bot := s.provision("@hatch.assistant", "open")
		nick := s.provision("@hatch.human", "open")
		mBot := mcpConnect(t, s, bot)
		sid := bot.createSession(map[string]any{"invite": []string{nick.handle}, "topic": "hatches"})
		nick.join(sid)

		noHatches := func(tag string) map[string]any {
			env := testEnvelope(tag)
			delete(env["question"].(map[string]any), "hatches")
			return env
		}
		// Over REST: the envelope as a message's data part.
		var sent struct {
			MessageID string `json:"message_id"`
		}
		mustUnmarshal(t, bot.must(http.StatusCreated, "POST", "/sessions/"+sid+"/messages", map[string]any{"content": []any{
			map[string]any{"type": "data", "data": map[string]any{"resolver": nick.handle, "binding_moment": noHatches("rest")}}}},
			"PostSessionsMessagesResponse"), &sent)
		// Over MCP: request_decision.
		var req struct {
			MomentID string `json:"moment_id"`
		}
		mBot.ok("request_decision", map[string]any{"session_id": sid, "binding_moment": noHatches("mcp"), "resolver": nick.handle}, &req)

		nick.must(http.StatusCreated, "POST", "/decisions/"+sent.MessageID+"/resolve",
			map[string]any{"outcome": "answered", "answer": "Renew for one year only."}, "")
		nick.must(http.StatusCreated, "POST", "/decisions/"+req.MomentID+"/resolve",
			map[string]any{"outcome": "referred_back", "objection": "Not yet."}, "")
		for id, outcome := range map[string]string{sent.MessageID: "answered", req.MomentID: "referred_back"} {
			var d decisionDoc
			mustUnmarshal(t, nick.must(http.StatusOK, "GET", "/decisions/"+id, nil, ""), &d)
			if d.Status != "resolved" || d.Resolution == nil || d.Resolution.Outcome != outcome {
				t.Fatalf("moment %s: %+v, want resolved %s", id, d, outcome)
			}
			// The envelope is kept as sent: the default is the reader's.
			if _, ok := d.BindingMoment["question"].(map[string]any)["hatches"]; ok {
				t.Fatalf("moment %s: hatches added to the stored envelope: %v", id, d.BindingMoment)
			}
		}

		// Control: free_text closed, dialogue absent (open).
		closed := noHatches("closed")
		closed["question"].(map[string]any)["hatches"] = map[string]any{"free_text": false}
		mustUnmarshal(t, bot.must(http.StatusCreated, "POST", "/sessions/"+sid+"/messages", map[string]any{"content": []any{
			map[string]any{"type": "data", "data": map[string]any{"resolver": nick.handle, "binding_moment": closed}}}}, ""), &sent)
		code, body := nick.do("POST", "/decisions/"+sent.MessageID+"/resolve", map[string]any{"outcome": "answered", "answer": "Mine."})
		frWantError(t, "answered on a closed free_text hatch", code, body, http.StatusBadRequest, "field-invalid", "outcome")
		nick.must(http.StatusCreated, "POST", "/decisions/"+sent.MessageID+"/resolve", map[string]any{"outcome": "referred_back"}, "")
	})
}
