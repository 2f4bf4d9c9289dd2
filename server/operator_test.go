package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Operator tokens, scopes and the audit log over the wire, on both stores.

type opClient struct {
	t  *testing.T
	hs *httptest.Server
}

type opAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (a opAnswer) code() string {
	var b protocol.ErrorBody
	if json.Unmarshal(a.body, &b) != nil || b.Error == nil {
		return ""
	}
	return b.Error.Code
}

// do sends a request with token and, when set, X-Request-Id reqID.
func (c opClient) do(method, path, token, reqID string, body any) opAnswer {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.hs.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if reqID != "" {
		req.Header.Set("X-Request-Id", reqID)
	}
	resp, err := c.hs.Client().Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	// A live stream answers its status and then streams: the status is
	// what these tests look at.
	if strings.HasPrefix(resp.Header.Get("Content-Type"), mediaSSE) {
		return opAnswer{status: resp.StatusCode, header: resp.Header}
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return opAnswer{status: resp.StatusCode, header: resp.Header, body: b}
}

// must does the request and decodes the answer into out (when not nil),
// failing unless the status is status.
func (c opClient) must(status int, method, path, token string, body, out any) opAnswer {
	c.t.Helper()
	a := c.do(method, path, token, "", body)
	if a.status != status {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, a.status, a.body, status)
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, a.body)
		}
	}
	return a
}

func (c opClient) token(admin, name, scope string) string {
	c.t.Helper()
	var tok protocol.OperatorTokenWithSecret
	c.must(http.StatusCreated, "POST", "/admin/v1/operator-tokens", admin, map[string]any{"name": name, "scope": scope}, &tok)
	if tok.Name != name || tok.Scope != scope || tok.CreatedAt <= 0 || !strings.HasPrefix(tok.Token, "aspo_") {
		c.t.Fatalf("created operator token %+v", tok)
	}
	return tok.Token
}

func newOpServer(t *testing.T, url string) (*Server, opClient) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s, hs := newRoutesTestServer(t, url, func(cfg *app.Config) {
		cfg.Chorus.Key = key
		cfg.Chorus.PublicURL = "http://aspd.invalid"
	})
	return s, opClient{t: t, hs: hs}
}

