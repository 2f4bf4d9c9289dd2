package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
)

// connect is WS /connect: one stream per connection carrying every session
// event the agent may see, replay first, then live.
func (s *Server) connect(c echo.Context) error {
	handle := agent(c)
	ws, err := websocket.Accept(c.Response(), c.Request(), &websocket.AcceptOptions{})
	if err != nil {
		return nil // Accept has written the HTTP error
	}
	ws.SetReadLimit(s.cfg.WSReadLimit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &wsTransport{ws: ws}
	conn, err := s.hub.Attach(ctx, handle, tr)
	if err != nil {
		ws.Close(websocket.StatusTryAgainLater, "server shutting down")
		return nil
	}
	// The reader: answers pings/pongs and notices the peer going away.
	// Clients send nothing else; a data message is ignored.
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				var ce websocket.CloseError
				if errors.As(err, &ce) {
					conn.Close(int(ce.Code), "client closed")
				} else {
					conn.Close(int(websocket.StatusGoingAway), "read failed")
				}
				cancel()
				return
			}
		}
	}()
	// Keepalive: a peer that stops answering pings is closed.
	go func() {
		t := time.NewTicker(s.cfg.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-conn.Done():
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(ctx, s.cfg.PingInterval)
				err := ws.Ping(pctx)
				pcancel()
				if err != nil && ctx.Err() == nil {
					conn.Close(int(websocket.StatusPolicyViolation), "ping timeout")
					return
				}
			}
		}
	}()
	conn.Run(ctx)
	// cancel (deferred) tears the socket down at once; let a close handshake
	// the server started (4001, 1001, 1008, ...) put its close frame on the
	// wire first, or the peer sees an abnormal closure instead of the code.
	tr.wait(15 * time.Second)
	return nil
}

type wsTransport struct {
	ws      *websocket.Conn
	mu      sync.Mutex
	closing chan struct{} // set by Close; closed when the close handshake is over
}

func (t *wsTransport) Write(ctx context.Context, msg []byte) error {
	return t.ws.Write(ctx, websocket.MessageText, msg)
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
