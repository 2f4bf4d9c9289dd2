package aspclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aspd/aspd/protocol"
)

const (
	pingInterval = 30 * time.Second
	seenCapacity = 1 << 16 // (session_id, sequence) pairs remembered for de-duplication
)

// CloseUnauthorized is the WebSocket close code of a rotated or revoked
// token or a deleted agent: reconnecting with the same token cannot succeed.
const CloseUnauthorized = 4001

// CloseError is a close frame the server sent on WS /connect.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("server closed the connection: %d %s", e.Code, e.Reason)
}

// Handler processes one event of the stream. Returning nil confirms it:
// Stream acknowledges it to the server and never passes the same
// (session_id, sequence) again. Returning an error stops Stream, which
// returns that error; the event is not acknowledged, so a later Stream
// receives it again.
type Handler func(ctx context.Context, ev protocol.Event) error

// Stream connects to WS /connect and passes every event to h, in each
// session's order, until ctx is done (it then returns ctx.Err()), h returns
// an error (returned), or reconnecting cannot help: the token is refused at
// the handshake (an *Error, 401) or the server closes with
// CloseUnauthorized (a *CloseError). Any other failure (a dropped
// connection, a server shutting down or restarting) is followed by a
// reconnection after a backoff (WithBackoff, WithOnDisconnect); the server
// then replays from the agent's confirmed position.
//
// Delivery is at least once on the wire: the server may send an event
// again (after a reconnection, or when a join replays the transcript).
// Stream remembers the last 65536 (session_id, sequence) pairs it handled
// and skips those. Calls of h are sequential.
func (c *Client) Stream(ctx context.Context, h Handler) error {
	s := &stream{c: c, h: h, seen: newSeenSet(seenCapacity)}
	wait := c.backoffMin
	for {
		connected, err := s.connectOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var herr *handlerError
		if errors.As(err, &herr) {
			return herr.err
		}
		if !retryable(err) {
			return err
		}
		if connected {
			wait = c.backoffMin
		}
		if c.onDrop != nil {
			if err := c.onDrop(err, wait); err != nil {
				return err
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, c.backoffMax)
	}
}

// retryable reports whether reconnecting may help.
func retryable(err error) bool {
	var ae *Error
	var ce *CloseError
	switch {
	case errors.As(err, &ae):
		return ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden
	case errors.As(err, &ce):
		return ce.Code != CloseUnauthorized
	}
	return true
}

type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }

type stream struct {
	c    *Client
	h    Handler
	seen *seenSet
}

// connectOnce dials and handles events until the connection ends, and
// reports whether the dial succeeded. When ctx is done it closes with 1000.
func (s *stream) connectOnce(ctx context.Context) (connected bool, err error) {
	conn, err := s.c.Dial(ctx)
	if err != nil {
		return false, err
	}
	closed := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(closed)
		conn.Close("client done")
	})
	defer stopWatch()
	done := make(chan struct{})
	defer close(done)
	go keepalive(conn, done)
	for {
		// Read with a context that is never cancelled: cancelling a read
		// tears the connection down without a close frame.
		msg, err := conn.Next(context.Background())
		if ctx.Err() != nil {
			if stopWatch() { // the watcher had not started: close here
				conn.Close("client done")
			} else {
				<-closed
			}
			return true, ctx.Err()
		}
		if err != nil {
			var ce *CloseError
			if !errors.As(err, &ce) {
				conn.CloseNow()
			}
			return true, err
		}
		ev, ok := ParseEvent(msg)
		if !ok {
			continue // not an event: ignored
		}
		k := seenKey{ev.SessionID, ev.Sequence}
		if !s.seen.has(k) {
			if err := s.h(ctx, ev); err != nil {
				conn.Close("")
				return true, &handlerError{err}
			}
			s.seen.add(k)
		}
		// Acks are cumulative per session: acknowledging an event handled
		// before (a replayed duplicate) confirms nothing new but is harmless.
		actx, cancel := context.WithTimeout(context.Background(), pingInterval)
		_ = conn.Ack(actx, ev.SessionID, ev.Sequence) // a failed write ends the connection; the read reports it
		cancel()
	}
}

// keepalive pings the server so that a silently dead connection is noticed
// and replaced; it stops when done is closed.
func keepalive(conn *Conn, done <-chan struct{}) {
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), pingInterval)
			err := conn.Ping(ctx)
			cancel()
			if err != nil {
				conn.CloseNow()
				return
			}
		}
	}
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

func (s *seenSet) has(k seenKey) bool { _, ok := s.keys[k]; return ok }

// add records k (which must not be present).
func (s *seenSet) add(k seenKey) {
	if len(s.order) < s.capacity {
		s.order = append(s.order, k)
	} else {
		delete(s.keys, s.order[s.next])
		s.order[s.next] = k
		s.next = (s.next + 1) % s.capacity
	}
	s.keys[k] = struct{}{}
}