func auditRows(t *testing.T, s *Server) []protocol.AuditEntry {
	t.Helper()
	rows, err := s.app.Store().ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestOperatorChangesWriteOneAuditRow walks every audited operator route:
// performed by a named admin token, each writes exactly one audit row with
// that token's name, the route's action, its target and the request's id;
// a refused change writes none. No token or signing secret handed out on
// the way appears in the audit log (its API) or in an export. A route that
// names an action and is not performed here fails the test: a new audited
// route adds its case.
func TestOperatorChangesWriteOneAuditRow(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s, c := newOpServer(t, url)
		boot := routesTestAdminToken
		var secrets []string
		ops := c.token(boot, "ops", protocol.ScopeAdmin)
		secrets = append(secrets, ops)
		if rows := auditRows(t, s); len(rows) != 1 || rows[0].Actor != "bootstrap" || rows[0].Action != "operator_token.create" ||
			rows[0].Target != "ops" || string(rows[0].Detail) != `{"scope":"admin"}` {
			t.Fatalf("the bootstrap token's creation of ops: %+v", rows)
		}
		agentTok := func(handle string) string {
			var a protocol.AgentWithToken
			c.must(http.StatusCreated, "POST", "/admin/v1/agents", boot, map[string]any{"handle": handle, "inbound_policy": "open"}, &a)
			secrets = append(secrets, a.Token)
			return a.Token
		}
		alice := agentTok("@acme.alice")
		agentTok("@acme.bob")
		var created protocol.CreateSessionResponse
		c.must(http.StatusCreated, "POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"}, "topic": "t",
			"initial_message": map[string]any{"content": "to be redacted"}}, &created)
		// The sequence of the initial message, for the redaction below.
		redactPath := func() string {
			var page protocol.EventsPage
			c.must(http.StatusOK, "GET", "/admin/v1/sessions/"+created.SessionID+"/events", boot, nil, &page)
			for _, raw := range page.Events {
				var ev struct {
					Type     string `json:"type"`
					Sequence int64  `json:"sequence"`
				}
				if err := json.Unmarshal(raw, &ev); err != nil {
					t.Fatal(err)
				}
				if ev.Type == "session.message" {
					return "/admin/v1/sessions/" + created.SessionID + "/events/" + jsonNumber(ev.Sequence) + "/redact"
				}
			}
			t.Fatalf("no message in %+v", page.Events)
			return ""
		}

		const ap = "/admin/v1/agents/@acme.hook"
		type change struct {
			method, pattern, path string
			body                  any
			target                string
			detail                string // the row's detail, "" to skip
			before                func()
			pathf                 func() string // the path, when it is known only at run time
		}
		changes := []change{
			{method: "POST", pattern: "/admin/v1/agents", path: "/admin/v1/agents", body: map[string]any{"handle": "@acme.hook", "inbound_policy": "open"},
				target: "@acme.hook", detail: `{"inbound_policy":"open"}`},
			{method: "PUT", pattern: "/admin/v1/agents/:handle/policy", path: ap + "/policy", body: map[string]any{"inbound_policy": "allowlist"},
				target: "@acme.hook", detail: `{"inbound_policy":"allowlist"}`},
			{method: "PUT", pattern: "/admin/v1/agents/:handle/allowlist", path: ap + "/allowlist", body: map[string]any{"entries": []string{"@acme.alice"}},
				target: "@acme.hook", detail: `{"entries":["@acme.alice"]}`},
			{method: "POST", pattern: "/admin/v1/agents/:handle/allowlist", path: ap + "/allowlist", body: map[string]any{"entries": []string{"@acme.bob"}}, target: "@acme.hook"},
			{method: "DELETE", pattern: "/admin/v1/agents/:handle/allowlist", path: ap + "/allowlist", body: map[string]any{"entries": []string{"@acme.bob"}}, target: "@acme.hook"},
			{method: "PUT", pattern: "/admin/v1/agents/:handle/roles", path: ap + "/roles", body: map[string]any{"roles": []string{"reviewer"}},
				target: "@acme.hook", detail: `{"roles":["reviewer"]}`},
			{method: "POST", pattern: "/admin/v1/agents/:handle/blocks", path: ap + "/blocks", body: map[string]any{"handle": "@acme.bob"},
				target: "@acme.hook", detail: `{"blocked":"@acme.bob"}`},
			{method: "DELETE", pattern: "/admin/v1/agents/:handle/blocks/:blocked", path: ap + "/blocks/@acme.bob",
				target: "@acme.hook", detail: `{"blocked":"@acme.bob"}`},
			{method: "PUT", pattern: "/admin/v1/agents/:handle/chorus", path: ap + "/chorus", body: map[string]any{"connection_string": "https://user:pw-secret@hook.example.com/aspd"},
				target: "@acme.hook", detail: `{}`},
			{method: "POST", pattern: "/admin/v1/agents/:handle/chorus/deliveries/:id/redeliver", path: ap + "/chorus/deliveries/msg_audit/redeliver",
				target: "@acme.hook", detail: `{"id":"msg_audit"}`, before: func() {
					// A delivery record to redeliver, as the Chorus worker
					// would have queued it.
					var list protocol.SessionList[*protocol.Session]
					c.must(http.StatusOK, "GET", "/admin/v1/sessions", boot, nil, &list)
					sid := list.Sessions[0].ID
					if err := s.app.Store().ChorusEnqueueBatch(context.Background(), []store.ChorusEnqueue{{Handle: "@acme.hook", SessionID: sid, Cursor: 0,
						Next: &store.ChorusDelivery{ID: "msg_audit", Handle: "@acme.hook", SessionID: sid, Sequence: 1, EventType: "session.created"}}}); err != nil {
						t.Fatal(err)
					}
				}},
			{method: "DELETE", pattern: "/admin/v1/agents/:handle/chorus", path: ap + "/chorus", target: "@acme.hook", detail: `{}`},
			{method: "POST", pattern: "/admin/v1/agents/:handle/token", path: ap + "/token", target: "@acme.hook", detail: `{}`},
			{method: "DELETE", pattern: "/admin/v1/agents/:handle/token", path: ap + "/token", target: "@acme.hook"},
			{method: "DELETE", pattern: "/admin/v1/agents/:handle", path: ap, target: "@acme.hook"},
			{method: "POST", pattern: "/admin/v1/operator-tokens", path: "/admin/v1/operator-tokens", body: map[string]any{"name": "viewer", "scope": "read"},
				target: "viewer", detail: `{"scope":"read"}`},
			{method: "POST", pattern: "/admin/v1/operator-tokens/:name/rotate", path: "/admin/v1/operator-tokens/viewer/rotate", target: "viewer", detail: `{}`},
			{method: "DELETE", pattern: "/admin/v1/operator-tokens/:name", path: "/admin/v1/operator-tokens/viewer", target: "viewer"},
			{method: "POST", pattern: "/admin/v1/sessions/:id/events/:sequence/redact", pathf: redactPath, body: map[string]any{"reason": "test"},
				target: created.SessionID},
			{method: "DELETE", pattern: "/admin/v1/sessions/:id/participants/:handle", path: "/admin/v1/sessions/" + created.SessionID + "/participants/@acme.bob",
				target: created.SessionID},
			{method: "POST", pattern: "/admin/v1/sessions/:id/end", path: "/admin/v1/sessions/" + created.SessionID + "/end", body: map[string]any{},
				target: created.SessionID},
		}
		performed := map[string]bool{}
		for i, ch := range changes {
			rt := findRoute(ch.method, ch.pattern)
			if rt == nil || rt.action == "" {
				t.Fatalf("%s %s: not an audited route", ch.method, ch.pattern)
			}
			if ch.before != nil {
				ch.before()
			}
			if ch.pathf != nil {
				ch.path = ch.pathf()
			}
			n := len(auditRows(t, s))
			reqID := "audit-req-" + string(rune('a'+i))
			a := c.do(ch.method, ch.path, ops, reqID, ch.body)
			if a.status != rt.status {
				t.Fatalf("%s %s: %d %s, want %d", ch.method, ch.path, a.status, a.body, rt.status)
			}
			// Whatever the answer hands out once is a secret.
			var handed struct {
				Token         string `json:"token"`
				SigningSecret string `json:"signing_secret"`
			}
			_ = json.Unmarshal(a.body, &handed)
			for _, sec := range []string{handed.Token, handed.SigningSecret} {
				if sec != "" {
					secrets = append(secrets, sec)
				}
			}
			rows := auditRows(t, s)
			if len(rows) != n+1 {
				t.Fatalf("%s %s wrote %d audit rows, want 1: %+v", ch.method, ch.path, len(rows)-n, rows[:len(rows)-n])
			}
			r := rows[0]
			if r.Actor != "ops" || r.Action != rt.action || r.Target != ch.target || r.RequestID != reqID || r.At <= 0 {
				t.Fatalf("%s %s: audit row %+v, want actor ops, action %s, target %s, request id %s", ch.method, ch.path, r, rt.action, ch.target, reqID)
			}
			if ch.detail != "" && string(r.Detail) != ch.detail {
				t.Fatalf("%s %s: detail %s, want %s", ch.method, ch.path, r.Detail, ch.detail)
			}
			performed[ch.method+" "+ch.pattern] = true
		}
		for _, rt := range routeTable {
			if rt.action != "" && !performed[rt.method+" "+rt.path] {
				t.Errorf("%s %s (%s): not performed by this test; add its case", rt.method, rt.path, rt.action)
			}
		}

		// Refused changes write nothing: an unknown agent, a bad body, a
		// duplicate name.
		n := len(auditRows(t, s))
		for _, bad := range []struct {
			method, path string
			body         any
			status       int
		}{
			{"PUT", "/admin/v1/agents/@acme.nobody/policy", map[string]any{"inbound_policy": "open"}, http.StatusNotFound},
			{"PUT", "/admin/v1/agents/@acme.alice/policy", map[string]any{"inbound_policy": "wide"}, http.StatusBadRequest},
			{"POST", "/admin/v1/operator-tokens", map[string]any{"name": "ops", "scope": "read"}, http.StatusConflict},
			{"POST", "/admin/v1/operator-tokens/nobody/rotate", nil, http.StatusNotFound},
			{"DELETE", "/admin/v1/agents/@acme.hook", nil, http.StatusNotFound},
		} {
			if a := c.do(bad.method, bad.path, ops, "", bad.body); a.status != bad.status {
				t.Fatalf("%s %s: %d %s, want %d", bad.method, bad.path, a.status, a.body, bad.status)
			}
		}
		if rows := auditRows(t, s); len(rows) != n {
			t.Fatalf("refused changes wrote audit rows: %+v", rows[:len(rows)-n])
		}

		// The log over the wire: keyset pages, newest first, and filters.
		var all protocol.AuditPage
		c.must(http.StatusOK, "GET", "/admin/v1/audit?limit=500", ops, nil, &all)
		if len(all.Items) != n || all.NextBefore != 0 {
			t.Fatalf("audit: %d items (next %d), want %d", len(all.Items), all.NextBefore, n)
		}
		var got []protocol.AuditEntry
		for before := int64(0); ; {
			var page protocol.AuditPage
			path := "/admin/v1/audit?limit=4"
			if before > 0 {
				path += "&before=" + jsonNumber(before)
			}
			c.must(http.StatusOK, "GET", path, ops, nil, &page)
			got = append(got, page.Items...)
			if page.NextBefore == 0 {
				break
			}
			before = page.NextBefore
		}
		if len(got) != len(all.Items) {
			t.Fatalf("paged %d entries, want %d", len(got), len(all.Items))
		}
		for i := range got {
			if got[i].ID != all.Items[i].ID || (i > 0 && got[i].ID >= got[i-1].ID) {
				t.Fatalf("paging: entry %d is %d, want %d, newest first", i, got[i].ID, all.Items[i].ID)
			}
		}
		var byActor protocol.AuditPage
		c.must(http.StatusOK, "GET", "/admin/v1/audit?actor=bootstrap&action=agent.create", ops, nil, &byActor)
		if len(byActor.Items) != 2 {
			t.Fatalf("bootstrap's agent.create rows: %+v", byActor.Items)
		}
		var byTarget protocol.AuditPage
		c.must(http.StatusOK, "GET", "/admin/v1/audit?target=viewer", ops, nil, &byTarget)
		if len(byTarget.Items) != 3 || byTarget.Items[0].Action != "operator_token.revoke" {
			t.Fatalf("viewer's rows: %+v", byTarget.Items)
		}
		for _, q := range []string{"limit=0", "limit=501", "limit=x", "before=-1", "before=x", "since=1"} {
			if a := c.do("GET", "/admin/v1/audit?"+q, ops, "", nil); a.status != http.StatusBadRequest {
				t.Fatalf("audit?%s: %d %s, want 400", q, a.status, a.body)
			}
		}

		// No secret anywhere in the audit log, the events export or the
		// network export (aspd export, which holds the audit log; with the
		// token hashes too, which are not the tokens).
		export := c.must(http.StatusOK, "GET", "/admin/v1/export", ops, nil, nil)
		raw := c.must(http.StatusOK, "GET", "/admin/v1/audit?limit=500", ops, nil, nil)
		var network bytes.Buffer
		xs, err := s.app.Store().Export(context.Background(), &network, store.ExportOptions{IncludeTokenHashes: true})
		if err != nil || xs.Counts[store.KindAudit] != int64(n) {
			t.Fatalf("network export: %v, %d audit rows, want %d", err, xs.Counts[store.KindAudit], n)
		}
		if len(secrets) < 6 {
			t.Fatalf("only %d secrets collected", len(secrets))
		}
		for _, sec := range append(secrets, "pw-secret") {
			for what, b := range map[string][]byte{"the audit log": raw.body, "the events export": export.body, "the network export": network.Bytes()} {
				if bytes.Contains(b, []byte(sec)) {
					t.Fatalf("a secret (%.8s...) is in %s", sec, what)
				}
			}
		}
	})
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// examplePath fills a route pattern's parameters with plausible values.
func examplePath(pattern string) string {
	parts := strings.Split(pattern, "/")
	for i, p := range parts {
		switch {
		case p == ":handle" || p == ":blocked":
			parts[i] = "@acme.alice"
		case p == "*":
			parts[i] = "x"
		case strings.HasPrefix(p, ":"):
			parts[i] = "x1"
		}
	}
	return strings.Join(parts, "/")
}

