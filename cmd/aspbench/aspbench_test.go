package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/aspclient"
	"github.com/aspd/aspd/internal/aspdtest"
)

var aspdBin string

func TestMain(m *testing.M) {
	bin, cleanup := aspdtest.MustBuild()
	aspdBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// ---- histogram ----

func TestHistogramSmallValuesAreExact(t *testing.T) {
	h := newHistogram()
	for v := 1; v <= 1000; v++ {
		h.Record(time.Duration(v))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500}, {0.9, 900}, {0.99, 990}, {0.999, 999}, {1, 1000}, {0, 1}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %d, want %d", c.q, got, c.want)
		}
	}
	s := h.Summary()
	if s.Count != 1000 || s.Max != 0.001 || s.Mean != 0.001 {
		t.Errorf("summary %+v, want count 1000, max 0.001ms, mean 0.0005ms rounded to 0.001", s)
	}
}

func TestHistogramPercentilesWithinPrecision(t *testing.T) {
	h := newHistogram()
	const n = 100000
	for i := 1; i <= n; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := float64(time.Duration(math.Ceil(q*n)) * time.Microsecond)
		got := float64(h.Quantile(q))
		if rel := math.Abs(got-want) / want; rel > 0.001 {
			t.Errorf("Quantile(%v) = %v, want %v within 0.1%% (off by %.4f%%)", q, time.Duration(got), time.Duration(want), rel*100)
		}
	}
	s := h.Summary()
	if s.Count != n || s.Min != 0.001 || s.Max != 100 {
		t.Errorf("count/min/max = %d/%v/%v, want %d/0.001/100 (exact)", s.Count, s.Min, s.Max, n)
	}
	if s.Mean != 50.0005 && math.Abs(s.Mean-50.0005) > 0.001 {
		t.Errorf("mean = %v ms, want 50.0005", s.Mean)
	}
	if s.P50 < 49.95 || s.P50 > 50.05 || s.P99 < 98.9 || s.P99 > 99.1 {
		t.Errorf("summary p50=%v p99=%v", s.P50, s.P99)
	}
}

func TestHistogramTail(t *testing.T) {
	// 990 fast answers and 10 slow ones: p99 is fast, p99.9 and max are slow.
	h := newHistogram()
	for i := 0; i < 990; i++ {
		h.Record(time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		h.Record(100 * time.Millisecond)
	}
	if got := h.Quantile(0.99); math.Abs(float64(got-time.Millisecond)) > 0.001*float64(time.Millisecond) {
		t.Errorf("p99 = %v, want 1ms", got)
	}
	if got := h.Quantile(0.999); math.Abs(float64(got-100*time.Millisecond)) > 0.001*float64(100*time.Millisecond) {
		t.Errorf("p99.9 = %v, want 100ms", got)
	}
	if got := h.Quantile(1); got != 100*time.Millisecond {
		t.Errorf("max = %v, want exactly 100ms", got)
	}
	if got := newHistogram().Quantile(0.5); got != 0 {
		t.Errorf("empty histogram p50 = %v, want 0", got)
	}
}

func TestHistogramBuckets(t *testing.T) {
	// Every value lies in its bucket, buckets are contiguous, and no bucket
	// above the exact range is wider than 1/512 of its lower bound.
	prevHi := int64(-1)
	for i := 0; i < histIndex(histMax-1); i++ {
		lo, hi := histBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if lo >= 1<<histSubBits && float64(hi-lo+1)/float64(lo) > 1.0/512 {
			t.Fatalf("bucket %d [%d, %d] is wider than 1/512", i, lo, hi)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d [%d, %d]: index(lo)=%d index(hi)=%d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		prevHi = hi
	}
}

// ---- loopback guard ----

func TestLoopbackGuard(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:8080", "http://192.168.1.1", "http://example.com", "https://example.com:443",
		"http://0.0.0.0:8080", "http://[2001:db8::1]:80", "http://localhost.example.com", "http://127.0.0.1.nip.io", "ftp://127.0.0.1", "127.0.0.1:8080"} {
		if err := checkLoopback(u); err == nil {
			t.Errorf("checkLoopback(%q) accepted a non-loopback target", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1", "http://127.0.0.1:8080", "http://127.9.8.7:1", "http://[::1]:8080", "http://localhost:8080", "http://LOCALHOST", "https://127.0.0.1:8443/"} {
		if err := checkLoopback(u); err != nil {
			t.Errorf("checkLoopback(%q) = %v, want accepted", u, err)
		}
	}
}

func TestRunRefusesNonLoopbackServer(t *testing.T) {
	for _, host := range []string{"http://10.0.0.1:8080", "http://192.168.1.1:8080", "http://example.com"} {
		var out, errb bytes.Buffer
		code := run([]string{"--server", host, "--admin-token", "x", "chat"}, &out, &errb)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2", host, code)
		}
		if !strings.Contains(errb.String(), "not a loopback address") {
			t.Errorf("%s: stderr %q does not explain the refusal", host, errb.String())
		}
		if out.Len() != 0 {
			t.Errorf("%s: stdout %q, want nothing", host, out.String())
		}
	}
}

func TestRunUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"chat"}, // no token, no seed
		{"--admin-token", "x"},
		{"--admin-token", "x", "nosuch"},
		{"--admin-token", "x", "chat", "--participants", "1"},
		{"--admin-token", "x", "chat", "--sessions", "2", "--participants", "3", "--agents", "7"},
		{"--admin-token", "x", "fanout", "--rate", "0"},
		{"--admin-token", "x", "chat", "extra"},
		{"--admin-token", "x", "--duration", "5s", "fanout"},
		{"--admin-token", "x", "replay", "--duration", "5s"},
		{"--admin-token", "x", "chat", "--connect-wave", "0"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %s)", args, code, errb.String())
		}
	}
}

