package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestRouting: an unknown path is 404 not_found and a known path with a
// method it does not take is 405 method_not_allowed (with Allow), whatever
// token the request carries. Routing decides before authentication does:
// a catch-all route behind agent authentication once answered both with 401.
func TestRouting(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		agentTok := e.agent("@acme.router")
		tokens := map[string]string{"no token": "", "agent token": agentTok, "admin token": adminToken, "bad token": "asp_nope"}
		for name, tok := range tokens {
			t.Run(name, func(t *testing.T) {
				for _, tc := range []struct {
					method, path string
					status       int
					code, allow  string
				}{
					{"GET", "/nope", 404, "not_found", ""},
					{"POST", "/sessions/x/nope", 404, "not_found", ""},
					{"GET", "/admin/v1/nope", 404, "not_found", ""},
					{"GET", "/admin/v2/agents", 404, "not_found", ""},
					{"PUT", "/healthz", 405, "method_not_allowed", "GET"},
					{"DELETE", "/sessions", 405, "method_not_allowed", "GET, POST"},
					{"PUT", "/sessions/sess_x/join", 405, "method_not_allowed", "POST"},
					{"PATCH", "/admin/v1/agents", 405, "method_not_allowed", "GET, POST"},
					{"POST", "/metrics", 405, "method_not_allowed", "GET"},
				} {
					r := e.do(tc.method, tc.path, tok, nil)
					if r.Status != tc.status || r.code() != tc.code {
						t.Errorf("%s %s: %d %q, want %d %q: %s", tc.method, tc.path, r.Status, r.code(), tc.status, tc.code, r.Body)
						continue
					}
					if tc.allow != "" && !sameMethods(r.Header.Get("Allow"), tc.allow) {
						t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, r.Header.Get("Allow"), tc.allow)
					}
					if r.Header.Get("WWW-Authenticate") != "" {
						t.Errorf("%s %s: WWW-Authenticate on a routing answer", tc.method, tc.path)
					}
				}
			})
		}
		// Known routes still authenticate.
		wantError(t, e.do("GET", "/sessions", "", nil), http.StatusUnauthorized, "unauthorized")
		wantError(t, e.do("GET", "/admin/v1/agents", agentTok, nil), http.StatusUnauthorized, "unauthorized")
		wantError(t, e.do("GET", "/metrics", "", nil), http.StatusUnauthorized, "unauthorized")
	})
}

// sameMethods compares Allow header values as sets of methods, ignoring
// OPTIONS, which echo adds.
func sameMethods(got, want string) bool {
	set := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" && f != "OPTIONS" {
				m[f] = true
			}
		}
		return m
	}
	g, w := set(got), set(want)
	if len(g) != len(w) {
		return false
	}
	for k := range w {
		if !g[k] {
			return false
		}
	}
	return true
}
