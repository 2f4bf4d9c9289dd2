package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Store outages seen from the outside (docs/operators.md, "During a store
// outage"): 503 store_unavailable with Retry-After on REST and MCP, never
// 500 nor 401; WebSocket /connect closed 1013, never 4001; open WebSockets
// stay open; /readyz not ready while it lasts and ready again by itself;
// one log line when it starts and one when it ends.

type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *logSink) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *logSink) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// newOutageEnv is newEnv with the server's and the store's logs kept.
func newOutageEnv(t *testing.T, dbURL string) (*env, *logSink) {
	t.Helper()
	logs := &logSink{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e := startEnv(t, dbURL, testConfig(), log, func(st *store.Store) {
		st.SetLogger(log)
		st.EnableGroupCommit(0) // as aspd runs it
	})
	return e, logs
}

// wantStoreUnavailable fails unless r is 503 store_unavailable with
// Retry-After.
func wantStoreUnavailable(t *testing.T, what string, r response) {
	t.Helper()
	if r.Status != http.StatusServiceUnavailable || r.code() != protocol.CodeStoreUnavailable {
		t.Fatalf("%s: %d %s, want 503 store_unavailable", what, r.Status, r.Body)
	}
	if r.Header.Get("Retry-After") != "2" {
		t.Fatalf("%s: Retry-After %q, want 2", what, r.Header.Get("Retry-After"))
	}
	// A challenge would tell the client its token is at fault.
	if h := r.Header.Get("WWW-Authenticate"); h != "" {
		t.Fatalf("%s: WWW-Authenticate %q on a store outage", what, h)
	}
}

// wantLoggedOnce fails unless the outage was logged once when it began
// and once when it ended, with nothing at ERROR.
func wantLoggedOnce(t *testing.T, logs string) {
	t.Helper()
	if testing.Verbose() {
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "store un") || strings.Contains(l, "store available") || strings.Contains(l, "level=WARN") {
				t.Log(l)
			}
		}
	}
	if n := strings.Count(logs, `msg="store unavailable`); n != 1 {
		t.Errorf("%d \"store unavailable\" lines, want 1", n)
	}
	if n := strings.Count(logs, `msg="store available again"`); n != 1 {
		t.Errorf("%d \"store available again\" lines, want 1", n)
	}
	if strings.Contains(logs, "level=ERROR") {
		t.Errorf("logged at ERROR during an outage")
	}
	if t.Failed() {
		t.Fatalf("logs:\n%s", logs)
	}
}

// waitReadyz polls /readyz until it answers 200.
func waitReadyz(t *testing.T, e *env, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := e.do("GET", "/readyz", "", nil)
		if r.Status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready within %v: %d %s", within, r.Status, r.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wsDial opens /connect.
func wsDial(t *testing.T, e *env, token string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(e.srv.URL, "http://", "ws://", 1)+"/connect?token="+token, nil)
	if err != nil {
		t.Fatalf("dial /connect: %v", err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

// readMessageWith reads a WebSocket until a message contains want.
func readMessageWith(t *testing.T, ws *websocket.Conn, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("WebSocket read waiting for %q: %v", want, err)
		}
		if bytes.Contains(msg, []byte(want)) {
			return
		}
	}
}

// mcpSession connects an MCP client with token.
func mcpSession(t *testing.T, e *env, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "outage-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("mcp connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// setupSession makes alice and bob (joined) share a session.
func setupSession(t *testing.T, e *env) (alice, bob, sp string) {
	t.Helper()
	alice, bob = e.agent("@acme.alice"), e.agent("@acme.bob")
	var created protocol.CreateSessionResponse
	e.must(http.StatusCreated, "POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"}, "topic": "outage"}, &created)
	sp = "/sessions/" + created.SessionID
	e.must(http.StatusOK, "POST", sp+"/join", bob, map[string]any{}, nil)
	return alice, bob, sp
}

// wantMessagesInLog fails unless every acknowledged message is in the
// session's log.
func wantMessagesInLog(t *testing.T, e *env, token, sp string, acked []string) {
	t.Helper()
	var all strings.Builder
	cursor := ""
	for {
		var page protocol.EventsPage
		e.must(http.StatusOK, "GET", sp+"/events?limit=500"+cursor, token, nil, &page)
		for _, ev := range page.Events {
			all.Write(ev)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = "&cursor=" + page.NextCursor
	}
	for _, id := range acked {
		if !strings.Contains(all.String(), id) {
			t.Fatalf("acknowledged message %s is not in the log", id)
		}
	}
}

// mountTmpfs mounts a small tmpfs for a test (removed when it ends): a disk
// that fills up. Mounting needs root; without it the test is skipped,
// loudly, unless ASPD_REQUIRE_TMPFS=1.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("\n*** cannot mount a tmpfs (%v: %s): the full-disk test is SKIPPED; run as root, or set ASPD_REQUIRE_TMPFS=1 to fail instead\n", err, strings.TrimSpace(string(out)))
		if os.Getenv("ASPD_REQUIRE_TMPFS") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprint(os.Stderr, msg)
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			return
		}
	}
}

