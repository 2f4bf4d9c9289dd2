package server

import (
	"context"
	"errors"
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
	return nil
}

type wsTransport struct{ ws *websocket.Conn }

func (t *wsTransport) Write(ctx context.Context, msg []byte) error {
	return t.ws.Write(ctx, websocket.MessageText, msg)
}

func (t *wsTransport) Close(code int, reason string) {
	// Close blocks for the closing handshake (bounded by the library); do it
	// off the caller's goroutine so a slow peer never stalls the hub.
	go t.ws.Close(websocket.StatusCode(code), reason)
}
