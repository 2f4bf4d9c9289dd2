package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ---- histogram ----

// histSubBits sets the histogram's precision: values below 2^histSubBits ns
// are counted exactly; above, each power of two is split into
// 2^(histSubBits-1) linear buckets, so a bucket is at most 1/512 of its
// values wide and the midpoint reported is within 0.1% of any value in it.
const histSubBits = 10

// histMax is the largest value tracked separately (2^42 ns, about 73
// minutes); larger values land in the last bucket (max stays exact).
const histMax = int64(1) << 42

// Histogram is a lock-free log-linear latency histogram (HDR-like). Count,
// sum, min and max are exact; percentiles are within 0.1%.
type Histogram struct {
	counts []atomic.Int64
	count  atomic.Int64
	sum    atomic.Int64
	min    atomic.Int64
	max    atomic.Int64
}

func newHistogram() *Histogram {
	h := &Histogram{counts: make([]atomic.Int64, histIndex(histMax-1)+1)}
	h.min.Store(math.MaxInt64)
	return h
}

func histIndex(v int64) int {
	if v < 1<<histSubBits {
		return int(v)
	}
	msb := bits.Len64(uint64(v)) - 1
	shift := msb - histSubBits + 1
	return shift<<(histSubBits-1) + int(v>>shift)
}

// histBounds is the smallest and largest value of bucket i.
func histBounds(i int) (lo, hi int64) {
	if i < 1<<histSubBits {
		return int64(i), int64(i)
	}
	shift := i>>(histSubBits-1) - 1
	m := int64(i - shift<<(histSubBits-1))
	return m << shift, (m+1)<<shift - 1
}

// Record adds one value (a duration); negative values count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	i := histIndex(min(v, histMax-1))
	h.counts[i].Add(1)
	h.count.Add(1)
	h.sum.Add(v)
	for {
		cur := h.min.Load()
		if v >= cur || h.min.CompareAndSwap(cur, v) {
			break
		}
	}
	for {
		cur := h.max.Load()
		if v <= cur || h.max.CompareAndSwap(cur, v) {
			break
		}
	}
}

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return h.count.Load() }

// Quantile returns the value at quantile q (0..1): the midpoint of the
// bucket holding the ceil(q*count)-th smallest value, clamped to [min, max].
// Quantile(1) is the exact maximum. Empty: 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.count.Load()
	if n == 0 {
		return 0
	}
	lo, hi := h.min.Load(), h.max.Load()
	if q >= 1 {
		return time.Duration(hi)
	}
	rank := int64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			bl, bh := histBounds(i)
			v := bl + (bh-bl)/2
			return time.Duration(min(max(v, lo), hi))
		}
	}
	return time.Duration(hi)
}

