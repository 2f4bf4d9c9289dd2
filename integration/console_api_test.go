package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The operator endpoints behind the web console, over HTTP on both stores:
// GET /admin/v1/health and GET /admin/v1/sessions/{id}/events/live.

func TestOperatorHealth(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@hp.alice", "open")
		b := s.provision("@hp.bob", "open")

		sample := func() map[string]json.RawMessage {
			t.Helper()
			code, body := s.adminDo("GET", "/health", nil)
			if code != http.StatusOK {
				t.Fatalf("GET /admin/v1/health: %d %s", code, body)
			}
			var m map[string]json.RawMessage
			mustUnmarshal(t, body, &m)
			return m
		}
		num := func(m map[string]json.RawMessage, k string) int64 {
			t.Helper()
			n, err := strconv.ParseInt(string(m[k]), 10, 64)
			if err != nil {
				t.Fatalf("health %s = %s", k, m[k])
			}
			return n
		}

		first := sample()
		for _, k := range []string{"sampled_at", "connections", "agents_online", "events_committed", "events_delivered", "slow_consumers", "live_transcripts"} {
			num(first, k)
		}
		var st struct{ Dialect, Status string }
		mustUnmarshal(t, first["store"], &st)
		wantDialect := "sqlite"
		if strings.HasPrefix(dbURL, "postgres") {
			wantDialect = "postgres"
		}
		// Chorus runs on the embedded store with a generated key, and is off
		// on PostgreSQL without one: the backlog is reported only when on.
		if raw, ok := first["chorus"]; ok != (wantDialect == "sqlite") {
			t.Fatalf("%s: chorus member %s (present %v)", wantDialect, raw, ok)
		} else if ok {
			var ch struct {
				Pending *int64 `json:"pending"`
				Oldest  *int64 `json:"oldest_pending_age_ms"`
			}
			mustUnmarshal(t, raw, &ch)
			if ch.Pending == nil || *ch.Pending != 0 || ch.Oldest == nil || *ch.Oldest != 0 {
				t.Fatalf("chorus backlog %s, want 0 pending", raw)
			}
		}
		if st.Dialect != wantDialect || st.Status != "ok" {
			t.Fatalf("store %s, want %s ok", first["store"], wantDialect)
		}

		// The counters are the live ones: a connection and three committed
		// events (message, invitation; then a message) move them.
		conn := b.connect()
		sid := a.createSession(map[string]any{"invite": []string{"@hp.bob"}, "initial_message": map[string]any{"content": "x"}})
		b.join(sid)
		a.send(sid, "y")
		in := newInbox(conn)
		for range 4 { // the connection is attached and has been written to
			in.next()
		}
		second := sample()
		if got := num(second, "connections"); got != 1 {
			t.Fatalf("connections = %d, want 1", got)
		}
		if got := num(second, "agents_online"); got != 1 {
			t.Fatalf("agents_online = %d, want 1", got)
		}
		if d := num(second, "events_committed") - num(first, "events_committed"); d != 4 {
			t.Fatalf("events_committed moved by %d, want 4 (invited, message, joined, message)", d)
		}
		if num(second, "sampled_at") < num(first, "sampled_at") {
			t.Fatal("sampled_at went back")
		}

		// Operator token only; no query parameters.
		code, body := request(t, "GET", s.url+"/admin/v1/health", "", nil)
		wantError(t, "health without a token", code, body, http.StatusUnauthorized, "unauthorized")
		code, body = request(t, "GET", s.url+"/admin/v1/health", a.token, nil)
		wantError(t, "health with an agent token", code, body, http.StatusUnauthorized, "unauthorized")
		code, body = s.adminDo("GET", "/health?verbose=1", nil)
		wantError(t, "health with a query", code, body, http.StatusBadRequest, "invalid_request")
	})
}

