package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// TestAPIErrors checks every request-validation error of the agent API, the
// configured limits, and that a rejected request changes nothing.
func TestAPIErrors(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--max-body-bytes", "2048", "--max-content-bytes", "512", "--max-parts", "2", "--max-invitees", "2")
		a := s.provision("@api.one", "open")
		b := s.provision("@api.two", "open")
		c := s.provision("@api.three", "open")
		d := s.provision("@api.four", "open")
		sid := a.createSession(map[string]any{"invite": []string{b.handle}, "initial_message": map[string]any{"content": "hello"}})
		b.join(sid)
		bIn := newInbox(b.connect())
		bIn.expect("session.message", "session.invited", "session.joined")
		before := a.rawEvents(sid)
		sessionsBefore := len(a.mySessions())

		msgs := "/sessions/" + sid + "/messages"
		text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
		cases := []struct {
			name, method, path string
			body               any
			status             int
			code               string
		}{
			// Body syntax.
			{"truncated JSON", "POST", msgs, `{"content": "x"`, 400, "malformed_json"},
			{"not JSON", "POST", msgs, `content=x`, 400, "malformed_json"},
			{"JSON array body", "POST", msgs, `[{"content": "x"}]`, 400, "malformed_json"},
			{"trailing data", "POST", msgs, `{"content": "x"} {"content": "y"}`, 400, "malformed_json"},
			// Schema.
			{"unknown field", "POST", msgs, map[string]any{"content": "x", "bogus": 1}, 400, "invalid_request"},
			{"sender in body", "POST", msgs, map[string]any{"content": "x", "sender": a.handle}, 400, "invalid_request"},
			{"wrong type", "POST", msgs, map[string]any{"content": "x", "idempotency_key": 5}, 400, "invalid_request"},
			{"empty idempotency key", "POST", msgs, map[string]any{"content": "x", "idempotency_key": ""}, 400, "invalid_request"},
			{"metadata not an object", "POST", msgs, map[string]any{"content": "x", "metadata": []int{1}}, 400, "invalid_request"},
			{"join with a body field", "POST", "/sessions/" + sid + "/join", map[string]any{"now": true}, 400, "invalid_request"},
			// Content.
			{"missing content", "POST", msgs, map[string]any{}, 400, "invalid_content"},
			{"empty string content", "POST", msgs, map[string]any{"content": ""}, 400, "invalid_content"},
			{"empty array content", "POST", msgs, map[string]any{"content": []any{}}, 400, "invalid_content"},
			{"empty text part", "POST", msgs, map[string]any{"content": []any{text("")}}, 400, "invalid_content"},
			{"number content", "POST", msgs, map[string]any{"content": 5}, 400, "invalid_content"},
			{"unknown part type", "POST", msgs, map[string]any{"content": []any{map[string]any{"type": "video", "url": "https://x.test/v"}}}, 400, "invalid_content"},
			{"unknown part field", "POST", msgs, map[string]any{"content": []any{map[string]any{"type": "text", "text": "x", "lang": "en"}}}, 400, "invalid_content"},
			// Limits.
			{"content over --max-content-bytes", "POST", msgs, map[string]any{"content": strings.Repeat("x", 600)}, 413, "content_too_large"},
			{"parts over --max-parts", "POST", msgs, map[string]any{"content": []any{text("1"), text("2"), text("3")}}, 413, "content_too_large"},
			{"body over --max-body-bytes", "POST", msgs, map[string]any{"content": strings.Repeat("x", 3000)}, 413, "body_too_large"},
			{"invite list over --max-invitees", "POST", "/sessions/" + sid + "/invite", map[string]any{"invite": []string{c.handle, d.handle, "@api.five"}}, 400, "invalid_request"},
			{"empty invite list", "POST", "/sessions/" + sid + "/invite", map[string]any{"invite": []string{}}, 400, "invalid_request"},
			{"invalid handle in invite", "POST", "/sessions/" + sid + "/invite", map[string]any{"invite": []string{"api.three"}}, 400, "invalid_request"},
			// POST /sessions.
			{"create: invalid handle", "POST", "/sessions", map[string]any{"invite": []string{"@API.three"}}, 400, "invalid_request"},
			{"create: invite is not an array", "POST", "/sessions", map[string]any{"invite": c.handle}, 400, "invalid_request"},
			{"create: invites itself", "POST", "/sessions", map[string]any{"invite": []string{a.handle}}, 400, "invalid_request"},
			{"create: too many invitees", "POST", "/sessions", map[string]any{"invite": []string{b.handle, c.handle, d.handle}}, 400, "invalid_request"},
			{"create: end_after_send without initial_message", "POST", "/sessions", map[string]any{"invite": []string{c.handle}, "end_after_send": true}, 400, "invalid_request"},
			{"create: end_after_send wrong type", "POST", "/sessions", map[string]any{"end_after_send": "yes", "initial_message": map[string]any{"content": "x"}}, 400, "invalid_request"},
			{"create: unknown field", "POST", "/sessions", map[string]any{"invitees": []string{c.handle}}, 400, "invalid_request"},
			{"create: empty initial message", "POST", "/sessions", map[string]any{"invite": []string{c.handle}, "initial_message": map[string]any{"content": ""}}, 400, "invalid_content"},
			{"create: initial message over limit", "POST", "/sessions", map[string]any{"initial_message": map[string]any{"content": strings.Repeat("y", 600)}}, 413, "content_too_large"},
			{"create: body over limit", "POST", "/sessions", map[string]any{"topic": strings.Repeat("t", 3000)}, 413, "body_too_large"},
			{"create: malformed", "POST", "/sessions", `{"invite": [}`, 400, "malformed_json"},
			// Event reads.
			{"events limit=0", "GET", "/sessions/" + sid + "/events?limit=0", nil, 400, "invalid_request"},
			{"events limit=1001", "GET", "/sessions/" + sid + "/events?limit=1001", nil, 400, "invalid_request"},
			{"events limit not a number", "GET", "/sessions/" + sid + "/events?limit=ten", nil, 400, "invalid_request"},
			{"events negative after_sequence", "GET", "/sessions/" + sid + "/events?after_sequence=-1", nil, 400, "invalid_request"},
		}
		for _, tc := range cases {
			code, out := a.do(tc.method, tc.path, tc.body)
			wantError(t, tc.name, code, out, tc.status, tc.code)
		}

		// Boundaries that are accepted: exactly --max-parts parts, exactly
		// --max-invitees invitees, limit=1 and limit=1000.
		if n := len(a.events(sid)); n != len(before) {
			t.Fatalf("rejected requests appended events: %d -> %d", len(before), n)
		}
		after := a.rawEvents(sid)
		for i := range before {
			if !bytes.Equal(before[i], after[i]) {
				t.Fatalf("event %d changed:\n%s\n%s", i, before[i], after[i])
			}
		}
		if n := len(a.mySessions()); n != sessionsBefore {
			t.Fatalf("rejected creates listed sessions: %d -> %d", sessionsBefore, n)
		}
		bIn.quiet(quietFor)

		seq := a.send(sid, []any{text("1"), text("2")})
		wantEvent(t, bIn.expect("session.message")[0], "session.message", sid, seq)
		if got := a.invite(sid, c.handle, d.handle); len(got) != 2 {
			t.Fatalf("invite at --max-invitees: %v", got)
		}
		a.must(http.StatusOK, "GET", "/sessions/"+sid+"/events?limit=1", nil, "GetSessionEventsResponse")
		a.must(http.StatusOK, "GET", "/sessions/"+sid+"/events?limit=1000", nil, "GetSessionEventsResponse")

		// Idempotency keys: a retry answers the original; another body with
		// the same key is a conflict and appends nothing.
		body := map[string]any{"content": "once", "idempotency_key": "k-1"}
		first := a.must(http.StatusCreated, "POST", msgs, body, "PostSessionsMessagesResponse")
		again := a.must(http.StatusCreated, "POST", msgs, body, "PostSessionsMessagesResponse")
		if !bytes.Equal(first, again) {
			t.Fatalf("retry answered %s, want %s", again, first)
		}
		a.mustFail(http.StatusConflict, "idempotency_key_reused", "POST", msgs, map[string]any{"content": "twice", "idempotency_key": "k-1"})
		// The key is per sender: b may use the same key for its own message.
		other := b.must(http.StatusCreated, "POST", msgs, body, "PostSessionsMessagesResponse")
		if bytes.Equal(first, other) {
			t.Fatalf("another sender's key returned the first sender's message: %s", other)
		}
		evs := a.events(sid)
		n := 0
		for _, e := range evs {
			if e.Type == "session.message" && e.field("content") == "once" {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("%d messages 'once', want 2 (one per sender): %v", n, types(evs))
		}

		// State errors.
		c.mustFail(http.StatusConflict, "not_joined", "POST", msgs, map[string]any{"content": "x"})
		c.mustFail(http.StatusConflict, "not_joined", "POST", "/sessions/"+sid+"/invite", map[string]any{"invite": []string{d.handle}})
		c.mustFail(http.StatusConflict, "not_joined", "POST", "/sessions/"+sid+"/leave", nil)
		c.mustFail(http.StatusConflict, "not_joined", "POST", "/sessions/"+sid+"/end", nil)
		a.mustFail(http.StatusConflict, "session_active", "POST", "/sessions/"+sid+"/reopen", map[string]any{})
	})
}