// LatencySummary is a histogram in milliseconds.
type LatencySummary struct {
	Count int64   `json:"count"`
	Min   float64 `json:"min"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

func ms(d time.Duration) float64 { return round3(float64(d) / 1e6) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Summary summarises the histogram in milliseconds.
func (h *Histogram) Summary() LatencySummary {
	n := h.count.Load()
	if n == 0 {
		return LatencySummary{}
	}
	return LatencySummary{
		Count: n,
		Min:   ms(time.Duration(h.min.Load())),
		Mean:  ms(time.Duration(h.sum.Load() / n)),
		P50:   ms(h.Quantile(0.50)),
		P90:   ms(h.Quantile(0.90)),
		P99:   ms(h.Quantile(0.99)),
		P999:  ms(h.Quantile(0.999)),
		Max:   ms(time.Duration(h.max.Load())),
	}
}

// ---- ordered JSON objects ----

// ordered is a JSON object that keeps insertion order (for the table and a
// readable document).
type ordered struct {
	mu   sync.Mutex
	keys []string
	vals map[string]any
}

func newOrdered() *ordered { return &ordered{vals: map[string]any{}} }

func (o *ordered) set(k string, v any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *ordered) each(fn func(k string, v any)) {
	o.mu.Lock()
	keys := append([]string(nil), o.keys...)
	vals := make(map[string]any, len(o.vals))
	for k, v := range o.vals {
		vals[k] = v
	}
	o.mu.Unlock()
	for _, k := range keys {
		fn(k, vals[k])
	}
}

func (o *ordered) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	var err error
	first := true
	o.each(func(k string, v any) {
		if err != nil {
			return
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		var vb []byte
		vb, err = json.Marshal(v)
		buf.Write(vb)
	})
	buf.WriteByte('}')
	return buf.Bytes(), err
}

// ---- correctness and errors ----

// Violation kinds: any of them fails the run.
const (
	kindGap        = "gaps"
	kindReorder    = "reorders"
	kindDuplicate  = "duplicates"
	kindMissing    = "missing"
	kindMismatch   = "mismatched"
	kindClosed     = "unexpected_closes"
	kindMalformed  = "malformed_events"
	kindIncomplete = "incomplete"
)

var violationKinds = []string{kindGap, kindReorder, kindDuplicate, kindMissing, kindMismatch, kindClosed, kindMalformed, kindIncomplete}

// checker collects correctness violations.
type checker struct {
	mu          sync.Mutex
	counts      map[string]int64
	examples    map[string][]string
	events      atomic.Int64 // events checked
	restarts    atomic.Int64 // documented join restarts
	redelivered atomic.Int64 // events a later connection re-received (at-least-once)
}

func (c *checker) violate(kind string, n int64, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int64{}
		c.examples = map[string][]string{}
	}
	c.counts[kind] += n
	if len(c.examples[kind]) < 5 {
		c.examples[kind] = append(c.examples[kind], fmt.Sprintf(format, args...))
	}
}

func (c *checker) count(kind string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[kind]
}

func (c *checker) firstExample(kind string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ex := c.examples[kind]; len(ex) > 0 {
		return ex[0]
	}
	return ""
}

// Correctness is the report's account of the checks.
type Correctness struct {
	Connections      int      `json:"connections"`
	EventsChecked    int64    `json:"events_checked"`
	Gaps             int64    `json:"gaps"`
	Reorders         int64    `json:"reorders"`
	Duplicates       int64    `json:"duplicates"`
	Missing          int64    `json:"missing"`
	Mismatched       int64    `json:"mismatched"`
	UnexpectedCloses int64    `json:"unexpected_closes"`
	MalformedEvents  int64    `json:"malformed_events"`
	Incomplete       int64    `json:"incomplete"`
	JoinRestarts     int64    `json:"join_restarts"`
	Redelivered      int64    `json:"redelivered_across_connections"`
	Examples         []string `json:"examples"`
}

// errTally counts failed requests during the measurement.
type errTally struct {
	mu       sync.Mutex
	total    int64
	byKind   map[string]int64
	examples []string
}

func (t *errTally) add(op string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKind == nil {
		t.byKind = map[string]int64{}
	}
	t.total++
	t.byKind[errKind(op, err)]++
	if len(t.examples) < 5 {
		t.examples = append(t.examples, err.Error())
	}
}

func (t *errTally) first() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.examples) > 0 {
		return t.examples[0]
	}
	return ""
}

// ErrorsReport is the report's account of failed requests.
type ErrorsReport struct {
	Total    int64            `json:"total"`
	ByKind   map[string]int64 `json:"by_kind"`
	Examples []string         `json:"examples"`
}

// ---- machine and server process ----

// Machine describes where the run happened (server and load generator
// share it: loopback only).
type Machine struct {
	Cores       int    `json:"cores"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	MemoryBytes int64  `json:"memory_bytes"`
	CPU         string `json:"cpu,omitempty"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	Kernel      string `json:"kernel,omitempty"`
	Go          string `json:"go"`
	// The 1-minute load average when the run started and ended: the
	// machine is shared with the server and anything else running.
	LoadStart float64 `json:"load_average_start"`
	LoadEnd   float64 `json:"load_average_end"`
}

func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(), LoadStart: loadAverage()}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				m.MemoryBytes = parseKB(rest)
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// parseKB parses "  123456 kB" into bytes.
func parseKB(s string) int64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	if len(f) > 1 && strings.EqualFold(f[1], "kB") {
		n *= 1024
	}
	return n
}

// procSample is a reading of a process from /proc.
type procSample struct {
	AtS        float64 `json:"at_s"` // on the run's clock
	RSSBytes   int64   `json:"rss_bytes"`
	HWMBytes   int64   `json:"rss_peak_bytes"`
	Threads    int64   `json:"threads"`
	OpenFiles  int     `json:"open_files"`
	CPUSeconds float64 `json:"cpu_seconds"` // user + system since start
}

// clockTicks is USER_HZ, 100 on every Linux configuration Go supports.
const clockTicks = 100

func readProc(pid int) (procSample, error) {
	var s procSample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "VmRSS":
			s.RSSBytes = parseKB(v)
		case "VmHWM":
			s.HWMBytes = parseKB(v)
		case "Threads":
			s.Threads, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 12 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			s.CPUSeconds = float64(ut+st) / clockTicks
		}
	}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.OpenFiles = len(fds)
	}
	return s, nil
}

// serverProc is the server process before and after the measurement.
type serverProc struct {
	PID           int         `json:"pid"`
	Before        *procSample `json:"before,omitempty"`
	After         *procSample `json:"after,omitempty"`
	RSSDeltaBytes int64       `json:"rss_delta_bytes"`
	CPUSeconds    float64     `json:"cpu_seconds"`
	CPUCores      float64     `json:"cpu_cores"` // CPU seconds per wall second between the readings
}

// machineBusy is the whole machine's busy CPU time (every core, every
// process) from /proc/stat's first line, in seconds: user, nice, system,
// irq, softirq and steal (idle and iowait are not busy).
func machineBusy() (float64, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	return float64(busy) / clockTicks, nil
}

// MachineCPU is how busy the whole machine was between the readings of
// the server process: on a shared machine, the busy cores that are
// neither the server's nor the load generator's are the rest of the
// system under test (its database, on one machine).
type MachineCPU struct {
	BusyCores  float64 `json:"busy_cores"`  // CPU seconds per wall second, every process
	OtherCores float64 `json:"other_cores"` // busy_cores less the server's and this process's
	busy, at   float64 // the "before" reading
}

// serverSample reads the server process (with --pid), this process and
// the machine as "before" or "after" the measurement.
func (b *bench) serverSample(which string) {
	at := round3(b.now().Seconds())
	if busy, err := machineBusy(); err == nil {
		switch {
		case which == "before":
			b.rep.MachineCPU = &MachineCPU{busy: busy, at: at}
		case b.rep.MachineCPU != nil:
			defer b.rep.MachineCPU.finish(busy, at, b.rep.ServerProcess, b.rep.LoadGenerator)
		}
	}
	if s, err := readProc(os.Getpid()); err == nil {
		s.AtS = at
		if b.rep.LoadGenerator == nil {
			b.rep.LoadGenerator = &serverProc{PID: os.Getpid()}
		}
		b.rep.LoadGenerator.add(which, s)
	}
	if b.o.pid <= 0 {
		return
	}
	s, err := readProc(b.o.pid)
	if err != nil {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("reading /proc/%d: %v", b.o.pid, err))
		return
	}
	s.AtS = at
	if b.rep.ServerProcess == nil {
		b.rep.ServerProcess = &serverProc{PID: b.o.pid}
	}
	b.rep.ServerProcess.add(which, s)
}

// finish sets the busy cores from the "after" reading; it runs once the
// processes' own "after" readings are in.
func (m *MachineCPU) finish(busy, at float64, procs ...*serverProc) {
	wall := at - m.at
	if wall <= 0 {
		return
	}
	m.BusyCores = round3((busy - m.busy) / wall)
	other := m.BusyCores
	for _, p := range procs {
		if p != nil && p.After != nil {
			other -= p.CPUCores
		}
	}
	m.OtherCores = round3(max(other, 0))
}

func (sp *serverProc) add(which string, s procSample) {
	if which == "before" {
		sp.Before = &s
		return
	}
	sp.After = &s
	if sp.Before != nil {
		sp.RSSDeltaBytes = s.RSSBytes - sp.Before.RSSBytes
		sp.CPUSeconds = round3(s.CPUSeconds - sp.Before.CPUSeconds)
		if wall := s.AtS - sp.Before.AtS; wall > 0 {
			sp.CPUCores = round3(sp.CPUSeconds / wall)
		}
	}
}

// goMallocs is the Go runtime's count of heap allocations since start.
const goMallocs = "go_memstats_mallocs_total"

// metrics fetches GET /metrics (Prometheus text) and keeps the memory,
// goroutine and connection series; nil when the server has none.
func (b *bench) metrics(ctx context.Context) map[string]float64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(b.o.server, "/")+"/metrics", nil)
	if err != nil {
		return nil
	}
	if b.o.adminToken != "" {
		// aspd serves /metrics to the operator; other operators may not ask.
		req.Header.Set("Authorization", "Bearer "+b.o.adminToken)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		return nil
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := f[0]
		base, _, _ := strings.Cut(name, "{")
		if !(base == goMallocs || strings.Contains(base, "memory") || strings.Contains(base, "heap") || strings.Contains(base, "goroutines") ||
			strings.Contains(base, "connection") || strings.Contains(base, "_sys_bytes")) {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// ---- report ----

// Report is the result of a run: the table and the --json document.
type Report struct {
	Tool          string       `json:"tool"`
	Scenario      string       `json:"scenario"`
	OK            bool         `json:"ok"`
	Failures      []string     `json:"failures"`
	Notes         []string     `json:"notes,omitempty"`
	RunID         string       `json:"run_id"`
	Server        string       `json:"server"`
	Provisioning  string       `json:"provisioning"`
	StartedAt     string       `json:"started_at"`
	ElapsedS      float64      `json:"elapsed_s"`
	Machine       Machine      `json:"machine"`
	Parameters    *ordered     `json:"parameters"`
	Phases        *ordered     `json:"phases_s"`
	Figures       *ordered     `json:"figures"`
	Latency       *ordered     `json:"latency_ms"`
	ServerProcess *serverProc  `json:"server_process,omitempty"`
	LoadGenerator *serverProc  `json:"load_generator_process,omitempty"`
	MachineCPU    *MachineCPU  `json:"machine_cpu,omitempty"`
	Metrics       *ordered     `json:"metrics,omitempty"`
	Correctness   Correctness  `json:"correctness"`
	Errors        ErrorsReport `json:"errors"`
}

func newReport(scenario string, b *bench) *Report {
	return &Report{
		Tool: "aspbench", Scenario: scenario, RunID: b.runID, Server: serverList(b.o),
		StartedAt: b.base.UTC().Format(time.RFC3339), Machine: machine(),
		Parameters: newOrdered(), Phases: newOrdered(), Figures: newOrdered(), Latency: newOrdered(),
		Failures: []string{},
	}
}

// finish fills in the checks and errors and decides the outcome.
func (b *bench) finish(runErr error) {
	r := b.rep
	r.ElapsedS = round3(b.now().Seconds())
	r.Machine.LoadEnd = loadAverage()
	b.mu.Lock()
	r.Correctness.Connections = len(b.conns)
	b.mu.Unlock()
	c := &b.check
	r.Correctness.EventsChecked = c.events.Load()
	r.Correctness.JoinRestarts = c.restarts.Load()
	r.Correctness.Redelivered = c.redelivered.Load()
	r.Correctness.Examples = []string{}
	c.mu.Lock()
	r.Correctness.Gaps = c.counts[kindGap]
	r.Correctness.Reorders = c.counts[kindReorder]
	r.Correctness.Duplicates = c.counts[kindDuplicate]
	r.Correctness.Missing = c.counts[kindMissing]
	r.Correctness.Mismatched = c.counts[kindMismatch]
	r.Correctness.UnexpectedCloses = c.counts[kindClosed]
	r.Correctness.MalformedEvents = c.counts[kindMalformed]
	r.Correctness.Incomplete = c.counts[kindIncomplete]
	if runErr != nil {
		r.Failures = append(r.Failures, runErr.Error())
	}
	for _, k := range violationKinds {
		if n := c.counts[k]; n > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("correctness: %d %s, e.g. %s", n, strings.ReplaceAll(k, "_", " "), c.examples[k][0]))
			r.Correctness.Examples = append(r.Correctness.Examples, c.examples[k]...)
		}
	}
	c.mu.Unlock()
	t := &b.errs
	t.mu.Lock()
	r.Errors = ErrorsReport{Total: t.total, ByKind: map[string]int64{}, Examples: []string{}}
	for k, v := range t.byKind {
		r.Errors.ByKind[k] = v
	}
	r.Errors.Examples = append(r.Errors.Examples, t.examples...)
	if t.total > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d requests failed during the measurement, e.g. %s", t.total, t.examples[0]))
	}
	t.mu.Unlock()
	r.OK = len(r.Failures) == 0
}

func writeJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTable prints the report for people.
func writeTable(w io.Writer, r *Report) {
	status := "ok"
	if !r.OK {
		status = "FAILED"
	}
	fmt.Fprintf(w, "aspbench %s: %s   (run %s, %s, agents via %s, %.1fs)\n", r.Scenario, status, r.RunID, r.Server, r.Provisioning, r.ElapsedS)
	m := r.Machine
	fmt.Fprintf(w, "machine: %d cores, %.1f GiB, %s/%s, %s, %s, load average %.2f -> %.2f (server and load generator share it)\n",
		m.Cores, float64(m.MemoryBytes)/(1<<30), m.OS, m.Arch, m.Go, m.CPU, m.LoadStart, m.LoadEnd)
	var params []string
	r.Parameters.each(func(k string, v any) { params = append(params, fmt.Sprintf("%s=%v", k, v)) })
	fmt.Fprintf(w, "parameters: %s\n", strings.Join(params, " "))
	var phases []string
	r.Phases.each(func(k string, v any) { phases = append(phases, fmt.Sprintf("%s %.3f", k, v)) })
	fmt.Fprintf(w, "phases (s): %s\n", strings.Join(phases, ", "))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "figures")
	r.Figures.each(func(k string, v any) {
		fmt.Fprintf(w, "  %-40s %s\n", k, formatValue(v))
	})
	if len(r.Latency.keys) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%-26s %9s %9s %9s %9s %9s %9s %9s %9s\n", "latency (ms)", "count", "min", "mean", "p50", "p90", "p99", "p99.9", "max")
		r.Latency.each(func(k string, v any) {
			s := v.(LatencySummary)
			fmt.Fprintf(w, "  %-24s %9d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", k, s.Count, s.Min, s.Mean, s.P50, s.P90, s.P99, s.P999, s.Max)
		})
	}
	fmt.Fprintln(w)
	if sp := r.ServerProcess; sp != nil && sp.Before != nil && sp.After != nil {
		fmt.Fprintf(w, "server pid %d: rss %s -> %s (%+.1f MiB), peak %s, threads %d -> %d, open files %d -> %d, cpu %.2fs (%.2f cores)\n",
			sp.PID, mib(sp.Before.RSSBytes), mib(sp.After.RSSBytes), float64(sp.RSSDeltaBytes)/(1<<20), mib(sp.After.HWMBytes),
			sp.Before.Threads, sp.After.Threads, sp.Before.OpenFiles, sp.After.OpenFiles, sp.CPUSeconds, sp.CPUCores)
	}
	if sp := r.LoadGenerator; sp != nil && sp.Before != nil && sp.After != nil {
		fmt.Fprintf(w, "load generator (this process): rss %s, cpu %.2fs (%.2f cores) over the same interval\n",
			mib(sp.After.RSSBytes), sp.CPUSeconds, sp.CPUCores)
	}
	if m := r.MachineCPU; m != nil && m.BusyCores > 0 {
		fmt.Fprintf(w, "machine: %.2f of %d cores busy over the same interval, %.2f of them neither the server's nor the load generator's (the database's, on one machine)\n",
			m.BusyCores, r.Machine.Cores, m.OtherCores)
	}
	if r.Metrics != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "server /metrics")
		r.Metrics.each(func(k string, v any) { fmt.Fprintf(w, "  %-40s %s\n", k, formatValue(v)) })
	}
	c := r.Correctness
	fmt.Fprintln(w)
	fmt.Fprintf(w, "correctness: %d connections, %d events checked: gaps %d, reorders %d, duplicates %d, missing %d, mismatched %d, unexpected closes %d, malformed %d, incomplete %d (join restarts %d, redelivered across connections %d)\n",
		c.Connections, c.EventsChecked, c.Gaps, c.Reorders, c.Duplicates, c.Missing, c.Mismatched, c.UnexpectedCloses, c.MalformedEvents, c.Incomplete, c.JoinRestarts, c.Redelivered)
	fmt.Fprintf(w, "errors: %d", r.Errors.Total)
	if r.Errors.Total > 0 {
		keys := make([]string, 0, len(r.Errors.ByKind))
		for k := range r.Errors.ByKind {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "\n  %-60s %d", k, r.Errors.ByKind[k])
		}
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func formatValue(v any) string {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatFloat(x, 'f', 0, 64)
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}
