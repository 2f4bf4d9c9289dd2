package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// countingListener counts the writes to the sockets it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// wsPair starts a WebSocket server whose handler hands its wsTransport to
// the test, and dials it.
func wsPair(t testing.TB) (*wsTransport, *websocket.Conn, *countingListener) {
	t.Helper()
	got := make(chan *wsTransport, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj := &batchHijacker{ResponseWriter: w}
		ws, err := websocket.Accept(hj, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		got <- &wsTransport{ws: ws, bc: hj.conn}
		// The server side reads too (pongs, the close frame), as the real
		// handler's reader does.
		go func() {
			for {
				if _, _, err := ws.Read(context.Background()); err != nil {
					return
				}
			}
		}()
	}))
	ln := &countingListener{Listener: srv.Listener}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, strings.Replace(srv.URL, "http", "ws", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseNow() })
	select {
	case tr := <-got:
		return tr, client, ln
	case <-ctx.Done():
		t.Fatal("no server side")
		return nil, nil, nil
	}
}

// TestWSBatchOneWrite: N event frames written as one batch reach the socket
// in one write system call (they took N before), and the peer reads all of
// them, in order. A ping written by another goroutine during the batch
// leaves with it, after the frames written before it.
func TestWSBatchOneWrite(t *testing.T) {
	tr, client, ln := wsPair(t)
	const n = 50
	before := ln.writes.Load()
	for i := range n {
		if err := tr.Write(context.Background(), fmt.Appendf(nil, `{"sequence":%d}`, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if w := ln.writes.Load() - before; w != 0 {
		t.Fatalf("%d socket writes before the flush, want 0", w)
	}
	if err := tr.Flush(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if w := ln.writes.Load() - before; w != 1 {
		t.Fatalf("%d socket writes for a batch of %d events, want 1", w, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		_, msg, err := client.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"sequence":%d}`, i+1); string(msg) != want {
			t.Fatalf("message %d is %s, want %s", i, msg, want)
		}
	}
	// Outside a batch, a frame goes straight out: a ping (answered by the
	// client's reader, which is running: client.Read above is done, so
	// read on in the background).
	go func() {
		for {
			if _, _, err := client.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	before = ln.writes.Load()
	if err := tr.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if w := ln.writes.Load() - before; w != 1 {
		t.Fatalf("%d socket writes for a ping outside a batch, want 1", w)
	}
}

// TestWSBatchDeadline: a peer that stops reading fails the flush at its
// deadline, with an error that is a context.DeadlineExceeded (the writer
// closes 1008 slow consumer), and every later write fails.
func TestWSBatchDeadline(t *testing.T) {
	tr, _, _ := wsPair(t) // the client never reads
	big := []byte(`"` + strings.Repeat("x", 64<<10) + `"`)
	var err error
	for i := 0; i < 1000 && err == nil; i++ { // up to 64 MiB: more than any socket buffers
		for range 16 {
			if err = tr.Write(context.Background(), big); err != nil {
				break
			}
		}
		if err == nil {
			err = tr.Flush(time.Now().Add(200 * time.Millisecond))
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush to a peer that does not read: %v, want a deadline error", err)
	}
	if err := tr.Write(context.Background(), []byte(`{}`)); err == nil {
		if err = tr.Flush(time.Now().Add(time.Second)); err == nil {
			t.Fatal("a write after a failed flush succeeded")
		}
	}
}

// TestWSBatchAbort: the writer's context ending (its write timeout) aborts
// a flush blocked on a peer that does not read, well before the flush's
// own deadline, with a deadline error; later writes fail.
func TestWSBatchAbort(t *testing.T) {
	tr, _, _ := wsPair(t) // the client never reads
	ctx, cancel := context.WithCancel(context.Background())
	big := []byte(`"` + strings.Repeat("x", 64<<10) + `"`)
	done := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 1000 && err == nil; i++ { // up to 64 MiB: more than any socket buffers
			for range 16 {
				if err = tr.Write(ctx, big); err != nil {
					break
				}
			}
			if err == nil {
				err = tr.Flush(time.Now().Add(time.Minute))
			}
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the writes fill the socket's buffers
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("aborted flush: %v, want a deadline error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the blocked flush was not aborted")
	}
	if err := tr.Write(context.Background(), []byte(`{}`)); err == nil {
		t.Fatal("a write after the abort succeeded")
	}
}

// TestWSBatchFrameSizes: event frames (framed by batchConn.writeText) of
// every size around the connection's small write buffer (1024) and around
// the three header forms (7-bit, 16-bit and 64-bit lengths, RFC 6455
// §5.2) leave a batch in one write, and reach a standard client whole, as
// text, and in order.
func TestWSBatchFrameSizes(t *testing.T) {
	tr, client, ln := wsPair(t)
	client.SetReadLimit(1 << 20)
	sizes := []int{0, 1, 124, 125, 126, 127, 1024 - 1, 1024, 1024 + 1, 3*1024 + 7,
		65535, 65536, 65537, 200 << 10, 5}
	var want [][]byte
	before := ln.writes.Load()
	for i, n := range sizes {
		msg := bytes.Repeat([]byte{byte('a' + i)}, n)
		want = append(want, msg)
		if err := tr.Write(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Flush(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if w := ln.writes.Load() - before; w != 1 {
		t.Fatalf("%d socket writes for one batch, want 1", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range want {
		typ, msg, err := client.Read(ctx)
		if err != nil {
			t.Fatalf("message %d (%d bytes): %v", i, sizes[i], err)
		}
		if typ != websocket.MessageText || !bytes.Equal(msg, want[i]) {
			t.Fatalf("message %d: a %v message of %d bytes, want text of %d", i, typ, len(msg), len(want[i]))
		}
	}
}

// TestWSEarlyFrameAfterUpgrade: a client that sends a frame in the same
// packet as its upgrade request (so it sits in net/http's read buffer at the
// hijack) has it read: its ping is answered.
func TestWSEarlyFrameAfterUpgrade(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj := &batchHijacker{ResponseWriter: w}
		ws, err := websocket.Accept(hj, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		go func() { // answers pings
			for {
				if _, _, err := ws.Read(context.Background()); err != nil {
					return
				}
			}
		}()
	}))
	t.Cleanup(srv.Close)
	nc, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	payload := []byte("early-ping")
	mask := [4]byte{1, 2, 3, 4}
	frame := []byte{0x89, 0x80 | byte(len(payload))} // FIN+ping, masked
	frame = append(frame, mask[:]...)
	for i, c := range payload {
		frame = append(frame, c^mask[i%4])
	}
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := nc.Write(append([]byte(req), frame...)); err != nil { // one write
		t.Fatal(err)
	}
	var got []byte
	want := append([]byte{0x8a, byte(len(payload))}, payload...) // the pong, unmasked
	buf := make([]byte, 512)
	for !bytes.Contains(got, want) {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("no pong for the early ping (read %q): %v", got, err)
		}
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 101")) {
		t.Fatalf("answer %q, want a 101 first", got)
	}
}

// TestWSNoDataFrameAfterClose: once the library has written its close
// frame, an event write fails instead of putting a data frame after it
// (RFC 6455 §5.5.1), and the peer reads the events before the close, then
// the close.
func TestWSNoDataFrameAfterClose(t *testing.T) {
	tr, client, _ := wsPair(t)
	if err := tr.Write(context.Background(), []byte(`{"sequence":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Flush(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tr.Close(4001, "replaced")
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.bc.mu.Lock()
		sent := tr.bc.closeSent
		tr.bc.mu.Unlock()
		if sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the close frame was not written")
		}
		time.Sleep(time.Millisecond)
	}
	if err := tr.Write(context.Background(), []byte(`{"sequence":2}`)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after the close frame: %v, want net.ErrClosed", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, msg, err := client.Read(ctx); err != nil || string(msg) != `{"sequence":1}` {
		t.Fatalf("first read: %q, %v", msg, err)
	}
	_, msg, err := client.Read(ctx)
	if websocket.CloseStatus(err) != 4001 {
		t.Fatalf("second read: %q, %v; want the close 4001", msg, err)
	}
}

// TestIsCloseFrame: only a whole close frame as the library writes it sets
// closeSent; a ping, a pong or a text frame, or a close frame's bytes cut
// short, do not.
func TestIsCloseFrame(t *testing.T) {
	cases := []struct {
		p    []byte
		want bool
	}{
		{[]byte{0x88, 0x00}, true},
		{[]byte{0x88, 0x02, 0x03, 0xe8}, true},
		{[]byte{0x88, 0x03, 0x03, 0xe8}, false}, // cut short
		{[]byte{0x89, 0x00}, false},             // ping
		{[]byte{0x8a, 0x00}, false},             // pong
		{[]byte{0x81, 0x02, 'h', 'i'}, false},   // text
		{[]byte{0x88}, false},
		{[]byte{0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8}, false}, // masked: a client's
	}
	for _, c := range cases {
		if got := isCloseFrame(c.p); got != c.want {
			t.Errorf("isCloseFrame(% x) = %v, want %v", c.p, got, c.want)
		}
	}
}

// BenchmarkWSWrite: one event frame written and flushed to a reading peer
// (the write system call included), per operation.
func BenchmarkWSWrite(b *testing.B) {
	tr, client, _ := wsPair(b)
	go func() {
		for {
			if _, _, err := client.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	msg := bytes.Repeat([]byte("x"), 400)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := tr.Write(context.Background(), msg); err != nil {
			b.Fatal(err)
		}
		if err := tr.Flush(time.Now().Add(5 * time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}
