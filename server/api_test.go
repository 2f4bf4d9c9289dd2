package server_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/daemon"
	"github.com/aspd/aspd/protocol"
)

// TestSessionFlow drives a session through the HTTP layer: create with an
// invitation and an initial message, join, send, read the events as each
// participant sees them, list, leave, end.
func TestSessionFlow(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		alice, bob := e.agent("@acme.alice"), e.agent("@acme.bob")
		var created protocol.CreateSessionResponse
		e.must(http.StatusCreated, "POST", "/sessions", alice, map[string]any{
			"invite": []string{"@acme.bob"}, "topic": "t1", "initial_message": map[string]any{"content": "hello"}}, &created)
		if !protocol.ValidSessionID(created.SessionID) {
			t.Fatalf("session id %q", created.SessionID)
		}
		sp := "/sessions/" + created.SessionID
		e.must(http.StatusOK, "POST", sp+"/join", bob, map[string]any{}, nil)
		var sent protocol.SendMessageResponse
		e.must(http.StatusCreated, "POST", sp+"/messages", bob, map[string]any{"content": "hi alice"}, &sent)
		if sent.MessageID == "" {
			t.Fatalf("send answered %+v", sent)
		}
		var sess protocol.Session
		e.must(http.StatusOK, "GET", sp, alice, nil, &sess)
		if sess.ID != created.SessionID || sess.State != protocol.StateActive {
			t.Fatalf("session %+v", sess)
		}
		var page protocol.EventsPage
		e.must(http.StatusOK, "GET", sp+"/events?limit=2", alice, nil, &page)
		if len(page.Events) != 2 || page.NextCursor == "" {
			t.Fatalf("first page: %d events, cursor %q", len(page.Events), page.NextCursor)
		}
		var rest protocol.EventsPage
		e.must(http.StatusOK, "GET", sp+"/events?cursor="+page.NextCursor, alice, nil, &rest)
		all := strings.Join(rawStrings(append(page.Events, rest.Events...)), "\n")
		for _, typ := range []string{"session.invited", "session.joined", "hi alice", "hello"} {
			if !strings.Contains(all, typ) {
				t.Errorf("events lack %q:\n%s", typ, all)
			}
		}
		var list struct {
			Sessions []struct {
				ID string `json:"id"`
			} `json:"sessions"`
		}
		e.must(http.StatusOK, "GET", "/sessions?state=active", bob, nil, &list)
		if len(list.Sessions) != 1 || list.Sessions[0].ID != created.SessionID {
			t.Fatalf("bob's sessions: %+v", list)
		}
		e.must(http.StatusOK, "POST", sp+"/leave", bob, map[string]any{}, nil)
		e.must(http.StatusOK, "POST", sp+"/end", alice, map[string]any{}, nil)
		e.must(http.StatusOK, "GET", sp, alice, nil, &sess)
		if sess.State != protocol.StateEnded {
			t.Fatalf("after end: %+v", sess)
		}
		// Ended sessions refuse messages; reopening takes them back.
		r := e.do("POST", sp+"/messages", alice, map[string]any{"content": "late"})
		if r.Status < 400 {
			t.Fatalf("message to an ended session: %d %s", r.Status, r.Body)
		}
		e.must(http.StatusOK, "POST", sp+"/reopen", alice, map[string]any{"invite": []string{"@acme.bob"}}, nil)
		var inv protocol.InviteResponse
		carol := e.agent("@acme.carol")
		_ = carol
		e.must(http.StatusOK, "POST", sp+"/invite", alice, map[string]any{"invite": []string{"@acme.carol"}}, &inv)
		if len(inv.Invited) != 1 || inv.Invited[0] != "@acme.carol" {
			t.Fatalf("invited %+v", inv)
		}
	})
}

func rawStrings(raws []json.RawMessage) []string {
	out := make([]string, len(raws))
	for i, r := range raws {
		out[i] = string(r)
	}
	return out
}