// TestAPIPaging walks the event log with limit=2 through next_cursor and
// checks GET /sessions.
func TestAPIPaging(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@page.one", "open")
		b := s.provision("@page.two", "open")
		lonely := s.provision("@page.three", "open")
		if rows := lonely.mySessions(); len(rows) != 0 {
			t.Fatalf("new agent has sessions %+v", rows)
		}
		sid := a.createSession(map[string]any{"invite": []string{b.handle}, "topic": "paging", "initial_message": map[string]any{"content": "m1"}})
		b.join(sid)
		a.send(sid, "m2")
		a.send(sid, "m3")
		b.send(sid, "m4")
		b.send(sid, "m5") // 7 events: message, invited, joined, 4 messages

		var paged []event
		after, pages := "0", 0
		for {
			out := a.must(http.StatusOK, "GET", "/sessions/"+sid+"/events?limit=2&after_sequence="+after, nil, "GetSessionEventsResponse")
			var page struct {
				Events     []json.RawMessage `json:"events"`
				NextCursor *string           `json:"next_cursor"`
			}
			mustUnmarshal(t, out, &page)
			pages++
			if len(page.Events) > 2 || len(page.Events) == 0 {
				t.Fatalf("page %d has %d events", pages, len(page.Events))
			}
			for _, raw := range page.Events {
				paged = append(paged, decodeEvent(t, raw))
			}
			if page.NextCursor == nil {
				break
			}
			if *page.NextCursor == "" {
				t.Fatalf("empty next_cursor: %s", out)
			}
			after = *page.NextCursor
			if pages > 10 {
				t.Fatalf("paging does not end")
			}
		}
		if pages != 4 {
			t.Fatalf("%d pages of 2 for 7 events, want 4", pages)
		}
		wantSeqs(t, "paged events", paged, seqRange(1, 7)...)
		all := a.events(sid)
		for i := range all {
			if !bytes.Equal(all[i].Raw, paged[i].Raw) {
				t.Fatalf("paged event %d differs:\n%s\n%s", i, paged[i].Raw, all[i].Raw)
			}
		}
		// after_sequence past the end is an empty page without a cursor.
		out := a.must(http.StatusOK, "GET", "/sessions/"+sid+"/events?after_sequence=7", nil, "GetSessionEventsResponse")
		if string(out) != `{"events":[]}` && string(out) != "{\"events\":[]}\n" {
			t.Fatalf("past the end: %s", out)
		}

		// GET /sessions lists the caller's sessions, newest first.
		sid2 := a.createSession(map[string]any{"topic": "second"})
		rows := a.mySessions()
		if len(rows) != 2 || rows[0].ID != sid2 || rows[1].ID != sid {
			t.Fatalf("a's sessions %+v", rows)
		}
		if r := rows[1]; r.State != "active" || r.Topic != "paging" || r.Status != "joined" || r.LastSeq != 7 || r.CreatedAt == 0 || r.EndedAt != 0 {
			t.Fatalf("a's row for %s: %+v", sid, r)
		}
		if r := rows[0]; r.LastSeq != 0 || r.Topic != "second" {
			t.Fatalf("a's row for %s: %+v", sid2, r)
		}
		b.end(sid)
		if rows := b.mySessions(); len(rows) != 1 || rows[0].ID != sid || rows[0].State != "ended" || rows[0].EndedAt == 0 || rows[0].LastSeq != 8 {
			t.Fatalf("b's sessions %+v", rows)
		}
		if rows := lonely.mySessions(); len(rows) != 0 {
			t.Fatalf("lonely's sessions %+v", rows)
		}
	})
}

