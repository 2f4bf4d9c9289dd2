package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// A store outage is a failure of the database to serve now, not a bug and
// not a refusal of the request: PostgreSQL down, restarting or refusing
// connections, a connection it killed, its disk full; SQLite's disk full or
// read-only, its file gone, or its write lock held by another process past
// the busy timeout. Every error a database call returns passes through
// classify (here, called by the driver wrapper in guard.go and by runTx for
// its own timeout), which turns those into a KindUnavailable domain error
// wrapping the driver's error; the edge answers it 503 store_unavailable
// with Retry-After. The health tracker below records the outage, logs it
// once when it starts and once when it ends, and makes readiness fail
// while it lasts.

// unavailableMessage is what a client is told; the driver's error (which
// may name hosts and databases) stays in the log.
const unavailableMessage = "the store cannot serve requests right now; retry later"

// IsUnavailable reports whether err is, or wraps, an outage of the store.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// unavailable returns cause as a KindUnavailable domain error.
func unavailable(cause error) error {
	if IsUnavailable(cause) {
		return cause
	}
	return &Error{Kind: KindUnavailable, Message: unavailableMessage, cause: cause}
}

// classify sorts an error a database call returned. unavailable: the
// database cannot serve now. lost: what failed is this one connection
// (killed by the server, closed, reset), so another connection may well
// succeed; a failure to connect is not lost but unavailable.
func classify(err error) (isUnavailable, lost bool) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller's cancellation or time bound (which a driver reports
		// as a timeout, and context.DeadlineExceeded is a net.Error): not
		// the database's state. runTx classifies its own time bound.
		return false, false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// Refused, unreachable, starting up or shutting down (57P03), the
		// database not accepting connections (55000) or gone (3D000): any
		// failure to connect means the store cannot serve now.
		return true, false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P05", strings.HasPrefix(pg.Code, "08"):
			// The server terminated this connection (administrator command,
			// crash of another backend, idle timeout) or it broke.
			return true, true
		case pg.Code == "57P03", // cannot_connect_now: starting up, shutting down, recovering
			strings.HasPrefix(pg.Code, "53"), // insufficient resources: disk full, out of memory, too many connections
			pg.Code == "25006",               // read_only_sql_transaction: a standby, or a primary demoted
			pg.Code == "58030":               // io_error
			return true, false
		}
		return false, false // the server's answer to this request
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code of an extended one
		case sqlite3.SQLITE_FULL, // disk full (or max_page_count reached)
			sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, // another process holds the lock past busy_timeout
			sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL:
			return true, false
		}
		return false, false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EDQUOT) {
		return true, false
	}
	// What is left are failures of the connection itself, as pgx and
	// database/sql report them: a closed connection (pgx says it is safe to
	// retry: nothing was sent), a broken socket, the server hanging up.
	var ne net.Error
	if errors.Is(err, driver.ErrBadConn) || pgconn.SafeToRetry(err) || errors.As(err, &ne) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true, true
	}
	return false, false
}

// health tracks whether the store serves: it goes down on the first
// unavailable error that is not one lost connection (a failed connect, a
// full disk, a lock held too long), and up again on a write that commits
// (or Ready's probe write) once no failure came for settle. One WARN line
// when an outage starts and one INFO line when it ends, with the count of
// failed operations and how long it lasted, replace a line per request.
type health struct {
	isDown atomic.Bool // fast path of ok: nothing to do while up

	mu       sync.Mutex
	since    time.Time // when the outage started
	lastFail time.Time
	failed   int64 // unavailable errors since the outage started
	log      *slog.Logger
	now      func() time.Time
}

// settle is how long after the last failure a success ends an outage: a
// store that fails one write in two (a nearly full disk) is down, not up
// and down by turns.
const settle = time.Second

func newHealth() *health { return &health{log: slog.Default(), now: time.Now} }

// observe classifies err, records an outage, and returns err as
// ErrUnavailable's kind if it is one (any other error as it is).
func (h *health) observe(err error) error {
	unav, lost := classify(err)
	if !unav {
		return err
	}
	if lost {
		h.count()
	} else {
		h.fail(err)
	}
	return unavailable(err)
}

// fail records a failure that means the store cannot serve now.
func (h *health) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	h.lastFail = now
	h.failed++
	if h.isDown.Load() {
		return
	}
	h.isDown.Store(true)
	h.since = now
	h.failed = 1
	h.log.Warn("store unavailable: requests are answered 503 store_unavailable and /readyz is not ready until writes succeed again", "err", err)
}

// count counts a failed operation (a lost connection) during an outage;
// one lost connection alone does not start one (the next connection is
// likely to work, and if it is not, its connect fails).
func (h *health) count() {
	if !h.isDown.Load() {
		return
	}
	h.mu.Lock()
	h.failed++
	h.mu.Unlock()
}

// ok records a write that committed, which ends an outage once it has
// settled.
func (h *health) ok() {
	if !h.isDown.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if !h.isDown.Load() || now.Sub(h.lastFail) < settle {
		return
	}
	h.isDown.Store(false)
	h.log.Info("store available again", "failed_operations", h.failed, "duration", now.Sub(h.since).Round(time.Millisecond))
}

// down reports whether the store is in an outage.
func (h *health) down() bool { return h.isDown.Load() }

// Available reports whether the store is serving, as far as the requests
// so far tell: false from an unavailable-class failure until a write
// commits again (see Ready).
func (s *Store) Available() bool { return !s.health.down() }

// Ready reports whether the store can serve: the database answers and,
// after writes failed, a probe write commits. While healthy it costs one
// ping. A ping alone does not see a full disk (SQLite and PostgreSQL read
// and ping as usual), nor does BEGIN IMMEDIATE; ROLLBACK: only a commit
// that writes does.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.Ping(ctx); err != nil {
		return unavailable(err)
	}
	if !s.health.down() {
		return nil
	}
	if err := s.probeWrite(ctx); err != nil {
		return unavailable(err)
	}
	if s.health.down() {
		return ErrUnavailable // the probe committed, but the last failure is too recent
	}
	return nil
}

// probeKey is the cursor row the probe write inserts and deletes again: a
// handle no agent can have, so nothing ever reads it.
const probeKey = "aspd:write-probe"

// probeWrite commits a write that changes nothing: it inserts a cursor row
// and deletes it in one transaction. The pages it touches are written all
// the same (SQLite appends them to its WAL, PostgreSQL writes the tuple and
// the WAL records), so it fails when the disk is full. Its commit, like any
// write's, ends the outage (guard.go).
func (s *Store) probeWrite(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO cursors (handle, session_id, seq) VALUES ('', $1, 0)`, probeKey); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM cursors WHERE handle = '' AND session_id = $1`, probeKey); err != nil {
		return err
	}
	return tx.Commit()
}

// SetLogger sets the logger of the store's outage lines (the default
// logger otherwise). Call it before use.
func (s *Store) SetLogger(l *slog.Logger) { s.health.log = l }
