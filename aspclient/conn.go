package aspclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/protocol"
)

// DefaultReadLimit is the largest frame a Conn accepts unless WithReadLimit
// says otherwise: well above the largest event aspd sends.
const DefaultReadLimit = 16 << 20

// Conn is one WebSocket /connect connection, the layer under Stream: it
// passes on every frame as it arrives, duplicates included, and
// acknowledges only what it is told to. Programs that observe the delivery
// itself (a benchmark counting duplicates and gaps) use it; agents use
// Stream, which adds reconnection, de-duplication and acknowledgements.
//
// Next must not be called concurrently with itself; Ack, Ping and Close
// may be called from any goroutine.
type Conn struct {
	ws *websocket.Conn
}

// Dial opens WS /connect with the client's token. The handshake is bounded
// by the client's timeout (WithTimeout) and ctx; ctx does not bound the
// connection afterwards. A refused handshake is an *Error (401 for a bad
// token).
func (c *Client) Dial(ctx context.Context) (*Conn, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u := c.connectURL()
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: c.http,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + c.token}},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			return nil, DecodeError(resp.StatusCode, b)
		}
		return nil, fmt.Errorf("connecting to %s: %w", u, err)
	}
	ws.SetReadLimit(c.readLimit)
	return &Conn{ws: ws}, nil
}

// connectURL is the ws:// or wss:// URL of /connect under the base URL.
func (c *Client) connectURL() string {
	u, _ := url.Parse(c.base) // checked by New
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/connect"
	return u.String()
}

// Next returns the next frame the server sent: an event (events.json) as
// raw JSON, see ParseEvent. It returns a *CloseError when the server
// closed the connection, or another error when the connection was lost.
//
// Cancelling ctx tears the connection down without a close frame (a
// property of the WebSocket library); to stop cleanly, call Close from
// another goroutine and let Next return.
func (c *Conn) Next(ctx context.Context) ([]byte, error) {
	_, msg, err := c.ws.Read(ctx)
	if err != nil {
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			return nil, &CloseError{Code: int(ce.Code), Reason: ce.Reason}
		}
		return nil, fmt.Errorf("connection lost: %w", err)
	}
	return msg, nil
}

// ParseEvent decodes a frame of Next; ok is false for a frame that is not
// an event (no session_id or sequence), which a client ignores.
func ParseEvent(frame []byte) (ev protocol.Event, ok bool) {
	if json.Unmarshal(frame, &ev) != nil || ev.SessionID == "" || ev.Sequence < 1 {
		return protocol.Event{}, false
	}
	return ev, true
}

// Ack confirms the events of a session up to seq (docs/delivery.md,
// "Confirmation"): acknowledgements are cumulative per session, and a
// later connection resumes after the highest one the server read.
func (c *Conn) Ack(ctx context.Context, sessionID string, seq int64) error {
	b, err := json.Marshal(protocol.Ack{Type: protocol.ClientMessageAck, SessionID: sessionID, Sequence: seq})
	if err != nil {
		return err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("acknowledging %s #%d: %w", sessionID, seq, err)
	}
	return nil
}

// Ping checks the connection end to end; it needs a concurrent Next to
// read the answer.
func (c *Conn) Ping(ctx context.Context) error { return c.ws.Ping(ctx) }

// Close closes the connection normally (1000) with reason, after the acks
// already written, and waits (up to 5 seconds) for the server's close
// frame; a concurrent Next then returns.
func (c *Conn) Close(reason string) error {
	return c.ws.Close(websocket.StatusNormalClosure, reason)
}

// CloseNow drops the connection without a close frame.
func (c *Conn) CloseNow() error { return c.ws.CloseNow() }
