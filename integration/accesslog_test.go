package integration

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestAccessLog: each request writes exactly one access-log line with its
// method, route pattern, status, duration, agent and request id; a
// WebSocket's line is written when it ends; no token ever reaches the log.
func TestAccessLog(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t))
	a := s.provision("@log.a", "open")
	sid := a.createSession(map[string]any{})

	req, _ := http.NewRequest("GET", s.url+"/sessions/"+sid, nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("X-Request-Id", "access-log-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// A WebSocket authenticated by the query string (?token=): the line is
	// written when the connection ends, and shows the route only.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(s.url, "http://", "ws://", 1)+"/connect?token="+a.token,
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Request-Id": {"access-log-ws"}}})
	if err != nil {
		t.Fatalf("dial /connect?token=: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	ws.Close(websocket.StatusNormalClosure, "")

	lines := func(id string) []string {
		var out []string
		for _, l := range strings.Split(s.logs(), "\n") {
			if strings.Contains(l, "msg=request ") && strings.Contains(l, "request_id="+id) {
				out = append(out, l)
			}
		}
		return out
	}
	var ws1 []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ws1 = lines("access-log-ws"); len(ws1) > 0 {
			break
		}
	}
	got := lines("access-log-1")
	if len(got) != 1 {
		t.Fatalf("%d access-log lines for one request, want 1:\n%s", len(got), strings.Join(got, "\n"))
	}
	line := regexp.MustCompile(`level=INFO msg=request method=GET route=/sessions/:id status=200 duration_ms=[0-9.]+ agent=@log.a request_id=access-log-1$`)
	if !line.MatchString(got[0]) {
		t.Errorf("access-log line: %s", got[0])
	}
	if len(ws1) != 1 || !regexp.MustCompile(`method=GET route=/connect status=101 duration_ms=([5-9]\d|\d{3,})(\.\d+)? agent=@log.a`).MatchString(ws1[0]) {
		t.Errorf("WebSocket access-log lines (want one, with the connection's duration):\n%s", strings.Join(ws1, "\n"))
	}
	if strings.Contains(s.logs(), a.token) || strings.Contains(s.logs(), s.admin) {
		t.Errorf("a token appears in the log:\n%s", s.logs())
	}
}