func TestOperatorLiveTranscript(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@lt.alice", "open")
		b := s.provision("@lt.bob", "open")
		sid := a.createSession(map[string]any{"invite": []string{"@lt.bob"}, "topic": "live", "initial_message": map[string]any{"content": "one"}})
		b.join(sid)
		path := "/admin/v1/sessions/" + sid + "/events/live"

		// next reads the next event and checks it: schema, id = sequence.
		next := func(c *sseClient, wantSeq int64, wantType string) event {
			t.Helper()
			it := c.next()
			e := decodeEvent(t, []byte(it.Data))
			if e.Sequence != wantSeq || e.Type != wantType || it.ID != strconv.FormatInt(wantSeq, 10) || e.SessionID != sid {
				t.Fatalf("live event id %s: %s #%d in %s, want %s #%d", it.ID, e.Type, e.Sequence, e.SessionID, wantType, wantSeq)
			}
			return e
		}

		// From the start: the whole log (the operator sees everything), then live.
		c := sseOpen(t, s, s.admin, path, nil)
		if cc := c.resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Fatalf("Cache-Control %q", cc)
		}
		next(c, 1, "session.message")
		next(c, 2, "session.invited")
		next(c, 3, "session.joined")
		seq := b.send(sid, "live two")
		if e := next(c, seq, "session.message"); !strings.Contains(string(e.Payload), "live two") {
			t.Fatalf("live message %s", e.Raw)
		}
		// A batch arrives in order, each event once.
		for i := range 5 {
			a.send(sid, fmt.Sprintf("burst %d", i))
		}
		for i := range 5 {
			next(c, seq+1+int64(i), "session.message")
		}
		c.quiet(400 * time.Millisecond)

		// Measured, not asserted: commit-to-stream latency of single
		// messages (the send's answer comes after the commit).
		var lat []time.Duration
		for range 20 {
			start := time.Now()
			timed := a.send(sid, "timed")
			it := c.next()
			lat = append(lat, time.Since(start))
			if it.ID != strconv.FormatInt(timed, 10) {
				t.Fatalf("timed message: id %s, want %d", it.ID, timed)
			}
			time.Sleep(time.Duration(37*len(lat)%250) * time.Millisecond) // spread over the poll phase
		}
		slices.Sort(lat)
		t.Logf("live transcript latency, send to receipt, 20 messages: median %v, max %v", lat[len(lat)/2], lat[len(lat)-1])
		seq += 5 + 20

		// Resuming after a sequence starts right after it.
		r := sseOpen(t, s, s.admin, path+"?after_sequence=3", nil)
		next(r, 4, "session.message")
		r.close()

		// A log longer than one read (100 events) comes whole, in order.
		for i := range 120 {
			a.send(sid, fmt.Sprintf("bulk %d", i))
		}
		all := sseOpen(t, s, s.admin, path, nil)
		last := seq + 120
		for q := int64(1); q <= last; q++ {
			it := all.next()
			if it.ID != strconv.FormatInt(q, 10) {
				t.Fatalf("bulk read: id %s, want %d", it.ID, q)
			}
		}
		all.quiet(300 * time.Millisecond)
		all.close()

		// Refusals: each a JSON error, no stream.
		for _, tc := range []struct {
			what, token, path string
			status            int
			code              string
		}{
			{"no token", "", path, http.StatusUnauthorized, "unauthorized"},
			{"an agent token", a.token, path, http.StatusUnauthorized, "unauthorized"},
			{"an unknown session", s.admin, "/admin/v1/sessions/sess_01M86CY12FHKM2MXSXFAPAZYQ7/events/live", http.StatusNotFound, "not_found"},
			{"a malformed session id", s.admin, "/admin/v1/sessions/nope/events/live", http.StatusNotFound, "not_found"},
			{"a negative after_sequence", s.admin, path + "?after_sequence=-1", http.StatusBadRequest, "invalid_request"},
			{"a non-numeric after_sequence", s.admin, path + "?after_sequence=x", http.StatusBadRequest, "invalid_request"},
			{"limit", s.admin, path + "?limit=5", http.StatusBadRequest, "invalid_request"},
			{"an unknown parameter", s.admin, path + "?token=" + s.admin, http.StatusBadRequest, "invalid_request"},
		} {
			cl, code, body := sseDial(t, s, tc.token, tc.path, nil)
			if cl != nil {
				cl.close()
				t.Fatalf("%s: the stream opened", tc.what)
			}
			wantError(t, tc.what, code, body, tc.status, tc.code)
		}

		// At most 64 live transcripts per server: the next is 429, with
		// Retry-After; closing one frees its slot.
		var open []*sseClient
		for range 63 { // c is open already
			open = append(open, sseOpen(t, s, s.admin, path+"?after_sequence="+strconv.FormatInt(last, 10), nil))
		}
		waitLiveTranscripts(t, s, 64)
		if cl, code, body := sseDial(t, s, s.admin, path, nil); cl != nil {
			cl.close()
			t.Fatal("a 65th live transcript opened")
		} else {
			wantError(t, "the 65th live transcript", code, body, http.StatusTooManyRequests, "rate_limited")
		}
		open[0].close()
		waitLiveTranscripts(t, s, 63)
		open[0] = sseOpen(t, s, s.admin, path+"?after_sequence="+strconv.FormatInt(last, 10), nil)

		// Shutting aspd down ends the streams.
		s.stop()
		for _, cl := range append(open, c) {
			select {
			case <-cl.done:
			case <-time.After(10 * time.Second):
				t.Fatal("a live transcript outlived the server")
			}
		}
	})
}

// TestConsoleServedSafely checks, through the real binary, the headers the
// console's security model rests on (docs/console.md): the CSP and its
// companions on the pages, and no CORS grant on the operator API, so that
// another site's page cannot send the bearer header the API requires.
func TestConsoleServedSafely(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/aspd.db")
	for _, path := range []string{"/console/", "/console/main.js", "/console/nope"} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Fatalf("%s: %d, headers %v", path, resp.StatusCode, resp.Header)
		}
	}

	// A cross-site preflight for the Authorization header is not granted.
	req, _ := http.NewRequest(http.MethodOptions, s.url+"/admin/v1/agents", nil)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Fatalf("the operator API answers a cross-site preflight with %s: %v", k, resp.Header)
		}
	}
	// And a request without the header (what a forged form or image makes) is refused.
	code, body := request(t, "POST", s.url+"/admin/v1/agents", "", map[string]any{"handle": "@evil.agent"})
	wantError(t, "a forged create", code, body, http.StatusUnauthorized, "unauthorized")
}
