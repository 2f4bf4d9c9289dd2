package main

// The timeline: where the slow messages of an open-loop chat run come
// from.
//
//   - aspbench chat --timeline FILE records, for every measured message, its
//     scheduled time, when its POST started, when its 201 arrived and when
//     its last recipient had it, and writes them after the run as JSON lines
//     (Unix microseconds). The POSTs then carry X-Request-Id bench-RUN-N,
//     which aspd's access log repeats.
//   - aspbench stamp prefixes every line of its input with the Unix
//     microsecond wall time at which it was read (aspd's stderr, with
//     GODEBUG=gctrace=1: the runtime prints a line when each GC cycle ends).
//   - aspbench timeline reads the messages, the stamped aspd log and,
//     optionally, PostgreSQL's log (log_min_duration_statement), and tells
//     for each message over --slow which of these overlapped its life:
//     the load generator's own lag, a slow PostgreSQL statement, an aspd GC
//     cycle. An overlap is a correlation, not a proof.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ---- recording (aspbench chat --timeline) ----

// msgTimes is one message's times on the run's clock.
type msgTimes struct {
	set        bool
	accepted   bool
	session    int32
	deliveries int32
	sched      time.Duration
	post       time.Duration
	done       time.Duration // the 201
	last       time.Duration // the last recipient's arrival
}

// timeline records the measured messages of a chat run, indexed by id.
// The senders (accepted) and every connection's reader (delivered) call it
// concurrently; one mutex is enough at the rates aspbench drives.
type timeline struct {
	mu   sync.Mutex
	recs []msgTimes
}

func newTimeline(capacity int) *timeline {
	return &timeline{recs: make([]msgTimes, 0, max(capacity, 1024))}
}

// at returns the record of message n, growing the table; t.mu is held.
func (t *timeline) at(n int64) *msgTimes {
	if n >= int64(len(t.recs)) {
		if n < int64(cap(t.recs)) {
			t.recs = t.recs[:n+1]
		} else {
			t.recs = append(t.recs, make([]msgTimes, n+1-int64(len(t.recs)))...)
		}
	}
	return &t.recs[n]
}

// accepted records message n's 201: scheduled at sched, POST started at
// post, answered at done.
func (t *timeline) accepted(n int64, session int, sched, post, done time.Duration) {
	if n < 0 {
		return
	}
	t.mu.Lock()
	r := t.at(n)
	r.set, r.accepted = true, true
	r.session = int32(session)
	r.sched, r.post, r.done = sched, post, done
	t.mu.Unlock()
}

// delivered records that a recipient had message n (scheduled at sched)
// at time at.
func (t *timeline) delivered(n int64, sched, at time.Duration) {
	if n < 0 {
		return
	}
	t.mu.Lock()
	r := t.at(n)
	r.set = true
	r.sched = sched
	r.deliveries++
	if at > r.last {
		r.last = at
	}
	t.mu.Unlock()
}

// tlMessage is one line of the messages file. Times are Unix µs; 0 when
// the event was not seen (no 201, no delivery).
type tlMessage struct {
	N          int64  `json:"n"`
	Session    int    `json:"session"`
	Sched      int64  `json:"sched_us"`
	Post       int64  `json:"post_us"`
	Accepted   int64  `json:"accepted_us"`
	Delivered  int64  `json:"delivered_us"`
	Deliveries int    `json:"deliveries"`
	RequestID  string `json:"request_id,omitempty"`
}

// requestIDFor is the X-Request-Id of benchmark message id in run runID.
func requestIDFor(runID string, id int64) string {
	return "bench-" + runID + "-" + strconv.FormatInt(id, 10)
}