// ---- stream checks ----

func TestSessTrackOrder(t *testing.T) {
	const me = "@a.me"
	type ev struct {
		seq     int64
		typ     string
		subject string
	}
	cases := []struct {
		name       string
		expectFrom int64
		events     []ev
		want       []string // outcome per event
		fresh      []bool
	}{
		{"in order", 1, []ev{{1, "session.invited", "@a.x"}, {2, "session.message", ""}, {3, "session.message", ""}},
			[]string{"", "", ""}, []bool{true, true, true}},
		{"gap", 1, []ev{{1, "m", ""}, {2, "m", ""}, {4, "m", ""}, {5, "m", ""}},
			[]string{"", "", kindGap, ""}, []bool{true, true, true, true}},
		{"duplicate", 1, []ev{{1, "m", ""}, {2, "m", ""}, {2, "m", ""}, {3, "m", ""}},
			[]string{"", "", kindDuplicate, ""}, []bool{true, true, false, true}},
		{"reorder", 1, []ev{{1, "m", ""}, {2, "m", ""}, {4, "m", ""}, {3, "m", ""}},
			[]string{"", "", kindGap, kindReorder}, []bool{true, true, true, false}},
		{"starts late", 1, []ev{{3, "m", ""}, {4, "m", ""}},
			[]string{kindGap, ""}, []bool{true, true}},
		{"join restart before own joined", 1, []ev{{1, "session.invited", "@a.x"}, {2, "session.invited", me}, {3, "session.joined", "@a.x"},
			{1, "session.invited", "@a.x"}, {2, "session.invited", me}, {3, "session.joined", "@a.x"}, {4, "session.joined", me}, {5, "m", ""}},
			[]string{"", "", "", outcomeRestart, "", "", "", ""}, []bool{true, true, true, false, false, false, true, true}},
		{"no restart after own joined", 1, []ev{{1, "session.invited", me}, {2, "session.joined", me}, {3, "m", ""}, {1, "m", ""}},
			[]string{"", "", "", kindReorder}, []bool{true, true, true, false}},
		{"reconnect resumes after the cursor", 5, []ev{{5, "m", ""}, {6, "m", ""}},
			[]string{"", ""}, []bool{true, true}},
		{"reconnect redelivers (at-least-once)", 5, []ev{{4, "m", ""}, {5, "m", ""}, {6, "m", ""}},
			[]string{outcomeRedelivered, "", ""}, []bool{false, true, true}},
		{"reconnect skips", 5, []ev{{7, "m", ""}},
			[]string{kindGap}, []bool{true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &sessTrack{expectFrom: c.expectFrom, maxSeen: c.expectFrom - 1}
			for i, e := range c.events {
				fresh, outcome, _ := st.observe(e.seq, e.typ, e.subject, me)
				if outcome != c.want[i] || fresh != c.fresh[i] {
					t.Errorf("event %d (seq %d): outcome %q fresh %v, want %q fresh %v", i, e.seq, outcome, fresh, c.want[i], c.fresh[i])
				}
			}
		})
	}
}

