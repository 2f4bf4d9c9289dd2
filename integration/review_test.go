package integration

// End-to-end regression tests for the "delivery integrity" review.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

const notFoundBody = `{"error":{"code":"not_found","message":"not found"}}`

// wantNotFoundBody checks the one 404 body every trust denial shares.
func wantNotFoundBody(t testing.TB, what string, code int, body []byte) {
	t.Helper()
	if code != http.StatusNotFound || string(bytes.TrimSpace(body)) != notFoundBody {
		t.Fatalf("%s: %d %s, want 404 %s", what, code, body, notFoundBody)
	}
}

// adminSessionIDs lists every session id through the operator API.
func adminSessionIDs(t testing.TB, s *server) []string {
	t.Helper()
	code, out := s.adminDo("GET", "/sessions?limit=1000", nil)
	if code != http.StatusOK {
		t.Fatalf("admin sessions: %d %s", code, out)
	}
	var r struct {
		Sessions []struct {
			ID string `json:"id"`
		} `json:"sessions"`
	}
	mustUnmarshal(t, out, &r)
	ids := []string{}
	for _, x := range r.Sessions {
		ids = append(ids, x.ID)
	}
	return ids
}

// TestReviewCreateWithBlockerAndBlocked: §6.2, a blocked agent "cannot be
// invited to new ones". A third party's POST /sessions inviting both the
// blocker and the agent it blocked is the 404 of every trust denial, and
// nothing is written.
func TestReviewCreateWithBlockerAndBlocked(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		s.provision("@rv.blocker", "open")
		s.provision("@rv.blocked", "open")
		third := s.provision("@rv.third", "open")
		if code, out := s.adminDo("POST", "/agents/@rv.blocker/blocks", map[string]any{"handle": "@rv.blocked"}); code != http.StatusOK {
			t.Fatalf("block: %d %s", code, out)
		}
		for _, invite := range [][]string{{"@rv.blocker", "@rv.blocked"}, {"@rv.blocked", "@rv.blocker"}} {
			code, out := third.do("POST", "/sessions", map[string]any{"invite": invite, "topic": "both",
				"initial_message": map[string]any{"content": "hello both"}, "idempotency_key": "k1"})
			wantNotFoundBody(t, fmt.Sprint("create inviting ", invite), code, out)
		}
		code, out := third.do("POST", "/sessions", map[string]any{"invite": []string{"@rv.nobody"}})
		wantNotFoundBody(t, "create inviting a handle that does not exist", code, out)
		if rows := third.mySessions(); len(rows) != 0 {
			t.Fatalf("refused creates are listed: %+v", rows)
		}
		if ids := adminSessionIDs(t, s); len(ids) != 0 {
			t.Fatalf("refused creates wrote sessions %v", ids)
		}
		// The key stays unused: another request with it succeeds.
		third.createSession(map[string]any{"invite": []string{"@rv.blocked"}, "idempotency_key": "k1"})
	})
}

// TestReviewBlockedAgentView: the blocked agent sees itself left in its own
// snapshot, as in its listing and in the answer to a send; and the answers
// to its requests stay the same once the others end the session.
func TestReviewBlockedAgentView(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@rb.alice", "open")
		bob := s.provision("@rb.bob", "open")
		eve := s.provision("@rb.eve", "open")
		carol := s.provision("@rb.carol", "open")
		sid := alice.createSession(map[string]any{"invite": []string{"@rb.bob", "@rb.eve", "@rb.carol"}})
		bob.join(sid)
		eve.join(sid)
		carol.join(sid)
		carol.leave(sid)
		if code, out := s.adminDo("POST", "/agents/@rb.alice/blocks", map[string]any{"handle": "@rb.eve"}); code != http.StatusOK {
			t.Fatalf("block: %d %s", code, out)
		}
		d := eve.getSession(sid)
		if d.State != "active" || d.statuses() != "[@rb.alice=joined @rb.bob=joined @rb.carol=left @rb.eve=left]" {
			t.Fatalf("blocked agent's snapshot %s", d.Raw)
		}
		if rows := eve.mySessions(); len(rows) != 1 || rows[0].Status != "left" || rows[0].State != "active" {
			t.Fatalf("blocked agent's listing %+v", rows)
		}

		type call struct{ method, path string }
		calls := []call{{"POST", "/join"}, {"POST", "/messages"}, {"POST", "/invite"}, {"POST", "/leave"}, {"POST", "/end"}, {"POST", "/reopen"}}
		bodies := map[string]any{"/messages": map[string]any{"content": "still here?"}, "/invite": map[string]any{"invite": []string{"@rb.alice"}}}
		answers := func(a *agent) string {
			var out []string
			for _, c := range calls {
				code, body := a.do(c.method, "/sessions/"+sid+c.path, bodies[c.path])
				var e struct {
					Error struct {
						Code string `json:"code"`
					} `json:"error"`
				}
				_ = json.Unmarshal(body, &e)
				out = append(out, fmt.Sprintf("%s %d %s", c.path, code, e.Error.Code))
			}
			return strings.Join(out, ", ")
		}
		const want = "/join 409 not_invited, /messages 409 not_joined, /invite 409 not_joined, /leave 409 not_joined, /end 409 not_joined, /reopen 409 not_joined"
		for _, a := range []*agent{eve, carol} {
			if got := answers(a); got != want {
				t.Fatalf("%s while the session goes on: %s", a.handle, got)
			}
		}
		alice.end(sid)
		for _, a := range []*agent{eve, carol} {
			if got := answers(a); got != want {
				t.Fatalf("%s once the others ended the session: %s", a.handle, got)
			}
		}
		if d2 := eve.getSession(sid); string(d2.Raw) != string(d.Raw) {
			t.Fatalf("blocked agent's snapshot changed:\n%s\n%s", d.Raw, d2.Raw)
		}
	})
}

