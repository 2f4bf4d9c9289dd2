package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// t0 is a whole second, so that PostgreSQL's millisecond stamps are exact.
var t0 = time.Date(2026, 11, 27, 22, 10, 6, 0, time.UTC).UnixMicro()

// pgLine is a duration line of PostgreSQL's log, logged at t0+atUs (a
// whole millisecond).
func pgLine(db string, atUs int64, durMs string, text string) string {
	return fmt.Sprintf("%s [1234] postgres@%s LOG:  duration: %s ms  %s",
		wallUs(t0+atUs).Format("2006-01-02 15:04:05.000 MST"), db, durMs, text)
}

// gcLine is a stamped gctrace line read at t0+stampUs, whose three clock
// phases are given.
func gcLine(n int, stampUs int64, clock string) string {
	return fmt.Sprintf("%d\tgc %d @%.3fs 2%%: %s ms clock, 0.036+0.5/10/20+0.006 ms cpu, 43->45->22 MB, 46 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		t0+stampUs, n, float64(n), clock)
}

// msg is a message scheduled at t0+sched, its POST started at t0+post, its
// 201 at t0+acc and its last delivery at t0+del (all µs).
func msg(n, sched, post, acc, del int64) tlMessage {
	return tlMessage{N: n, Sched: t0 + sched, Post: t0 + post, Accepted: t0 + acc, Delivered: t0 + del, Deliveries: 2, RequestID: fmt.Sprintf("bench-r-%d", n)}
}

func TestTimelineAttribution(t *testing.T) {
	const slow = 10 * time.Millisecond
	for _, tc := range []struct {
		name   string
		msg    tlMessage
		gc     []string // stamped aspd log lines
		pg     []string // PostgreSQL log lines
		slow   bool
		causes cause
		phase  phase
	}{
		{name: "fast: exactly --slow is not over it",
			msg: msg(1, 0, 0, 9000, 10000), gc: []string{gcLine(1, 5000, "0.1+2+0.1")}},
		{name: "slow, nothing overlaps",
			msg: msg(1, 0, 100, 9000, 10001), slow: true, phase: phaseAccept},
		{name: "slow in delivery, nothing overlaps",
			msg: msg(1, 0, 100, 2000, 15000), slow: true, phase: phaseDelivery},
		{name: "sender late: over slow/2",
			msg: msg(1, 0, 5001, 9000, 12000), slow: true, causes: causeLate, phase: phaseAccept},
		{name: "sender not late: exactly slow/2",
			msg: msg(1, 0, 5000, 9000, 12000), slow: true, phase: phaseAccept},
		// GC cycle of 0.5+20+0.5 = 21 ms, stamped at 40 ms: [19 ms, 40 ms].
		{name: "gc spans back from its stamp: message after the stamp",
			msg: msg(1, 40001, 40001, 50001, 60000), gc: []string{gcLine(1, 40000, "0.5+20+0.5")}, slow: true, phase: phaseAccept},
		{name: "gc touching the message's start",
			msg: msg(1, 40000, 40001, 50000, 60000), gc: []string{gcLine(1, 40000, "0.5+20+0.5")}, slow: true, causes: causeGC, phase: phaseAccept},
		{name: "gc touching the message's last delivery",
			msg: msg(1, 5000, 5000, 8000, 19000), gc: []string{gcLine(1, 40000, "0.5+20+0.5")}, slow: true, causes: causeGC, phase: phaseDelivery},
		{name: "gc ends 1 µs before the message's end... starts 1 µs after it",
			msg: msg(1, 5000, 5000, 8000, 18999), gc: []string{gcLine(1, 40000, "0.5+20+0.5")}, slow: true, phase: phaseDelivery},
		{name: "gc wholly inside the message",
			msg: msg(1, 0, 100, 2000, 60000), gc: []string{gcLine(1, 40000, "0.5+20+0.5")}, slow: true, causes: causeGC, phase: phaseDelivery},
		{name: "gc line in another line's output (no stamp) is not placed",
			msg: msg(1, 0, 100, 2000, 60000), gc: []string{strings.SplitN(gcLine(1, 40000, "0.5+20+0.5"), "\t", 2)[1]}, slow: true, phase: phaseDelivery},
		{name: "gc line cut by another thread's line",
			msg: msg(1, 0, 100, 2000, 60000), gc: []string{
				fmt.Sprintf("%d\tgc 7 @3.000s 2%%: time=2026-11-27T22:10:06.030Z level=INFO msg=request", t0+30000),
				fmt.Sprintf("%d\t0.5+20+0.5 ms clock, 1+1/1/1+1 ms cpu, 4->4->2 MB, 4 MB goal, 2 P", t0+40000)},
			slow: true, causes: causeGC, phase: phaseDelivery},
		{name: "gc line cut inside its clock part, over several lines",
			msg: msg(1, 0, 100, 2000, 60000), gc: []string{
				fmt.Sprintf("%d\tgc 7 @3.000s 2%%: 0.5+20+0.5time=2026-11-27T22:10:06.030Z level=INFO msg=request duration_ms=3 request_id=x", t0+30000),
				fmt.Sprintf("%d\ttime=2026-11-27T22:10:06.030Z level=INFO msg=request duration_ms=3 request_id=y", t0+30000),
				fmt.Sprintf("%d\t ms clock, 1+1/1/1+1 ms cpu, 4->4->2 MB, 4 MB goal, 2 P", t0+40000)},
			slow: true, causes: causeGC, phase: phaseDelivery},
		{name: "gc line cut inside its clock part: spans back from the stamp of its end",
			msg: msg(1, 0, 100, 2000, 19999), gc: []string{
				fmt.Sprintf("%d\tgc 7 @3.000s 2%%: 0.5+20+0.5time=2026-11-27T22:10:06.030Z level=INFO msg=request duration_ms=3 request_id=x", t0+30000),
				fmt.Sprintf("%d\t ms clock, 1+1/1/1+1 ms cpu, 4->4->2 MB, 4 MB goal, 2 P", t0+41000)},
			slow: true, phase: phaseDelivery},
		// COMMIT of 41.234 ms logged at 100.000 ms: [58.766, 100.999] ms.
		{name: "pg statement overlapping POST..201",
			msg: msg(1, 50000, 50000, 70000, 71000), pg: []string{pgLine("aspd_bench", 100000, "41.234", "statement: COMMIT")}, slow: true, causes: causePG, phase: phaseAccept},
		{name: "pg statement ends (truncated ms) as the POST starts",
			msg: msg(1, 100999, 100999, 115000, 116000), pg: []string{pgLine("aspd_bench", 100000, "41.234", "statement: COMMIT")}, slow: true, causes: causePG, phase: phaseAccept},
		{name: "pg statement over before the POST starts",
			msg: msg(1, 101000, 101000, 115000, 116000), pg: []string{pgLine("aspd_bench", 100000, "41.234", "statement: COMMIT")}, slow: true, phase: phaseAccept},
		{name: "pg statement starts as the 201 arrives",
			msg: msg(1, 40000, 40000, 58766, 60000), pg: []string{pgLine("aspd_bench", 100000, "41.234", "statement: COMMIT")}, slow: true, causes: causePG, phase: phaseAccept},
		{name: "pg statement starts 1 µs after the 201",
			msg: msg(1, 40000, 40000, 58765, 60000), pg: []string{pgLine("aspd_bench", 100000, "41.234", "statement: COMMIT")}, slow: true, phase: phaseAccept},
		{name: "pg statement during delivery only does not count",
			msg: msg(1, 50000, 50000, 52000, 120000), pg: []string{pgLine("aspd_bench", 100000, "3.1", "execute <unnamed>: SELECT 1")}, slow: true, phase: phaseDelivery},
		{name: "pg statement of another database",
			msg: msg(1, 50000, 50000, 70000, 71000), pg: []string{pgLine("other", 100000, "41.234", "statement: COMMIT")}, slow: true, phase: phaseAccept},
		{name: "pg lines that are not durations",
			msg: msg(1, 50000, 50000, 70000, 71000), pg: []string{
				wallUs(t0+60000).Format("2006-01-02 15:04:05.000 MST") + " [1] LOG:  checkpoint starting: time",
				wallUs(t0+60000).Format("2006-01-02 15:04:05.000 MST") + " [1] postgres@aspd_bench ERROR:  duplicate key"},
			slow: true, phase: phaseAccept},
		{name: "all three",
			msg: msg(1, 0, 6000, 30000, 31000), gc: []string{gcLine(1, 40000, "0.5+20+0.5")},
			pg: []string{pgLine("aspd_bench", 100000, "80", "statement: COMMIT")}, slow: true, causes: causeLate | causePG | causeGC, phase: phaseAccept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, err := parseAspdLog(strings.NewReader(strings.Join(tc.gc, "\n")))
			if err != nil {
				t.Fatal(err)
			}
			pgs, err := parsePGLog(strings.NewReader(strings.Join(tc.pg, "\n")), "aspd_bench")
			if err != nil {
				t.Fatal(err)
			}
			a := attribute([]tlMessage{tc.msg}, slow, log.gcs, pgs, nil)
			if got := len(a.slow) == 1; got != tc.slow {
				t.Fatalf("slow %v, want %v", got, tc.slow)
			}
			if !tc.slow {
				return
			}
			v := a.slow[0]
			if v.causes != tc.causes || v.phase != tc.phase {
				t.Errorf("causes %v phase %d, want %v phase %d", v.causes, v.phase, tc.causes, tc.phase)
			}
			col := 1 + int(tc.phase)
			if a.total[0] != 1 || a.total[col] != 1 {
				t.Errorf("totals %v", a.total)
			}
			if (tc.causes == 0) != (a.none[0] == 1 && a.none[col] == 1) {
				t.Errorf("unattributed %v for causes %v", a.none, tc.causes)
			}
		})
	}
}