// A wrong stream fails the run: events fed to a connection's checks end up
// as failures in the report.
func TestChecksFailTheRun(t *testing.T) {
	o := defaultOptions()
	b := newBench(o, "chat", io.Discard)
	a := &agent{handle: "@t.a", token: "x"}
	c := b.newConn(a, nil)
	c.expect("sess_1", 1)
	msg := func(seq, id int64) []byte {
		return []byte(fmt.Sprintf(`{"type":"session.message","session_id":"sess_1","event_id":"e%d","sequence":%d,"created_at":1,"payload":{"sender":"@t.b","content":[{"type":"data","data":{"bench":{"run":%q,"id":%d,"t":1}}}]}}`, seq, seq, b.runID, id))
	}
	c.receive(msg(1, 1), time.Millisecond)
	c.receive(msg(3, 3), time.Millisecond)
	c.receive(msg(3, 3), time.Millisecond)
	c.receive([]byte(`{"nope":1}`), time.Millisecond)
	s := &session{id: "sess_1", creator: a, members: []*agent{a}}
	for _, id := range []int64{1, 2, 3} {
		s.tally.add(id, id)
	}
	b.verifySessions([]*session{s}, map[*agent]*wsConn{a: c})
	b.finish(nil)
	r := b.rep
	if r.OK {
		t.Fatal("report OK despite a gap, a duplicate, a malformed event and a missing message")
	}
	got := r.Correctness
	if got.Gaps != 1 || got.Duplicates != 1 || got.MalformedEvents != 1 || got.Missing != 1 {
		t.Errorf("correctness %+v, want 1 gap, 1 duplicate, 1 malformed, 1 missing", got)
	}
	if len(r.Failures) != 4 {
		t.Errorf("failures %q, want 4", r.Failures)
	}
	var out bytes.Buffer
	writeTable(&out, r)
	if !strings.Contains(out.String(), "FAILED") {
		t.Errorf("table does not say FAILED:\n%s", out.String())
	}
}

