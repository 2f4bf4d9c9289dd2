package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
)

// The console's second step (issue 22) in headless Chromium against a real
// aspd on both stores: the shell's fixes, the overview, the richer lists,
// and every operator action, each confirmed in a dialog and checked through
// the API afterwards.

func TestConsoleActionsInBrowser(t *testing.T) {
	chromiumPath(t)
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--chorus-key-file", chorusKeyFile(t), "--chorus-allow-loopback",
			"--chorus-retry-schedule", "100ms,100ms,100ms", "--chorus-poll-interval", "50ms")
		b := newBrowser(t)

		t.Run("login page", func(t *testing.T) {
			b.t = t
			b.do("open the console", chromedp.Navigate(s.url+"/console"), chromedp.WaitVisible(chromedp.ID("login-token")))
			// The menu and Log out are hidden until a token works ([hidden]
			// beats .top nav's display:flex).
			if d := eval[string](b, `getComputedStyle(document.getElementById('nav')).display`); d != "none" {
				t.Fatalf("the menu shows on the login page: display %s", d)
			}
			if eval[bool](b, `!!document.getElementById('logout').getClientRects().length`) {
				t.Fatal("Log out shows on the login page")
			}
			// The page names its own icon: the browser asks for no /favicon.ico.
			b.waitFor("the icon", `performance.getEntriesByType('resource').some(e => e.name.endsWith('/console/favicon.svg'))`)
			if eval[bool](b, `performance.getEntriesByType('resource').some(e => e.name.endsWith('/favicon.ico'))`) {
				t.Fatal("the browser asked for /favicon.ico")
			}
			b.do("log in", chromedp.SendKeys(chromedp.ID("login-token"), s.admin), chromedp.Click(chromedp.CSS("#login-form button")))
			b.waitFor("the agents page", `!document.getElementById('nav').hidden && !!document.getElementById('create-agent')`)
			if d := eval[string](b, `getComputedStyle(document.getElementById('nav')).display`); d != "flex" {
				t.Fatalf("the menu after login: display %s", d)
			}
		})

		t.Run("overview", func(t *testing.T) {
			b.t = t
			b.goTo("#/overview", "Overview")
			b.waitFor("the facts", `!!document.querySelector('#ov-store .value')`)
			store := "sqlite"
			if strings.HasPrefix(dbURL, "postgres") {
				store = "postgres"
			}
			if got := eval[string](b, `document.querySelector('#ov-store .value').textContent`); got != store {
				t.Fatalf("overview store %q, want %q", got, store)
			}
			b.waitFor("a node", `document.querySelectorAll('#nodes-table tbody tr').length >= 1`)
			// Every chart is drawn by uPlot (a canvas), the library served from the console's own files.
			for _, k := range []string{"events_per_second", "connections", "deliver_p99_ms", "chorus_backlog", "http_5xx_per_second"} {
				b.waitFor("the chart "+k, fmt.Sprintf(`!!document.querySelector('#chart-%s canvas')`, k))
			}
		})

		alice := s.provision("@ops.alice", "open")
		bob := s.provision("@ops.bob", "open")
		carol := s.provision("@ops.carol", "open")
		bot := s.provision("@ops.bot", "open")
		hook := newHook(t)
		registerHook(t, s, bot.handle, hook.srv.URL+"/inbox/sk_test_secret")
		ws := alice.connect()
		defer ws.close()
		// U+202E (right-to-left override): unisolated, it would turn the
		// rest of its line around ("txt.exe" shown as "exe.txt").
		rlo := "invoice\u202Etxt.exe"
		sid := alice.createSession(map[string]any{"invite": []string{bob.handle, carol.handle, bot.handle}, "topic": "ops " + rlo,
			"initial_message": map[string]any{"content": "first " + rlo}})
		bob.join(sid)
		hook.nextOf("session.invited")

		t.Run("agents list", func(t *testing.T) {
			b.t = t
			// Presence is written just after the WebSocket attaches.
			waitFor(t, "alice online", func() bool { return adminAgents(t, s)[alice.handle].Online })
			b.goTo("#/sessions", "Sessions")
			b.goTo("#/agents", "Agents")
			b.waitFor("alice online with one WebSocket", `(() => { const r = document.querySelector('#agents-table tr[data-handle="@ops.alice"]');
				return r && r.querySelector('.presence').textContent.includes('online') && r.querySelector('.doors').textContent.includes('WebSocket ×1'); })()`)
			b.waitFor("carol offline", `document.querySelector('#agents-table tr[data-handle="@ops.carol"] .presence')?.textContent.includes('offline')`)
			b.waitFor("the bot's Chorus door", `/Chorus (healthy|failing)/.test(document.querySelector('#agents-table tr[data-handle="@ops.bot"] .doors')?.textContent)`)
		})

		t.Run("redeliver", func(t *testing.T) {
			b.t = t
			var first string
			waitFor(t, "a delivery record", func() bool {
				ds := deliveries(t, s, bot.handle)
				if len(ds) > 0 && ds[len(ds)-1].State == "delivered" {
					first = ds[len(ds)-1].ID
					return true
				}
				return false
			})
			b.do("manage the bot", chromedp.Click(chromedp.CSS(`#agents-table tr[data-handle="@ops.bot"] button`)))
			sel := fmt.Sprintf(`#chorus-deliveries tr[data-delivery=%s] button.redeliver`, js(first))
			b.waitFor("the delivery", fmt.Sprintf(`!!document.querySelector(%s)`, js(sel)))
			b.do("redeliver", chromedp.Click(chromedp.CSS(sel)))
			b.confirm("confirm-redeliver")
			// The same delivery (same webhook-id) reaches the hook again.
			deadline := time.Now().Add(15 * time.Second)
			for {
				if d := hook.next(); d.id == first {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("delivery %s was not delivered again", first)
				}
			}
			b.waitFor("the status line", `document.getElementById('agents-status').textContent.includes('queued again')`)
		})

		t.Run("revoke token", func(t *testing.T) {
			b.t = t
			b.do("manage carol", chromedp.Click(chromedp.CSS(`#agents-table tr[data-handle="@ops.carol"] button`)))
			b.waitFor("carol's panel", `document.querySelector('#agent-detail h2')?.textContent === '@ops.carol'`)
			b.do("ask to revoke", chromedp.Click(chromedp.ID("revoke-token")))
			b.waitFor("the dialog", `!!document.querySelector('dialog[open] #confirm-revoke')`)
			b.do("cancel", chromedp.Click(chromedp.ID("confirm-cancel")))
			b.waitFor("the dialog closed", `!document.querySelector('dialog[open]')`)
			carol.must(http.StatusOK, "GET", "/sessions", nil, "") // cancelled: the token still works
			b.do("revoke", chromedp.Click(chromedp.ID("revoke-token")))
			b.confirm("confirm-revoke")
			b.waitFor("the revoked token", `document.querySelector('#agents-table tr[data-handle="@ops.carol"]')?.textContent.includes('revoked')`)
			if code, _ := carol.do("GET", "/sessions", nil); code != http.StatusUnauthorized {
				t.Fatalf("carol's token after revocation: %d", code)
			}
		})

		t.Run("session", func(t *testing.T) {
			b.t = t
			b.goTo("#/sessions", "Sessions")
			row := fmt.Sprintf(`document.querySelector('tr[data-session=%s]')`, js(sid))
			b.waitFor("the session row with its counts", row+`?.children[4].textContent === '1' && !!`+row+`?.children[5].textContent`)
			b.do("sort by messages", chromedp.SetValue(chromedp.ID("f-sort"), "messages"))
			b.goTo("#/sessions/"+sid, "")
			b.waitFor("the live stream", `document.getElementById('live-state')?.textContent === 'live'`)
			// The stream's state is a status region with its own look.
			if got := eval[string](b, `(() => { const l = document.getElementById('live-state'); return l.getAttribute('role') + ' ' + l.getAttribute('aria-live') + ' ' + l.className; })()`); got != "status polite live state-live" {
				t.Fatalf("live badge: %q", got)
			}

			// Bidi isolation: the topic, the sender and the content are
			// isolated, so the override reorders nothing outside them.
			b.waitFor("the first message", `!!document.querySelector('#transcript li[data-seq="1"] .content p')`)
			for _, sel := range []string{"#session-head h2 bdi", `#transcript li[data-seq="1"] .content p`, `#transcript li[data-seq="1"] .sender bdi`} {
				got := eval[string](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.getAttribute('dir') + ' ' + getComputedStyle(e).unicodeBidi : 'missing'; })()`, js(sel)))
				if got != "auto isolate" {
					t.Fatalf("%s: dir and unicode-bidi %q, want \"auto isolate\"", sel, got)
				}
			}
			if !eval[bool](b, fmt.Sprintf(`document.querySelector('#transcript li[data-seq="1"] .content').textContent === %s`, js("first "+rlo))) {
				t.Fatal("the message text changed")
			}
			// The overridden run stays inside its element: the sequence
			// number before the content is laid out left of it, as in any
			// left-to-right line.
			b.shot("console-bidi")

			// Remove carol (invited): asked first, then done.
			b.waitFor("carol's Remove", `!!document.querySelector('#session-head li[data-handle="@ops.carol"] .remove-participant')`)
			b.do("remove carol", chromedp.Click(chromedp.CSS(`#session-head li[data-handle="@ops.carol"] .remove-participant`)))
			b.waitFor("the dialog", `!!document.querySelector('dialog[open] #confirm-remove')`)
			b.shot("console-session-actions")
			b.confirm("confirm-remove")
			b.waitFor("carol left", `document.querySelector('#session-head li[data-handle="@ops.carol"]')?.textContent.includes('left')`)
			if got := alice.getSession(sid).statuses(); !strings.Contains(got, "@ops.carol=left") {
				t.Fatalf("after removal: %s", got)
			}
			b.waitFor("the left event live", `[...document.querySelectorAll('#transcript li.system')].some(li => li.textContent.includes('left @ops.carol'))`)

			// Auto-follow: at the bottom, new events scroll into view.
			var last int64
			for i := range 40 {
				last = alice.send(sid, fmt.Sprintf("line %d", i))
			}
			b.waitFor("the last line", fmt.Sprintf(`!!document.querySelector('#transcript li[data-seq="%d"]')`, last))
			b.waitFor("followed to the bottom", `window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40`)
			if !eval[bool](b, `document.getElementById('new-messages').hidden`) {
				t.Fatal("a marker while following")
			}
			// Scrolled up: the page stays, and a marker counts what arrives.
			eval[any](b, `window.scrollTo(0, 0); null`)
			b.waitFor("scrolled up", `window.scrollY === 0`)
			time.Sleep(100 * time.Millisecond) // the scroll event
			last = alice.send(sid, "while scrolled up")
			b.waitFor("the marker", `!document.getElementById('new-messages').hidden && document.getElementById('new-messages').textContent.startsWith('1 new event')`)
			if y := eval[float64](b, `window.scrollY`); y != 0 {
				t.Fatalf("the page moved to %v while scrolled up", y)
			}
			b.do("follow", chromedp.Click(chromedp.ID("new-messages")))
			b.waitFor("at the bottom again", `window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40 && document.getElementById('new-messages').hidden`)

			// A membership change redraws the snapshot above the transcript;
			// the page still follows.
			if code, body := s.adminDo("DELETE", "/sessions/"+sid+"/participants/"+bot.handle, nil); code != http.StatusOK {
				t.Fatalf("remove the bot: %d %s", code, body)
			}
			b.waitFor("the bot left", `document.querySelector('#session-head li[data-handle="@ops.bot"]')?.textContent.includes('left')`)
			b.waitFor("still following", `document.getElementById('new-messages').hidden && window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40`)
			last++

			// Download the transcript: JSON Lines, one event per line.
			dir := t.TempDir()
			b.do("allow downloads", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
					Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir})
				return err
			}))
			b.do("download", chromedp.Click(chromedp.ID("download-transcript")))
			file := filepath.Join(dir, sid+".jsonl")
			waitFor(t, "the downloaded transcript", func() bool { _, err := os.Stat(file); return err == nil })
			var body []byte
			waitFor(t, "the whole transcript", func() bool {
				body, _ = os.ReadFile(file)
				return strings.Count(string(body), "\n") == int(last)
			})
			lines := strings.Split(strings.TrimSpace(string(body)), "\n")
			if ev := decodeEvent(t, []byte(lines[len(lines)-1])); ev.Sequence != last {
				t.Fatalf("last line of the transcript: %s", lines[len(lines)-1])
			}

			// aspd restarting: the badge says reconnecting (its own look),
			// then live again, and nothing is missed.
			s.stop()
			b.waitFor("reconnecting", `document.getElementById('live-state').className === 'live state-reconnecting' && document.getElementById('live-state').textContent === 'reconnecting'`)
			s.restart()
			b.waitFor("live again", `document.getElementById('live-state').className === 'live state-live'`)
			after := alice.send(sid, "after the restart")
			b.waitFor("the message after the restart", fmt.Sprintf(`!!document.querySelector('#transcript li[data-seq="%d"]')`, after))

			// End the session.
			b.do("end", chromedp.Click(chromedp.ID("end-session")))
			b.confirm("confirm-end")
			b.waitFor("ended", `document.getElementById('session-state')?.textContent === 'ended' && !document.getElementById('end-session')`)
			b.waitFor("the ended event live", `[...document.querySelectorAll('#transcript li.system')].some(li => li.textContent.startsWith('#') && li.textContent.includes('ended'))`)
			code, raw := s.adminDo("GET", "/sessions/"+sid, nil)
			if code != http.StatusOK || !strings.Contains(string(raw), `"state":"ended"`) {
				t.Fatalf("after End: %d %s", code, raw)
			}
		})

		t.Run("closed stream", func(t *testing.T) {
			b.t = t
			// A refused stream (no such session) is closed, not retried.
			b.goTo("#/sessions/sess_NOSUCH", "")
			b.waitFor("closed", `document.getElementById('live-state')?.className === 'live state-closed' && document.getElementById('live-state').textContent === 'closed'`)
			b.waitFor("the reason", `document.getElementById('session-status').textContent.includes('No such session')`)
		})

		t.Run("overview after traffic", func(t *testing.T) {
			b.t = t
			b.goTo("#/overview", "Overview")
			b.waitFor("the connections chart with a value", `/now \d/.test(document.querySelector('#chart-connections .latest')?.textContent)`)
			b.shot("console-overview")
		})

		t.Run("narrow screen", func(t *testing.T) {
			b.t = t
			b.do("phone viewport", chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile))
			b.goTo("#/agents", "Agents")
			b.waitFor("the agents table", `!!document.querySelector('#agents-table button')`)
			// "Manage" stays one word on one line.
			if h := eval[float64](b, `Math.max(...[...document.querySelectorAll('#agents-table button')].map(e => e.getBoundingClientRect().height))`); h > 30 {
				t.Fatalf("a Manage button is %vpx high: it wraps", h)
			}
			if w := overflow(b, 375); w > 0 {
				t.Fatalf("the agents page overflows a 375px screen by %dpx", w)
			}
			b.goTo("#/overview", "Overview")
			b.waitFor("the charts", `!!document.querySelector('#chart-connections canvas')`)
			if w := overflow(b, 375); w > 0 {
				t.Fatalf("the overview overflows a 375px screen by %dpx", w)
			}
			b.do("desktop viewport", chromedp.EmulateViewport(1280, 900))
		})

		b.t = t
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.exceptions) > 0 {
			t.Fatalf("uncaught JavaScript exceptions: %v", b.exceptions)
		}
	})
}
