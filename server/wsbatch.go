package server

import (
	"bufio"
	"context"
	"encoding/binary"
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
// a batchConn: the replay writer's event frames are framed here
// (writeText) and held in one buffer, and every frame the library writes
// while a batch is held (a pong, a ping, a close, from any goroutine) is
// appended to the same buffer, in order; flush sends the buffer in one
// write under the batch's deadline. Outside a batch, the library's writes
// go straight through. The library keeps the handshake, the reading and
// the control frames; the cost is one memory copy per frame.

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
	// closeSent: the library wrote its close frame; no data frame may
	// follow it (RFC 6455 §5.5.1).
	closeSent bool
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

// Write is the library's write: since the event frames are written by
// writeText, only its control frames (ping, pong, close), each in one call
// from its buffer's flush (wsWriteBuffer holds any control frame whole).
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil && b.aborted.Load() {
		b.err = errAborted
	}
	if b.err != nil {
		return 0, b.err
	}
	if isCloseFrame(p) {
		b.closeSent = true
	}
	if b.holding {
		*b.buf = append(*b.buf, p...)
		return len(p), nil
	}
	return b.Conn.Write(p)
}

// writeText appends one event, as a final unmasked text frame (RFC 6455
// §5.2), to the batch, starting one if none is held. It frames the event
// itself rather than through the library's Write, which took two channel
// locks, a buffer reset and a copy through its own buffer per frame: 7.6%
// of aspd's CPU under the chat load (docs/benchmarks.md). The library still
// does the handshake, the reading and every control frame, which reach
// Write whole, so frames never interleave; compression is never
// negotiated (AcceptOptions' default), so a frame is its payload.
func (b *batchConn) writeText(p []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil && b.aborted.Load() {
		b.err = errAborted
	}
	if b.err != nil {
		return b.err
	}
	if b.closeSent {
		return net.ErrClosed
	}
	if !b.holding {
		b.holding = true
		b.buf = batchBufs.Get().(*[]byte)
	}
	*b.buf = append(appendTextHeader(*b.buf, len(p)), p...)
	return nil
}

// appendTextHeader appends the header of a final, unmasked text frame with
// an n-byte payload: the 7-bit length, or 126 and 16 bits, or 127 and 64.
func appendTextHeader(b []byte, n int) []byte {
	const finText = 0x80 | 0x1
	switch {
	case n <= 125:
		return append(b, finText, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, finText, 126), uint16(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, finText, 127), uint64(n))
	}
}

// isCloseFrame reports whether p is exactly one final, unmasked close
// frame, as the library writes it (a close payload is at most 125 bytes).
func isCloseFrame(p []byte) bool {
	return len(p) >= 2 && p[0] == 0x80|0x8 && p[1]&0x80 == 0 && int(p[1]) <= 125 && len(p) == 2+int(p[1])
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
