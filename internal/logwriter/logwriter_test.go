package logwriter

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// gatedWriter records every write it gets, as one call each, and holds
// each write until the test lets it go.
type gatedWriter struct {
	mu     sync.Mutex
	writes []string
	gate   chan struct{} // nil: writes pass at once
	inside chan struct{} // a write has begun
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	if g.gate != nil {
		g.inside <- struct{}{}
		<-g.gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes = append(g.writes, string(p))
	return len(p), nil
}

func (g *gatedWriter) snapshot() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.writes...)
}

// A line written while nothing else is written reaches the output at
// once, in a write of its own.
func TestALoneLineLeavesAtOnce(t *testing.T) {
	out := &gatedWriter{}
	w := New(out, 1<<16)
	fmt.Fprintln(w, "one")
	fmt.Fprintln(w, "two")
	if got := out.snapshot(); fmt.Sprint(got) != fmt.Sprint([]string{"one\n", "two\n"}) {
		t.Errorf("writes %q", got)
	}
}

// Lines written while the output is busy leave together, in order, in
// one write after the one under way.
func TestLinesWaitingForTheOutputLeaveTogether(t *testing.T) {
	out := &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	w := New(out, 1<<16)
	done := make(chan struct{})
	go func() {
		fmt.Fprintln(w, "first")
		close(done)
	}()
	<-out.inside // "first" is being written
	for i := range 50 {
		fmt.Fprintf(w, "line %d\n", i) // queued: returns at once
	}
	out.gate <- struct{}{} // "first" done; the flusher takes the 50 lines
	<-out.inside
	out.gate <- struct{}{}
	<-done
	got := out.snapshot()
	var want strings.Builder
	for i := range 50 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if len(got) != 2 || got[0] != "first\n" || got[1] != want.String() {
		t.Errorf("writes %q, want \"first\\n\" then the 50 lines in one", got)
	}
}

// With the output busy and the queue full, a Write waits for the flusher
// to take the queue (memory stays bounded), and nothing is lost.
func TestAFullQueueWaits(t *testing.T) {
	out := &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	w := New(out, 8)
	flusher := make(chan struct{})
	go func() {
		fmt.Fprint(w, "busy") // the flusher: it writes every batch
		close(flusher)
	}()
	<-out.inside
	fmt.Fprint(w, "aaaa")
	fmt.Fprint(w, "bbbb") // 8 bytes pending: full
	third := make(chan struct{})
	go func() {
		fmt.Fprint(w, "cccc")
		close(third)
	}()
	select {
	case <-third:
		t.Fatal("a write past the queue's size returned while the output was busy")
	default:
	}
	out.gate <- struct{}{} // "busy" done: the flusher takes aaaabbbb, cccc queues
	<-third
	<-out.inside
	out.gate <- struct{}{}
	<-out.inside
	out.gate <- struct{}{}
	<-flusher
	if got, want := out.snapshot(), []string{"busy", "aaaabbbb", "cccc"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("writes %q, want %q", got, want)
	}
}

// An error of the output reaches a Write.
func TestTheOutputsErrorIsReported(t *testing.T) {
	w := New(writerFunc(func(p []byte) (int, error) { return 0, errors.New("disk full") }), 64)
	if _, err := fmt.Fprintln(w, "x"); err == nil || err.Error() != "disk full" {
		t.Errorf("error %v, want disk full", err)
	}
}

// A slog handler's lines, logged from many goroutines at once, reach the
// output whole: every line parses, and none is lost.
func TestSlogLinesStayWhole(t *testing.T) {
	var out bytes.Buffer
	w := New(&out, 4096) // only the flusher writes to out
	log := slog.New(slog.NewTextHandler(w, nil))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				log.Info("request", "g", g, "i", i, "pad", strings.Repeat("x", i%50))
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8*500 {
		t.Fatalf("%d lines, want %d", len(lines), 8*500)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " msg=request g=") {
			t.Fatalf("a broken line: %q", l)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Sync returns once the lines queued behind another goroutine's write are
// written.
func TestSyncWaitsForQueuedLines(t *testing.T) {
	out := &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	w := New(out, 1<<16)
	go fmt.Fprint(w, "busy")
	<-out.inside
	fmt.Fprint(w, "queued")
	synced := make(chan struct{})
	go func() {
		w.Sync()
		close(synced)
	}()
	out.gate <- struct{}{}
	<-out.inside
	select {
	case <-synced:
		t.Fatal("Sync returned before the queued line was written")
	default:
	}
	out.gate <- struct{}{}
	<-synced
	if got, want := out.snapshot(), []string{"busy", "queued"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("writes %q, want %q", got, want)
	}
}