func TestParseSeed(t *testing.T) {
	got, err := parseSeed([]byte(`{"@z.one": {"token": "t1", "inbound_policy": "open", "allowlist": []}, "@a.two": "t2", "@m.three": {"token": "t3"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []agent{{handle: "@z.one", token: "t1"}, {handle: "@a.two", token: "t2"}, {handle: "@m.three", token: "t3"}}
	if len(got) != len(want) {
		t.Fatalf("got %d agents, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].handle != want[i].handle || got[i].token != want[i].token {
			t.Errorf("agent %d = %+v, want %+v (file order)", i, *got[i], want[i])
		}
	}
	for _, bad := range []string{`[]`, `{"@a.b": ""}`, `{"@a.b": {"inbound_policy": "open"}}`, `{"nohandle": "t"}`, `{"@a.b": "t", "@a.b": "u"}`, `{"@a.b": "t"} x`} {
		if _, err := parseSeed([]byte(bad)); err == nil {
			t.Errorf("parseSeed(%s) accepted it", bad)
		}
	}
}

// ---- end to end against a real aspd ----

type aspdProc struct {
	url   string
	admin string
	proc  *aspdtest.Process
	log   aspdtest.Log
}

// startAspd starts aspd on the embedded store on a fresh loopback port.
func startAspd(t *testing.T, extra ...string) *aspdProc {
	t.Helper()
	p := &aspdProc{admin: fmt.Sprintf("admin-%d-token", time.Now().UnixNano())}
	args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, extra...)
	proc, err := aspdtest.Start(aspdBin, args, []string{"ASPD_ADMIN_TOKEN=" + p.admin}, &p.log)
	if err != nil {
		t.Fatalf("%v:\n%s", err, p.log.String())
	}
	p.proc, p.url = proc, proc.URL
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			t.Logf("aspd log (tail):\n%s", tail(p.log.String(), 60))
		}
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// result is the part of the JSON document the tests read.
type result struct {
	Scenario     string                    `json:"scenario"`
	OK           bool                      `json:"ok"`
	Failures     []string                  `json:"failures"`
	Provisioning string                    `json:"provisioning"`
	Machine      Machine                   `json:"machine"`
	Parameters   map[string]any            `json:"parameters"`
	Figures      map[string]float64        `json:"figures"`
	Latency      map[string]LatencySummary `json:"latency_ms"`
	Correctness  Correctness               `json:"correctness"`
	Errors       ErrorsReport              `json:"errors"`
	Server       *serverProc               `json:"server_process"`
	MachineCPU   *MachineCPU               `json:"machine_cpu"`
}

// bench runs aspbench with --json and returns the exit code and document.
func runBench(t *testing.T, args ...string) (int, result, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"--json", "--timeout", "90s"}, args...), &out, &errb)
	var r result
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("stdout is not the JSON document: %v\n%s", err, out.String())
		}
	}
	return code, r, errb.String()
}

// requireOK asserts a clean run: exit 0, ok, no failures, every check zero,
// no failed request, and the machine described.
func requireOK(t *testing.T, code int, r result, stderr string, scenario string, connections int) {
	t.Helper()
	if code != 0 || !r.OK || len(r.Failures) != 0 {
		t.Fatalf("exit %d ok=%v failures=%q\nstderr:\n%s", code, r.OK, r.Failures, stderr)
	}
	if r.Scenario != scenario {
		t.Errorf("scenario %q, want %q", r.Scenario, scenario)
	}
	c := r.Correctness
	if c.Gaps+c.Reorders+c.Duplicates+c.Missing+c.Mismatched+c.UnexpectedCloses+c.MalformedEvents+c.Incomplete != 0 {
		t.Errorf("correctness errors: %+v", c)
	}
	if c.Connections != connections {
		t.Errorf("correctness.connections = %d, want %d", c.Connections, connections)
	}
	if r.Errors.Total != 0 {
		t.Errorf("errors: %+v", r.Errors)
	}
	if r.Machine.Cores < 1 || r.Machine.MemoryBytes <= 0 {
		t.Errorf("machine %+v", r.Machine)
	}
}

func positive(t *testing.T, r result, names ...string) {
	t.Helper()
	for _, n := range names {
		if v, ok := r.Figures[n]; !ok || !(v > 0) {
			t.Errorf("figure %s = %v (present %v), want > 0; figures %v", n, v, ok, r.Figures)
		}
	}
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aspd")
	}
	srv := startAspd(t)
	pid := fmt.Sprint(srv.proc.PID())
	common := []string{"--server", srv.url, "--admin-token", srv.admin}

	t.Run("chat closed loop", func(t *testing.T) {
		code, r, stderr := runBench(t, append(common, "chat", "--sessions", "2", "--participants", "3", "--duration", "2s", "--warmup", "500ms", "--concurrency", "4")...)
		requireOK(t, code, r, stderr, "chat", 6)
		positive(t, r, "accepted_msgs_per_s", "delivered_events_per_s", "messages_accepted", "messages_measured")
		lat := r.Latency["send_to_deliver"]
		if lat.Count == 0 || lat.P50 <= 0 || lat.Max < lat.P99 || lat.P99 < lat.P50 {
			t.Errorf("send_to_deliver %+v", lat)
		}
		// Each measured message reaches the 2 other participants.
		if got, want := r.Figures["deliveries_measured"], 2*r.Figures["messages_measured"]; got != want {
			t.Errorf("deliveries_measured %v, want %v", got, want)
		}
		if r.Provisioning != "admin" {
			t.Errorf("provisioning %q", r.Provisioning)
		}
	})

	t.Run("chat open loop", func(t *testing.T) {
		code, r, stderr := runBench(t, append(common, "chat", "--sessions", "2", "--participants", "3", "--duration", "1s", "--warmup", "500ms", "--rate", "100")...)
		requireOK(t, code, r, stderr, "chat", 6)
		positive(t, r, "accepted_msgs_per_s", "delivered_events_per_s", "target_msgs_per_s")
		// 1.5s at 100/s on a fixed schedule: exactly 150 messages, 100 measured.
		if r.Figures["scheduled_msgs"] != 150 || r.Figures["messages_accepted"] != 150 || r.Figures["messages_measured"] != 100 {
			t.Errorf("open loop counts: %v", r.Figures)
		}
		if r.Latency["send_start_lag"].Count != 100 {
			t.Errorf("send_start_lag %+v", r.Latency["send_start_lag"])
		}
	})

	t.Run("chat open loop --timeline", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "timeline.jsonl")
		code, r, stderr := runBench(t, append(common, "chat", "--sessions", "2", "--participants", "3", "--duration", "1s", "--warmup", "500ms", "--rate", "100", "--timeline", path)...)
		requireOK(t, code, r, stderr, "chat", 6)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := readMessages(f)
		f.Close()
		if err != nil || len(msgs) != 100 {
			t.Fatalf("%d messages in the timeline (%v), want the 100 measured", len(msgs), err)
		}
		now := time.Now().UnixMicro()
		for i, m := range msgs {
			// Messages 50..149 (the first 50 are the warm-up), 10 ms apart.
			if m.N != int64(50+i) || m.Session != int(m.N%2) || m.Deliveries != 2 {
				t.Fatalf("message %d: %+v", i, m)
			}
			if i > 0 && m.Sched-msgs[i-1].Sched != 10000 {
				t.Errorf("message %d scheduled %d µs after the previous, want 10000", i, m.Sched-msgs[i-1].Sched)
			}
			if !(m.Sched <= m.Post && m.Post < m.Accepted && m.Post < m.Delivered) || now-m.Sched > 60e6 || m.Sched > now {
				t.Errorf("message %d: times out of order or not wall-clock µs: %+v (now %d)", i, m, now)
			}
		}
		// The POSTs carried their X-Request-Id, which aspd logs.
		if !strings.Contains(srv.log.String(), "request_id="+msgs[0].RequestID+"\n") {
			t.Errorf("aspd's log has no request_id=%s", msgs[0].RequestID)
		}
		logPath := filepath.Join(t.TempDir(), "aspd.log")
		if err := os.WriteFile(logPath, []byte(srv.log.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := run([]string{"timeline", "--messages", path, "--aspd-log", logPath, "--slow", "1us"}, &out, &errb); code != 0 {
			t.Fatalf("timeline: exit %d: %s", code, errb.String())
		}
		if !strings.Contains(out.String(), "messages measured: 100,") || !strings.Contains(out.String(), "slow (send-to-deliver over 1µs): 100 ") ||
			!strings.Contains(out.String(), "aspd's access log (X-Request-Id): 100 of 100 slow messages found") {
			t.Errorf("timeline report:\n%s", out.String())
		}
	})

	t.Run("fanout", func(t *testing.T) {
		code, r, stderr := runBench(t, append(common, "fanout", "--participants", "20", "--messages", "5", "--rate", "20")...)
		requireOK(t, code, r, stderr, "fanout", 20)
		positive(t, r, "delivered_events_per_s", "initial_sync_events_per_s")
		if r.Figures["messages_accepted"] != 5 || r.Figures["deliveries"] != 5*19 {
			t.Errorf("figures %v, want 5 messages and 95 deliveries", r.Figures)
		}
		if l := r.Latency["last_recipient"]; l.Count != 5 || l.P50 <= 0 || l.Max < r.Latency["first_recipient"].Max {
			t.Errorf("last_recipient %+v first_recipient %+v", l, r.Latency["first_recipient"])
		}
	})

	t.Run("replay", func(t *testing.T) {
		code, r, stderr := runBench(t, append(common, "replay", "--sessions", "3", "--events", "60")...)
		requireOK(t, code, r, stderr, "replay", 3)
		positive(t, r, "replay_ms", "replay_events_per_s", "accumulate_msgs_per_s")
		if r.Figures["messages_missed"] != 60 {
			t.Errorf("messages_missed %v, want 60", r.Figures["messages_missed"])
		}
		// 60 messages plus, per session, the agent's session.disconnected
		// and session.reconnected.
		if got := r.Figures["events_replayed"]; got < 60 || got > 66 {
			t.Errorf("events_replayed %v, want 60..66", got)
		}
		if r.Figures["sessions_with_reconnected_event"] != 3 {
			t.Errorf("sessions_with_reconnected_event %v, want 3", r.Figures["sessions_with_reconnected_event"])
		}
		if r.Correctness.Redelivered != 0 {
			t.Errorf("redelivered %d after a normal close, want 0", r.Correctness.Redelivered)
		}
	})

	t.Run("idle", func(t *testing.T) {
		code, r, stderr := runBench(t, append(common, "--pid", pid, "--duration", "500ms", "idle", "--connections", "50")...)
		requireOK(t, code, r, stderr, "idle", 50)
		positive(t, r, "connections", "connects_per_s", "server_rss_after_bytes")
		if r.Figures["connections"] != 50 || r.Figures["server_reported_connections"] != 50 || r.Figures["pings_failed"] != 0 {
			t.Errorf("figures %v", r.Figures)
		}
		if _, ok := r.Figures["server_rss_per_connection_bytes"]; !ok {
			t.Errorf("no server_rss_per_connection_bytes in %v", r.Figures)
		}
		if r.Server == nil || r.Server.Before == nil || r.Server.After == nil || r.Server.After.OpenFiles < 50 {
			t.Errorf("server process %+v", r.Server)
		}
		// The whole machine is at least as busy as the server (within the
		// 10 ms ticks of /proc), and no busier than its cores.
		if m := r.MachineCPU; m == nil || m.BusyCores <= 0 || m.BusyCores > float64(r.Machine.Cores)+0.1 ||
			r.Server != nil && m.BusyCores+0.1 < r.Server.CPUCores || m.OtherCores < 0 {
			t.Errorf("machine cpu %+v (server %+v, %d cores)", r.MachineCPU, r.Server, r.Machine.Cores)
		}
		if r.Latency["handshake"].Count != 50 {
			t.Errorf("handshake %+v", r.Latency["handshake"])
		}
	})

	t.Run("cleanup deleted the agents", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := run(append(common, "--json", "--keep-agents", "replay", "--sessions", "1", "--events", "1"), &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		// Only the agents of the --keep-agents run are left: every other
		// run deleted its own.
		admin, err := aspclient.NewAdmin(srv.url, srv.admin)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Agents []struct {
				Handle string `json:"handle"`
			} `json:"agents"`
		}
		if err := admin.Do(t.Context(), "GET", "/agents", nil, nil, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Agents) != 2 {
			t.Errorf("%d agents left, want the 2 of the --keep-agents run: %v", len(r.Agents), r.Agents)
		}
	})
}

func TestEndToEndSeed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts aspd")
	}
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.json")
	var parts []string
	for i := 1; i <= 6; i++ {
		if i%2 == 0 {
			parts = append(parts, fmt.Sprintf(`"@seed.a%d": "tok-seed-agent-%d-0123456789"`, i, i))
		} else {
			parts = append(parts, fmt.Sprintf(`"@seed.a%d": {"token": "tok-seed-agent-%d-0123456789", "inbound_policy": "open"}`, i, i))
		}
	}
	if err := os.WriteFile(seed, []byte("{"+strings.Join(parts, ", ")+"}"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startAspd(t, "--seed", seed)
	base := []string{"--server", srv.url, "--seed", seed}

	code, r, stderr := runBench(t, append(base, "chat", "--sessions", "2", "--participants", "3", "--duration", "1s", "--warmup", "200ms", "--concurrency", "2")...)
	requireOK(t, code, r, stderr, "chat", 6)
	positive(t, r, "accepted_msgs_per_s", "delivered_events_per_s")
	if r.Provisioning != "seed" {
		t.Errorf("provisioning %q, want seed", r.Provisioning)
	}
	// The same agents again: the previous run's sessions were ended, and
	// the new sessions are checked from sequence 1 all the same.
	code, r, stderr = runBench(t, append(base, "replay", "--sessions", "2", "--events", "20")...)
	requireOK(t, code, r, stderr, "replay", 3)

	// Too few agents in the seed file is a usage error.
	var out, errb bytes.Buffer
	if code := run(append(base, "chat", "--sessions", "3", "--participants", "3"), &out, &errb); code != 2 {
		t.Errorf("9 agents from a seed of 6: exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), "holds 6 agents") {
		t.Errorf("stderr %q does not say the seed is too small", errb.String())
	}
}

// --server may list several nodes; each must be a loopback URL, and agents
// are spread over them round-robin (requests with their tokens and their
// connections go to their node; operator requests to the first).
func TestSeveralServers(t *testing.T) {
	if got := splitServers(" http://127.0.0.1:1/, http://127.0.0.1:2,,"); fmt.Sprint(got) != "[http://127.0.0.1:1 http://127.0.0.1:2]" {
		t.Fatalf("split %v", got)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--server", "http://127.0.0.1:1,http://example.com:2", "chat"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "loopback") {
		t.Fatalf("a non-loopback second node: exit %d, %s", code, errb.String())
	}
	o := defaultOptions()
	o.server, o.servers = "http://127.0.0.1:1", []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}
	b := newBench(o, "chat", io.Discard)
	b.agents = []*agent{{handle: "@a.a", token: "ta"}, {handle: "@b.b", token: "tb"}, {handle: "@c.c", token: "tc"}}
	if err := b.spreadAgents(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:1"} {
		if a := b.agents[i]; a.node != want || a.api == nil || a.ws == nil {
			t.Fatalf("agent %s on %q (clients %v, %v), want %s", a.handle, a.node, a.api != nil, a.ws != nil, want)
		}
	}
	if serverList(o) != "http://127.0.0.1:1,http://127.0.0.1:2" {
		t.Fatalf("report server %q", serverList(o))
	}
}
