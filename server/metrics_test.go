package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestMetricLabelsClosed sends 10,000 requests with invented methods and
// paths, without a token, and checks that the request histogram gains no
// series from them: every label comes from a closed set ("other" for a
// non-standard method, "unmatched" for an unknown path).
func TestMetricLabelsClosed(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		u, err := url.Parse(e.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		// One keep-alive connection, as the probe used: raw HTTP/1.1, since
		// net/http's client would refuse some of these methods.
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rd := bufio.NewReader(conn)
		send := func(method, path string) int {
			t.Helper()
			if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n", method, path); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(rd, nil)
			if err != nil {
				t.Fatalf("%.40s %.40s: %v", method, path, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		// Warm up every label the flood can reach: an unknown method and an
		// unknown path, each once.
		send("FOO0", "/healthz")
		send("GET", "/nope/0")
		requestSeries(t, e) // so that the scrape's own series exists
		before := requestSeries(t, e)

		long := strings.Repeat("A", 2000)
		for i := 0; i < 5000; i++ {
			if st := send(fmt.Sprintf("M%06d%s", i, long), "/healthz"); st >= 500 {
				t.Fatalf("invented method answered %d", st)
			}
			if st := send("GET", fmt.Sprintf("/nope/%d/%s", i, long[:100])); st != http.StatusNotFound {
				t.Fatalf("unknown path answered %d, want 404", st)
			}
		}
		after := requestSeries(t, e)
		if len(after) != len(before) {
			t.Fatalf("request series grew from %d to %d under invented methods and paths", len(before), len(after))
		}
		var sawOther, sawUnmatched bool
		for _, s := range after {
			if strings.Contains(s, "M0000") || strings.Contains(s, "/nope") || strings.Contains(s, "FOO") {
				t.Fatalf("a label taken from the request: %s", s)
			}
			sawOther = sawOther || strings.Contains(s, `method="other"`)
			sawUnmatched = sawUnmatched || strings.Contains(s, `route="unmatched"`)
		}
		if !sawOther || !sawUnmatched {
			t.Fatalf("want method=\"other\" and route=\"unmatched\" series, got %q", after)
		}
	})
}

// requestSeries returns the request histogram's series, one _count line
// each, from GET /metrics.
func requestSeries(t *testing.T, e *env) []string {
	t.Helper()
	r := e.must(http.StatusOK, "GET", "/metrics", adminToken, nil, nil)
	var out []string
	for _, line := range strings.Split(string(r.Body), "\n") {
		if strings.HasPrefix(line, "aspd_http_request_duration_seconds_count{") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatal("no aspd_http_request_duration_seconds series")
	}
	return out
}
