package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/chorus"
	"github.com/aspd/aspd/internal/cluster"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/server"
	"github.com/aspd/aspd/store"
)

const adminToken = "daemon-test-admin-token"

// testConfig is the whole graph as aspd runs it on url: Chorus on (a key,
// so the worker runs) and, on PostgreSQL, a cluster node.
func testConfig(url string) Config {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cfg := Config{
		App: app.Config{
			Limits:      protocol.DefaultLimits(),
			GraceWindow: time.Minute,
			Hub:         replay.DefaultConfig(),
			Frames:      app.DefaultFramesConfig(),
			Chorus:      app.ChorusConfig{Key: key, PublicURL: "http://aspd.invalid", CallbackTTL: time.Hour, MCPTokenTTL: time.Minute},
		},
		HTTP: server.Config{
			MaxBodyBytes:    1 << 20,
			AdminTokenHash:  server.HashToken(adminToken),
			PingInterval:    time.Minute,
			WSReadLimit:     1 << 16,
			StreamKeepalive: 15 * time.Second,
		},
		Chorus: chorus.DefaultConfig(),
	}
	if strings.HasPrefix(url, "postgres") {
		cl := cluster.DefaultConfig()
		cl.DatabaseURL, cl.Addr, cl.RingSize = url, "daemon-test", cfg.App.Hub.RingSize
		cfg.App.Cluster = &cl
	}
	return cfg
}

// TestDaemon builds the whole graph on each store, starts it, serves
// requests and a live delivery through the handler, and closes it: the
// Chorus worker stops before the application, and nothing of aspd's keeps
// running once the daemon and the store are closed.
func TestDaemon(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st, err := store.Open(ctx, url)
		if err != nil {
			t.Fatalf("store.Open: %v", err)
		}
		d := New(testConfig(url), st, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := d.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		hs := httptest.NewServer(d.Handler())
		closed := false
		defer func() {
			if !closed { // a failure midway
				hs.Close()
				d.Close()
				st.Close()
			}
		}()

		do := func(method, path, token string, body any) (int, []byte) {
			t.Helper()
			var rd io.Reader
			if body != nil {
				b, _ := json.Marshal(body)
				rd = bytes.NewReader(b)
			}
			req, _ := http.NewRequest(method, hs.URL+path, rd)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		newAgent := func(handle string) string {
			t.Helper()
			var a protocol.AgentWithToken
			status, b := do("POST", "/admin/v1/agents", adminToken, map[string]any{"handle": handle, "inbound_policy": "open"})
			if status != http.StatusCreated || json.Unmarshal(b, &a) != nil || a.Token == "" {
				t.Fatalf("creating %s: %d %s", handle, status, b)
			}
			return a.Token
		}
		alice, bob := newAgent("@acme.alice"), newAgent("@acme.bob")
		if _, b := do("GET", "/readyz", "", nil); bytes.Contains(b, []byte(`"node":`)) != (testConfig(url).App.Cluster != nil) {
			t.Fatalf("readyz %s: a node exactly when the store is PostgreSQL", b)
		}

		// Bob connects; once the hub counts the connection, an invitation
		// reaches him live, through the hub's OnLiveWrite the daemon wires.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(wctx, strings.Replace(hs.URL, "http://", "ws://", 1)+"/connect",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + bob}}})
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer ws.CloseNow()
		waitFor(t, "the connection", func() bool {
			_, b := do("GET", "/readyz", "", nil)
			return bytes.Contains(b, []byte(`"connections":1`))
		})
		if status, b := do("POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"}}); status != http.StatusCreated {
			t.Fatalf("create session: %d %s", status, b)
		}
		if _, msg, err := ws.Read(wctx); err != nil || !bytes.Contains(msg, []byte("session.invited")) {
			t.Fatalf("bob's first event: %v %s", err, msg)
		}

		// /metrics holds the daemon's metrics beside the server's: the
		// send-to-deliver histogram (fed), the Chorus worker's, with the
		// same buckets as the request histogram.
		var metrics string
		waitFor(t, "the live delivery in aspd_delivery_latency_seconds", func() bool {
			status, b := do("GET", "/metrics", adminToken, nil)
			if status != http.StatusOK {
				t.Fatalf("/metrics: %d %s", status, b)
			}
			metrics = string(b)
			return regexp.MustCompile(`(?m)^aspd_delivery_latency_seconds_count 1$`).MatchString(metrics)
		})
		for _, name := range []string{"# HELP aspd_chorus_outbox_pending ", "# HELP aspd_http_request_duration_seconds ", "# HELP aspd_connections "} {
			if !strings.Contains(metrics, name) {
				t.Errorf("/metrics lacks %q", name)
			}
		}
		if del, req := buckets(metrics, `aspd_delivery_latency_seconds_bucket{`), buckets(metrics, `aspd_http_request_duration_seconds_bucket{method="GET",route="/readyz",status="2xx",`); len(del) == 0 || !slices.Equal(del, req) {
			t.Errorf("delivery latency buckets %v, request buckets %v", del, req)
		}

		// Close: the worker runs until then, and has stopped by the time
		// the application begins to stop.
		if !running("chorus.(*Worker).loop") {
			t.Fatal("the Chorus worker is not running")
		}
		workerAtAppStop := make(chan bool, 1)
		go func() {
			<-d.app.Stopping()
			workerAtAppStop <- running("chorus.(*Worker).loop")
		}()
		ws.Close(websocket.StatusNormalClosure, "")
		hs.Close()
		d.Close()
		st.Close()
		closed = true
		if <-workerAtAppStop {
			t.Error("the Chorus worker was still running when the application began to stop")
		}
		for deadline := time.Now().Add(10 * time.Second); len(aspdGoroutines()) > 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("aspd goroutines still running after Close:\n%s", strings.Join(aspdGoroutines(), "\n\n"))
			}
		}
	})
}

// buckets returns the le labels of the series whose lines start with prefix.
func buckets(metrics, prefix string) []string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, prefix) {
			if m := regexp.MustCompile(`le="([^"]+)"`).FindStringSubmatch(l); m != nil {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// running reports whether a goroutine is in fn.
func running(fn string) bool {
	return slices.ContainsFunc(goroutines(), func(g string) bool { return strings.Contains(g, fn) })
}

// aspdGoroutines are the goroutines running aspd's code, other than the
// tests'.
func aspdGoroutines() []string {
	var out []string
	for _, g := range goroutines() {
		if strings.Contains(g, "github.com/aspd/aspd/") && !strings.Contains(g, "daemon.Test") && !strings.Contains(g, "daemon.running") {
			out = append(out, g)
		}
	}
	return out
}

func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
