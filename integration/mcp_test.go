package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ---- an MCP agent: the SDK's own client over Streamable HTTP ----

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

type mcpAgent struct {
	t      testing.TB
	handle string
	cs     *mcp.ClientSession
}

func mcpConnect(t testing.TB, s *server, a *agent) *mcpAgent {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "aspd-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{a.token, http.DefaultTransport}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("mcp connect as %s: %v", a.handle, err)
	}
	t.Cleanup(func() { cs.Close() })
	return &mcpAgent{t: t, handle: a.handle, cs: cs}
}

// call calls a tool and returns its result.
func (m *mcpAgent) call(name string, args map[string]any) *mcp.CallToolResult {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := m.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		m.t.Fatalf("%s: %s: %v", m.handle, name, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured content
// into out (if non-nil); the text copy must carry the same JSON.
func (m *mcpAgent) ok(name string, args map[string]any, out any) {
	m.t.Helper()
	res := m.call(name, args)
	if res.IsError {
		m.t.Fatalf("%s: %s %v: error %s", m.handle, name, args, resultText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		m.t.Fatal(err)
	}
	var fromText, fromStructured any
	mustUnmarshal(m.t, []byte(resultText(res)), &fromText)
	mustUnmarshal(m.t, b, &fromStructured)
	if fmt.Sprint(fromText) != fmt.Sprint(fromStructured) {
		m.t.Fatalf("%s: text copy %s differs from structured content %s", name, resultText(res), b)
	}
	if out != nil {
		mustUnmarshal(m.t, b, out)
	}
}

// fail calls a tool that must fail with code, and returns its text.
func (m *mcpAgent) fail(code, name string, args map[string]any) string {
	m.t.Helper()
	res := m.call(name, args)
	if !res.IsError {
		m.t.Fatalf("%s: %s %v succeeded, want %s", m.handle, name, args, code)
	}
	text := resultText(res)
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	mustUnmarshal(m.t, []byte(text), &body)
	if body.Error.Code != code {
		m.t.Fatalf("%s: %s: error %s, want code %s", m.handle, name, text, code)
	}
	return text
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// wait calls wait_for_events once and returns the events, validated.
func (m *mcpAgent) wait(timeout, max int) ([]event, bool) {
	m.t.Helper()
	var r struct {
		Events []json.RawMessage `json:"events"`
		More   bool              `json:"more"`
	}
	m.ok("wait_for_events", map[string]any{"timeout_seconds": timeout, "max_events": max}, &r)
	out := make([]event, len(r.Events))
	for i, raw := range r.Events {
		out[i] = decodeEvent(m.t, raw)
	}
	return out, r.More
}

// expect waits for events and checks their types in order.
func (m *mcpAgent) expect(types ...string) []event {
	m.t.Helper()
	var got []event
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(types) && time.Now().Before(deadline) {
		evs, _ := m.wait(2, len(types)-len(got))
		got = append(got, evs...)
	}
	if len(got) != len(types) {
		m.t.Fatalf("%s: got %v, want %v", m.handle, mcpTypes(got), types)
	}
	for i, typ := range types {
		if got[i].Type != typ {
			m.t.Fatalf("%s: event %d is %s (seq %d), want %s; all: %v", m.handle, i, got[i].Type, got[i].Sequence, typ, mcpTypes(got))
		}
	}
	return got
}

// drain calls wait_for_events until a call returns nothing.
func (m *mcpAgent) drain(max int) []event {
	m.t.Helper()
	var all []event
	for {
		evs, _ := m.wait(0, max)
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
	}
}

// sameEvents fails unless got and want are the same events in the same order.
func sameEvents(t testing.TB, got, want []event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("wait_for_events delivered %d events %v, WebSocket replay %d %v", len(got), mcpTypes(got), len(want), mcpTypes(want))
	}
	for i := range want {
		if canon(t, got[i].Raw) != canon(t, want[i].Raw) {
			t.Fatalf("event %d:\nMCP %s\nWS  %s", i, got[i].Raw, want[i].Raw)
		}
	}
}

// canon is an event's JSON with its object keys sorted: MCP structured
// content is re-encoded by the SDK, so key order is not the WebSocket's.
func canon(t testing.TB, raw []byte) string {
	t.Helper()
	var v any
	mustUnmarshal(t, raw, &v)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mcpTypes(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%s#%d", e.Type, e.Sequence)
	}
	return out
}

func (m *mcpAgent) create(args map[string]any) (string, int64) {
	m.t.Helper()
	var r struct {
		SessionID string `json:"session_id"`
		Sequence  int64  `json:"sequence"`
	}
	m.ok("create_session", args, &r)
	return r.SessionID, r.Sequence
}

func (m *mcpAgent) send(sid string, content any) int64 {
	m.t.Helper()
	var r struct {
		MessageID string `json:"message_id"`
		Sequence  int64  `json:"sequence"`
	}
	m.ok("send_message", map[string]any{"session_id": sid, "content": content}, &r)
	return r.Sequence
}

// TestMCPWalkthrough plays whitepaper §7.1 through MCP tools alone: three
// agents, none of which opens a WebSocket.
func TestMCPWalkthrough(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		nick := mcpConnect(t, s, s.provision("@nick.assistant", "open"))
		sup := mcpConnect(t, s, s.provision("@acme.support", "open"))
		eng := mcpConnect(t, s, s.provision("@acme.engineer", "allowlist", "@acme.*"))

		// The tools and their annotations.
		tools, err := nick.cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]*mcp.Tool{}
		for _, tl := range tools.Tools {
			names[tl.Name] = tl
			if tl.InputSchema == nil || tl.OutputSchema == nil || tl.Annotations == nil || tl.Description == "" {
				t.Errorf("tool %s lacks a schema, annotations or a description", tl.Name)
			}
		}
		for _, n := range []string{"create_session", "invite_to_session", "join_session", "leave_session", "end_session", "reopen_session",
			"send_message", "get_session", "list_sessions", "read_events", "wait_for_events", "post_frame", "get_roster"} {
			if names[n] == nil {
				t.Fatalf("tool %s missing", n)
			}
		}
		if !names["read_events"].Annotations.ReadOnlyHint || names["send_message"].Annotations.ReadOnlyHint {
			t.Errorf("readOnlyHint wrong")
		}

		// ---- Creating the session ----
		const topic = "Question about widget v3 export"
		const msg1 = "Hi — having trouble with the widget v3 export feature. Is there a known issue?"
		create := map[string]any{"invite": []string{"@acme.support"}, "topic": topic, "message": msg1, "idempotency_key": "01HW7AB12CDEF"}
		sid, seq := nick.create(create)
		if seq != 1 {
			t.Fatalf("initial message sequence %d, want 1", seq)
		}
		ev := nick.expect("session.message", "session.invited")
		wantMessage(t, ev[0], sid, 1, "@nick.assistant", msg1)
		wantPayload(t, ev[1], map[string]any{"invitee": "@acme.support", "by": "@nick.assistant", "topic": topic})
		// A retry answers the same session.
		if sid2, _ := nick.create(create); sid2 != sid {
			t.Fatalf("retried create answered %s, want %s", sid2, sid)
		}
		// The invitee gets only the invitation.
		ev = sup.expect("session.invited")
		wantEvent(t, ev[0], "session.invited", sid, 2)
		if evs, _ := sup.wait(0, 10); len(evs) != 0 {
			t.Fatalf("invitee got %v before joining", mcpTypes(evs))
		}

		// ---- Joining: the transcript is replayed from 1 ----
		sup.ok("join_session", map[string]any{"session_id": sid}, nil)
		ev = sup.expect("session.message", "session.invited", "session.joined")
		wantMessage(t, ev[0], sid, 1, "@nick.assistant", msg1)
		wantEvent(t, ev[2], "session.joined", sid, 3)
		nick.expect("session.joined")

		// ---- Messages flow ----
		const msg2 = "Looking into it. Bringing in our engineer."
		if seq := sup.send(sid, msg2); seq != 4 {
			t.Fatalf("msg2 sequence %d, want 4", seq)
		}
		wantMessage(t, nick.expect("session.message")[0], sid, 4, "@acme.support", msg2)
		sup.expect("session.message")

		// ---- A third participant (allowed by @acme.*) ----
		var inv struct {
			Invited []string `json:"invited"`
		}
		sup.ok("invite_to_session", map[string]any{"session_id": sid, "invite": []string{"@acme.engineer"}}, &inv)
		if len(inv.Invited) != 1 || inv.Invited[0] != "@acme.engineer" {
			t.Fatalf("invited %v", inv.Invited)
		}
		for _, m := range []*mcpAgent{nick, sup, eng} {
			wantEvent(t, m.expect("session.invited")[0], "session.invited", sid, 5)
		}
		eng.ok("join_session", map[string]any{"session_id": sid}, nil)
		eng.expect("session.message", "session.invited", "session.joined", "session.message", "session.invited", "session.joined")
		const msg3 = "Known issue in v3.0.2; fixed in v3.0.3."
		parts := []map[string]any{{"type": "text", "text": msg3}, {"type": "data", "data": map[string]any{"ticket": "ENG-4521"}}}
		if seq := eng.send(sid, parts); seq != 7 {
			t.Fatalf("msg3 sequence %d, want 7", seq)
		}
		for _, m := range []*mcpAgent{nick, sup} {
			ev := m.expect("session.joined", "session.message")
			wantEvent(t, ev[1], "session.message", sid, 7)
		}
		eng.expect("session.message")

		// ---- Reads ----
		var sess struct {
			State        string `json:"state"`
			Topic        string `json:"topic"`
			Participants []struct {
				Handle string `json:"handle"`
				Status string `json:"status"`
			} `json:"participants"`
		}
		nick.ok("get_session", map[string]any{"session_id": sid}, &sess)
		if sess.State != "active" || sess.Topic != topic || len(sess.Participants) != 3 {
			t.Fatalf("get_session: %+v", sess)
		}
		var page struct {
			Events     []json.RawMessage `json:"events"`
			NextCursor string            `json:"next_cursor"`
		}
		nick.ok("read_events", map[string]any{"session_id": sid, "after_sequence": 3, "limit": 2}, &page)
		if len(page.Events) != 2 || page.NextCursor != "5" {
			t.Fatalf("read_events page: %d events, next %q", len(page.Events), page.NextCursor)
		}
		for _, raw := range page.Events {
			validate(t, "events.json", raw)
		}
		var list struct {
			Sessions []sessionRow `json:"sessions"`
		}
		eng.ok("list_sessions", map[string]any{"state": "active"}, &list)
		if len(list.Sessions) != 1 || list.Sessions[0].ID != sid || list.Sessions[0].Status != "joined" || list.Sessions[0].LastSeq != 7 ||
			len(list.Sessions[0].Participants) != 3 {
			t.Fatalf("list_sessions: %+v", list.Sessions)
		}

		// ---- The support agent leaves; nick ends; nick reopens ----
		sup.ok("leave_session", map[string]any{"session_id": sid}, nil)
		for _, m := range []*mcpAgent{nick, sup, eng} {
			wantEvent(t, m.expect("session.left")[0], "session.left", sid, 8)
		}
		nick.ok("end_session", map[string]any{"session_id": sid}, nil)
		for _, m := range []*mcpAgent{nick, eng} {
			wantEvent(t, m.expect("session.ended")[0], "session.ended", sid, 9)
		}
		if evs, _ := sup.wait(0, 10); len(evs) != 0 {
			t.Fatalf("the agent that left got %v", mcpTypes(evs))
		}
		nick.fail("session_ended", "send_message", map[string]any{"session_id": sid, "content": "late"})
		nick.ok("reopen_session", map[string]any{"session_id": sid, "message": "One more thing."}, nil)
		nick.expect("session.reopened", "session.message")
	})
}