// TestErrors: the HTTP layer's own refusals and the application's, with
// their status and code.
func TestErrors(t *testing.T) {
	forEachBackend(t, func(c *daemon.Config) { c.HTTP.MaxBodyBytes = 4096 }, func(t *testing.T, e *env) {
		alice := e.agent("@acme.alice")
		e.agent("@acme.bob")
		for _, tc := range []struct {
			name, method, path, token string
			body                      any
			status                    int
			code                      string
		}{
			{"no token", "POST", "/sessions", "", map[string]any{}, 401, "unauthorized"},
			{"unknown token", "GET", "/sessions", "asp_unknown", nil, 401, "unauthorized"},
			{"admin token on the agent API", "GET", "/sessions", adminToken, nil, 401, "unauthorized"},
			{"agent token on the operator API", "GET", "/admin/v1/agents", alice, nil, 401, "unauthorized"},
			{"malformed JSON", "POST", "/sessions", alice, `{"invite":`, 400, "malformed_json"},
			{"unknown field", "POST", "/sessions", alice, map[string]any{"nope": 1}, 400, ""},
			{"body too large", "POST", "/sessions", alice, `{"topic":"` + strings.Repeat("x", 5000) + `"}`, 413, "body_too_large"},
			{"unknown query parameter", "GET", "/sessions?nope=1", alice, nil, 400, "invalid_request"},
			{"bad limit", "GET", "/sessions?limit=0", alice, nil, 400, "invalid_request"},
			{"malformed session id", "GET", "/sessions/nope", alice, nil, 404, "not_found"},
			{"missing session", "GET", "/sessions/sess_00000000000000000000000000", alice, nil, 404, "not_found"},
			{"end_after_send without a message", "POST", "/sessions", alice, map[string]any{"end_after_send": true}, 400, "invalid_request"},
			{"inviting oneself", "POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.alice"}}, 400, ""},
			{"empty invitation", "POST", "/sessions/sess_00000000000000000000000000/invite", alice, map[string]any{"invite": []string{}}, 400, "invalid_request"},
			{"bad idempotency key", "POST", "/sessions", alice, map[string]any{"idempotency_key": ""}, 400, ""},
			{"bad policy", "POST", "/admin/v1/agents", adminToken, map[string]any{"handle": "@acme.x", "inbound_policy": "closed"}, 400, "invalid_request"},
			{"bad handle", "POST", "/admin/v1/agents", adminToken, map[string]any{"handle": "acme"}, 400, "invalid_request"},
			{"duplicate agent", "POST", "/admin/v1/agents", adminToken, map[string]any{"handle": "@acme.bob"}, 409, ""},
			{"missing agent", "GET", "/admin/v1/agents/@acme.nobody", adminToken, nil, 404, "not_found"},
			{"frame without scope", "POST", "/frames", alice, map[string]any{"frame": map[string]any{"x": 1}}, 400, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := e.do(tc.method, tc.path, tc.token, tc.body)
				if r.Status != tc.status || (tc.code != "" && r.code() != tc.code) || r.code() == "" {
					t.Fatalf("%d %q, want %d %q: %s", r.Status, r.code(), tc.status, tc.code, r.Body)
				}
				if r.Header.Get("X-Request-Id") == "" {
					t.Error("no X-Request-Id")
				}
				if tc.status == 401 && r.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			})
		}
	})
}

// TestRateLimits: the per-agent contact and message limits answer 429
// rate_limited with Retry-After, per agent.
func TestRateLimits(t *testing.T) {
	tune := func(c *daemon.Config) {
		c.App.ContactRate, c.App.ContactBurst = 0.01, 2
		c.App.MessageRate, c.App.MessageBurst = 0.01, 1
		c.App.Frames.RatePerSecond, c.App.Frames.Burst = 0.01, 1
	}
	forEachBackend(t, tune, func(t *testing.T, e *env) {
		alice, bob := e.agent("@acme.alice"), e.agent("@acme.bob")
		var created protocol.CreateSessionResponse
		e.must(http.StatusCreated, "POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"}}, &created)
		e.must(http.StatusCreated, "POST", "/sessions", alice, map[string]any{}, nil)
		r := e.do("POST", "/sessions", alice, map[string]any{})
		wantError(t, r, http.StatusTooManyRequests, "rate_limited")
		if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 {
			t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
		}
		if !strings.Contains(string(r.Body), "contact attempts") {
			t.Errorf("429 body %s", r.Body)
		}
		// Invitations are contact attempts too; another agent has its own bucket.
		wantError(t, e.do("POST", "/sessions/"+created.SessionID+"/invite", alice, map[string]any{"invite": []string{"@acme.bob"}}), http.StatusTooManyRequests, "rate_limited")
		e.must(http.StatusCreated, "POST", "/sessions", bob, map[string]any{}, nil)

		sp := "/sessions/" + created.SessionID
		e.must(http.StatusCreated, "POST", sp+"/messages", alice, map[string]any{"content": "one"}, nil)
		r = e.do("POST", sp+"/messages", alice, map[string]any{"content": "two"})
		wantError(t, r, http.StatusTooManyRequests, "rate_limited")
		if r.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}

		// The limit is checked before the path and the body (the documented
		// order): an over-rate request is 429 however malformed.
		wantError(t, e.do("POST", "/sessions", alice, `{"invite":`), http.StatusTooManyRequests, "rate_limited")
		wantError(t, e.do("POST", "/sessions/nope/messages", alice, `not json`), http.StatusTooManyRequests, "rate_limited")

		// Frame submissions have their own bucket.
		e.do("POST", "/frames", alice, map[string]any{})
		r = e.do("POST", "/frames", alice, map[string]any{})
		wantError(t, r, http.StatusTooManyRequests, "rate_limited")
		if r.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	})
}

// TestTokenRotation: rotating a token stops the old one at once (the
// authentication cache is evicted) and the new one works.
func TestTokenRotation(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		old := e.agent("@acme.alice")
		e.must(http.StatusOK, "GET", "/sessions", old, nil, nil) // cached now
		var rotated struct {
			Token string `json:"token"`
		}
		e.must(http.StatusOK, "POST", "/admin/v1/agents/@acme.alice/token", adminToken, nil, &rotated)
		wantError(t, e.do("GET", "/sessions", old, nil), http.StatusUnauthorized, "unauthorized")
		e.must(http.StatusOK, "GET", "/sessions", rotated.Token, nil, nil)
		e.must(http.StatusOK, "DELETE", "/admin/v1/agents/@acme.alice/token", adminToken, nil, nil)
		wantError(t, e.do("GET", "/sessions", rotated.Token, nil), http.StatusUnauthorized, "unauthorized")
	})
}