func TestTimelineParsing(t *testing.T) {
	log, err := parseAspdLog(strings.NewReader(strings.Join([]string{
		gcLine(3, 40000, "0.018+21+0.003"),
		fmt.Sprintf("%d\ttime=2026-11-27T22:10:06.041Z level=INFO msg=request method=POST route=/sessions/:id/messages status=201 duration_ms=12.5 agent=@a.b request_id=bench-r-7", t0+41000),
		fmt.Sprintf("%d\ttime=2026-11-27T22:10:06.041Z level=INFO msg=request method=GET route=/readyz status=200 duration_ms=0.1 request_id=xyz", t0+41000),
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(log.gcs) != 1 {
		t.Fatalf("gcs %+v", log.gcs)
	}
	g := log.gcs[0]
	if g.num != 3 || g.end != t0+40000 || g.start != t0+40000-21021 || g.atUs != 3e6 {
		t.Errorf("gc %+v, want #3 [%d, %d] @3s", g, t0+40000-21021, t0+40000)
	}
	if log.handlerUs["bench-r-7"] != 12500 || log.handlerUs["xyz"] != 100 {
		t.Errorf("access log %v", log.handlerUs)
	}
	pgs, err := parsePGLog(strings.NewReader(pgLine("aspd_bench", 6712000, "3.1", "execute <unnamed>: INSERT INTO events")), "aspd_bench")
	if err != nil || len(pgs) != 1 {
		t.Fatalf("%v %+v", err, pgs)
	}
	if p := pgs[0]; p.durUs != 3100 || p.end != t0+6712999 || p.start != t0+6712000-3100 {
		t.Errorf("pg %+v", p)
	}
	// The stamps' lag against the runtime's clock: the second line is
	// read 2 ms later than the first, relative to the cycles' own times.
	med, worst, ok := gcLag([]gcCycle{
		{num: 1, span: span{t0 + 1000000 - 5000, t0 + 1000000}, atUs: 995000},
		{num: 2, span: span{t0 + 3002000 - 5000, t0 + 3002000}, atUs: 2995000},
		{num: 3, span: span{t0 + 5000500 - 5000, t0 + 5000500}, atUs: 4995000},
	})
	if !ok || med != 500 || worst != 2000 {
		t.Errorf("gcLag %d %d %v, want 500 2000", med, worst, ok)
	}
}

func TestTimelineSecondsAndReport(t *testing.T) {
	msgs := []tlMessage{
		msg(0, 0, 0, 1000, 2000),
		msg(1, 500000, 500000, 520000, 521000),          // slow, pg
		msg(2, 1200000, 1200000, 1201000, 1230000),      // slow, gc, delivery
		msg(3, 2100000, 2100000, 2101000, 2102000),      // fast
		msg(4, 2900000, 2990000, 2991000, 2992000),      // slow, late
		{N: 5, Sched: t0 + 3000000, Post: t0 + 3000000}, // never delivered
	}
	log, _ := parseAspdLog(strings.NewReader(gcLine(1, 1225000, "1+10+1")))
	pgs, _ := parsePGLog(strings.NewReader(pgLine("aspd_bench", 515000, "10", "statement: COMMIT")), "aspd_bench")
	a := attribute(msgs, 10*time.Millisecond, log.gcs, pgs, map[string]int64{"bench-r-1": 19000})
	if a.total != [3]int{3, 2, 1} || a.undelivered != 1 || a.longest != 90000+2000 {
		t.Errorf("total %v undelivered %d longest %d", a.total, a.undelivered, a.longest)
	}
	if a.byCause[0] != [3]int{1, 1, 0} || a.byCause[1] != [3]int{1, 1, 0} || a.byCause[2] != [3]int{1, 0, 1} || a.none != [3]int{} {
		t.Errorf("by cause %v none %v", a.byCause, a.none)
	}
	if len(a.seconds) != 4 {
		t.Fatalf("%d seconds", len(a.seconds))
	}
	want := []struct{ messages, slow, gcs, pgs int }{{2, 1, 0, 1}, {1, 1, 1, 0}, {2, 1, 0, 0}, {1, 0, 0, 0}}
	for i, w := range want {
		r := a.seconds[i]
		if r.messages != w.messages || r.slow != w.slow || r.gcs != w.gcs || r.pgs != w.pgs {
			t.Errorf("second %d: %+v, want %+v", i, r, w)
		}
	}
	if a.handlerJoined != 1 || a.handlerSlow[1] != 1 {
		t.Errorf("handler joined %d slow %v", a.handlerJoined, a.handlerSlow)
	}
	var out bytes.Buffer
	a.write(&out, log, "aspd_bench", true)
	for _, s := range []string{"slow (send-to-deliver over 10ms): 3", "aspd GC cycles: 1", "PostgreSQL statements logged for @aspd_bench: 1 (1 commits)", "unattributed"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
}

func TestTimelineGCByRuntimeClock(t *testing.T) {
	// Three cycles of 21 ms whose runtime starts are 1 s apart (@1.000s,
	// @2.000s, @3.000s); the second's line was stamped 5 ms late.
	lines := []string{
		fmt.Sprintf("%d\tgc 1 @1.000s 1%%: 0.5+20+0.5 ms clock, 1 ms cpu, 2 P", t0+1021000),
		fmt.Sprintf("%d\tgc 2 @2.000s 1%%: 0.5+20+0.5 ms clock, 1 ms cpu, 2 P", t0+2026000),
		fmt.Sprintf("%d\tgc 3 @3.000s 1%%: 0.5+20+0.5 ms clock, 1 ms cpu, 2 P", t0+3021000),
		// aspd restarted: its runtime clock starts again.
		fmt.Sprintf("%d\tgc 1 @0.500s 1%%: 1+1+1 ms clock, 1 ms cpu, 2 P", t0+10503000),
	}
	log, err := parseAspdLog(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil || len(log.gcs) != 4 {
		t.Fatalf("%v %+v", err, log.gcs)
	}
	got := placeByRuntime(log.gcs)
	want := []span{{t0 + 1000000, t0 + 1021000}, {t0 + 2000000, t0 + 2021000}, {t0 + 3000000, t0 + 3021000}, {t0 + 10500000, t0 + 10503000}}
	for i := range want {
		if got[i].span != want[i] {
			t.Errorf("cycle %d: %+v, want %+v", i, got[i].span, want[i])
		}
	}
	// A message just after the second cycle by the runtime's clock, but
	// inside it by the late stamp.
	m := msg(1, 2021001, 2021001, 2035000, 2036000)
	if v, _ := classify(&m, 10000, got, nil); v.causes != 0 {
		t.Errorf("by the runtime's clock: causes %v, want none", v.causes)
	}
	if v, _ := classify(&m, 10000, log.gcs, nil); v.causes != causeGC {
		t.Errorf("by the stamps: causes %v, want gc", v.causes)
	}
}

// chunkReader returns its chunks one Read at a time.
type chunkReader struct{ chunks []string }

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	if r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

func TestStampLines(t *testing.T) {
	clock := time.UnixMicro(1000)
	now := func() time.Time { clock = clock.Add(time.Microsecond); return clock }
	var out bytes.Buffer
	r := &chunkReader{chunks: []string{"a\nb", "c\n", "d\ne\n", "tail"}}
	if err := stampLines(r, &out, now); err != nil {
		t.Fatal(err)
	}
	// A line is stamped when its end is read; lines of one read share it.
	want := "1001\ta\n1002\tbc\n1003\td\n1003\te\n1005\ttail\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestTimelineRecorder(t *testing.T) {
	tl := newTimeline(4)
	var wg sync.WaitGroup
	const msgs, recipients = 500, 3
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(w); n < msgs; n += 4 {
				sched := time.Duration(n) * time.Millisecond
				for k := 0; k < recipients; k++ {
					tl.delivered(n, sched, sched+time.Duration(5+k)*time.Millisecond)
				}
				tl.accepted(n, int(n%7), sched, sched+time.Millisecond, sched+2*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	base := time.UnixMicro(t0)
	path := filepath.Join(t.TempDir(), "tl.jsonl")
	if n, err := tl.write(path, base, "r"); err != nil || n != msgs {
		t.Fatalf("wrote %d, %v", n, err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := readMessages(f)
	if err != nil || len(got) != msgs {
		t.Fatalf("%d messages, %v", len(got), err)
	}
	for i, m := range got {
		s := t0 + int64(i)*1000
		if m.N != int64(i) || m.Session != i%7 || m.Sched != s || m.Post != s+1000 || m.Accepted != s+2000 || m.Delivered != s+7000 || m.Deliveries != recipients || m.RequestID != fmt.Sprintf("bench-r-%d", i) {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
}
