package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/protocol"
)

const (
	backoffMin   = time.Second
	backoffMax   = 30 * time.Second
	dialTimeout  = 30 * time.Second
	seenCapacity = 1 << 16 // (session, sequence) pairs remembered for de-duplication
	readLimit    = 16 << 20
	pingInterval = 30 * time.Second
)

// closeUnauthorized is the close code of a rotated or revoked token or a
// deleted agent: reconnecting with the same token cannot succeed.
const closeUnauthorized = 4001

func listen(a *app, c *command, args []string) error {
	fs := a.flags(c)
	pretty := fs.Bool("pretty", false, "human format: SESSION #SEQ TYPE details")
	reconnect := fs.Bool("reconnect", false, "reconnect with backoff (1s doubling to 30s) after the connection drops")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cl, err := a.agentClient()
	if err != nil {
		return err
	}
	u, err := connectURL(cl.base)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(a.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second interrupt during the close kills
	l := &listener{url: u, server: cl.base, token: cl.token, pretty: *pretty, out: a.stdout, log: a.stderr, seen: newSeenSet(seenCapacity)}
	return l.run(ctx, *reconnect)
}

// connectURL maps the server's base URL to its WebSocket /connect URL.
func connectURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", usageErrorf("--server %q is not a URL: %v", base, err)
	}
	switch u.Scheme {
	case "http", "ws":
		u.Scheme = "ws"
	case "https", "wss":
		u.Scheme = "wss"
	default:
		return "", usageErrorf("--server %q must be an http:// or https:// URL", base)
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/connect"
	return u.String(), nil
}

// listener prints the events of WS /connect, one line each, never the
// same (session_id, sequence) twice: a join replays the transcript and a
// reconnection may resend events (delivery is at least once).
type listener struct {
	url, token string
	server     string // the --server URL, for error messages
	pretty     bool
	out, log   io.Writer
	seen       *seenSet
}

// closeError is a close frame sent by the server.
type closeError struct {
	code   websocket.StatusCode
	reason string
}

func (e *closeError) Error() string {
	return fmt.Sprintf("server closed the connection: %d %s", int(e.code), e.reason)
}

// run connects until ctx is done (nil: interrupted, closed normally) or,
// without reconnect, until the connection ends.
func (l *listener) run(ctx context.Context, reconnect bool) error {
	wait := backoffMin
	for {
		connected, err := l.connectOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !reconnect || !retryable(err) {
			return err
		}
		if connected {
			wait = backoffMin
		}
		fmt.Fprintf(l.log, "aspctl: %v; reconnecting in %s\n", err, wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, backoffMax)
	}
}

// retryable reports whether reconnecting may help: not when the token is
// refused or was rotated or revoked.
func retryable(err error) bool {
	var ae *apiError
	var ce *closeError
	switch {
	case errors.As(err, &ae):
		return ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden
	case errors.As(err, &ce):
		return ce.code != closeUnauthorized
	}
	return true
}

// connectOnce dials, prints events until the connection ends, and reports
// whether the dial succeeded. When ctx is done it closes with 1000.
func (l *listener) connectOnce(ctx context.Context) (connected bool, err error) {
	ws, err := l.dial(ctx)
	if err != nil {
		return false, err
	}
	ws.SetReadLimit(readLimit)
	closed := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(closed)
		ws.Close(websocket.StatusNormalClosure, "client interrupted")
	})
	defer stopWatch()
	done := make(chan struct{})
	defer close(done)
	go keepalive(ws, done)
	for {
		// Read with a context that is never cancelled: cancelling a read
		// tears the connection down without a close frame.
		_, msg, err := ws.Read(context.Background())
		if ctx.Err() != nil {
			<-closed
			return true, nil
		}
		if err != nil {
			return true, readError(ws, err)
		}
		if err := l.print(msg); err != nil {
			ws.Close(websocket.StatusNormalClosure, "")
			return true, err
		}
		ack(ws, msg)
	}
}

// ack confirms a printed event (docs/delivery.md, "Confirmation"): the
// agent's cursor then moves exactly as far as what was printed, and a
// reconnect resumes right after it.
func ack(ws *websocket.Conn, event []byte) {
	var e struct {
		SessionID string `json:"session_id"`
		Sequence  int64  `json:"sequence"`
	}
	if json.Unmarshal(event, &e) != nil || e.SessionID == "" || e.Sequence < 1 {
		return
	}
	b, _ := json.Marshal(protocol.Ack{Type: protocol.ClientMessageAck, SessionID: e.SessionID, Sequence: e.Sequence})
	ctx, cancel := context.WithTimeout(context.Background(), pingInterval)
	defer cancel()
	_ = ws.Write(ctx, websocket.MessageText, b) // a failed write ends the connection; the read reports it
}

// keepalive pings the server so that a silently dead connection is noticed
// (and, with --reconnect, replaced); it stops when the connection is closed.
func keepalive(ws *websocket.Conn, done <-chan struct{}) {
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), pingInterval)
			err := ws.Ping(ctx)
			cancel()
			if err != nil {
				ws.CloseNow()
				return
			}
		}
	}
}

func readError(ws *websocket.Conn, err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return &closeError{code: ce.Code, reason: ce.Reason}
	}
	ws.CloseNow()
	return fmt.Errorf("connection lost: %w", err)
}

func (l *listener) dial(ctx context.Context) (*websocket.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, l.url, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + l.token}},
	})
	if err == nil {
		return ws, nil
	}
	if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
		b, _ := io.ReadAll(resp.Body)
		return nil, decodeError(resp.StatusCode, b)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("connecting to %s: %w", l.url, err)
	}
	return nil, reachError(l.server, err)
}

// print writes one event unless it was printed already.
func (l *listener) print(msg []byte) error {
	var ev protocol.Event
	if err := json.Unmarshal(msg, &ev); err != nil {
		fmt.Fprintf(l.log, "aspctl: ignoring a message that is not an event: %s\n", truncate(msg, 200))
		return nil
	}
	if !l.seen.add(seenKey{ev.SessionID, ev.Sequence}) {
		return nil
	}
	var line bytes.Buffer
	if l.pretty {
		line.WriteString(formatEvent(&ev))
	} else if err := json.Compact(&line, msg); err != nil {
		return err
	}
	line.WriteByte('\n')
	_, err := l.out.Write(line.Bytes())
	return err
}

// formatEvent is the --pretty line of an event:
// "sess_01J... #12 session.message @acme.support: hello".
func formatEvent(ev *protocol.Event) string {
	head := fmt.Sprintf("%s #%d %s", ev.SessionID, ev.Sequence, ev.Type)
	switch ev.Type {
	case protocol.EventMessage:
		var m protocol.Message
		_ = json.Unmarshal(ev.Payload, &m)
		return head + " " + m.Sender + ": " + contentText(m.Content)
	case protocol.EventInvited:
		var p protocol.InvitedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		s := head + " " + p.Invitee + " by " + p.By
		if p.Topic != "" {
			s += " topic " + strconv.Quote(p.Topic)
		}
		if p.InitialMessage != nil {
			s += ": " + contentText(p.InitialMessage.Content)
		}
		return s
	case protocol.EventJoined, protocol.EventDisconnected, protocol.EventReconnected:
		var p protocol.AgentPayload
		_ = json.Unmarshal(ev.Payload, &p)
		return head + " " + p.Agent
	case protocol.EventLeft:
		var p protocol.LeftPayload
		_ = json.Unmarshal(ev.Payload, &p)
		if p.Reason != "" {
			return head + " " + p.Agent + " (" + p.Reason + ")"
		}
		return head + " " + p.Agent
	case protocol.EventEnded:
		var p protocol.EndedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		if p.EndedBy == "" {
			return head + " (no participant left)"
		}
		return head + " by " + p.EndedBy
	case protocol.EventReopened:
		var p protocol.ReopenedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		return head + " by " + p.ReopenedBy
	}
	var b bytes.Buffer
	_ = json.Compact(&b, ev.Payload)
	return head + " " + b.String()
}

// contentText renders message content on one line: text as is, data parts
// as compact JSON, images and files as [image NAME] / [file NAME].
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string          `json:"type"`
		Text string          `json:"text"`
		Data json.RawMessage `json:"data"`
		Name string          `json:"name"`
		URL  string          `json:"url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "text":
			out = append(out, p.Text)
		case "data":
			var b bytes.Buffer
			_ = json.Compact(&b, p.Data)
			out = append(out, b.String())
		default:
			name := p.Name
			if name == "" {
				name = p.URL
			}
			out = append(out, "["+p.Type+" "+name+"]")
		}
	}
	return strings.Join(out, " ")
}

type seenKey struct {
	session  string
	sequence int64
}

// seenSet remembers the most recent keys added, at most capacity of them;
// the oldest are forgotten first.
type seenSet struct {
	capacity int
	keys     map[seenKey]struct{}
	order    []seenKey // ring of keys in insertion order
	next     int       // the slot to overwrite once order is full
}

func newSeenSet(capacity int) *seenSet {
	return &seenSet{capacity: capacity, keys: make(map[seenKey]struct{})}
}

// add records k and reports whether it is new.
func (s *seenSet) add(k seenKey) bool {
	if _, ok := s.keys[k]; ok {
		return false
	}
	if len(s.order) < s.capacity {
		s.order = append(s.order, k)
	} else {
		delete(s.keys, s.order[s.next])
		s.order[s.next] = k
		s.next = (s.next + 1) % s.capacity
	}
	s.keys[k] = struct{}{}
	return true
}