// TestMCPMixedSession: one agent on MCP, one on REST and the WebSocket, in
// one session; both end with the same transcript.
func TestMCPMixedSession(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@mcp.agent", "open")
		b := s.provision("@ws.agent", "open")
		am := mcpConnect(t, s, a)
		bws := newInbox(b.connect())

		sid, _ := am.create(map[string]any{"invite": []string{"@ws.agent"}, "message": "hello from MCP"})
		bws.expect("session.invited")
		b.join(sid)
		bws.expect("session.message", "session.joined") // the inbox de-duplicates the repeated invitation
		b.send(sid, "hello from the WebSocket")
		am.send(sid, []map[string]any{{"type": "text", "text": "and data"}, {"type": "data", "data": map[string]any{"n": 1}}})
		b.send(sid, "bye")
		b.end(sid)
		wsEvs := bws.expect("session.message", "session.message", "session.message", "session.ended")
		mcpEvs := am.drain(100)
		if got := mcpTypes(mcpEvs); strings.Join(got, " ") != "session.message#1 session.invited#2 session.joined#3 session.message#4 session.message#5 session.message#6 session.ended#7" {
			t.Fatalf("MCP agent got %v", got)
		}
		// From the join on, both saw the same events, byte for byte.
		var fromJoin []event
		for _, e := range mcpEvs {
			if e.Sequence >= 4 {
				fromJoin = append(fromJoin, e)
			}
		}
		for i := range wsEvs {
			if canon(t, wsEvs[i].Raw) != canon(t, fromJoin[i].Raw) {
				t.Fatalf("event %d differs:\nWS  %s\nMCP %s", i, wsEvs[i].Raw, fromJoin[i].Raw)
			}
		}
		// And the same transcript through the read API.
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		am.ok("read_events", map[string]any{"session_id": sid}, &page)
		rest := b.rawEvents(sid)
		if len(page.Events) != len(rest) {
			t.Fatalf("read_events: %d events, REST %d", len(page.Events), len(rest))
		}
		for i := range rest {
			var x, y any
			mustUnmarshal(t, page.Events[i], &x)
			mustUnmarshal(t, rest[i], &y)
			if fmt.Sprint(x) != fmt.Sprint(y) {
				t.Fatalf("event %d: MCP %s, REST %s", i, page.Events[i], rest[i])
			}
		}
	})
}

