package logwriter

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedWriter records every write it gets, as one call each, and, with a
// gate, holds each write until the test lets it go.
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

func waitWrites(t *testing.T, out *gatedWriter, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got := out.snapshot(); len(got) >= n {
			return got
		}
	}
	t.Fatalf("%d writes, want %d: %q", len(out.snapshot()), n, out.snapshot())
	return nil
}

// A line after a quiet spell leaves at once; lines that follow it within
// the linger time leave together, in order, in one write, without a Sync.
func TestLinesWithinTheLingerLeaveTogether(t *testing.T) {
	out := &gatedWriter{}
	w := New(out, 1<<16, 50*time.Millisecond)
	fmt.Fprintln(w, "first")
	if got := out.snapshot(); len(got) != 1 || got[0] != "first\n" {
		t.Fatalf("after a quiet spell: writes %q, want the line at once", got)
	}
	var want strings.Builder
	for i := range 100 {
		fmt.Fprintf(w, "line %d\n", i)
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := out.snapshot(); len(got) != 1 {
		t.Fatalf("lines within the linger time were written at once: %q", got)
	}
	got := waitWrites(t, out, 2)
	if len(got) != 2 || got[1] != want.String() {
		t.Errorf("writes %q, want the 100 lines in one write", got)
	}
}

// Lines written while the output is busy wait for the write under way,
// then leave together.
func TestLinesWaitingForTheOutputLeaveTogether(t *testing.T) {
	out := &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	w := New(out, 1<<16, time.Millisecond)
	done := make(chan struct{})
	go func() {
		fmt.Fprintln(w, "first") // the flusher
		close(done)
	}()
	<-out.inside
	var want strings.Builder
	for i := range 50 {
		fmt.Fprintf(w, "line %d\n", i) // queued: returns at once
		fmt.Fprintf(&want, "line %d\n", i)
	}
	out.gate <- struct{}{}
	<-out.inside
	out.gate <- struct{}{}
	<-done
	if got := out.snapshot(); len(got) != 2 || got[0] != "first\n" || got[1] != want.String() {
		t.Errorf("writes %q, want \"first\\n\" then the 50 lines in one", got)
	}
}

// With the output busy and the queue full, a Write waits for the output
// (memory stays bounded); with the output idle, a full queue is written at
// once, without waiting for the linger time. Nothing is lost.
func TestAFullQueue(t *testing.T) {
	out := &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	w := New(out, 8, time.Hour)
	flusher := make(chan struct{})
	go func() {
		fmt.Fprint(w, "busy")
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
	// Idle now, within the (hour-long) linger: two lines wait; a third that
	// overfills the queue writes them at once.
	out.gate = nil
	fmt.Fprint(w, "dddd")
	fmt.Fprint(w, "eeee")
	fmt.Fprint(w, "ff")
	w.Sync()
	if got, want := out.snapshot(), []string{"busy", "aaaabbbb", "cccc", "ddddeeee", "ff"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("writes %q, want %q", got, want)
	}
}

// Sync writes the lines that wait for the linger time, and those queued
// behind another goroutine's write.
func TestSync(t *testing.T) {
	out := &gatedWriter{}
	w := New(out, 1<<16, time.Hour)
	fmt.Fprint(w, "a")
	fmt.Fprint(w, "b") // waits: the output wrote "a" just now
	w.Sync()
	if got, want := out.snapshot(), []string{"a", "b"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after Sync: writes %q, want %q", got, want)
	}

	out = &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	w = New(out, 1<<16, time.Hour)
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

// An error of the output reaches a Write.
func TestTheOutputsErrorIsReported(t *testing.T) {
	w := New(writerFunc(func(p []byte) (int, error) { return 0, errors.New("disk full") }), 64, time.Millisecond)
	if _, err := fmt.Fprintln(w, "x"); err == nil || err.Error() != "disk full" {
		t.Errorf("error %v, want disk full", err)
	}
}

// A slog handler's lines, logged from many goroutines at once, reach the
// output whole and in fewer writes: every line parses, none is lost.
func TestSlogLinesStayWhole(t *testing.T) {
	var out bytes.Buffer
	writes := 0
	w := New(writerFunc(func(p []byte) (int, error) { // only one write at a time
		writes++
		return out.Write(p)
	}), 4096, time.Millisecond)
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
	w.Sync()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8*500 {
		t.Fatalf("%d lines, want %d", len(lines), 8*500)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " msg=request g=") {
			t.Fatalf("a broken line: %q", l)
		}
	}
	if writes >= len(lines) {
		t.Errorf("%d writes for %d lines: none batched", writes, len(lines))
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
