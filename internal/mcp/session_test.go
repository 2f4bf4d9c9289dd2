package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/dbtest"
	aspmcp "github.com/aspd/aspd/internal/mcp"
	"github.com/aspd/aspd/protocol"
)

// event is an ASP event as the tools return it.
type event struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	EventID   string          `json:"event_id"`
	Sequence  int64           `json:"sequence"`
	Payload   json.RawMessage `json:"payload"`
}

type waitResult struct {
	Events []event `json:"events"`
	More   bool    `json:"more"`
}

// wait calls wait_for_events once.
func (c *client) wait(timeout, max int) waitResult {
	c.t.Helper()
	var r waitResult
	c.ok("wait_for_events", map[string]any{"timeout_seconds": timeout, "max_events": max}, &r)
	if r.Events == nil {
		c.t.Fatalf("%s: wait_for_events answered no events array", c.handle)
	}
	return r
}

// drain calls wait_for_events (timeout 0) until a call returns nothing;
// that last call confirms everything before it.
func (c *client) drain() []event {
	c.t.Helper()
	var all []event
	for range 20 {
		r := c.wait(0, 500)
		if len(r.Events) == 0 {
			return all
		}
		all = append(all, r.Events...)
	}
	c.t.Fatalf("%s: events did not run dry", c.handle)
	return nil
}

func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// message is a session.message payload.
func message(t *testing.T, e event) protocol.Message {
	t.Helper()
	if e.Type != protocol.EventMessage {
		t.Fatalf("event %s at %d, want %s", e.Type, e.Sequence, protocol.EventMessage)
	}
	var m protocol.Message
	unmarshal(t, e.Payload, &m)
	return m
}