// peek replays an agent's undelivered events over a WebSocket that confirms
// nothing (it acks an unknown session first, so pongs stop confirming, and
// never acks anything else), until the stream is quiet.
func peek(t *testing.T, s *server, token string) []event {
	t.Helper()
	r := dlDialRaw(t, s, token)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ack","session_id":"sess_00000000000000000000000000","sequence":1}`)); err != nil {
		t.Fatal(err)
	}
	raws, _ := r.readAll(time.Second)
	r.ws.Close(websocket.StatusNormalClosure, "")
	out := make([]event, len(raws))
	for i, raw := range raws {
		out[i] = decodeEvent(t, raw)
	}
	return out
}

// TestMCPWaitMatchesReplay: wait_for_events delivers exactly what a
// WebSocket replay of the same agent would, from the same durable cursor,
// including after a restart of aspd (what the last call returned and no
// call confirmed is delivered again).
func TestMCPWaitMatchesReplay(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		nick := s.provision("@nick.assistant", "open")
		bob := s.provision("@bob.agent", "open")
		s.provision("@carol.agent", "open")
		bm := mcpConnect(t, s, bob)
		s1 := nick.createSession(map[string]any{"invite": []string{"@bob.agent"}, "initial_message": map[string]any{"content": "one"}})
		s2 := nick.createSession(map[string]any{"invite": []string{"@bob.agent"}, "initial_message": map[string]any{"content": "two"}})
		for i := range 5 {
			nick.send(s1, fmt.Sprintf("s1 #%d", i))
			nick.send(s2, fmt.Sprintf("s2 #%d", i))
		}
		// Bob sees both invitations (confirmed by the next call), then joins s1:
		// its pass restarts at 1.
		bm.expect("session.invited", "session.invited")
		if evs, _ := bm.wait(0, 10); len(evs) != 0 { // confirms the invitations
			t.Fatalf("after the invitations: %v", mcpTypes(evs))
		}
		bm.ok("join_session", map[string]any{"session_id": s1}, nil)
		nick.send(s1, "after the join")

		// The join restarts the pass at 1, for both.
		joined := peek(t, s, bob.token)
		dlWaitLog(t, s, s1, "session.disconnected", func(e event) bool { return e.Type == "session.disconnected" })
		first, more := bm.wait(0, 500)
		// Closing the peek connection marked bob offline: session.disconnected.
		if more || len(first) != 10 || first[9].Type != "session.disconnected" {
			t.Fatalf("after the join: %v more=%v", mcpTypes(first), more)
		}
		sameEvents(t, first[:9], joined)

		for i := range 3 {
			nick.send(s1, fmt.Sprintf("s1 later #%d", i))
			nick.send(s2, fmt.Sprintf("s2 later #%d", i))
		}
		nick.invite(s2, "@carol.agent")
		second, more := bm.wait(0, 2) // confirms first; second is unconfirmed
		if !more || len(second) != 2 {
			t.Fatalf("second call: %v more=%v", mcpTypes(second), more)
		}

		s.stop()
		s.restart()
		bm = mcpConnect(t, s, bob)
		replay := peek(t, s, bob.token)
		if len(replay) == 0 || canon(t, replay[0].Raw) != canon(t, second[0].Raw) {
			t.Fatalf("after the restart the replay starts with %v, want the unconfirmed %v", mcpTypes(replay), mcpTypes(second))
		}
		heads := map[string]int64{}
		for _, e := range replay {
			heads[e.SessionID] = max(heads[e.SessionID], e.Sequence)
		}
		got := bm.drain(4)
		// Closing the peek connection marked bob offline: drop the
		// session.disconnected it appended after the replay.
		var cmp []event
		for _, e := range got {
			if e.Sequence > heads[e.SessionID] {
				if e.Type != "session.disconnected" {
					t.Fatalf("unexpected event past the replay: %s", e.Raw)
				}
				continue
			}
			cmp = append(cmp, e)
		}
		sameEvents(t, cmp, replay)
		if len(heads) != 1 || heads[s1] == 0 {
			t.Fatalf("replay covered %v, want only %s", heads, s1)
		}
	})
}