// TestOperatorScopes walks the route table with a read token: every route
// that needs admin answers 403 insufficient_scope and writes no audit row;
// every other operator route is not refused for its scope. An admin token
// and the bootstrap token pass; no token, an unknown one and an agent's
// are 401 with a challenge.
func TestOperatorScopes(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s, c := newOpServer(t, url)
		boot := routesTestAdminToken
		read := c.token(boot, "viewer", protocol.ScopeRead)
		admin := c.token(boot, "ops", protocol.ScopeAdmin)
		var ag protocol.AgentWithToken
		c.must(http.StatusCreated, "POST", "/admin/v1/agents", boot, map[string]any{"handle": "@acme.alice", "inbound_policy": "open"}, &ag)
		n := len(auditRows(t, s))
		refused, allowed := 0, 0
		for i := range routeTable {
			rt := &routeTable[i]
			if rt.auth != authOperator {
				continue
			}
			path := examplePath(rt.path)
			var body any
			if rt.request != nil {
				body = map[string]any{}
			}
			a := c.do(rt.method, path, read, "", body)
			if routeScope(rt) == protocol.ScopeAdmin {
				if a.status != http.StatusForbidden || a.code() != protocol.CodeInsufficientScope {
					t.Errorf("%s %s with a read token: %d %s, want 403 insufficient_scope", rt.method, path, a.status, a.body)
				}
				refused++
				continue
			}
			if a.status == http.StatusForbidden || a.status == http.StatusUnauthorized {
				t.Errorf("%s %s with a read token: %d %s", rt.method, path, a.status, a.body)
			}
			allowed++
		}
		if refused < 15 || allowed < 10 {
			t.Fatalf("walked %d admin routes and %d read routes", refused, allowed)
		}
		if rows := auditRows(t, s); len(rows) != n {
			t.Fatalf("refused changes wrote audit rows: %+v", rows[:len(rows)-n])
		}
		var agent protocol.Agent
		c.must(http.StatusOK, "GET", "/admin/v1/agents/@acme.alice", read, nil, &agent)
		if agent.InboundPolicy != "open" {
			t.Fatalf("a refused change changed the agent: %+v", agent)
		}

		for tok, want := range map[string]protocol.Whoami{
			read: {Name: "viewer", Scope: "read"}, admin: {Name: "ops", Scope: "admin"}, boot: {Name: "bootstrap", Scope: "admin"},
		} {
			var who protocol.Whoami
			c.must(http.StatusOK, "GET", "/admin/v1/whoami", tok, nil, &who)
			if who != want {
				t.Fatalf("whoami: %+v, want %+v", who, want)
			}
		}
		c.must(http.StatusOK, "PUT", "/admin/v1/agents/@acme.alice/policy", admin, map[string]any{"inbound_policy": "allowlist"}, nil)
		for _, tok := range []string{"", "aspo_unknown", ag.Token, read + "x"} {
			a := c.do("GET", "/admin/v1/whoami", tok, "", nil)
			if a.status != http.StatusUnauthorized || a.code() != protocol.CodeUnauthorized || a.header.Get("WWW-Authenticate") == "" {
				t.Fatalf("token %.10q: %d %s (challenge %q), want 401 with a challenge", tok, a.status, a.body, a.header.Get("WWW-Authenticate"))
			}
		}
	})
}

