package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// One write per batch on a WebSocket. coder/websocket flushes its buffer,
// one write system call, at the end of every message, and has no way to
// write several messages and flush once. So the connection it writes to is
// a batchConn: while the replay writer is writing a batch of events
// (hold ... flush), every frame the library writes, the writer's and any
// other goroutine's (a pong, a ping, a close), is appended to one buffer in
// order, and flush sends the buffer in one write under the batch's
// deadline. Outside a batch, writes go straight through, as before. This
// keeps the library, its framing and its control-frame handling, and adds
// no copy of its code; the cost is one memory copy per frame.

// batchBufs recycles batch buffers: a connection holds one only during a
// batch, so an idle connection holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// maxPooledBatch: larger buffers are dropped rather than kept in the pool.
const maxPooledBatch = 256 << 10

// batchConn is the socket under a WebSocket connection, able to hold writes
// until flush.
type batchConn struct {
	net.Conn
	mu      sync.Mutex // held across the socket write, so frames never interleave
	holding bool
	buf     *[]byte // the held frames, from batchBufs; nil when not holding
	err     error   // a flush failed: the stream is torn, every later write fails
	aborted atomic.Bool
}

// errAborted: the writer's context ended (its write timeout fired, or the
// connection finished) while a write was pending.
var errAborted = fmt.Errorf("websocket write aborted: %w", context.DeadlineExceeded)

// abort fails every write, the one blocked now included (a write holds mu,
// so abort does not take it): a write deadline in the past wakes it.
func (b *batchConn) abort() {
	b.aborted.Store(true)
	_ = b.Conn.SetWriteDeadline(time.Unix(1, 0))
}

// hold starts a batch: writes are held until flush.
func (b *batchConn) hold() {
	b.mu.Lock()
	if !b.holding {
		b.holding = true
		b.buf = batchBufs.Get().(*[]byte)
	}
	b.mu.Unlock()
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil && b.aborted.Load() {
		b.err = errAborted
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.holding {
		*b.buf = append(*b.buf, p...)
		return len(p), nil
	}
	return b.Conn.Write(p)
}

// flush ends the batch: the held frames leave in one write, which gives up
// at deadline with an error that wraps context.DeadlineExceeded (the replay
// writer's slow consumer). After a failed flush the stream may end inside a
// frame, so every later write fails too and the library closes the socket.
func (b *batchConn) flush(deadline time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.holding {
		return b.err
	}
	buf := b.buf
	b.holding, b.buf = false, nil
	defer func() {
		if cap(*buf) <= maxPooledBatch {
			*buf = (*buf)[:0]
			batchBufs.Put(buf)
		}
	}()
	if b.err == nil && b.aborted.Load() {
		b.err = errAborted
	}
	if b.err != nil || len(*buf) == 0 {
		return b.err
	}
	// A deadline only for this write: the library bounds its own writes
	// (pongs, close frames) by closing the socket.
	if err := b.Conn.SetWriteDeadline(deadline); err != nil {
		b.err = err
		return err
	}
	_, err := b.Conn.Write(*buf)
	if err == nil {
		err = b.Conn.SetWriteDeadline(time.Time{})
	}
	if err == nil && b.aborted.Load() {
		err = errAborted // abort's deadline may have been cleared just now
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		b.err = err
	}
	return err
}

// batchHijacker hands websocket.Accept the hijacked socket wrapped in a
// batchConn, which it then writes to.
type batchHijacker struct {
	http.ResponseWriter
	conn *batchConn
}

func (h *batchHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("http.ResponseWriter does not implement http.Hijacker")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil { // empty, as net/http flushes the response head
		nc.Close()
		return nil, nil, err
	}
	h.conn = &batchConn{Conn: nc}
	// net/http hands over 4 KiB read and write buffers, which the library
	// keeps for the connection's life: two thirds of an idle connection's
	// heap. Smaller ones take their place. Writing, the batchConn is the
	// buffer that counts (a frame larger than wsWriteBuffer reaches it in
	// two or three appends, not one); reading, frames are small (acks,
	// pongs) and a larger payload is read straight into the library's
	// buffer. A client that sent bytes after its upgrade request, already
	// in net/http's buffer, keeps that buffer: the library reads what is
	// buffered there first, and only there.
	br := brw.Reader
	if br.Buffered() == 0 {
		br = bufio.NewReaderSize(nc, wsReadBuffer)
	}
	// Every write goes through h.conn, so none reaches the socket past the
	// batchConn.
	return h.conn, bufio.NewReadWriter(br, bufio.NewWriterSize(h.conn, wsWriteBuffer)), nil
}

// The buffers a WebSocket connection keeps (net/http's are 4 KiB each).
const (
	wsReadBuffer  = 512
	wsWriteBuffer = 1024
)

// Unwrap lets http.ResponseController reach the response writer below.
func (h *batchHijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }
