package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

var ctx = context.Background()

// newApp builds an App on a fresh database at url; tune adjusts its
// configuration first.
func newApp(t *testing.T, url string, tune func(*Config)) *App {
	t.Helper()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	cfg := Config{Limits: protocol.DefaultLimits(), GraceWindow: time.Minute, Hub: replay.DefaultConfig(), Frames: DefaultFramesConfig()}
	if tune != nil {
		tune(&cfg)
	}
	a := New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := a.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		a.Close()
		st.Close()
	})
	return a
}

func forEach(t *testing.T, tune func(*Config), fn func(t *testing.T, a *App)) {
	dbtest.ForEach(t, func(t *testing.T, url string) { fn(t, newApp(t, url, tune)) })
}

// mkAgent creates an open agent and returns its token.
func mkAgent(t *testing.T, a *App, handle string) string {
	t.Helper()
	ag, err := a.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: handle, InboundPolicy: protocol.PolicyOpen})
	if err != nil {
		t.Fatalf("CreateAgent %s: %v", handle, err)
	}
	return ag.Token
}

// wantCode fails unless err is a protocol error with status and code.
func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Status != status || pe.Code != code {
		t.Fatalf("error %v, want %d %s", err, status, code)
	}
}

func content(s string) json.RawMessage { b, _ := json.Marshal(s); return b }

func TestCreateSessionRules(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		mkAgent(t, a, "@acme.alice")
		mkAgent(t, a, "@acme.bob")
		_, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{EndAfterSend: true})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		empty := ""
		_, err = a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{IdempotencyKey: &empty})
		if err == nil {
			t.Fatal("an empty idempotency key was accepted")
		}
		_, err = a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"not a handle"}})
		if err == nil {
			t.Fatal("a malformed invitee was accepted")
		}

		// Idempotency: the same key and request answer the same session; the
		// same key with another request is refused.
		key := "k-1"
		req := protocol.CreateSessionRequest{Invite: []string{"@acme.bob"}, IdempotencyKey: &key,
			InitialMessage: &protocol.InitialMessage{Content: content("hi")}}
		r1, err := a.CreateSession(ctx, "@acme.alice", req)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := a.CreateSession(ctx, "@acme.alice", req)
		if err != nil || r2.SessionID != r1.SessionID {
			t.Fatalf("retry answered %+v, %v; want %s", r2, err, r1.SessionID)
		}
		req.Topic = "other"
		if _, err := a.CreateSession(ctx, "@acme.alice", req); err == nil {
			t.Fatal("the same key with another request was accepted")
		}
	})
}

func TestSessionActionsPublish(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		mkAgent(t, a, "@acme.alice")
		mkAgent(t, a, "@acme.bob")
		handed := func() int64 { return a.DeliveryStats().Handed }
		step := func(what string, act func() error) {
			t.Helper()
			before := handed()
			if err := act(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if handed() <= before {
				t.Fatalf("%s committed but published nothing", what)
			}
		}
		var id string
		step("create", func() error {
			r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.bob"}})
			id = r.SessionID
			return err
		})
		step("join", func() error { return a.Join(ctx, "@acme.bob", id) })
		step("send", func() error {
			_, err := a.SendMessage(ctx, "@acme.bob", id, protocol.SendMessageRequest{Content: content("hello")})
			return err
		})
		mkAgent(t, a, "@acme.carol")
		step("invite", func() error {
			_, err := a.Invite(ctx, "@acme.alice", id, protocol.InviteRequest{Invite: []string{"@acme.carol"}})
			return err
		})
		step("leave", func() error { return a.Leave(ctx, "@acme.bob", id) })
		step("end", func() error { return a.End(ctx, "@acme.alice", id) })
		step("reopen", func() error {
			return a.Reopen(ctx, "@acme.alice", id, protocol.ReopenRequest{Invite: []string{"@acme.carol"}})
		})
		step("join after reopen", func() error { return a.Join(ctx, "@acme.carol", id) })
		step("block", func() error {
			_, err := a.Block(ctx, "@acme.carol", protocol.BlockRequest{Handle: "@acme.alice"})
			return err
		})

		page, err := a.Events(ctx, "@acme.alice", id, Page{Limit: 100})
		if err != nil || len(page.Events) < 6 {
			t.Fatalf("events: %d, %v", len(page.Events), err)
		}
		if _, err := a.Events(ctx, "@acme.alice", "nope", Page{Limit: 1}); err == nil {
			t.Fatal("a malformed session id was read")
		}
		s, err := a.Session(ctx, "@acme.alice", id)
		if err != nil || s.ID != id {
			t.Fatalf("session: %+v, %v", s, err)
		}
		list, err := a.Sessions(ctx, "@acme.alice", SessionFilter{Limit: 1})
		if err != nil || len(list.Sessions) != 1 {
			t.Fatalf("sessions: %+v, %v", list, err)
		}
		admin, err := a.AdminEvents(ctx, id, Page{Limit: 2})
		if err != nil || len(admin.Events) != 2 || admin.NextCursor == "" {
			t.Fatalf("admin events: %+v, %v", admin, err)
		}
		all, err := a.AdminSessions(ctx, SessionFilter{Limit: 10})
		if err != nil || len(all.Sessions) != 1 {
			t.Fatalf("admin sessions: %+v, %v", all, err)
		}
		begun := false
		n, err := a.Export(ctx, ExportRequest{Session: id}, func() { begun = true }, func([]byte) error { return nil })
		if err != nil || !begun || n < 6 {
			t.Fatalf("export: %d events, begun %v, %v", n, begun, err)
		}
		begun = false
		_, err = a.Export(ctx, ExportRequest{Session: "sess_00000000000000000000000000"}, func() { begun = true }, nil)
		if err == nil || begun {
			t.Fatalf("export of a missing session: begun %v, %v", begun, err)
		}
	})
}

func TestRateLimits(t *testing.T) {
	tune := func(c *Config) {
		c.ContactRate, c.ContactBurst = 0.01, 1
		c.MessageRate, c.MessageBurst = 0.01, 1
		c.Frames.RatePerSecond, c.Frames.Burst = 0.01, 1
	}
	forEach(t, tune, func(t *testing.T, a *App) {
		mkAgent(t, a, "@acme.alice")
		mkAgent(t, a, "@acme.bob")
		r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		wantRetry := func(what string, err error) {
			t.Helper()
			var re *RetryError
			if !errors.As(err, &re) || re.RetryAfterSeconds() < 1 {
				t.Fatalf("%s: %v, want a RetryError", what, err)
			}
			wantCode(t, err, http.StatusTooManyRequests, protocol.CodeRateLimited)
		}
		_, err = a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{})
		wantRetry("second contact", err)
		_, err = a.Invite(ctx, "@acme.alice", r.SessionID, protocol.InviteRequest{Invite: []string{"@acme.bob"}})
		wantRetry("invite", err)
		wantRetry("reopen", a.Reopen(ctx, "@acme.alice", r.SessionID, protocol.ReopenRequest{}))
		if _, err := a.CreateSession(ctx, "@acme.bob", protocol.CreateSessionRequest{}); err != nil {
			t.Fatalf("bob has his own bucket: %v", err)
		}
		if _, err := a.SendMessage(ctx, "@acme.alice", r.SessionID, protocol.SendMessageRequest{Content: content("1")}); err != nil {
			t.Fatal(err)
		}
		_, err = a.SendMessage(ctx, "@acme.alice", r.SessionID, protocol.SendMessageRequest{Content: content("2")})
		wantRetry("second message", err)
		// An early admission is the method's admission: one token, not two.
		bctx, err := a.Admit(ctx, "@acme.bob", ActSendMessage)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.SendMessage(bctx, "@acme.bob", r.SessionID, protocol.SendMessageRequest{Content: content("x")})
		var re *RetryError
		if err == nil || errors.As(err, &re) {
			t.Fatalf("admitted send by a non-participant: %v, want a refusal that is not 429", err)
		}
		if _, err := a.CreateSession(bctx, "@acme.bob", protocol.CreateSessionRequest{}); err == nil {
			t.Fatal("an admission for messages admitted a contact attempt")
		}
		if _, err := a.Admit(ctx, "@acme.bob", ActSendMessage); err == nil {
			t.Fatal("a second admission within the burst of one")
		}
		_, _ = a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{})
		_, err = a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{})
		wantRetry("second frame", err)
	})
}

func TestAuthCacheEviction(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		tok := mkAgent(t, a, "@acme.alice")
		if _, err := a.Authenticate(ctx, "asp_unknown"); err == nil {
			t.Fatal("an unknown token authenticated")
		}
		for i := 0; i < 2; i++ { // the second answer comes from the cache
			if h, err := a.Authenticate(ctx, tok); err != nil || h != "@acme.alice" {
				t.Fatalf("Authenticate: %q, %v", h, err)
			}
		}
		rot, err := a.RotateToken(ctx, "@acme.alice")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(ctx, tok); err == nil {
			t.Fatal("the rotated-out token still authenticates")
		}
		if h, err := a.Authenticate(ctx, rot.Token); err != nil || h != "@acme.alice" {
			t.Fatalf("new token: %q, %v", h, err)
		}
		if _, err := a.RevokeToken(ctx, "@acme.alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(ctx, rot.Token); err == nil {
			t.Fatal("a revoked token still authenticates")
		}
		tok2 := mkAgent(t, a, "@acme.bob")
		if _, err := a.Authenticate(ctx, tok2); err != nil {
			t.Fatal(err)
		}
		if err := a.DeleteAgent(ctx, "@acme.bob"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(ctx, tok2); err == nil {
			t.Fatal("a deleted agent's token still authenticates")
		}
		// A stream opened with a token that is no longer valid is refused.
		if _, err := a.OpenStream(ctx, "@acme.bob", tok2, StreamRequest{}); err == nil {
			t.Fatal("a stream opened with a deleted agent's token")
		}
	})
}

func TestAgentRules(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		_, err := a.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "nope"})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		_, err = a.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@acme.x", InboundPolicy: "closed"})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		_, err = a.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@acme.x", Allowlist: []string{"acme"}})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		_, err = a.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@acme.x", Roles: []string{"Bad Role"}})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		ag, err := a.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@acme.x", Roles: []string{"ops"}})
		if err != nil || ag.InboundPolicy != protocol.PolicyAllowlist || len(ag.Roles) != 1 {
			t.Fatalf("created %+v, %v (closed by default, with its roles)", ag.Agent, err)
		}
		got, err := a.SetPolicy(ctx, "@acme.x", protocol.PolicyRequest{InboundPolicy: protocol.PolicyOpen})
		if err != nil || got.InboundPolicy != protocol.PolicyOpen {
			t.Fatalf("SetPolicy: %+v, %v", got, err)
		}
		_, err = a.UpdateAllowlist(ctx, "@acme.x", AllowlistAdd, protocol.AllowlistRequest{})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		for _, op := range []AllowlistOp{AllowlistReplace, AllowlistAdd, AllowlistRemove} {
			if _, err := a.UpdateAllowlist(ctx, "@acme.x", op, protocol.AllowlistRequest{Entries: []string{"@acme.*"}}); err != nil {
				t.Fatalf("allowlist op %d: %v", op, err)
			}
		}
		got, err = a.SetRoles(ctx, "@acme.x", protocol.RolesRequest{})
		if err != nil || len(got.Roles) != 0 {
			t.Fatalf("SetRoles: %+v, %v", got, err)
		}
		_, err = a.Block(ctx, "@acme.x", protocol.BlockRequest{Handle: "@acme.x"})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		mkAgent(t, a, "@acme.y")
		if _, err := a.Block(ctx, "@acme.x", protocol.BlockRequest{Handle: "@acme.y"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Unblock(ctx, "@acme.x", "@acme.y"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Agent(ctx, "not a handle"); err == nil {
			t.Fatal("Agent accepted a malformed handle")
		}
		if _, err := a.Agents(ctx, "@acme"); err == nil {
			t.Fatal("Agents accepted an owner with @")
		}
		list, err := a.Agents(ctx, "acme")
		if err != nil || len(list) != 2 {
			t.Fatalf("Agents: %d, %v", len(list), err)
		}
	})
}

// frameFor returns a valid agent_advisory frame.
func frameFor(t testing.TB, sender, recipient string) json.RawMessage {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
	b, err := json.Marshal(map[string]any{
		"envelope_version": "1.0", "frame_id": id, "kind": "agent_advisory",
		"sender_handle": sender, "recipient_handle": recipient,
		"created_at": time.Now().UTC().Format(time.RFC3339), "ttl_ms": 60000,
		"acted_by": "~alice", "drafted_with": "~cc-example-model",
		"provenance_compute_location": "local-only", "provenance_method": []any{"session-context-snapshot"},
		"provenance_context_check": "passed", "provenance_basis": "agent-channel",
		"payload": map[string]any{"advisory_text": "hi", "file_refs": []any{"a.go"}, "branch": "main"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFrames(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		aliceTok := mkAgent(t, a, "@acme.alice")
		bobTok := mkAgent(t, a, "@acme.bob")
		if _, err := a.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@other.closed"}); err != nil {
			t.Fatal(err)
		}

		// Frames in session messages: the sender must be the caller.
		r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.bob"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Join(ctx, "@acme.bob", r.SessionID); err != nil {
			t.Fatal(err)
		}
		part := func(fr json.RawMessage) json.RawMessage {
			b, _ := json.Marshal([]any{map[string]any{"type": "data", "data": fr}})
			return b
		}
		_, err = a.SendMessage(ctx, "@acme.alice", r.SessionID, protocol.SendMessageRequest{Content: part(frameFor(t, "@acme.bob", "@acme.alice"))})
		wantCode(t, err, http.StatusBadRequest, "sender-identity-mismatch")
		if _, err := a.SendMessage(ctx, "@acme.alice", r.SessionID, protocol.SendMessageRequest{Content: part(frameFor(t, "@acme.alice", "@acme.bob"))}); err != nil {
			t.Fatalf("a valid frame in a message: %v", err)
		}

		// The ephemeral fan-out.
		st, err := a.OpenStream(ctx, "@acme.bob", bobTok, StreamRequest{Instrument: "cc"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if roster := a.Roster("@acme.bob"); len(roster) != 1 {
			t.Fatalf("roster %+v", roster)
		}
		if len(a.Roster("@acme.alice")) != 0 {
			t.Fatal("alice sees a roster she does not have")
		}
		res, err := a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Scope: "@acme.bob", Frame: frameFor(t, "@acme.alice", "@acme.bob")})
		if err != nil || res.Subscriptions != 1 || res.Exact {
			t.Fatalf("frame to bob: %+v, %v (coarse count of one)", res, err)
		}
		select {
		case d := <-st.Sub.C:
			if d.Kind != "agent_advisory" {
				t.Fatalf("delivered %+v", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the frame never reached bob's stream")
		}
		_, err = a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Scope: "@acme.bob", Frame: frameFor(t, "@acme.bob", "@acme.bob")})
		wantCode(t, err, http.StatusForbidden, "sender-identity-mismatch")
		_, err = a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Scope: "@acme.carol", Frame: frameFor(t, "@acme.alice", "@acme.bob")})
		wantCode(t, err, http.StatusForbidden, "scope-unauthorised")
		// A closed agent refuses contact: the same 404 as no agent at all.
		_, err = a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Scope: "@other.closed", Frame: frameFor(t, "@acme.alice", "@other.closed")})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("frame to a closed agent: %v", err)
		}
		_, err = a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Scope: "@acme.bob"})
		wantCode(t, err, http.StatusBadRequest, "field-missing")
		_, err = a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Frame: frameFor(t, "@acme.alice", "@acme.bob")})
		wantCode(t, err, http.StatusBadRequest, "field-missing")
		self, err := a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Scope: "@acme.alice", Frame: frameFor(t, "@acme.alice", "@acme.alice")})
		if err != nil || !self.Exact || self.Subscriptions != 0 {
			t.Fatalf("frame to oneself: %+v, %v (exact count)", self, err)
		}
		org, err := a.SubmitFrame(ctx, "@acme.alice", protocol.FrameSubmission{Scope: "org:acme/members/*", Frame: frameFor(t, "@acme.alice", "@acme.bob")})
		if err != nil || org.Exact {
			t.Fatalf("org frame: %+v, %v", org, err)
		}

		_, err = a.OpenStream(ctx, "@acme.alice", aliceTok, StreamRequest{Instrument: "bad instrument"})
		wantCode(t, err, http.StatusBadRequest, "field-invalid")
		_, err = a.OpenStream(ctx, "@acme.alice", aliceTok, StreamRequest{Session: "bad session"})
		wantCode(t, err, http.StatusBadRequest, "field-invalid")
		_, err = a.OpenStream(ctx, "@acme.alice", bobTok, StreamRequest{})
		wantCode(t, err, http.StatusUnauthorized, protocol.CodeUnauthorized)
	})
}