// TestOperatorTokenLifecycleOverTheWire: create, list (no secrets), use
// (last use recorded), rotate (the old secret is 401 at once, the new one
// works), revoke (401 at once); the bootstrap token keeps working; refused
// requests.
func TestOperatorTokenLifecycleOverTheWire(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		_, c := newOpServer(t, url)
		boot := routesTestAdminToken
		old := c.token(boot, "ci", protocol.ScopeRead)
		c.must(http.StatusOK, "GET", "/admin/v1/agents", old, nil, nil)

		var list protocol.OperatorTokenList
		a := c.must(http.StatusOK, "GET", "/admin/v1/operator-tokens", boot, nil, &list)
		if len(list.Items) != 1 || list.Items[0].Name != "ci" || list.Items[0].Scope != "read" || list.Items[0].LastUsedAt <= 0 || list.Items[0].RotatedAt != 0 {
			t.Fatalf("list: %s", a.body)
		}
		if bytes.Contains(a.body, []byte(old)) || bytes.Contains(a.body, []byte("hash")) {
			t.Fatalf("the listing shows a secret: %s", a.body)
		}

		var rot protocol.OperatorTokenWithSecret
		c.must(http.StatusOK, "POST", "/admin/v1/operator-tokens/ci/rotate", boot, nil, &rot)
		if rot.Name != "ci" || rot.Scope != "read" || rot.Token == "" || rot.Token == old {
			t.Fatalf("rotated: %+v", rot)
		}
		if a := c.do("GET", "/admin/v1/agents", old, "", nil); a.status != http.StatusUnauthorized {
			t.Fatalf("the old secret after rotation: %d %s", a.status, a.body)
		}
		c.must(http.StatusOK, "GET", "/admin/v1/agents", rot.Token, nil, nil)
		c.must(http.StatusOK, "GET", "/admin/v1/operator-tokens", boot, nil, &list)
		if list.Items[0].RotatedAt <= 0 {
			t.Fatalf("rotated_at not set: %+v", list.Items)
		}

		// A token may revoke itself; then it is 401 at once.
		admin := c.token(boot, "ops", protocol.ScopeAdmin)
		c.must(http.StatusNoContent, "DELETE", "/admin/v1/operator-tokens/ci", admin, nil, nil)
		if a := c.do("GET", "/admin/v1/agents", rot.Token, "", nil); a.status != http.StatusUnauthorized {
			t.Fatalf("a revoked token: %d %s", a.status, a.body)
		}
		c.must(http.StatusNoContent, "DELETE", "/admin/v1/operator-tokens/ops", admin, nil, nil)
		if a := c.do("GET", "/admin/v1/whoami", admin, "", nil); a.status != http.StatusUnauthorized {
			t.Fatalf("a token that revoked itself: %d %s", a.status, a.body)
		}
		c.must(http.StatusOK, "GET", "/admin/v1/whoami", boot, nil, nil)

		for _, bad := range []struct {
			method, path string
			body         any
			status       int
			code         string
		}{
			{"POST", "/admin/v1/operator-tokens", map[string]any{"name": "bootstrap", "scope": "admin"}, 400, protocol.CodeInvalidRequest},
			{"POST", "/admin/v1/operator-tokens", map[string]any{"name": "Bad Name", "scope": "admin"}, 400, protocol.CodeInvalidRequest},
			{"POST", "/admin/v1/operator-tokens", map[string]any{"name": "x", "scope": "root"}, 400, protocol.CodeInvalidRequest},
			{"POST", "/admin/v1/operator-tokens", map[string]any{"name": "x", "scope": "read", "token": "mine"}, 400, protocol.CodeInvalidRequest},
			{"POST", "/admin/v1/operator-tokens/ci/rotate", nil, 404, protocol.CodeNotFound},
			{"DELETE", "/admin/v1/operator-tokens/ci", nil, 404, protocol.CodeNotFound},
			{"DELETE", "/admin/v1/operator-tokens/bootstrap", nil, 404, protocol.CodeNotFound},
		} {
			if a := c.do(bad.method, bad.path, boot, "", bad.body); a.status != bad.status || a.code() != bad.code {
				t.Fatalf("%s %s %v: %d %s, want %d %s", bad.method, bad.path, bad.body, a.status, a.body, bad.status, bad.code)
			}
		}
	})
}