// TestOutageSQLiteDiskFull: aspd's SQLite database on a file system that
// fills up (a 2 MiB tmpfs), then gets space again.
func TestOutageSQLiteDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "2m")
	e, logs := newOutageEnv(t, filepath.Join(dir, "aspd.db"))
	alice, bob, sp := setupSession(t, e)
	ws := wsDial(t, e, bob) // open before the disk fills: stays open
	cs := mcpSession(t, e, alice)

	var acked []string
	for i := range 20 {
		var sent protocol.SendMessageResponse
		e.must(http.StatusCreated, "POST", sp+"/messages", alice, map[string]any{"content": fmt.Sprintf("before %d", i)}, &sent)
		acked = append(acked, sent.MessageID)
	}
	ballast := filepath.Join(dir, "ballast")
	fillDisk(t, ballast)
	var refused response
	for i := range 2000 {
		r := e.do("POST", sp+"/messages", alice, map[string]any{"content": fmt.Sprintf("m%04d %s", i, strings.Repeat("x", 500))})
		if r.Status == http.StatusCreated {
			var sent protocol.SendMessageResponse
			if err := json.Unmarshal(r.Body, &sent); err != nil {
				t.Fatal(err)
			}
			acked = append(acked, sent.MessageID)
			continue
		}
		refused = r
		break
	}
	t.Logf("%d messages acknowledged before the disk was full", len(acked))
	if refused.Status == 0 {
		t.Fatal("the disk never filled")
	}
	wantStoreUnavailable(t, "a message on a full disk", refused)
	wantStoreUnavailable(t, "/readyz on a full disk", e.do("GET", "/readyz", "", nil))
	wantStoreUnavailable(t, "another message", e.do("POST", sp+"/messages", alice, map[string]any{"content": "full"}))

	// An operator's agent with roles and an allowlist: all of it or none.
	r := e.do("POST", "/admin/v1/agents", adminToken, map[string]any{"handle": "@acme.carol", "inbound_policy": "allowlist",
		"allowlist": []string{"@acme.alice"}, "roles": []string{"ops"}})
	wantStoreUnavailable(t, "creating an agent on a full disk", r)

	// A token rotation either hands out the new token or changes nothing.
	wantStoreUnavailable(t, "rotating a token on a full disk", e.do("POST", "/admin/v1/agents/@acme.bob/token", adminToken, nil))

	// MCP: the tool error carries the code and when to retry.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_message",
		Arguments: map[string]any{"session_id": strings.TrimPrefix(sp, "/sessions/"), "content": "via mcp"}})
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if !res.IsError || !strings.Contains(text, `"code":"store_unavailable"`) || !strings.Contains(text, `"retry_after_seconds":2`) {
		t.Fatalf("MCP send_message on a full disk: isError %v %s", res.IsError, text)
	}

	// Reads and authenticated GETs still work on a full disk.
	e.must(http.StatusOK, "GET", sp, alice, nil, nil)

	// Space again: ready by itself, and writes work.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, e, 10*time.Second)
	var sent protocol.SendMessageResponse
	e.must(http.StatusCreated, "POST", sp+"/messages", alice, map[string]any{"content": "after the outage"}, &sent)
	acked = append(acked, sent.MessageID)
	readMessageWith(t, ws, sent.MessageID)  // the WebSocket opened before stayed open
	wantMessagesInLog(t, e, bob, sp, acked) // bob's token survived the refused rotation
	if r := e.do("GET", "/admin/v1/agents/@acme.carol", adminToken, nil); r.Status != http.StatusNotFound {
		t.Fatalf("agent refused during the outage exists: %d %s", r.Status, r.Body)
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/agents", adminToken, map[string]any{"handle": "@acme.carol", "inbound_policy": "allowlist",
		"allowlist": []string{"@acme.alice"}, "roles": []string{"ops"}}, nil)
	wantLoggedOnce(t, logs.String())
}

