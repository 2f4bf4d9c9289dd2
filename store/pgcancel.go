package store

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// cancelDeadline is how long a cancelled statement's connection waits for
// the server to confirm the cancel request before its socket's deadline
// ends the wait (and the connection, as pgx's default would at once): a
// server that does not answer still frees the caller within it.
const cancelDeadline = 500 * time.Millisecond

// cancelUnconfirmed is the key of serverCancel's mark in a connection's
// CustomData: a cancel request went out and the server never confirmed it.
// The pool drops such a connection when it is next taken (openPostgres's
// PrepareConn).
const cancelUnconfirmed = "aspd.cancel_unconfirmed"

// serverCancel is the pool's context watcher (pgconn's ctxwatch.Handler):
// when a statement's context ends, it sends PostgreSQL a cancel request for
// that statement, so that its backend stops rather than run on to its end,
// and sets the socket's deadline cancelDeadline ahead.
//
// A cancel request is asynchronous: PostgreSQL's postmaster forks a
// process that signals the backend, then closes the request's connection.
// A signal that reaches the backend while it waits for its next command
// is ignored there; one that arrives after the next command began cancels
// it ("canceling statement due to user request"), another caller's
// statement. So a connection is only reused once the server has confirmed
// the request by closing it: the signal was sent before that, and the
// backend takes it before it reads another command. The statement's
// caller waits for the confirmation (a fork and a kill: 1-13 ms on the
// machines measured, BenchmarkCancelledStatement) when its
// statement ended first; a request that is not confirmed in time marks the
// connection (cancelUnconfirmed), and the pool drops it.
//
// pgx's own CancelRequestContextWatcherHandler stops waiting for the
// confirmation as soon as the statement ends, then sleeps 100 ms to let the
// signal land: every cancelled statement cost its caller those 100 ms
// (BenchmarkCancelledStatement: 101-109 ms against 0.9-13 ms).
type serverCancel struct {
	conn *pgconn.PgConn

	// Per cancel, set by HandleCancel. ctxwatch calls
	// HandleUnwatchAfterCancel only after HandleCancel has returned.
	done      chan struct{} // closed when the request is confirmed, given up or not sent
	claimed   atomic.Bool   // taken by whichever comes first: the request (sent) or the statement's end (not sent)
	confirmed bool          // written before done is closed, read after
}

func newServerCancel(c *pgconn.PgConn) *serverCancel { return &serverCancel{conn: c} }

// HandleCancel runs when the watched context ends, while the statement
// may still run.
func (h *serverCancel) HandleCancel(context.Context) {
	deadline := time.Now().Add(cancelDeadline)
	h.conn.Conn().SetDeadline(deadline) //nolint:errcheck // a closed socket fails the statement anyway
	h.done = make(chan struct{})
	h.claimed.Store(false)
	h.confirmed = false
	go func() {
		defer close(h.done)
		if !h.claimed.CompareAndSwap(false, true) { // the statement ended first: nothing to cancel
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		// CancelRequest reads until the server closes the request's
		// connection, or until ctx's deadline ends the read; it reports
		// neither, so a return before the deadline, without error, is the
		// server's close.
		err := h.conn.CancelRequest(ctx)
		h.confirmed = err == nil && time.Now().Before(deadline)
	}()
}

// HandleUnwatchAfterCancel runs when the statement has ended, after
// HandleCancel: it waits for the request to be confirmed (or given up),
// so that the connection is not reused before the signal has landed.
func (h *serverCancel) HandleUnwatchAfterCancel() {
	sent := !h.claimed.CompareAndSwap(false, true)
	<-h.done
	if sent && !h.confirmed {
		h.conn.CustomData()[cancelUnconfirmed] = true
	}
	h.conn.Conn().SetDeadline(time.Time{}) //nolint:errcheck // see HandleCancel
}

// cancelUnconfirmedOn reports whether c's last cancel request was never
// confirmed (serverCancel): the pool drops such a connection rather than
// reuse it.
func cancelUnconfirmedOn(c *pgx.Conn) bool { return c.PgConn().CustomData()[cancelUnconfirmed] != nil }
