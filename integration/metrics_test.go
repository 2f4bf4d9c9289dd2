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
		// The exposition writes large values in exponent notation (2.2e+07).
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no %s in\n%s", name, body)
		}
		f, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return int64(f)
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
	// Latency histograms: requests by route, method and status class, and
	// send-to-deliver for the events b received live.
	for _, re := range []string{
		`(?m)^aspd_http_request_duration_seconds_count\{method="POST",route="/sessions/:id/messages",status="2xx"\} 1$`,
		`(?m)^aspd_delivery_latency_seconds_count [1-9]`,
		`(?m)^aspd_build_info\{goversion="[^"]+",revision="[^"]*",version="[^"]+"\} 1$`,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("no match for %s in\n%s", re, body)
		}
	}
}