// TestOutagePostgresDown: PostgreSQL refuses aspd's connections (as when it
// is down or restarting), then accepts them again.
func TestOutagePostgresDown(t *testing.T) {
	u := dbtest.Postgres(t)
	faults := dbtest.PostgresFaults(t, u)
	e, logs := newOutageEnv(t, u)
	alice, bob, sp := setupSession(t, e)
	carol, dave := e.agent("@acme.carol"), e.agent("@acme.dave")
	e.must(http.StatusOK, "GET", "/sessions", carol, nil, nil) // carol's token is now cached; dave's is not
	ws := wsDial(t, e, bob)                                    // open before the outage: stays open
	var ops protocol.OperatorTokenWithSecret
	e.must(http.StatusCreated, "POST", "/admin/v1/operator-tokens", adminToken, map[string]any{"name": "ops", "scope": "admin"}, &ops)

	faults.AllowConnections(t, false)
	faults.Terminate(t)

	// Authentication the store must answer: 503, not 401, not 500.
	wantStoreUnavailable(t, "an uncached token", e.do("GET", "/sessions", dave, nil))
	wantStoreUnavailable(t, "a message", e.do("POST", sp+"/messages", alice, map[string]any{"content": "down"}))
	wantStoreUnavailable(t, "a read", e.do("GET", sp+"/events", alice, nil))
	wantStoreUnavailable(t, "the operator's agent list", e.do("GET", "/admin/v1/agents", adminToken, nil))
	// A named operator token is looked up in the store: 503, not 401. The
	// bootstrap token is not: whoami answers.
	wantStoreUnavailable(t, "a named operator token", e.do("GET", "/admin/v1/whoami", ops.Token, nil))
	e.must(http.StatusOK, "GET", "/admin/v1/whoami", adminToken, nil, nil)
	wantStoreUnavailable(t, "creating a session", e.do("POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"}}))
	wantStoreUnavailable(t, "/readyz", e.do("GET", "/readyz", "", nil))

	// MCP's authentication too.
	req, _ := http.NewRequest("POST", e.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+dave)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	wantStoreUnavailable(t, "MCP with an uncached token", response{Status: resp.StatusCode, Header: resp.Header, Body: body.Bytes()})

	// A WebSocket opened now with a valid (cached) token: the store cannot
	// re-check it, so 1013 try again later, not 4001 (do not reconnect).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cws, _, err := websocket.Dial(ctx, strings.Replace(e.srv.URL, "http://", "ws://", 1)+"/connect?token="+carol, nil)
	if err != nil {
		t.Fatalf("dial during the outage: %v", err)
	}
	defer cws.CloseNow()
	for {
		_, _, err := cws.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusTryAgainLater {
			t.Fatalf("WebSocket opened during the outage: %v, want close 1013", err)
		}
		break
	}

	faults.AllowConnections(t, true)
	waitReadyz(t, e, 10*time.Second)
	var sent protocol.SendMessageResponse
	e.must(http.StatusCreated, "POST", sp+"/messages", alice, map[string]any{"content": "up again"}, &sent)
	readMessageWith(t, ws, sent.MessageID) // the WebSocket opened before stayed open
	e.must(http.StatusOK, "GET", "/sessions", dave, nil, nil)
	wantLoggedOnce(t, logs.String())
}

// TestOutagePostgresKilledBackends: PostgreSQL kills aspd's connections in
// the middle of a burst of requests: no request is answered 500 (503 is
// acceptable; the retries make most succeed), nothing acknowledged is
// lost, and readiness holds or comes back by itself.
func TestOutagePostgresKilledBackends(t *testing.T) {
	u := dbtest.Postgres(t)
	faults := dbtest.PostgresFaults(t, u)
	e, logs := newOutageEnv(t, u)
	alice, bob, sp := setupSession(t, e)

	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for _, at := range []time.Duration{20, 150, 300} {
			time.Sleep(at * time.Millisecond)
			faults.Terminate(t)
		}
	}()
	var mu sync.Mutex
	var acked []string
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 120 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r response
			switch i % 3 {
			case 0:
				r = e.do("POST", sp+"/messages", alice, map[string]any{"content": fmt.Sprintf("burst %d", i)})
			case 1:
				r = e.do("GET", sp+"/events?limit=10", bob, nil)
			default:
				r = e.do("GET", "/admin/v1/agents", adminToken, nil)
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[r.Status]++
			if r.Status == http.StatusCreated {
				var sent protocol.SendMessageResponse
				_ = json.Unmarshal(r.Body, &sent)
				acked = append(acked, sent.MessageID)
			}
			if r.Status >= 500 && r.code() != protocol.CodeStoreUnavailable {
				t.Errorf("answered %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	<-killed
	t.Logf("answers during the kills: %v", statuses)
	waitReadyz(t, e, 10*time.Second)
	wantMessagesInLog(t, e, bob, sp, acked)
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("killed connections logged at ERROR:\n%s", logs)
	}
}
