// Package logwriter batches log lines into fewer write(2) calls.
//
// aspd writes one access-log line per request; written straight to stderr,
// each line is a system call of its own, on the path of every message. A
// Writer writes a line at once when the output has been idle for its
// linger time (a quiet server logs as before). A line that follows another
// sooner, or arrives while a write is under way, waits at most the linger
// time and leaves with the lines around it, in one write: under load, one
// write(2) per linger time instead of one per request. Each Write is kept
// whole and in order, so a log/slog handler's lines (one Write each) never
// interleave. Lines are at most linger late; a crash loses at most those.
package logwriter

import (
	"io"
	"sync"
	"time"
)

// Writer is an io.Writer that batches what is written to it. Its methods
// may be called from any goroutine.
type Writer struct {
	out    io.Writer
	size   int
	linger time.Duration

	mu      sync.Mutex
	idle    sync.Cond // signalled when a batch is taken and when the writes end
	pending []byte    // written, not yet handed to the output
	spare   []byte    // the last batch's buffer, reused
	writing bool      // a goroutine is writing to the output
	armed   bool      // the timer will write what is pending
	timer   *time.Timer
	last    time.Time // when the last write to the output ended
	err     error     // the output's last error, for the next Write
}

// New returns a Writer that writes to out, holding lines at most linger
// and at most size bytes (past size, a Write waits for the output).
func New(out io.Writer, size int, linger time.Duration) *Writer {
	w := &Writer{out: out, size: size, linger: linger}
	w.idle.L = &w.mu
	return w
}

// Write hands p to the output: at once when the output has been idle for
// the linger time, else with the next batch, at most the linger time
// later. The error is the output's last, if any.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) > 0 && len(w.pending)+len(p) > w.size {
		if !w.writing {
			w.flushLocked() // full: no need to wait for the timer
			continue
		}
		w.idle.Wait() // bounded memory when the output is slow
	}
	w.pending = append(w.pending, p...)
	switch {
	case w.writing || w.armed:
		// A batch is under way or due: p leaves with it or the next.
	case time.Since(w.last) < w.linger:
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(w.linger, w.tick)
		} else {
			w.timer.Reset(w.linger)
		}
	default:
		w.flushLocked()
	}
	return len(p), w.takeErr()
}

// tick is the timer: it writes what is pending, unless a write under way
// will.
func (w *Writer) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	if !w.writing {
		w.flushLocked()
	}
}

// flushLocked writes what is pending, batch after batch, until nothing is;
// the lock is released during each write, so that lines keep queueing.
func (w *Writer) flushLocked() {
	w.writing = true
	for len(w.pending) > 0 {
		batch := w.pending
		w.pending = w.spare[:0]
		w.idle.Broadcast() // room for the writers that wait
		w.mu.Unlock()
		_, err := w.out.Write(batch)
		w.mu.Lock()
		w.spare = batch
		if err != nil {
			w.err = err
		}
	}
	w.writing = false
	w.last = time.Now()
	w.idle.Broadcast()
}

func (w *Writer) takeErr() error {
	err := w.err
	w.err = nil
	return err
}

// Sync writes what is pending and waits until everything written so far is
// handed to the output; aspd calls it before it exits.
func (w *Writer) Sync() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.writing {
		w.idle.Wait()
	}
	w.flushLocked()
}
