package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The web console (/console) driven in headless Chromium against a real
// aspd: log in, manage an agent, watch a session live while messages are
// sent over REST, pause and resume with the tab's visibility, search, and
// render hostile content as text. chromedp drives the browser over the
// DevTools protocol from Go, so the test needs no Node.js.
//
// Without Chromium the test skips with a message; ASPD_REQUIRE_CHROMIUM=1
// (CI) turns that into a failure. ASPD_CONSOLE_SCREENSHOTS=docs/img (a
// directory, relative to the repository root) saves a PNG of each page
// there, as shown in docs/console.md.

// chromiumPath finds the browser, or skips (fails under ASPD_REQUIRE_CHROMIUM=1).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "the console's browser tests need Chromium (chromium, chromium-browser or google-chrome on PATH; Debian: apt-get install chromium)"
	if os.Getenv("ASPD_REQUIRE_CHROMIUM") == "1" {
		t.Fatalf("%s, and ASPD_REQUIRE_CHROMIUM=1 forbids skipping them", msg)
	}
	t.Skip("SKIPPED: " + msg)
	return ""
}

// browser is one headless Chromium tab on the console.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string // directory for screenshots, "" = none

	mu         sync.Mutex
	exceptions []string // uncaught JavaScript exceptions
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromiumPath(t)
	// The flags keep Chromium off the network except for aspd: this
	// machine's closed network refuses its background connections.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.mu.Lock()
			d := e.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			b.exceptions = append(b.exceptions, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, text))
			b.mu.Unlock()
		case *runtime.EventConsoleAPICalled:
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			t.Logf("browser console.%s: %s", e.Type, strings.Join(parts, " "))
		}
	}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout
		t.Fatalf("starting Chromium (%s): %v", exe, err)
	}
	b.ctx = ctx
	if dir := os.Getenv("ASPD_CONSOLE_SCREENSHOTS"); dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("..", dir) // tests run in integration/
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b.shots = dir
	}
	return b
}

// do runs steps within 20s or fails the test.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor waits until the JavaScript expression is truthy.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, body)
	}
}

// shot saves a screenshot of the page as name.png when screenshots are on.
func (b *browser) shot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// goTo follows a console route (e.g. "#/sessions") and waits for its heading.
func (b *browser) goTo(hash, heading string) {
	b.t.Helper()
	eval[any](b, fmt.Sprintf(`location.hash = %s; null`, js(hash)))
	if heading == "" {
		return
	}
	b.waitFor("the "+heading+" page", fmt.Sprintf(`[...document.querySelectorAll('main h1')].some(h => h.textContent === %s)`, js(heading)))
}

// confirm clicks the button okID of the open confirmation dialog, once the
// dialog is showing, and waits for the dialog to close.
func (b *browser) confirm(okID string) {
	b.t.Helper()
	b.waitFor("the "+okID+" dialog", fmt.Sprintf(`!!document.querySelector('dialog[open] #%s')`, okID))
	b.do("confirm "+okID, chromedp.Click(chromedp.ID(okID)))
	b.waitFor("the dialog closed", `!document.querySelector('dialog[open]')`)
}

// js quotes a Go string as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// background opens a second tab in the console's window, which sends the
// console's tab to the background (document.visibilityState "hidden", a
// visibilitychange event), as switching tabs does. The func it returns
// closes that tab, which brings the console's tab back.
func (b *browser) background() (front func()) {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewWindow(false))
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		b.t.Fatalf("opening a second tab: %v", err)
	}
	b.waitFor("the console's tab in the background", `document.visibilityState === 'hidden'`)
	return func() {
		b.t.Helper()
		cancel()
		b.waitFor("the console's tab in front", `document.visibilityState === 'visible'`)
	}
}