// TestReviewEventPagesWithUnderscoreHandles: pages of GET
// /sessions/{id}/events are short only at the end of the log, for handles
// with "_" too (a LIKE wildcard).
func TestReviewEventPagesWithUnderscoreHandles(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@pg.a", "open")
		v := s.provision("@pg_x.v_", "open")
		for _, h := range []string{"@pg-x.v-", "@pgxx.vx"} {
			s.provision(h, "open")
		}
		others := []string{"@pg-x.v-", "@pgxx.vx"}
		sid := a.createSession(map[string]any{"invite": append([]string{"@pg_x.v_"}, others...)})
		v.join(sid)
		v.leave(sid)
		for i := 0; i < 2; i++ { // ended and reopened name only the others
			a.end(sid)
			a.must(http.StatusOK, "POST", "/sessions/"+sid+"/reopen", map[string]any{"invite": others}, "PostSessionsReopenResponse")
		}
		a.end(sid)
		a.must(http.StatusOK, "POST", "/sessions/"+sid+"/reopen", map[string]any{"invite": []string{"@pg_x.v_"}}, "PostSessionsReopenResponse")

		all := v.events(sid) // one page of up to 1000
		var got []int64
		after := "0"
		for {
			out := v.must(http.StatusOK, "GET", "/sessions/"+sid+"/events?limit=1&after_sequence="+after, nil, "GetSessionEventsResponse")
			var page struct {
				Events     []json.RawMessage `json:"events"`
				NextCursor string            `json:"next_cursor"`
			}
			mustUnmarshal(t, out, &page)
			for _, raw := range page.Events {
				got = append(got, decodeEvent(t, raw).Sequence)
			}
			if page.NextCursor == "" {
				break
			}
			if len(page.Events) != 1 {
				t.Fatalf("short page before the end: %s", out)
			}
			after = page.NextCursor
		}
		if fmt.Sprint(got) != fmt.Sprint(seqs(all)) {
			t.Fatalf("pages of one: %v; the whole log: %v", got, seqs(all))
		}
		if last := all[len(all)-1]; last.Type != "session.invited" {
			t.Fatalf("the viewer's log ends with %s, want its new invitation", last.Type)
		}
	})
}