// TestMCPAuthAndErrors: a bad token is refused with 401 and a challenge; a
// trust denial is the same tool error as a missing handle; errors carry
// REST's code and message.
func TestMCPAuthAndErrors(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@alice.agent", "open")
		s.provision("@closed.agent", "allowlist", "@someone.else")
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
		for _, auth := range []string{"", "Bearer asp_not_a_token"} {
			req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("auth %q: status %d, WWW-Authenticate %q", auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "x", Version: "1"}, nil)
		if _, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url + "/mcp",
			HTTPClient: &http.Client{Transport: bearer{"asp_bad", http.DefaultTransport}}, DisableStandaloneSSE: true}, nil); err == nil {
			t.Fatal("the SDK client connected with a bad token")
		}

		am := mcpConnect(t, s, a)
		denied := am.fail("not_found", "create_session", map[string]any{"invite": []string{"@closed.agent"}, "message": "hi"})
		missing := am.fail("not_found", "create_session", map[string]any{"invite": []string{"@nobody.here"}, "message": "hi"})
		if denied != missing {
			t.Fatalf("trust denial %s differs from a missing handle %s", denied, missing)
		}
		// The same code and message as REST.
		code, rest := a.do("POST", "/sessions", map[string]any{"invite": []string{"@closed.agent"}})
		if code != http.StatusNotFound || strings.TrimSpace(string(rest)) != denied {
			t.Fatalf("REST answered %d %s, MCP %s", code, rest, denied)
		}
		am.fail("not_found", "get_session", map[string]any{"session_id": "sess_nope"})
		am.fail("invalid_request", "wait_for_events", map[string]any{"timeout_seconds": 61})
		am.fail("invalid_request", "wait_for_events", map[string]any{"max_events": 501})
		sid, _ := am.create(map[string]any{"topic": "t"})
		am.fail("invalid_content", "send_message", map[string]any{"session_id": sid, "content": []any{}})
		// Revocation takes effect at once.
		if code, out := s.adminDo("POST", "/agents/@alice.agent/token", nil); code != http.StatusOK {
			t.Fatalf("rotate: %d %s", code, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := am.cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_sessions", Arguments: map[string]any{}}); err == nil {
			t.Fatal("a rotated token still works over MCP")
		}
	})
}

