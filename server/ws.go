package server

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
)

// connect is WS /connect: one stream per connection carrying every session
// event the agent may see, replay first, then live.
func (s *Server) connect(c echo.Context) error {
	handle := agent(c)
	hj := &batchHijacker{ResponseWriter: c.Response()}
	ws, err := websocket.Accept(hj, c.Request(), &websocket.AcceptOptions{})
	if err != nil {
		return nil // Accept has written the HTTP error
	}
	ws.SetReadLimit(s.cfg.WSReadLimit)
	ctx, cancel := context.WithCancel(context.Background())
	tr := &wsTransport{ws: ws, bc: hj.conn}
	conn, err := s.app.Connect(ctx, handle, token(c), tr)
	if err != nil {
		cancel()
		ws.Close(websocket.StatusTryAgainLater, "server shutting down")
		return nil
	}
	// Keepalive: a peer that stops answering pings is closed. A timer, not a
	// goroutine with a ticker: between pings a connection holds no goroutine
	// for it, which matters at tens of thousands of idle connections.
	var keepalive *time.Timer
	// Armed only after the assignment, so the callback always sees it.
	keepalive = time.AfterFunc(time.Duration(math.MaxInt64), func() {
		pctx, pcancel := context.WithTimeout(ctx, s.cfg.PingInterval)
		err := conn.Ping(pctx) // its pong also confirms what was written
		pcancel()
		if err != nil {
			if ctx.Err() == nil {
				conn.Close(int(websocket.StatusPolicyViolation), "ping timeout")
			}
			return
		}
		keepalive.Reset(s.cfg.PingInterval)
	})
	keepalive.Reset(s.cfg.PingInterval)
	conn.Start()

	// The reader owns the connection's lifetime: it answers pings, reads
	// pongs (which confirm delivery) and acks, notices the peer going away,
	// and tears everything down. Any other client message is ignored (unless
	// it is a text message that is not UTF-8). The
	// HTTP handler returns now, so an idle connection costs one goroutine,
	// this one.
	logEnd := s.detachAccessLog(c)
	go func() {
		defer logEnd()
		defer cancel()
		for {
			typ, msg, err := ws.Read(ctx)
			if err != nil {
				var ce websocket.CloseError
				if errors.As(err, &ce) {
					conn.Close(int(ce.Code), "client closed")
				} else {
					conn.Close(int(websocket.StatusGoingAway), "read failed")
				}
				break
			}
			if typ != websocket.MessageText {
				continue
			}
			// RFC 6455 §8.1: a text message that is not UTF-8 fails the
			// connection with 1007. The library does not check it.
			if !utf8.Valid(msg) {
				conn.Close(int(websocket.StatusInvalidFramePayloadData), "text message is not valid UTF-8")
				continue // read on until the close handshake ends
			}
			ack, err := protocol.DecodeClientMessage(msg)
			if err != nil {
				conn.Close(int(websocket.StatusPolicyViolation), closeReason("invalid ack: "+err.Error()))
				continue // read on until the close handshake ends
			}
			if ack != nil {
				conn.Ack(ack.SessionID, ack.Sequence)
			}
		}
		keepalive.Stop()
		conn.Finish()
		// cancel (deferred) tears the socket down at once; let a close
		// handshake the server started (4001, 1001, 1008, ...) put its close
		// frame on the wire first, or the peer sees an abnormal closure.
		tr.wait(15 * time.Second)
	}()
	return nil
}

type wsTransport struct {
	ws      *websocket.Conn
	bc      *batchConn // the socket under ws
	watch   sync.Once  // ties the writer's context to bc, once per connection
	mu      sync.Mutex
	closing chan struct{} // set by Close; closed when the close handshake is over
}

// Write queues one event frame for the next Flush (batchConn.writeText),
// so it takes no deadline of its own; the writer's deadline bounds the
// Flush. It may still wait behind a control frame another goroutine is
// writing to a peer that does not read: ctx (the connection's, which the
// write timeout cancels) aborts that wait, through one context.AfterFunc
// per connection rather than per frame.
func (t *wsTransport) Write(ctx context.Context, msg []byte) error {
	t.watch.Do(func() { context.AfterFunc(ctx, t.bc.abort) })
	return t.bc.writeText(msg)
}

// Flush sends the queued frames in one write.
func (t *wsTransport) Flush(deadline time.Time) error { return t.bc.flush(deadline) }

func (t *wsTransport) Ping(ctx context.Context) error { return t.ws.Ping(ctx) }

// closeReason fits a close reason into the 123 bytes a close frame allows.
func closeReason(s string) string {
	if len(s) <= 123 {
		return s
	}
	s = s[:120]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

func (t *wsTransport) Close(code int, reason string) {
	t.mu.Lock()
	if t.closing != nil {
		t.mu.Unlock()
		return
	}
	done := make(chan struct{})
	t.closing = done
	t.mu.Unlock()
	// Close blocks for the closing handshake (bounded by the library); do it
	// off the caller's goroutine so a slow peer never stalls the hub.
	go func() {
		defer close(done)
		t.ws.Close(websocket.StatusCode(code), reason)
	}()
}

// wait waits, at most d, for a close handshake started by Close to finish.
func (t *wsTransport) wait(d time.Duration) {
	t.mu.Lock()
	done := t.closing
	t.mu.Unlock()
	if done == nil {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}
