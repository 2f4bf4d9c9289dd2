package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The console against the issue 22 routes that other branches build
// (contracts-22.md): a "read" operator token (GET /admin/v1/whoami) sees no
// change control and gets 403 if it calls the API anyway; the Audit page
// (GET /admin/v1/audit) lists the console's changes; Redact (POST
// /admin/v1/sessions/{id}/events/{sequence}/redact) turns a message into a
// tombstone.

func TestConsoleOpsInBrowser(t *testing.T) {
	chromiumPath(t)
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		sid := secretSession(s, "rd")
		b := newBrowser(t)
		login := func(token string) { b.login(s.url, token) }

		t.Run("redact", func(t *testing.T) {
			b.t = t
			login(s.admin)
			b.goTo("#/sessions/"+sid, "")
			b.waitFor("the message", `!!document.querySelector('#transcript li[data-seq="1"] button.redact')`)
			b.do("redact", chromedp.Click(chromedp.CSS(`#transcript li[data-seq="1"] button.redact`)))
			b.waitFor("the dialog", `!!document.querySelector('dialog[open] #confirm-field')`)
			b.do("reason", chromedp.SetValue(chromedp.ID("confirm-field"), "leaked password"))
			b.do("confirm", chromedp.Click(chromedp.ID("confirm-redact")))
			b.waitFor("the tombstone", `document.querySelector('#transcript li[data-seq="1"]')?.classList.contains('redacted')`)
			text := eval[string](b, `document.querySelector('#transcript li[data-seq="1"]').textContent`)
			if strings.Contains(text, "hunter2") || !strings.Contains(text, "leaked password") {
				t.Fatalf("tombstone %q", text)
			}
			// A fresh load shows the tombstone too: it comes from the server.
			b.goTo("#/sessions", "Sessions")
			b.goTo("#/sessions/"+sid, "")
			b.waitFor("the tombstone after reload", `document.querySelector('#transcript li[data-seq="1"]')?.classList.contains('redacted')`)
			if strings.Contains(eval[string](b, `document.getElementById('transcript').textContent`), "hunter2") {
				t.Fatal("the redacted content is back after a reload")
			}
			b.shot("console-redacted")
		})

		t.Run("audit", func(t *testing.T) {
			b.t = t
			login(s.admin)
			if code, body := s.adminDo("POST", "/sessions/"+sid+"/end", nil); code != http.StatusOK {
				t.Fatalf("end: %d %s", code, body)
			}
			b.waitFor("the Audit menu entry", `!document.getElementById('nav-audit').hidden`)
			b.goTo("#/audit", "Audit")
			b.waitFor("the end in the log", fmt.Sprintf(`[...document.querySelectorAll('#audit-table tbody tr')].some(r => r.textContent.includes('session.end') && r.textContent.includes(%s))`, js(sid)))
			b.shot("console-audit")
		})

		t.Run("read token", func(t *testing.T) {
			b.t = t
			code, body := s.adminDo("POST", "/operator-tokens", map[string]any{"name": "viewer", "scope": "read"})
			if code != http.StatusCreated {
				t.Fatalf("create a read token: %d %s", code, body)
			}
			var tok struct {
				Token string `json:"token"`
			}
			mustUnmarshal(t, body, &tok)
			login(tok.Token)
			b.waitFor("read-only", `document.body.classList.contains('read-only') && document.getElementById('whoami').textContent.includes('read')`)
			b.goTo("#/agents", "Agents")
			b.waitFor("the agents table", `!!document.querySelector('#agents-table tr[data-handle="@rd.alice"]')`)
			if eval[bool](b, `!!document.getElementById('create-agent').getClientRects().length`) {
				t.Fatal("a read token sees New agent")
			}
			b.do("manage", chromedp.Click(chromedp.CSS(`#agents-table tr[data-handle="@rd.alice"] button`)))
			b.waitFor("the panel", `!!document.getElementById('edit-policy')`)
			// No change control is visible anywhere on the panel.
			if n := eval[int](b, `[...document.querySelectorAll('#agent-detail button, #agent-detail form')].filter(e => e.getClientRects().length).length`); n != 0 {
				t.Fatalf("a read token sees %d change controls on an agent", n)
			}
			b.goTo("#/sessions/"+sid, "")
			b.waitFor("the transcript", `!!document.querySelector('#transcript li[data-seq="1"]')`)
			if n := eval[int](b, `[...document.querySelectorAll('#end-session, .remove-participant, button.redact')].filter(e => e.getClientRects().length).length`); n != 0 {
				t.Fatalf("a read token sees %d session actions", n)
			}
			if !eval[bool](b, `!!document.getElementById('download-transcript').getClientRects().length`) {
				t.Fatal("a read token cannot download the transcript (a read)")
			}
			// Calling the API anyway is refused.
			for _, c := range []struct{ method, path string }{
				{"POST", "/admin/v1/sessions/" + sid + "/end"},
				{"DELETE", "/admin/v1/sessions/" + sid + "/participants/@rd.bob"},
				{"POST", "/admin/v1/agents/@rd.alice/token"},
			} {
				code, body := request(t, c.method, s.url+c.path, tok.Token, nil)
				wantError(t, c.method+" "+c.path+" with a read token", code, body, http.StatusForbidden, "insufficient_scope")
			}
		})
	})
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