// TestMCPFrames: post_frame reaches an open frame stream, get_roster lists
// the caller's own streams, and a frame error is REST's.
func TestMCPFrames(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@alice.cc", "open")
		bob := s.provision("@bob.dev", "open")
		am, bm := mcpConnect(t, s, alice), mcpConnect(t, s, bob)
		c := sseOpen(t, s, bob.token, "/stream?instrument=cli", nil)

		var roster struct {
			Streams []struct {
				Instrument string `json:"instrument"`
			} `json:"streams"`
		}
		bm.ok("get_roster", nil, &roster)
		if len(roster.Streams) != 1 || roster.Streams[0].Instrument != "cli" {
			t.Fatalf("roster %+v", roster)
		}
		am.ok("get_roster", nil, &roster)
		if len(roster.Streams) != 0 {
			t.Fatalf("alice sees streams %+v", roster)
		}

		fr := frNew(t, "@alice.cc", "@bob.dev", "agent_advisory", "")
		var res struct {
			Subscriptions int  `json:"subscriptions"`
			Exact         bool `json:"exact"`
		}
		am.ok("post_frame", map[string]any{"scope": "@bob.dev", "frame": fr}, &res)
		if res.Subscriptions != 1 {
			t.Fatalf("post_frame reached %+v", res)
		}
		it := c.next()
		if !strings.Contains(it.Data, frID(fr)) {
			t.Fatalf("stream got %+v, want frame %s", it, frID(fr))
		}
		// Another sender's identity is refused, as on POST /frames.
		spoof := frNew(t, "@bob.dev", "@bob.dev", "agent_advisory", "")
		text := am.fail("sender-identity-mismatch", "post_frame", map[string]any{"scope": "@bob.dev", "frame": spoof})
		_, _, rest := frPost(t, alice, map[string]any{"scope": "@bob.dev", "frame": spoof})
		if canon(t, rest) != canon(t, []byte(text)) {
			t.Fatalf("MCP %s, REST %s", text, rest)
		}
	})
}

// TestMCPRateLimited: over its message rate, an MCP agent gets REST's
// rate_limited, and the error says when to retry.
func TestMCPRateLimited(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--message-rate", "0.1", "--message-burst", "1")
		am := mcpConnect(t, s, s.provision("@alice.agent", "open"))
		sid, _ := am.create(map[string]any{"topic": "t"})
		am.send(sid, "first")
		text := am.fail("rate_limited", "send_message", map[string]any{"session_id": sid, "content": "second"})
		var body struct {
			RetryAfter int `json:"retry_after_seconds"`
		}
		mustUnmarshal(t, []byte(text), &body)
		if body.RetryAfter < 1 || body.RetryAfter > 10 {
			t.Fatalf("retry_after_seconds %d in %s, want 1..10 at 0.1 messages per second", body.RetryAfter, text)
		}
	})
}