func TestConsoleInBrowser(t *testing.T) {
	chromiumPath(t) // skip before starting anything when there is no browser
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		b := newBrowser(t)
		// A tracer: set by any script that hostile content might inject.
		hostile := `<img src=x onerror="window.__pwned='img'"><script>window.__pwned='script'</script><b>bold?</b>`

		t.Run("login", func(t *testing.T) {
			b.t = t
			b.do("open the console", chromedp.Navigate(s.url+"/console"), chromedp.WaitVisible(chromedp.ID("login-token")))
			b.shot("console-login")
			b.do("log in with a wrong token", chromedp.SendKeys(chromedp.ID("login-token"), "not-the-operator-token"),
				chromedp.Click(chromedp.CSS("#login-form button")))
			b.waitFor("the refusal", `document.getElementById('login-error').textContent.includes('refused')`)
			if eval[bool](b, `!document.getElementById('nav').hidden`) {
				t.Fatal("a wrong token opened the console")
			}
			b.do("log in", chromedp.SendKeys(chromedp.ID("login-token"), s.admin), chromedp.Click(chromedp.CSS("#login-form button")))
			b.waitFor("the agents page", `!document.getElementById('nav').hidden && !!document.getElementById('create-agent')`)
			// The token is in this tab's sessionStorage only: not in the
			// URL, not in a cookie, not left in the login field.
			if href := eval[string](b, `location.href`); strings.Contains(href, s.admin) {
				t.Fatalf("the token is in the URL: %s", href)
			}
			if c := eval[string](b, `document.cookie`); c != "" {
				t.Fatalf("the console set a cookie: %q", c)
			}
			if v := eval[string](b, `document.getElementById('login-token').value`); v != "" {
				t.Fatalf("the login field still holds the token")
			}
			if got := eval[string](b, `sessionStorage.getItem('aspd.console.token')`); got != s.admin {
				t.Fatalf("sessionStorage token = %q", got)
			}
		})

		var aliceToken string
		t.Run("agents", func(t *testing.T) {
			b.t = t
			b.do("create @web.alice", chromedp.SendKeys(chromedp.ID("new-handle"), "@web.alice"),
				chromedp.SetValue(chromedp.ID("new-policy"), "open"), chromedp.Click(chromedp.CSS("#create-agent button[type=submit]")))
			b.waitFor("the new token", `!!document.querySelector('#token-once .token-value')`)
			aliceToken = eval[string](b, `document.querySelector('#token-once .token-value').value`)
			if !strings.HasPrefix(aliceToken, "asp_") {
				t.Fatalf("shown token %q", aliceToken)
			}
			// The token shown works, and the agent is as created.
			alice := &agent{t: t, s: s, handle: "@web.alice", token: aliceToken}
			alice.must(http.StatusOK, "GET", "/sessions", nil, "")
			code, body := s.adminDo("GET", "/agents/@web.alice", nil)
			if code != http.StatusOK || !strings.Contains(string(body), `"inbound_policy":"open"`) {
				t.Fatalf("agent after creation: %d %s", code, body)
			}
			b.waitFor("the agent in the table", `!!document.querySelector('#agents-table tr[data-handle="@web.alice"]')`)

			// Manage @web.alice: allowlist, policy, block and unblock, rotate.
			b.do("manage", chromedp.Click(chromedp.CSS(`#agents-table tr[data-handle="@web.alice"] button`)))
			b.waitFor("the agent panel", `!!document.getElementById('edit-allowlist')`)
			b.do("set the allowlist", chromedp.SetValue(chromedp.ID("edit-allowlist"), "@web.*\n@kim.assistant"),
				chromedp.Click(chromedp.CSS(`form:has(#edit-allowlist) button`)))
			b.waitFor("the saved allowlist", `document.querySelector('#agents-table tr[data-handle="@web.alice"]')?.textContent.includes('@kim.assistant')`)
			// The value is set whole and checked before the click: typed key by
			// key, a re-render of the panel (the saved allowlist reloads the
			// agent) could submit half a handle.
			b.do("type the blocked handle", chromedp.SetValue(chromedp.ID("block-handle"), "@spam.bot"))
			b.waitFor("the blocked handle typed", `document.getElementById('block-handle')?.value === '@spam.bot'`)
			b.do("block", chromedp.Click(chromedp.CSS(`form:has(#block-handle) button`)))
			b.waitFor("the block", `document.querySelector('.blocks')?.textContent.includes('@spam.bot')`)
			b.shot("console-agents")
			code, body = s.adminDo("GET", "/agents/@web.alice", nil)
			if !strings.Contains(string(body), `"blocks":["@spam.bot"]`) || !strings.Contains(string(body), `"allowlist":["@kim.assistant","@web.*"]`) && !strings.Contains(string(body), `"allowlist":["@web.*","@kim.assistant"]`) {
				t.Fatalf("agent after block and allowlist: %d %s", code, body)
			}
			b.do("unblock", chromedp.Click(chromedp.CSS(`.blocks button`)))
			b.waitFor("the unblock", `!document.querySelector('.blocks')`)
			if _, body = s.adminDo("GET", "/agents/@web.alice", nil); !strings.Contains(string(body), `"blocks":[]`) {
				t.Fatalf("agent after unblock: %s", body)
			}
			b.do("policy back to allowlist", chromedp.SetValue(chromedp.ID("edit-policy"), "allowlist"), chromedp.Click(chromedp.CSS(`form:has(#edit-policy) button`)))
			b.confirm("confirm-policy")
			b.waitFor("the saved policy", `document.querySelector('#agents-table tr[data-handle="@web.alice"] td:nth-child(2)')?.textContent === 'allowlist'`)
			b.do("policy open again", chromedp.SetValue(chromedp.ID("edit-policy"), "open"), chromedp.Click(chromedp.CSS(`form:has(#edit-policy) button`)))
			b.confirm("confirm-policy")
			b.waitFor("the saved policy", `document.querySelector('#agents-table tr[data-handle="@web.alice"] td:nth-child(2)')?.textContent === 'open'`)

			b.do("rotate", chromedp.Click(chromedp.ID("rotate-token")))
			b.confirm("confirm-rotate")
			b.waitFor("the rotated token", fmt.Sprintf(`(document.querySelector('#token-once .token-value')?.value || %s) !== %s`, js(aliceToken), js(aliceToken)))
			rotated := eval[string](b, `document.querySelector('#token-once .token-value').value`)
			if code, _ := request(t, "GET", s.url+"/sessions", aliceToken, nil); code != http.StatusUnauthorized {
				t.Fatalf("the old token after rotation: %d", code)
			}
			aliceToken = rotated
			alice.token = rotated
			alice.must(http.StatusOK, "GET", "/sessions", nil, "")

			// Deletion asks first; cancelling deletes nothing.
			s.provision("@web.doomed", "open")
			b.goTo("#/sessions", "Sessions")
			b.goTo("#/agents", "Agents")
			b.waitFor("@web.doomed", `!!document.querySelector('#agents-table tr[data-handle="@web.doomed"]')`)
			b.do("manage @web.doomed", chromedp.Click(chromedp.CSS(`#agents-table tr[data-handle="@web.doomed"] button`)))
			b.waitFor("the panel", `document.querySelector('#agent-detail h2')?.textContent === '@web.doomed'`)
			b.do("ask to delete", chromedp.Click(chromedp.ID("delete-agent")))
			b.waitFor("the confirmation", `!!document.querySelector('dialog[open] #confirm-delete')`)
			if code, _ := s.adminDo("GET", "/agents/@web.doomed", nil); code != http.StatusOK {
				t.Fatalf("asking to delete deleted: %d", code)
			}
			b.do("confirm", chromedp.Click(chromedp.ID("confirm-delete")))
			b.waitFor("the row gone", `!!document.querySelector('#agents-table') && !document.querySelector('#agents-table tr[data-handle="@web.doomed"]')`)
			if code, _ := s.adminDo("GET", "/agents/@web.doomed", nil); code != http.StatusNotFound {
				t.Fatalf("after confirmed deletion: %d", code)
			}
		})
		if aliceToken == "" {
			t.FailNow()
		}

		alice := &agent{t: t, s: s, handle: "@web.alice", token: aliceToken}
		bob := s.provision("@web.bob", "open")
		sid := alice.createSession(map[string]any{"invite": []string{"@web.bob"}, "topic": "topic " + hostile,
			"initial_message": map[string]any{"content": "first words"}})
		bob.join(sid)

		t.Run("sessions", func(t *testing.T) {
			b.t = t
			alice.t, bob.t = t, t
			b.goTo("#/sessions", "Sessions")
			b.waitFor("the session row", fmt.Sprintf(`!!document.querySelector('tr[data-session=%s]')`, js(sid)))
			// The filter narrows: a participant who is not in it hides it.
			b.do("filter", chromedp.SendKeys(chromedp.ID("f-participant"), "@web.nobody"), chromedp.Click(chromedp.CSS("#sessions-filter button")))
			b.waitFor("no rows", `!document.querySelector('#sessions-table') && document.querySelector('main .empty')?.textContent === 'No sessions match.'`)
			b.do("filter", chromedp.SetValue(chromedp.ID("f-participant"), "@web.bob"), chromedp.Click(chromedp.CSS("#sessions-filter button")))
			b.waitFor("the session row", fmt.Sprintf(`!!document.querySelector('tr[data-session=%s]')`, js(sid)))
			b.shot("console-sessions")

			b.do("open the session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-session=%s] a`, js(sid)))))
			b.waitFor("the live stream", `document.getElementById('live-state')?.textContent === 'live'`)
			b.waitFor("the first message", `document.getElementById('transcript').textContent.includes('first words')`)

			// A message sent over REST now arrives live.
			seq := alice.send(sid, "hello from REST, live")
			b.waitFor("the live message", fmt.Sprintf(`document.querySelector('#transcript li[data-seq="%d"]')?.textContent.includes('hello from REST, live')`, seq))

			// Hostile content renders as text: the text is there, no element was made of it, no script ran.
			hseq := bob.send(sid, hostile)
			bob.send(sid, []map[string]any{{"type": "text", "text": "part " + hostile}, {"type": "data", "data": map[string]any{"html": hostile}}})
			b.waitFor("the hostile message", fmt.Sprintf(`document.querySelector('#transcript li[data-seq="%d"] .content')?.textContent === %s`, hseq, js(hostile)))
			b.waitFor("the hostile parts", `document.getElementById('transcript').textContent.includes('part <img')`)
			b.waitFor("the hostile topic", fmt.Sprintf(`document.querySelector('#session-head h2')?.textContent === %s`, js("topic "+hostile)))
			if n := eval[int](b, `document.querySelectorAll('main img, main script, main b, main iframe').length`); n != 0 {
				t.Fatalf("hostile content made %d elements", n)
			}
			if p := eval[string](b, `String(window.__pwned)`); p != "undefined" {
				t.Fatalf("hostile content ran a script: window.__pwned = %s", p)
			}
			if !eval[bool](b, fmt.Sprintf(`document.body.innerText.includes(%s)`, js(hostile))) {
				t.Fatal("the hostile text is not visible as text")
			}
			b.shot("console-session")

			// In the background, the stream closes; back in front, it
			// resumes after the last sequence shown: nothing missed, nothing twice.
			front := b.background()
			b.waitFor("the paused stream", `document.getElementById('live-state').textContent.startsWith('paused')`)
			waitLiveTranscripts(t, s, 0)
			hidden := alice.send(sid, "sent while the tab was hidden")
			time.Sleep(700 * time.Millisecond) // more than the app's 250ms poll: a live stream would have shown it
			if eval[bool](b, `document.getElementById('transcript').textContent.includes('while the tab was hidden')`) {
				t.Fatal("a hidden tab kept its stream")
			}
			front()
			b.waitFor("the resumed stream", fmt.Sprintf(`!!document.querySelector('#transcript li[data-seq="%d"]')`, hidden))
			waitLiveTranscripts(t, s, 1)
			seqs := eval[[]int64](b, `[...document.querySelectorAll('#transcript li')].map(li => Number(li.dataset.seq))`)
			for i, q := range seqs {
				if q != int64(i+1) {
					t.Fatalf("transcript sequences %v: want 1..%d, each once", seqs, len(seqs))
				}
			}
			if int64(len(seqs)) != hidden {
				t.Fatalf("transcript has %d events, want %d", len(seqs), hidden)
			}
		})

		t.Run("search", func(t *testing.T) {
			b.t = t
			if code, body := s.adminDo("GET", "/search?q=live", nil); code == http.StatusNotFound {
				t.Skipf("SKIPPED: GET /admin/v1/search is not on this branch (404 %s); this subtest passes once the search branch is merged", body)
			}
			b.goTo("#/search", "Search")
			b.do("search", chromedp.SendKeys(chromedp.ID("search-q"), "live"), chromedp.Click(chromedp.CSS("#search-form button[type=submit]")))
			b.waitFor("the hit", fmt.Sprintf(`[...document.querySelectorAll('#search-results .hit')].some(h => h.dataset.session === %s && h.querySelector('mark')?.textContent.toLowerCase() === 'live')`, js(sid)))
			b.shot("console-search")
			// A filter narrows: @web.bob never wrote "live".
			b.do("filter by sender", chromedp.Click(chromedp.CSS("#search-form summary")), chromedp.SendKeys(chromedp.ID("search-sender"), "@web.bob"),
				chromedp.Click(chromedp.CSS("#search-form button[type=submit]")))
			b.waitFor("no hits", `document.getElementById('search-status').textContent === 'Nothing found.' && !document.querySelector('#search-results .hit')`)
			eval[any](b, `document.getElementById('search-sender').value = ''; null`)
			b.do("search hostile", chromedp.SetValue(chromedp.ID("search-q"), "onerror"), chromedp.Click(chromedp.CSS("#search-form button[type=submit]")))
			b.waitFor("the hostile hit", `document.getElementById('search-results').textContent.includes('<img src=x onerror=')`)
			if n := eval[int](b, `document.querySelectorAll('#search-results img, #search-results script, #search-results b').length`); n != 0 {
				t.Fatalf("hostile snippets made %d elements", n)
			}
			if p := eval[string](b, `String(window.__pwned)`); p != "undefined" {
				t.Fatalf("a hostile snippet ran a script: window.__pwned = %s", p)
			}
		})

		t.Run("health", func(t *testing.T) {
			b.t = t
			b.goTo("#/health", "Health")
			b.waitFor("the health cards", `!!document.getElementById('h-store')`)
			if got := eval[string](b, `document.querySelector('#h-store .value').textContent`); !strings.HasSuffix(got, ": ok") {
				t.Fatalf("store card %q", got)
			}
			// The rate comes from two samples: a number once the second is in.
			b.waitFor("a rate", `/^\d+\.\d$/.test(document.querySelector('#h-rate .value')?.textContent)`)
			// Chorus is on with the embedded store's generated key, off on
			// PostgreSQL without a key.
			wantChorus := "Not available"
			if !strings.HasPrefix(dbURL, "postgres") {
				wantChorus = "0 pending"
			}
			if got := eval[string](b, `document.getElementById('chorus-backlog').textContent`); !strings.Contains(got, wantChorus) {
				t.Fatalf("chorus card %q, want %q", got, wantChorus)
			}
			b.shot("console-health")

			// In the background the page stops sampling (a hidden tab's
			// timers still run, only slower), and starts again in front.
			samples := `performance.getEntriesByType('resource').filter(e => e.name.endsWith('/admin/v1/health')).length`
			front := b.background()
			before := eval[int](b, samples)
			time.Sleep(6 * time.Second) // longer than the 5 s sampling interval
			if after := eval[int](b, samples); after != before {
				t.Fatalf("a hidden health page sampled %d times", after-before)
			}
			front()
			b.waitFor("sampling again", fmt.Sprintf(`%s > %d`, samples, before))
		})

		t.Run("narrow screen", func(t *testing.T) {
			b.t = t
			b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
			b.goTo("#/sessions/"+sid, "")
			b.waitFor("the transcript", fmt.Sprintf(`!!document.querySelector('#transcript li[data-seq="%d"]')`, 1))
			if w := overflow(b, 390); w > 0 {
				t.Fatalf("the session page overflows a 390px screen by %dpx", w)
			}
			b.shot("console-narrow")
			b.goTo("#/agents", "Agents")
			b.waitFor("the agents table", `!!document.getElementById('agents-table')`)
			if w := overflow(b, 390); w > 0 {
				t.Fatalf("the agents page overflows a 390px screen by %dpx", w)
			}
		})

		b.t = t
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.exceptions) > 0 {
			t.Fatalf("uncaught JavaScript exceptions: %v", b.exceptions)
		}
	})
}

// overflow is how far, in CSS pixels, the page's widest element reaches
// past width (0 if nothing does). The layout viewport of a mobile screen
// widens to fit its content, so scrollWidth alone would hide an overflow.
func overflow(b *browser, width int) int {
	b.t.Helper()
	right := eval[float64](b, `Math.max(...[...document.body.querySelectorAll('*')].map(e => e.getBoundingClientRect().right))`)
	return max(0, int(right+0.5)-width)
}

// waitLiveTranscripts waits until /admin/v1/health counts n open live transcripts.
func waitLiveTranscripts(t *testing.T, s *server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := s.adminDo("GET", "/health", nil)
		var h struct {
			LiveTranscripts int `json:"live_transcripts"`
		}
		mustUnmarshal(t, body, &h)
		if h.LiveTranscripts == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("live_transcripts = %d, want %d", h.LiveTranscripts, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