// TestReviewQueryParameters: query parameters are as strict as bodies. An
// unknown, repeated, empty, badly encoded, non-UTF-8 or NUL-holding
// parameter, an invalid value, or one missing the parameter it needs, is
// 400 invalid_request naming it, and the request does nothing.
func TestReviewQueryParameters(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@q.alice", "open")
		s.provision("@q.bob", "open")
		sid := alice.createSession(map[string]any{"invite": []string{"@q.bob"}})
		alice.send(sid, "hello")
		ended := alice.createSession(map[string]any{})
		alice.end(ended)

		type tc struct {
			method, path, query string
			body                any
			param               string // the parameter the message must name
		}
		agentCases := []tc{
			{"GET", "/sessions", "stat=active", nil, "stat"},
			{"GET", "/sessions", "participant=@q.bob", nil, "participant"},
			{"GET", "/sessions", "limit=1&limit=2", nil, "limit"},
			{"GET", "/sessions", "state=paused", nil, "state"},
			{"GET", "/sessions", "state=", nil, "state"},
			{"GET", "/sessions", "state", nil, "state"},
			{"GET", "/sessions", "state=%ff", nil, "state"},
			{"GET", "/sessions", "state=active%00", nil, "state"},
			{"GET", "/sessions", "state=%zz", nil, "state"},
			{"GET", "/sessions", "state=active;limit=1", nil, "state=active;limit=1"},
			{"GET", "/sessions", "before=" + sid + "&cursor=" + sid, nil, "cursor"},
			{"GET", "/sessions", "since=yesterday", nil, "since"},
			{"GET", "/sessions", "cursor=nope", nil, "cursor"},
			{"GET", "/sessions/" + sid, "verbose=1", nil, "verbose"},
			{"GET", "/sessions/" + sid + "/events", "after=1", nil, "after"},
			{"GET", "/sessions/" + sid + "/events", "limit=1&limit=1", nil, "limit"},
			{"GET", "/sessions/" + sid + "/events", "after_sequence=-1", nil, "after_sequence"},
			{"GET", "/sessions/" + sid + "/events", "cursor=x", nil, "cursor"},
			{"GET", "/sessions/" + sid + "/events", "after_sequence=1&cursor=2", nil, "cursor"},
			{"GET", "/sessions/" + sid + "/events", "limit=%ff", nil, "limit"},
			{"POST", "/sessions", "invite=@q.bob", map[string]any{"invite": []string{"@q.bob"}}, "invite"},
			{"POST", "/sessions/" + sid + "/messages", "x=1", map[string]any{"content": "not sent"}, "x"},
			{"POST", "/sessions/" + sid + "/invite", "x=1", map[string]any{"invite": []string{"@q.bob"}}, "x"},
			{"POST", "/sessions/" + sid + "/leave", "x=1", nil, "x"},
			{"POST", "/sessions/" + sid + "/end", "x=1", nil, "x"},
			{"POST", "/sessions/" + sid + "/join", "x=1", nil, "x"},
			{"POST", "/sessions/" + ended + "/reopen", "x=1", map[string]any{}, "x"},
		}
		adminCases := []tc{
			{"GET", "/agents", "owner=@q", nil, "owner"},
			{"GET", "/agents", "owners=q", nil, "owners"},
			{"GET", "/agents", "owner=q%00", nil, "owner"},
			{"GET", "/agents/@q.alice", "x=1", nil, "x"},
			{"POST", "/agents", "x=1", map[string]any{"handle": "@q.new", "inbound_policy": "open"}, "x"},
			{"DELETE", "/agents/@q.bob", "x=1", nil, "x"},
			{"POST", "/agents/@q.alice/blocks", "x=1", map[string]any{"handle": "@q.bob"}, "x"},
			{"PUT", "/agents/@q.alice/policy", "x=1", map[string]any{"inbound_policy": "allowlist"}, "x"},
			{"POST", "/agents/@q.alice/token", "x=1", nil, "x"},
			{"GET", "/sessions", "participants=@q.alice", nil, "participants"},
			{"GET", "/sessions", "status=joined", nil, "status"},
			{"GET", "/sessions", "participant=@q.alice&participant=@q.bob", nil, "participant"},
			{"GET", "/sessions", "participant=alice", nil, "participant"},
			{"GET", "/sessions", "limit=0", nil, "limit"},
			{"GET", "/sessions/" + sid, "x=1", nil, "x"},
			{"GET", "/sessions/" + sid + "/events", "cursor=1&after_sequence=1", nil, "cursor"},
			{"GET", "/export", "participants=@q.alice", nil, "participants"},
			{"GET", "/export", "participant=@q.bob&status=left&status=joined", nil, "status"},
			{"GET", "/export", "status=left", nil, "status"},
			{"GET", "/export", "session=" + sid + "&state=active", nil, "session"},
			{"GET", "/export", "session=nope", nil, "session"},
			{"GET", "/export", "limit=5", nil, "limit"},
			{"GET", "/export", "participant=%C0%80", nil, "participant"},
		}
		logBefore := len(alice.events(sid))
		sessionsBefore := adminSessionIDs(t, s)
		check := func(t *testing.T, what string, code int, out []byte, param string) {
			t.Helper()
			wantError(t, what, code, out, http.StatusBadRequest, "invalid_request")
			if !bytes.Contains(out, []byte(param)) {
				t.Fatalf("%s: the message does not name %q: %s", what, param, out)
			}
		}
		for _, c := range agentCases {
			t.Run("agent "+c.method+" "+c.path+"?"+c.query, func(t *testing.T) {
				code, out := alice.do(c.method, c.path+"?"+c.query, c.body)
				check(t, c.method+" "+c.path+"?"+c.query, code, out, c.param)
			})
		}
		for _, c := range adminCases {
			t.Run("admin "+c.method+" "+c.path+"?"+c.query, func(t *testing.T) {
				code, out := s.adminDo(c.method, c.path+"?"+c.query, c.body)
				check(t, c.method+" /admin/v1"+c.path+"?"+c.query, code, out, c.param)
			})
		}

		// Nothing happened.
		if n := len(alice.events(sid)); n != logBefore {
			t.Fatalf("refused requests appended %d events", n-logBefore)
		}
		if after := adminSessionIDs(t, s); fmt.Sprint(after) != fmt.Sprint(sessionsBefore) {
			t.Fatalf("refused requests changed the sessions: %v, was %v", after, sessionsBefore)
		}
		if code, out := s.adminDo("GET", "/agents/@q.new", nil); code != http.StatusNotFound {
			t.Fatalf("refused create made the agent: %d %s", code, out)
		}
		if code, out := s.adminDo("GET", "/agents/@q.alice", nil); code != http.StatusOK || !bytes.Contains(out, []byte(`"blocks":[]`)) ||
			!bytes.Contains(out, []byte(`"inbound_policy":"open"`)) {
			t.Fatalf("refused block or policy change applied: %s", out)
		}
		bob := s.provision("@q.carol", "open") // the token and agent endpoints still work as before
		_ = bob
		if code, out := s.adminDo("GET", "/agents/@q.bob", nil); code != http.StatusOK {
			t.Fatalf("refused delete removed the agent: %d %s", code, out)
		}
		alice.send(sid, "the token was not rotated")

		// Well-formed queries still work.
		for _, q := range []string{"state=active&limit=5", "status=joined", "before=" + sid, "cursor=" + sid, "since=0&until=2030-01-01T00:00:00Z"} {
			alice.must(http.StatusOK, "GET", "/sessions?"+q, nil, "")
		}
		alice.must(http.StatusOK, "GET", "/sessions/"+sid+"/events?cursor=1&limit=2", nil, "GetSessionEventsResponse")
		for _, q := range []string{"/agents?owner=q", "/sessions?participant=@q.alice&status=joined&limit=3", "/export?participant=@q.alice&status=joined",
			"/export?session=" + sid, "/sessions/" + sid + "/events?after_sequence=1"} {
			if code, out := s.adminDo("GET", q, nil); code != http.StatusOK {
				t.Fatalf("GET /admin/v1%s: %d %s", q, code, out)
			}
		}
		if code, out := s.adminDo("GET", "/export?session=sess_01ZZZZZZZZZZZZZZZZZZZZZZZZ", nil); code != http.StatusNotFound {
			t.Fatalf("export of an unknown session: %d %s", code, out)
		}
	})
}

// TestReviewQueryParametersOnStreamRoutes: the same strictness for the
// routes whose handlers live in server/ws.go and server/frames.go (the
// agent route group checks every query string).
func TestReviewQueryParametersOnStreamRoutes(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@qs.alice", "open")
		if code := dialStatus(t, s, "/connect?token="+alice.token+"&bogus=1", ""); code != http.StatusBadRequest {
			t.Fatalf("GET /connect?token=...&bogus=1: %d", code)
		}
		if code := dialStatus(t, s, "/connect?token="+alice.token+"&token="+alice.token, ""); code != http.StatusBadRequest {
			t.Fatalf("GET /connect with token twice: %d", code)
		}
		for _, path := range []string{"/stream?bogus=1", "/stream?instrument=a&instrument=b", "/stream?filter=%ff", "/stream/roster?x=1"} {
			code, out := alice.do("GET", path, nil)
			wantError(t, "GET "+path, code, out, http.StatusBadRequest, "invalid_request")
		}
		code, out := alice.do("POST", "/frames?x=1", map[string]any{})
		wantError(t, "POST /frames?x=1", code, out, http.StatusBadRequest, "invalid_request")
	})
}
