package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestRateLimits: with --contact-rate/--message-rate set, an agent's burst
// is honoured, the next request is 429 rate_limited with Retry-After and
// changes nothing, and other agents are unaffected. Off by default.
func TestRateLimits(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t), "--contact-rate", "0.5", "--contact-burst", "2", "--message-rate", "0.5", "--message-burst", "3")
	a := s.provision("@r.a", "open")
	b := s.provision("@r.b", "open")
	c := s.provision("@r.c", "open")

	sid := a.createSession(map[string]any{"invite": []string{"@r.b"}})
	a.createSession(map[string]any{})
	code, body := a.do("POST", "/sessions", map[string]any{"invite": []string{"@r.c"}})
	wantError(t, "third contact attempt", code, body, http.StatusTooManyRequests, "rate_limited")
	code, body = a.do("POST", "/sessions/"+sid+"/invite", map[string]any{"invite": []string{"@r.c"}})
	wantError(t, "invite over the limit", code, body, http.StatusTooManyRequests, "rate_limited")
	if rows := c.mySessions(); len(rows) != 0 {
		t.Fatalf("a refused contact attempt reached @r.c: %+v", rows)
	}
	// Another agent has its own bucket.
	b.createSession(map[string]any{})

	for i := 0; i < 3; i++ {
		a.send(sid, "m")
	}
	code, body = a.do("POST", "/sessions/"+sid+"/messages", map[string]any{"content": "one too many"})
	wantError(t, "fourth message", code, body, http.StatusTooManyRequests, "rate_limited")
	if evs := a.events(sid); len(evs) != 4 { // invited + 3 messages
		t.Fatalf("log has %d events after a refused message, want 4", len(evs))
	}
	req, _ := http.NewRequest("POST", s.url+"/sessions/"+sid+"/messages", strings.NewReader(`{"content":"again"}`))
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After: %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
