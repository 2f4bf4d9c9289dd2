package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/aspd/aspd/internal/dbtest"
)

// The console's side of the issue 22 contracts (contracts-22.md) that other
// branches serve: whoami, the audit log and redaction. Until those routes
// are merged, a proxy in front of a real aspd answers them with the
// contracts' shapes and passes everything else through, so the pages are
// tested against the agreed wire now. TestConsoleOpsInBrowser tests the
// same pages against the real routes once they exist.

// contractProxy is the stand-in: "read-token" is a read token (whoami says
// so, changes get 403 insufficient_scope, reads go through as the admin);
// the audit log holds one entry; redacting event 1 answers its tombstone.
type contractProxy struct {
	s        *server
	srv      *httptest.Server
	mu       sync.Mutex
	redacted map[string]string // session id/sequence -> reason
}

const readToken = "read-token"

func newContractProxy(t *testing.T, s *server) *contractProxy {
	p := &contractProxy{s: s, redacted: map[string]string{}}
	target, _ := url.Parse(s.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // the live transcript streams
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		read := tok == readToken
		if read {
			r.Header.Set("Authorization", "Bearer "+s.admin)
		}
		if read || tok == s.admin {
			switch {
			case r.URL.Path == "/admin/v1/whoami":
				name, scope := "bootstrap", "admin"
				if read {
					name, scope = "viewer", "read"
				}
				writeJSON(w, http.StatusOK, map[string]any{"name": name, "scope": scope})
				return
			case r.URL.Path == "/admin/v1/audit":
				writeJSON(w, http.StatusOK, map[string]any{"items": []map[string]any{{"id": "aud_1", "at": 1_764_000_000_000,
					"actor": "bootstrap", "action": "session.end", "target": "sess_CONTRACT", "request_id": "req1", "detail": map[string]any{}}}})
				return
			case read && r.Method != http.MethodGet && r.Method != http.MethodHead:
				writeJSON(w, http.StatusForbidden, map[string]any{"error": map[string]any{"code": "insufficient_scope", "message": "this token may only read"}})
				return
			case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/redact"):
				p.redact(w, r)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// redact answers POST /admin/v1/sessions/{id}/events/{seq}/redact with the
// event as the contract says readers then see it.
func (p *contractProxy) redact(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/admin/v1/sessions/"), "/") // id, events, seq, redact
	var req struct {
		Reason string `json:"reason"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil || len(parts) != 4 || req.Reason == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "invalid_request", "message": "bad redact"}})
		return
	}
	code, raw := p.s.adminDo("GET", "/sessions/"+parts[0]+"/events?after_sequence=0&limit=1000", nil)
	var page struct {
		Events []map[string]any `json:"events"`
	}
	if code != http.StatusOK || json.Unmarshal(raw, &page) != nil {
		writeJSON(w, code, json.RawMessage(raw))
		return
	}
	for _, ev := range page.Events {
		if fmt.Sprint(ev["sequence"]) == parts[2] {
			pl, _ := ev["payload"].(map[string]any)
			ev["payload"] = map[string]any{"sender": pl["sender"], "content": ""}
			ev["redacted"] = map[string]any{"at": 1_764_000_000_000, "by": "bootstrap", "reason": req.Reason}
			p.mu.Lock()
			p.redacted[parts[0]+"/"+parts[2]] = req.Reason
			p.mu.Unlock()
			writeJSON(w, http.StatusOK, ev)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": "not_found", "message": "not found"}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// secretSession makes @owner.alice and @owner.bob, and a session between
// them whose first message (sequence 1) holds a secret to redact.
func secretSession(s *server, owner string) string {
	alice := s.provision("@"+owner+".alice", "open")
	bob := s.provision("@"+owner+".bob", "open")
	sid := alice.createSession(map[string]any{"invite": []string{bob.handle}, "topic": "a secret",
		"initial_message": map[string]any{"content": "a secret: hunter2"}})
	bob.join(sid)
	return sid
}

// login opens the console at base in a tab without a token and logs in
// with token.
func (b *browser) login(base, token string) {
	b.t.Helper()
	b.do("open the console", chromedp.Navigate(base+"/console/#/agents"))
	eval[any](b, `sessionStorage.clear(); location.reload(); null`)
	b.do("the login", chromedp.WaitVisible(chromedp.ID("login-token")))
	b.do("log in", chromedp.SendKeys(chromedp.ID("login-token"), token), chromedp.Click(chromedp.CSS("#login-form button")))
	b.waitFor("the console", `!document.getElementById('nav').hidden && !!document.getElementById('agents-status')`)
}

func TestConsoleContractsInBrowser(t *testing.T) {
	chromiumPath(t)
	s := startServer(t, dbtest.SQLite(t)) // the stand-in does not depend on the store
	p := newContractProxy(t, s)
	sid := secretSession(s, "ct")
	b := newBrowser(t)
	login := func(token string) { b.login(p.srv.URL, token) }

	t.Run("admin: audit and redact", func(t *testing.T) {
		b.t = t
		login(s.admin)
		b.waitFor("whoami in the menu", `document.getElementById('whoami').textContent === 'bootstrap (admin)' && !document.body.classList.contains('read-only')`)
		b.waitFor("the Audit entry", `!document.getElementById('nav-audit').hidden`)
		b.goTo("#/audit", "Audit")
		b.waitFor("the audit row", `[...document.querySelectorAll('#audit-table tbody tr')].some(r => r.textContent.includes('session.end') && r.textContent.includes('sess_CONTRACT') && r.textContent.includes('bootstrap'))`)

		b.goTo("#/sessions/"+sid, "")
		b.waitFor("the message's Redact", `!!document.querySelector('#transcript li[data-seq="1"] button.redact')`)
		b.do("redact", chromedp.Click(chromedp.CSS(`#transcript li[data-seq="1"] button.redact`)))
		b.waitFor("the reason field", `!!document.querySelector('dialog[open] #confirm-field')`)
		// A reason is required: confirming an empty one keeps the dialog.
		b.do("confirm without a reason", chromedp.Click(chromedp.ID("confirm-redact")))
		if !eval[bool](b, `!!document.querySelector('dialog[open]')`) {
			t.Fatal("the dialog closed without a reason")
		}
		b.do("reason", chromedp.SetValue(chromedp.ID("confirm-field"), "leaked <b>password</b>"))
		b.do("confirm", chromedp.Click(chromedp.ID("confirm-redact")))
		b.waitFor("the tombstone", `document.querySelector('#transcript li[data-seq="1"]')?.classList.contains('redacted')`)
		text := eval[string](b, `document.querySelector('#transcript li[data-seq="1"]').textContent`)
		if strings.Contains(text, "hunter2") || !strings.Contains(text, "Redacted by bootstrap") || !strings.Contains(text, "leaked <b>password</b>") {
			t.Fatalf("tombstone %q", text)
		}
		if eval[int](b, `document.querySelectorAll('#transcript b').length`) != 0 {
			t.Fatal("the reason became markup")
		}
		p.mu.Lock()
		reason := p.redacted[sid+"/1"]
		p.mu.Unlock()
		if reason != "leaked <b>password</b>" {
			t.Fatalf("the redact request carried reason %q", reason)
		}
	})

	t.Run("read token", func(t *testing.T) {
		b.t = t
		login(readToken)
		b.waitFor("read-only", `document.body.classList.contains('read-only') && document.getElementById('whoami').textContent === 'viewer (read)'`)
		if eval[bool](b, `!!document.getElementById('create-agent').getClientRects().length`) {
			t.Fatal("a read token sees New agent")
		}
		b.waitFor("the agents", `!!document.querySelector('#agents-table tr[data-handle="@ct.alice"] button')`)
		b.do("manage", chromedp.Click(chromedp.CSS(`#agents-table tr[data-handle="@ct.alice"] button`)))
		b.waitFor("the panel", `!!document.getElementById('edit-policy')`)
		if n := eval[int](b, `[...document.querySelectorAll('#agent-detail button, #agent-detail form')].filter(e => e.getClientRects().length).length`); n != 0 {
			t.Fatalf("a read token sees %d change controls on an agent", n)
		}
		b.goTo("#/sessions/"+sid, "")
		b.waitFor("the transcript", `!!document.querySelector('#transcript li[data-seq="2"]') && !!document.getElementById('download-transcript')`)
		if n := eval[int](b, `[...document.querySelectorAll('#end-session, .remove-participant, button.redact')].filter(e => e.getClientRects().length).length`); n != 0 {
			t.Fatalf("a read token sees %d session actions", n)
		}
		// The stand-in refuses a change from the read token, as the contract says.
		code, body := request(t, "POST", p.srv.URL+"/admin/v1/sessions/"+sid+"/end", readToken, nil)
		wantError(t, "end with a read token", code, body, http.StatusForbidden, "insufficient_scope")
		b.shot("console-read-only")
	})

	b.t = t
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.exceptions) > 0 {
		t.Fatalf("uncaught JavaScript exceptions: %v", b.exceptions)
	}
}
