package integration

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestMetrics: /metrics needs the operator token and reports live
// connections and delivered events.
func TestMetrics(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t))
	if code, _ := request(t, "GET", s.url+"/metrics", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401", code)
	}
	a := s.provision("@m.a", "open")
	b := s.provision("@m.b", "open")
	bs := b.connect()
	sid := a.createSession(map[string]any{"invite": []string{"@m.b"}})
	bs.expect("session.invited")
	b.join(sid)
	a.send(sid, "hello")
	bs.expect("session.invited", "session.joined", "session.message") // the join restarts at 1

	// The writer counts an event once its write has returned, which can be
	// just after the client read it: scrape until the count is in.
	var body []byte
	for deadline := time.Now().Add(5 * time.Second); ; {
		var code int
		code, body = request(t, "GET", s.url+"/metrics", s.admin, nil)
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %s", code, body)
		}
		if regexp.MustCompile(`(?m)^aspd_events_delivered_total ([4-9]|\d\d+)$`).Match(body) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	value := func(name string) int64 {
		m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no %s in\n%s", name, body)
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return n
	}
	if got := value("aspd_connections"); got != 1 {
		t.Errorf("aspd_connections = %d, want 1", got)
	}
	if got := value("aspd_events_delivered_total"); got < 4 {
		t.Errorf("aspd_events_delivered_total = %d, want at least the 4 events b received", got)
	}
	if got := value("process_resident_memory_bytes"); got <= 0 {
		t.Errorf("process_resident_memory_bytes = %d", got)
	}
}
