// Package logwriter batches log lines into fewer write(2) calls, without
// delaying any.
//
// aspd writes one access-log line per request; written straight to stderr,
// each line is a system call of its own, on the path of every message. A
// Writer writes a line at once when no write to the output is under way,
// as before; lines that arrive while one is (from other requests) wait for
// it and then leave together, in one write. It is the group commit of the
// message path (store/batch.go) applied to the log: nothing waits for a
// batch to fill, and a busy server makes fewer, larger writes. Each Write
// is kept whole and in order, so a log/slog handler's lines (one Write
// each) never interleave.
package logwriter

import (
	"io"
	"sync"
)

// Writer is an io.Writer that batches what is written to it while a write
// to its output is under way. Its methods may be called from any
// goroutine.
type Writer struct {
	out  io.Writer
	size int

	mu      sync.Mutex
	room    sync.Cond // signalled when the flusher takes what is pending
	pending []byte    // written, not yet handed to the output
	spare   []byte    // the flusher's last batch, reused
	writing bool      // a goroutine is writing to the output (the flusher)
	err     error     // the last error of the output, reported to the next Write
}

// New returns a Writer that writes to out. At most size bytes wait while
// the output is busy; a Write that would hold more waits for the output.
func New(out io.Writer, size int) *Writer {
	w := &Writer{out: out, size: size}
	w.room.L = &w.mu
	return w
}

// Write hands p to the output: at once when nothing is being written,
// else with the next batch, after the write under way. It returns when p
// is written or queued; the error is the output's last, if any.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A full queue waits for the flusher to take it (bounded memory when
	// the output is slow, as a direct write would block).
	for w.writing && len(w.pending) > 0 && len(w.pending)+len(p) > w.size {
		w.room.Wait()
	}
	w.pending = append(w.pending, p...)
	if w.writing {
		return len(p), w.takeErr()
	}
	// This goroutine writes, batch after batch, until nothing is pending.
	w.writing = true
	for len(w.pending) > 0 {
		batch := w.pending
		w.pending = w.spare[:0]
		w.room.Broadcast()
		w.mu.Unlock()
		_, err := w.out.Write(batch)
		w.mu.Lock()
		w.spare = batch
		if err != nil {
			w.err = err
		}
	}
	w.writing = false
	w.room.Broadcast() // for Sync
	return len(p), w.takeErr()
}

// Sync waits until everything written so far is handed to the output: a
// line queued behind another goroutine's write would otherwise be lost if
// the process exited before that goroutine wrote it.
func (w *Writer) Sync() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.writing {
		w.room.Wait()
	}
}

func (w *Writer) takeErr() error {
	err := w.err
	w.err = nil
	return err
}