// TestOperatorTokenRevokedOnEveryNode: two aspd processes on one PostgreSQL
// database (as the nodes of a cluster): a token created on one works on
// the other, and once revoked on one it is refused at once on the other,
// since named tokens are looked up in the store on every request.
func TestOperatorTokenRevokedOnEveryNode(t *testing.T) {
	url := dbtest.Postgres(t)
	_, a := newOpServer(t, url)
	_, b := newOpServer(t, url)
	tok := a.token(routesTestAdminToken, "ops", protocol.ScopeAdmin)
	b.must(http.StatusOK, "GET", "/admin/v1/whoami", tok, nil, nil)
	var rot protocol.OperatorTokenWithSecret
	a.must(http.StatusOK, "POST", "/admin/v1/operator-tokens/ops/rotate", routesTestAdminToken, nil, &rot)
	if r := b.do("GET", "/admin/v1/whoami", tok, "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("the rotated-out secret on the other node: %d %s", r.status, r.body)
	}
	b.must(http.StatusOK, "GET", "/admin/v1/whoami", rot.Token, nil, nil)
	a.must(http.StatusNoContent, "DELETE", "/admin/v1/operator-tokens/ops", routesTestAdminToken, nil, nil)
	if r := b.do("GET", "/admin/v1/whoami", rot.Token, "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("a revoked token on the other node: %d %s", r.status, r.body)
	}
}