// TestAPIAuth checks authentication on REST and /connect, and that token
// rotation and revocation take effect at once, closing open streams 4001.
func TestAPIAuth(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@auth.one", "open")
		peer := s.provision("@auth.peer", "open")

		// No token, a bad token, a non-bearer scheme, the admin token.
		for _, c := range []struct{ name, token string }{{"no token", ""}, {"bad token", "asp_not-a-token"}, {"admin token", s.admin}} {
			for _, r := range []struct{ method, path string }{{"POST", "/sessions"}, {"GET", "/sessions"}, {"GET", "/sessions/" + missingSession}, {"GET", "/connect"}} {
				code, out := request(t, r.method, s.url+r.path, c.token, map[string]any{})
				wantError(t, c.name+" "+r.method+" "+r.path, code, out, http.StatusUnauthorized, "unauthorized")
			}
		}
		if code := dialStatus(t, s, "/connect", ""); code != http.StatusUnauthorized {
			t.Fatalf("WS /connect without token: %d", code)
		}
		if code := dialStatus(t, s, "/connect", "Bearer asp_not-a-token"); code != http.StatusUnauthorized {
			t.Fatalf("WS /connect with a bad token: %d", code)
		}
		if code := dialStatus(t, s, "/connect", "Basic "+a.token); code != http.StatusUnauthorized {
			t.Fatalf("WS /connect with Basic: %d", code)
		}
		if code := dialStatus(t, s, "/connect?token=asp_not-a-token", ""); code != http.StatusUnauthorized {
			t.Fatalf("WS /connect?token=bad: %d", code)
		}
		// ?token= is accepted on /connect only.
		code, out := request(t, "GET", s.url+"/sessions?token="+a.token, "", nil)
		wantError(t, "?token= on GET /sessions", code, out, http.StatusUnauthorized, "unauthorized")
		qs := dialQuery(t, s, a.token)
		sid := peer.createSession(map[string]any{"invite": []string{a.handle}, "topic": "auth"})
		e := qs.next()
		wantEvent(t, e, "session.invited", sid, 1)
		wantPayload(t, e, map[string]any{"invitee": a.handle, "by": peer.handle, "topic": "auth"})

		// ---- rotation ----
		hdr := a.connect()
		wantEvent(t, hdr.next(), "session.invited", sid, 1)
		code, out = s.adminDo("POST", "/agents/@auth.one/token", nil)
		if code != http.StatusOK {
			t.Fatalf("rotate: %d %s", code, out)
		}
		var rot struct {
			Token string `json:"token"`
		}
		mustUnmarshal(t, out, &rot)
		if rot.Token == "" || rot.Token == a.token {
			t.Fatalf("rotation answered %s", out)
		}
		old := a.token
		code, out = request(t, "GET", s.url+"/sessions", old, nil)
		wantError(t, "old token after rotation", code, out, http.StatusUnauthorized, "unauthorized")
		code, out = request(t, "POST", s.url+"/sessions/"+sid+"/join", old, nil)
		wantError(t, "old token join after rotation", code, out, http.StatusUnauthorized, "unauthorized")
		hdr.wantClosed(4001)
		qs.wantClosed(4001)
		if code := dialStatus(t, s, "/connect", "Bearer "+old); code != http.StatusUnauthorized {
			t.Fatalf("WS /connect with the rotated-out token: %d", code)
		}
		// The server lets the cut connections go after the client saw the
		// close; wait for that (the agent is offline), or the join could
		// commit first and be followed by a session.disconnected.
		waitFor(t, "@auth.one offline after the rotation", func() bool { return !adminAgents(t, s)["@auth.one"].Online })
		a.token = rot.Token
		a.join(sid)
		wantSeqs(t, "events with the new token", a.events(sid), 1, 2)
		fresh := a.connect()
		// The new connection replays what was not delivered: at least the join.
		for {
			e := fresh.next()
			if e.Type == "session.joined" {
				break
			}
		}

		// ---- revocation ----
		code, out = s.adminDo("DELETE", "/agents/@auth.one/token", nil)
		if code != http.StatusOK {
			t.Fatalf("revoke: %d %s", code, out)
		}
		code, out = a.do("GET", "/sessions/"+sid, nil)
		wantError(t, "revoked token", code, out, http.StatusUnauthorized, "unauthorized")
		fresh.wantClosed(websocket.StatusCode(4001))
		if code := dialStatus(t, s, "/connect?token="+a.token, ""); code != http.StatusUnauthorized {
			t.Fatalf("WS /connect?token= with the revoked token: %d", code)
		}
		// The session itself is untouched by the revocation.
		if d := peer.getSession(sid); d.statuses() != "[@auth.one=joined @auth.peer=joined]" {
			t.Fatalf("after revocation: %s", d.Raw)
		}
	})
}