// write writes the recorded messages to path as JSON lines, converting the
// run's clock to Unix µs with base, the wall time of the clock's 0.
func (t *timeline) write(path string, base time.Time, runID string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	enc := json.NewEncoder(w)
	anchor := base.UnixMicro()
	wall := func(d time.Duration) int64 { return anchor + d.Microseconds() }
	count := 0
	for n := range t.recs {
		r := &t.recs[n]
		if !r.set {
			continue
		}
		m := tlMessage{N: int64(n), Session: int(r.session), Sched: wall(r.sched), Deliveries: int(r.deliveries), RequestID: requestIDFor(runID, int64(n))}
		if r.accepted {
			m.Post, m.Accepted = wall(r.post), wall(r.done)
		}
		if r.deliveries > 0 {
			m.Delivered = wall(r.last)
		}
		if err := enc.Encode(&m); err != nil {
			f.Close()
			return count, err
		}
		count++
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return count, err
	}
	return count, f.Close()
}

// requestIDKey is the context key of a request's X-Request-Id.
type requestIDKey struct{}

// requestIDTransport sets X-Request-Id on the requests whose context
// carries one (b.post, with --timeline). aspclient has no per-request
// header, but it sends through aspbench's http.Client.
type requestIDTransport struct{ base http.RoundTripper }

func (t requestIDTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if id, ok := r.Context().Value(requestIDKey{}).(string); ok {
		r = r.Clone(r.Context()) // a RoundTripper must not change its request
		r.Header.Set("X-Request-Id", id)
	}
	return t.base.RoundTrip(r)
}

// withRequestID returns ctx carrying the X-Request-Id of message id when
// the run sends them (--timeline).
func (b *bench) withRequestID(ctx context.Context, id int64) context.Context {
	if !b.o.requestIDs || id < 0 {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, requestIDFor(b.runID, id))
}

// ---- aspbench stamp ----

// maxStampLine bounds a line held while waiting for its end.
const maxStampLine = 1 << 20

// stampLines copies r to w line by line, each line prefixed with the Unix
// µs wall time at which its end was read and a tab. Every line of one read
// gets that read's time, and w is flushed after each read, so a line is
// neither stamped late nor held back.
func stampLines(r io.Reader, w io.Writer, now func() time.Time) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	buf := make([]byte, 64<<10)
	var partial []byte
	var stamp []byte
	emit := func(us int64, parts ...[]byte) {
		stamp = strconv.AppendInt(stamp[:0], us, 10)
		stamp = append(stamp, '\t')
		bw.Write(stamp)
		for _, p := range parts {
			bw.Write(p)
		}
	}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			us := now().UnixMicro()
			data := buf[:n]
			for len(data) > 0 {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					partial = append(partial, data...)
					if len(partial) >= maxStampLine {
						emit(us, partial, []byte{'\n'})
						partial = partial[:0]
					}
					break
				}
				emit(us, partial, data[:i+1])
				partial, data = partial[:0], data[i+1:]
			}
			if ferr := bw.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			if len(partial) > 0 {
				emit(now().UnixMicro(), partial, []byte{'\n'})
			}
			return bw.Flush()
		}
		if err != nil {
			bw.Flush()
			return err
		}
	}
}

func runStamp(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("aspbench stamp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aspbench stamp <in >out\n\nCopies standard input to standard output, each line prefixed with the Unix\nmicrosecond wall time at which it was read and a tab (for aspbench timeline).\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "aspbench stamp: no arguments expected")
		return 2
	}
	if err := stampLines(stdin, stdout, time.Now); err != nil {
		fmt.Fprintln(stderr, "aspbench stamp:", err)
		return 1
	}
	return 0
}

// ---- aspbench timeline: parsing ----

// span is a closed interval of Unix µs.
type span struct{ start, end int64 }

// overlaps reports whether a and b share at least one instant; intervals
// that only touch overlap.
func overlaps(a, b span) bool { return a.start <= b.end && b.start <= a.end }

// gcCycle is one GC cycle of aspd, from its gctrace line.
type gcCycle struct {
	num int
	span
	atUs int64 // the runtime's own start time, µs since the process started (1 ms resolution)
}

func (g gcCycle) dur() int64 { return g.end - g.start }

// pgStmt is one statement of PostgreSQL's duration log.
type pgStmt struct {
	span
	durUs int64
	text  string
}