// TestConversation: two agents talk through the tools: create_session with
// an invitation and a first message, wait_for_events, join_session,
// send_message, read_events, list_sessions, get_session, end_session.
func TestConversation(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *app.App) {
		mkAgent(t, a, "@acme.alice")
		mkAgent(t, a, "@acme.bob")
		alice := connect(t, a, "@acme.alice")
		bob := connect(t, a, "@acme.bob")

		args := map[string]any{"invite": []string{"@acme.bob"}, "topic": "widgets", "message": "hi bob", "idempotency_key": "q-1"}
		var s protocol.CreateSessionResponse
		alice.ok("create_session", args, &s)
		if !strings.HasPrefix(s.SessionID, "sess_") || s.Sequence == nil || *s.Sequence < 1 {
			t.Fatalf("create_session answered %+v", s)
		}
		var again protocol.CreateSessionResponse
		alice.ok("create_session", args, &again)
		if again.SessionID != s.SessionID {
			t.Fatalf("a retry with the same idempotency key made session %s, want %s", again.SessionID, s.SessionID)
		}

		// Bob is invited: the invitation carries the topic and inviter.
		evs := bob.drain()
		if len(evs) != 1 || evs[0].Type != protocol.EventInvited || evs[0].SessionID != s.SessionID {
			t.Fatalf("bob's events before joining: %+v", evs)
		}
		var inv protocol.InvitedPayload
		unmarshal(t, evs[0].Payload, &inv)
		if inv.Invitee != "@acme.bob" || inv.By != "@acme.alice" || inv.Topic != "widgets" {
			t.Fatalf("invitation %+v", inv)
		}

		var ok protocol.OK
		bob.ok("join_session", map[string]any{"session_id": s.SessionID}, &ok)
		if !ok.OK {
			t.Fatal("join_session answered ok false")
		}
		// Joining replays the transcript: alice's first message among it.
		evs = bob.drain()
		var first *protocol.Message
		for _, e := range evs {
			if e.Type == protocol.EventMessage {
				m := message(t, e)
				first = &m
			}
		}
		if first == nil || first.Sender != "@acme.alice" || !strings.Contains(string(first.Content), "hi bob") {
			t.Fatalf("bob's events after joining %v lack alice's message (%+v)", types(evs), first)
		}

		// Alice waits; bob's reply ends her wait long before its timeout (a
		// wake-up, or at worst the one-second re-read).
		alice.drain()
		waitArgs := map[string]any{"timeout_seconds": 20, "max_events": 10}
		start := time.Now()
		done := alice.start("wait_for_events", waitArgs)
		time.Sleep(200 * time.Millisecond) // let the wait begin; a late start only makes it return at once
		var sent protocol.SendMessageResponse
		bob.ok("send_message", map[string]any{"session_id": s.SessionID, "content": []any{
			map[string]any{"type": "text", "text": "hello alice"},
			map[string]any{"type": "data", "data": map[string]any{"ticket": "ENG-1"}},
		}, "metadata": map[string]any{"lang": "en"}}, &sent)
		if !strings.HasPrefix(sent.MessageID, "msg_") || sent.Sequence <= *s.Sequence {
			t.Fatalf("send_message answered %+v", sent)
		}
		var got waitResult
		select {
		case res := <-done:
			alice.check("wait_for_events", waitArgs, res, &got)
		case <-time.After(15 * time.Second):
			t.Fatal("alice's pending wait_for_events did not return bob's message")
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("wait_for_events returned bob's message after %v, want well before its 20 s timeout", el)
		}
		if len(got.Events) != 1 {
			t.Fatalf("alice got %v, want bob's message", types(got.Events))
		}
		m := message(t, got.Events[0])
		if m.ID != sent.MessageID || m.Sender != "@acme.bob" || got.Events[0].Sequence != sent.Sequence ||
			!strings.Contains(string(m.Content), "ENG-1") || !strings.Contains(string(m.Metadata), `"lang"`) {
			t.Fatalf("alice got message %+v at %d, want %+v", m, got.Events[0].Sequence, sent)
		}
		// Her next call confirms it: it is not returned again.
		if r := alice.wait(0, 10); len(r.Events) != 0 {
			t.Fatalf("confirmed events returned again: %v", types(r.Events))
		}

		// read_events pages through the log, independent of the cursor.
		var page struct {
			Events     []event `json:"events"`
			NextCursor string  `json:"next_cursor"`
		}
		alice.ok("read_events", map[string]any{"session_id": s.SessionID, "limit": 2}, &page)
		if len(page.Events) != 2 || page.Events[0].Sequence != 1 || page.Events[1].Sequence != 2 || page.NextCursor != "2" {
			t.Fatalf("first page: %+v", page)
		}
		var seqs []int64
		after := int64(0)
		for range 20 {
			alice.ok("read_events", map[string]any{"session_id": s.SessionID, "after_sequence": after, "limit": 2}, &page)
			for _, e := range page.Events {
				seqs = append(seqs, e.Sequence)
			}
			if page.NextCursor == "" {
				break
			}
			if err := json.Unmarshal([]byte(page.NextCursor), &after); err != nil {
				t.Fatalf("next_cursor %q: %v", page.NextCursor, err)
			}
		}
		for i, q := range seqs {
			if q != int64(i+1) {
				t.Fatalf("paged sequences %v, want 1..n", seqs)
			}
		}
		if seqs[len(seqs)-1] != sent.Sequence {
			t.Fatalf("paged sequences %v end before bob's message %d", seqs, sent.Sequence)
		}

		var list struct {
			Sessions []struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"sessions"`
		}
		bob.ok("list_sessions", map[string]any{"state": "active"}, &list)
		if len(list.Sessions) != 1 || list.Sessions[0].ID != s.SessionID || list.Sessions[0].State != protocol.StateActive {
			t.Fatalf("bob's sessions: %+v", list)
		}

		var sess protocol.Session
		bob.ok("get_session", map[string]any{"session_id": s.SessionID}, &sess)
		status := statuses(sess)
		if sess.ID != s.SessionID || sess.Topic != "widgets" || status["@acme.alice"] != protocol.StatusJoined || status["@acme.bob"] != protocol.StatusJoined {
			t.Fatalf("get_session: %+v", sess)
		}

		alice.ok("end_session", map[string]any{"session_id": s.SessionID}, nil)
		bob.fail(protocol.CodeSessionEnded, "send_message", map[string]any{"session_id": s.SessionID, "content": "too late"})
		var none struct {
			Sessions []any `json:"sessions"`
		}
		bob.ok("list_sessions", map[string]any{"state": "active"}, &none)
		if none.Sessions == nil || len(none.Sessions) != 0 {
			t.Fatalf("bob's active sessions after the end: %+v", none)
		}
	})
}

// bearer adds an Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTPBearer: over Handler (Streamable HTTP), the bearer token is
// verified by App.Authenticate before any MCP message is read, a missing or
// unknown one is HTTP 401 with a Bearer challenge, and tools act as the
// token's agent.
func TestHTTPBearer(t *testing.T) {
	a := newApp(t, dbtest.SQLite(t), nil)
	aliceToken := mkAgent(t, a, "@acme.alice")
	bobToken := mkAgent(t, a, "@acme.bob")
	srv := httptest.NewServer(aspmcp.Handler(a, 1<<20))
	defer srv.Close()

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, token := range []string{"", "asp_not-a-token"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := bearer{token}.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("token %q: %d, WWW-Authenticate %q; want 401 with a Bearer challenge", token, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		// The REST error body, as every 4xx of the API (docs/openapi.json).
		var eb protocol.ErrorBody
		if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &eb) != nil || eb.Error == nil || eb.Error.Code != protocol.CodeUnauthorized {
			t.Fatalf("token %q: 401 %s %s; want the error body, code unauthorized", token, resp.Header.Get("Content-Type"), body)
		}
	}

	dial := func(handle, token string) *client {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "aspd-test", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearer{token}}, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("connect with %s's token: %v", handle, err)
		}
		t.Cleanup(func() { cs.Close() })
		return &client{t: t, handle: handle, cs: cs}
	}
	alice, bob := dial("@acme.alice", aliceToken), dial("@acme.bob", bobToken)

	// Each token acts as its own agent: alice creates, bob (invited) joins.
	var s protocol.CreateSessionResponse
	alice.ok("create_session", map[string]any{"invite": []string{"@acme.bob"}}, &s)
	var sess protocol.Session
	alice.ok("get_session", map[string]any{"session_id": s.SessionID}, &sess)
	if st := statuses(sess); len(st) != 2 || st["@acme.alice"] != protocol.StatusJoined || st["@acme.bob"] != protocol.StatusInvited {
		t.Fatalf("the session was not created as the token's agent: %+v", sess.Participants)
	}
	bob.ok("join_session", map[string]any{"session_id": s.SessionID}, nil)
	bob.ok("get_session", map[string]any{"session_id": s.SessionID}, &sess)
	if st := statuses(sess); st["@acme.bob"] != protocol.StatusJoined {
		t.Fatalf("bob's join_session did not join bob: %+v", sess.Participants)
	}
	// An application refusal over HTTP is a tool result too, not an HTTP error.
	alice.fail(protocol.CodeNotFound, "get_session", map[string]any{"session_id": "sess_00000000000000000000000000"})
}

func statuses(s protocol.Session) map[string]string {
	out := map[string]string{}
	for _, p := range s.Participants {
		out[p.Handle] = p.Status
	}
	return out
}