// aspdLog is what timeline reads from the stamped aspd log.
type aspdLog struct {
	gcs        []gcCycle
	handlerUs  map[string]int64 // request_id -> the access log's duration_ms, in µs
	unstamped  int              // gc lines without a stamp: not placed
	spliced    int              // gc lines cut by other output, put together again
	lines      int
	gcUnparsed int // gc header lines whose clock part was never found
}

var (
	stampRE   = regexp.MustCompile(`^(\d{10,})\t`)
	gcHeadRE  = regexp.MustCompile(`gc (\d+) @([0-9.]+)s [0-9]+%: `)
	gcClockRE = regexp.MustCompile(`([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock`)
	requestRE = regexp.MustCompile(`\bmsg=request\b.*\bduration_ms=([0-9.]+)\b.*\brequest_id=(\S+)`)
	pgStepRE  = regexp.MustCompile(`^(execute|bind|parse) [^:]*: (.*)$`)
	pgLineRE  = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+) \[\d+\] (\S*)@(\S*) LOG:  duration: ([0-9.]+) ms  (.*)$`)
)

// msToUs converts a decimal number of ms to µs, rounded.
func msToUs(s string) (int64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) {
		return 0, false
	}
	return int64(math.Round(v * 1000)), true
}

// parseAspdLog reads aspd's stderr as stamped by aspbench stamp: the GC
// cycles (gctrace lines, printed when a cycle ends: the cycle spans
// [stamp - its three clock phases, stamp]) and the access log's durations
// by request id.
func parseAspdLog(r io.Reader) (*aspdLog, error) {
	out := &aspdLog{handlerUs: map[string]int64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	// The runtime writes a gctrace line piece by piece, and aspd's log
	// writer can land whole lines of its own (slog text, "time=...") among
	// the pieces. The head of a cut line then waits, with the pieces seen
	// so far, for the line that completes its clock part.
	var pending *gcCycle
	var pendingText string
	pendingLines := 0
	// ownPiece is the part of a line before any slog record in it.
	ownPiece := func(s string) string {
		if i := strings.Index(s, "time="); i >= 0 {
			return s[:i]
		}
		return s
	}
	addGC := func(g gcCycle, line string, stamp int64, ok bool) {
		m := gcClockRE.FindStringSubmatch(line)
		if m == nil {
			out.gcUnparsed++
			return
		}
		var sum int64
		for _, p := range m[1:4] {
			v, _ := msToUs(p)
			sum += v
		}
		if !ok {
			out.unstamped++
			return
		}
		g.end, g.start = stamp, stamp-sum
		out.gcs = append(out.gcs, g)
	}
	for sc.Scan() {
		line := sc.Text()
		out.lines++
		var stamp int64
		stamped := false
		if m := stampRE.FindStringSubmatch(line); m != nil {
			stamp, _ = strconv.ParseInt(m[1], 10, 64)
			stamped = true
			line = line[len(m[0]):]
		}
		if m := requestRE.FindStringSubmatch(line); m != nil {
			if us, ok := msToUs(m[1]); ok {
				out.handlerUs[m[2]] = us
			}
		}
		head := gcHeadRE.FindStringSubmatchIndex(line)
		if head == nil {
			if pending == nil {
				continue
			}
			pendingText += ownPiece(line)
			pendingLines++
			if gcClockRE.MatchString(pendingText) {
				addGC(*pending, pendingText, stamp, stamped)
				out.spliced++
				pending = nil
			} else if pendingLines >= 8 {
				out.gcUnparsed++
				pending = nil
			}
			continue
		}
		if pending != nil {
			out.gcUnparsed++
			pending = nil
		}
		num, _ := strconv.Atoi(line[head[2]:head[3]])
		at, _ := strconv.ParseFloat(line[head[4]:head[5]], 64)
		g := gcCycle{num: num, atUs: int64(math.Round(at * 1e6))}
		if rest := ownPiece(line[head[1]:]); gcClockRE.MatchString(rest) {
			addGC(g, rest, stamp, stamped)
		} else {
			pending, pendingText, pendingLines = &g, rest, 0
		}
	}
	if pending != nil {
		out.gcUnparsed++
	}
	return out, sc.Err()
}

// pgTimeLayouts are the forms of %m (log_line_prefix) accepted.
var pgTimeLayouts = []string{"2006-01-02 15:04:05.000 MST", "2006-01-02 15:04:05.000 -07", "2006-01-02 15:04:05 MST"}

// parsePGLog reads PostgreSQL's log for the duration lines of database db
// (log_min_duration_statement; log_line_prefix '%m [%p] %q%u@%d '). A
// statement is logged when it ends, at a time truncated to the millisecond:
// it spans [logged - duration, logged + 999 µs].
func parsePGLog(r io.Reader, db string) ([]pgStmt, error) {
	var out []pgStmt
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "duration: ") {
			continue
		}
		m := pgLineRE.FindStringSubmatch(line)
		if m == nil || m[3] != db {
			continue
		}
		var at time.Time
		var err error
		for _, l := range pgTimeLayouts {
			if at, err = time.Parse(l, m[1]); err == nil {
				break
			}
		}
		if err != nil {
			continue
		}
		dur, ok := msToUs(m[4])
		if !ok {
			continue
		}
		end := at.UnixMicro()
		text := m[5]
		if c := pgStepRE.FindStringSubmatch(text); c != nil {
			text = c[1] + ": " + c[2] // the prepared statement's name says nothing
		}
		if len(text) > 70 {
			text = text[:70] + "..."
		}
		out = append(out, pgStmt{span: span{end - dur, end + 999}, durUs: dur, text: text})
	}
	return out, sc.Err()
}

// readMessages reads the messages file of aspbench chat --timeline.
func readMessages(r io.Reader) ([]tlMessage, error) {
	var out []tlMessage
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m tlMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// ---- aspbench timeline: attribution ----

// cause is a bit set of what overlapped a slow message.
type cause uint8

const (
	causeLate cause = 1 << iota // the POST started over slow/2 after its scheduled time
	causePG                     // a logged PostgreSQL statement overlapped [POST, 201]
	causeGC                     // an aspd GC cycle overlapped [scheduled, last delivery]
	nCauses   = 3
)

var causeShort = [nCauses]string{"late", "pg", "gc"}

func (c cause) String() string {
	var parts []string
	for i := 0; i < nCauses; i++ {
		if c&(1<<i) != 0 {
			parts = append(parts, causeShort[i])
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// phase is where a slow message spent most of its time.
type phase int

const (
	phaseAccept   phase = iota // scheduled -> 201 (sender's lag, request, commit)
	phaseDelivery              // 201 -> last recipient
)

// verdict is one slow message's attribution.
type verdict struct {
	msg     *tlMessage
	latency int64 // µs, scheduled -> last delivery
	causes  cause
	phase   phase
}

// classify tells whether m is slower than slow (µs: strictly over) and, if
// so, what overlapped it. gcs and pgs are sorted by start.
func classify(m *tlMessage, slow int64, gcs []gcCycle, pgs []pgStmt) (verdict, bool) {
	v := verdict{msg: m, latency: m.Delivered - m.Sched}
	if m.Delivered == 0 || m.Accepted == 0 || v.latency <= slow {
		return v, false
	}
	if m.Post-m.Sched > slow/2 {
		v.causes |= causeLate
	}
	accept := span{m.Post, m.Accepted}
	for i := range pgs {
		if pgs[i].start > accept.end {
			break
		}
		if overlaps(pgs[i].span, accept) {
			v.causes |= causePG
			break
		}
	}
	life := span{m.Sched, m.Delivered}
	for i := range gcs {
		if gcs[i].start > life.end {
			break
		}
		if overlaps(gcs[i].span, life) {
			v.causes |= causeGC
			break
		}
	}
	if m.Accepted-m.Sched < m.Delivered-m.Accepted {
		v.phase = phaseDelivery
	}
	return v, true
}

// secondRow is one second of the measured window.
type secondRow struct {
	messages, slow int
	longest        int64
	causes         [nCauses]int
	none           int
	gcs, pgs       int // cycles and statements that overlap the second
}

// attribution is the whole analysis.
type attribution struct {
	slowUs          int64
	measured        int
	undelivered     int // no 201 or no delivery recorded
	incomplete      int // fewer deliveries than the most any message had
	winStart        int64
	winEnd          int64
	slow            []verdict
	byCause         [nCauses][3]int // [cause][all, accept, delivery]
	none            [3]int
	total           [3]int
	combos          map[cause]int
	longest         int64
	seconds         []secondRow
	gcs             []gcCycle // overlapping the window
	pgs             []pgStmt  // overlapping the window
	handlerJoined   int       // slow messages found in aspd's access log
	handlerSlow     [3]int    // of those, aspd's handler took over slow/2
	handlerJoinedBy [3]int
	gcClock         string        // how the GC cycles were placed, for the report
	pgMin           time.Duration // the shortest statement counted, for the report
}

// attribute classifies every message. gcs and pgs may be in any order;
// handlerUs (request id -> aspd's handler time) may be nil.
func attribute(msgs []tlMessage, slow time.Duration, gcs []gcCycle, pgs []pgStmt, handlerUs map[string]int64) *attribution {
	a := &attribution{slowUs: slow.Microseconds(), combos: map[cause]int{}}
	gcs = append([]gcCycle(nil), gcs...)
	pgs = append([]pgStmt(nil), pgs...)
	sort.Slice(gcs, func(i, j int) bool { return gcs[i].start < gcs[j].start })
	sort.Slice(pgs, func(i, j int) bool { return pgs[i].start < pgs[j].start })
	a.winStart, a.winEnd = math.MaxInt64, math.MinInt64
	maxDeliveries := 0
	for i := range msgs {
		m := &msgs[i]
		a.winStart = min(a.winStart, m.Sched)
		a.winEnd = max(a.winEnd, m.Sched, m.Delivered, m.Accepted)
		maxDeliveries = max(maxDeliveries, m.Deliveries)
	}
	a.measured = len(msgs)
	if len(msgs) == 0 {
		a.winStart, a.winEnd = 0, 0
		return a
	}
	window := span{a.winStart, a.winEnd}
	for _, g := range gcs {
		if overlaps(g.span, window) {
			a.gcs = append(a.gcs, g)
		}
	}
	for _, p := range pgs {
		if overlaps(p.span, window) {
			a.pgs = append(a.pgs, p)
		}
	}
	a.seconds = make([]secondRow, (a.winEnd-a.winStart)/1e6+1)
	for _, g := range a.gcs {
		a.markSeconds(g.span, func(r *secondRow) { r.gcs++ })
	}
	for _, p := range a.pgs {
		a.markSeconds(p.span, func(r *secondRow) { r.pgs++ })
	}
	for i := range msgs {
		m := &msgs[i]
		row := &a.seconds[(m.Sched-a.winStart)/1e6]
		row.messages++
		if m.Delivered == 0 || m.Accepted == 0 {
			a.undelivered++
			continue
		}
		if m.Deliveries < maxDeliveries {
			a.incomplete++
		}
		v, slow := classify(m, a.slowUs, a.gcs, a.pgs)
		if !slow {
			continue
		}
		a.slow = append(a.slow, v)
		a.longest = max(a.longest, v.latency)
		row.slow++
		row.longest = max(row.longest, v.latency)
		a.combos[v.causes]++
		col := 1 + int(v.phase)
		a.total[0]++
		a.total[col]++
		if v.causes == 0 {
			a.none[0]++
			a.none[col]++
			row.none++
		}
		for c := 0; c < nCauses; c++ {
			if v.causes&(1<<c) != 0 {
				a.byCause[c][0]++
				a.byCause[c][col]++
				row.causes[c]++
			}
		}
		if us, ok := handlerUs[m.RequestID]; ok && m.RequestID != "" {
			a.handlerJoined++
			a.handlerJoinedBy[col]++
			if us > a.slowUs/2 {
				a.handlerSlow[0]++
				a.handlerSlow[col]++
			}
		}
	}
	return a
}

// markSeconds calls f for every second of the window that s overlaps.
func (a *attribution) markSeconds(s span, f func(*secondRow)) {
	first := max(s.start, a.winStart)
	last := min(s.end, a.winEnd)
	for sec := (first - a.winStart) / 1e6; sec <= (last-a.winStart)/1e6 && sec < int64(len(a.seconds)); sec++ {
		f(&a.seconds[sec])
	}
}

// placeByRuntime places the GC cycles on the runtime's own clock rather
// than by their stamps: each cycle starts at the process's start plus its
// @t, and the process's start is taken from the least late stamp (a
// stamp is never early). A stamp read late, when the machine is busy or the
// runtime prints late, then moves nothing; the price is @t's millisecond.
// A gc number that goes down starts another process, anchored on its own.
func placeByRuntime(gcs []gcCycle) []gcCycle {
	out := make([]gcCycle, 0, len(gcs))
	for len(gcs) > 0 {
		n := 1
		for n < len(gcs) && gcs[n].num > gcs[n-1].num {
			n++
		}
		seg := gcs[:n]
		gcs = gcs[n:]
		best := int64(math.MaxInt64)
		for _, g := range seg {
			best = min(best, g.end-(g.atUs+g.dur()))
		}
		for _, g := range seg {
			d := g.dur()
			g.start = best + g.atUs
			g.end = g.start + d
			out = append(out, g)
		}
	}
	return out
}

// ---- aspbench timeline: the report ----

func usMs(us int64) string { return strconv.FormatFloat(float64(us)/1000, 'f', 1, 64) }

func wallUs(us int64) time.Time { return time.UnixMicro(us).UTC() }

// gcLag describes how late the GC lines' stamps are against the runtime's
// own clock: each line's stamp minus the cycle's end by the runtime (its
// start @t plus its clock phases) is the process's start plus the delay
// of the stamp; the smallest such offset is taken as exact.
func gcLag(gcs []gcCycle) (median, worst int64, ok bool) {
	if len(gcs) < 2 {
		return 0, 0, false
	}
	offs := make([]int64, len(gcs))
	for i, g := range gcs {
		offs[i] = g.end - (g.atUs + g.dur())
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	best := offs[0]
	return offs[len(offs)/2] - best, offs[len(offs)-1] - best, true
}

func (a *attribution) write(w io.Writer, log *aspdLog, pgDB string, pgRead bool) {
	half := time.Duration(a.slowUs/2) * time.Microsecond
	slowD := time.Duration(a.slowUs) * time.Microsecond
	fmt.Fprintf(w, "messages measured: %d, scheduled from %s UTC over %.1f s (to the last delivery)\n",
		a.measured, wallUs(a.winStart).Format("2006-01-02 15:04:05.000"), float64(a.winEnd-a.winStart)/1e6)
	if a.undelivered > 0 || a.incomplete > 0 {
		fmt.Fprintf(w, "  not counted: %d without a 201 or a delivery; %d with fewer deliveries than the others\n", a.undelivered, a.incomplete)
	}
	pct := 0.0
	if a.measured > 0 {
		pct = 100 * float64(len(a.slow)) / float64(a.measured)
	}
	fmt.Fprintf(w, "slow (send-to-deliver over %s): %d (%.2f%%), the longest %s ms\n\n", slowD, len(a.slow), pct, usMs(a.longest))

	fmt.Fprintf(w, "available to overlap, inside the window:\n")
	if log == nil {
		fmt.Fprintf(w, "  aspd GC cycles: no aspd log given\n")
	} else {
		var total, longest int64
		for _, g := range a.gcs {
			total += g.dur()
			longest = max(longest, g.dur())
		}
		fmt.Fprintf(w, "  aspd GC cycles: %d, %s ms in all, the longest %s ms", len(a.gcs), usMs(total), usMs(longest))
		if len(a.gcs) > 1 {
			fmt.Fprintf(w, ", one every %.2f s", float64(a.gcs[len(a.gcs)-1].end-a.gcs[0].end)/1e6/float64(len(a.gcs)-1))
		}
		fmt.Fprintln(w)
		if a.gcClock == "runtime" {
			fmt.Fprintf(w, "    placed by the runtime's clock (@t, 1 ms resolution), anchored on the least late stamp\n")
		} else {
			fmt.Fprintf(w, "    placed by their stamps: [stamp - clock phases, stamp]\n")
		}
		if med, worst, ok := gcLag(log.gcs); ok {
			fmt.Fprintf(w, "    their stamps against the runtime's own clock: late by %s ms median, %s ms at worst\n", usMs(med), usMs(worst))
		}
		if log.unstamped+log.gcUnparsed > 0 || log.spliced > 0 {
			fmt.Fprintf(w, "    gc lines: %d without a stamp, %d unreadable, %d put together from two lines\n", log.unstamped, log.gcUnparsed, log.spliced)
		}
		if len(log.gcs) == 0 {
			fmt.Fprintf(w, "    (no gctrace line in the aspd log: was aspd run with GODEBUG=gctrace=1, through aspbench stamp?)\n")
		}
	}
	if !pgRead {
		fmt.Fprintf(w, "  PostgreSQL statements: no PostgreSQL log given\n")
	} else {
		var top *pgStmt
		commits := 0
		for i := range a.pgs {
			if top == nil || a.pgs[i].durUs > top.durUs {
				top = &a.pgs[i]
			}
			if strings.Contains(strings.ToUpper(a.pgs[i].text), "COMMIT") {
				commits++
			}
		}
		floor := ""
		if a.pgMin > 0 {
			floor = fmt.Sprintf(" of %s or more", a.pgMin)
		}
		fmt.Fprintf(w, "  PostgreSQL statements%s logged for @%s: %d (%d commits)", floor, pgDB, len(a.pgs), commits)
		if top != nil {
			fmt.Fprintf(w, ", the longest %s ms, ended %s: %s", usMs(top.durUs), wallUs(top.end-999).Format("15:04:05.000"), top.text)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "causes of the slow messages (a message may have several):\n")
	fmt.Fprintf(w, "  %-44s %7s %7s %9s\n", "", "all", "accept", "delivery")
	rows := [nCauses]string{
		fmt.Sprintf("sender late (POST started over %s late)", half),
		"PostgreSQL statement overlapping POST..201",
		"aspd GC cycle overlapping the message",
	}
	for c := 0; c < nCauses; c++ {
		fmt.Fprintf(w, "  %-44s %7d %7d %9d\n", rows[c], a.byCause[c][0], a.byCause[c][1], a.byCause[c][2])
	}
	fmt.Fprintf(w, "  %-44s %7d %7d %9d\n", "unattributed (none of these)", a.none[0], a.none[1], a.none[2])
	fmt.Fprintf(w, "  %-44s %7d %7d %9d\n", "slow messages", a.total[0], a.total[1], a.total[2])
	fmt.Fprintf(w, "  (accept: most of the time before the 201; delivery: after it)\n")
	if len(a.combos) > 0 {
		keys := make([]cause, 0, len(a.combos))
		for c := range a.combos {
			keys = append(keys, c)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		parts := make([]string, len(keys))
		for i, c := range keys {
			parts[i] = fmt.Sprintf("%s %d", c, a.combos[c])
		}
		fmt.Fprintf(w, "  combinations: %s\n", strings.Join(parts, ", "))
	}
	if log != nil && a.total[0] > 0 {
		fmt.Fprintf(w, "  aspd's access log (X-Request-Id): %d of %d slow messages found; aspd's handler took over %s for %d of %d accept-phase and %d of %d delivery-phase ones\n",
			a.handlerJoined, a.total[0], half, a.handlerSlow[1], a.handlerJoinedBy[1], a.handlerSlow[2], a.handlerJoinedBy[2])
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "per second of the window (by scheduled time):\n")
	fmt.Fprintf(w, "  %4s %-12s %6s %6s %9s %4s %4s  %s\n", "sec", "UTC", "msgs", "slow", "longest", "gc", "pg", "causes of the slow ones")
	for i, r := range a.seconds {
		if r.messages == 0 && r.slow == 0 {
			continue
		}
		longest := "-"
		if r.slow > 0 {
			longest = usMs(r.longest) + " ms"
		}
		var causes []string
		for c := 0; c < nCauses; c++ {
			if r.causes[c] > 0 {
				causes = append(causes, fmt.Sprintf("%s %d", causeShort[c], r.causes[c]))
			}
		}
		if r.none > 0 {
			causes = append(causes, fmt.Sprintf("none %d", r.none))
		}
		fmt.Fprintf(w, "  %4d %-12s %6d %6d %9s %4d %4d  %s\n", i, wallUs(a.winStart+int64(i)*1e6).Format("15:04:05.000"), r.messages, r.slow, longest, r.gcs, r.pgs, strings.Join(causes, ", "))
	}
}

func runTimeline(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("aspbench timeline", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	messages := fs.String("messages", "", "the messages file of aspbench chat --timeline (required)")
	aspdLogPath := fs.String("aspd-log", "", "aspd's stderr (with GODEBUG=gctrace=1) through aspbench stamp")
	pgLogPath := fs.String("pg-log", "", "PostgreSQL's log, with log_min_duration_statement set for the database")
	pgDB := fs.String("pg-db", "aspd_bench", "the database whose PostgreSQL log lines count")
	pgMin := fs.Duration("pg-min", 0, "count only PostgreSQL statements at least this long as a cause (default: every logged one)")
	gcClock := fs.String("gc-clock", "runtime", "place GC cycles by the runtime's own clock (@t, anchored on the least late stamp) or by each line's stamp: runtime or stamp")
	slow := fs.Duration("slow", 10*time.Millisecond, "a message is slow when its send-to-deliver latency is over this")
	usage := func() {
		fmt.Fprintf(stderr, "Usage: aspbench timeline --messages FILE [--aspd-log FILE] [--pg-log FILE] [--slow 10ms]\n\nAttributes each message slower than --slow to what overlapped it: the load\ngenerator's own lag, a slow PostgreSQL statement, an aspd GC cycle.\n\nFlags:\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return 0
		}
		fmt.Fprintln(stderr, "aspbench timeline:", err)
		return 2
	}
	if *messages == "" || fs.NArg() > 0 || *slow <= 0 || *gcClock != "runtime" && *gcClock != "stamp" {
		fmt.Fprintln(stderr, "aspbench timeline: give --messages FILE, a positive --slow, --gc-clock runtime or stamp, and no other arguments")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "aspbench timeline:", err)
		return 1
	}
	msgs, err := readFileWith(*messages, readMessages)
	if err != nil {
		return fail(err)
	}
	var log *aspdLog
	if *aspdLogPath != "" {
		if log, err = readFileWith(*aspdLogPath, parseAspdLog); err != nil {
			return fail(err)
		}
	}
	var pgs []pgStmt
	if *pgLogPath != "" {
		if pgs, err = readFileWith(*pgLogPath, func(r io.Reader) ([]pgStmt, error) { return parsePGLog(r, *pgDB) }); err != nil {
			return fail(err)
		}
		kept := pgs[:0]
		for _, p := range pgs {
			if p.durUs >= pgMin.Microseconds() {
				kept = append(kept, p)
			}
		}
		pgs = kept
	}
	var gcs []gcCycle
	var handler map[string]int64
	if log != nil {
		gcs, handler = log.gcs, log.handlerUs
		if *gcClock == "runtime" {
			gcs = placeByRuntime(gcs)
		}
	}
	a := attribute(msgs, *slow, gcs, pgs, handler)
	a.gcClock, a.pgMin = *gcClock, *pgMin
	a.write(stdout, log, *pgDB, *pgLogPath != "")
	return 0
}

func readFileWith[T any](path string, parse func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	v, err := parse(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
