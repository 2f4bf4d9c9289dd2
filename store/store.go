// Package store persists aspd's agents, trust settings, sessions and the
// durable per-session event log. One implementation of the logic runs on both
// SQL dialects (PostgreSQL for production, SQLite for the embedded default);
// only a handful of statements differ, and they live in dialect.go.
//
// Every state change is one transaction that locks the session row, assigns
// the next sequence numbers, inserts the events in their wire shape and
// updates the state they describe. The caller publishes the returned Commit
// to live connections after the transaction has committed, never before.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/aspd/aspd/migrations"
)

// Store is the persistence layer. It is safe for concurrent use.
type Store struct {
	read  *sql.DB // reads
	write *sql.DB // transactions that write; one connection on SQLite
	// pool is PostgreSQL's connection pool, under read and write too; the
	// message path uses it directly (stmtqueue.go). nil on SQLite.
	pool  *pgxpool.Pool
	d     dialect
	now   func() time.Time
	batch *batcher       // group commit of messages; nil = one transaction per message
	bg    sync.WaitGroup // committers
	// txTimeout bounds each request transaction (inTx, inQueuedTx); 0 means
	// requestTxTimeout. Tests shorten it.
	txTimeout time.Duration
	closed    atomic.Bool // set by Close: writes are ErrClosed
	// health tracks outages (unavailable.go); the driver wrapper (guard.go)
	// reports to it.
	health *health

	// searches holds the slots of concurrent searches (search.go).
	searches chan struct{}
	// members caches sessions' participants for the message path
	// (members.go); nil disables it.
	members       *memberCache
	guesses       guessStats    // appendCached's hits and misses (fastappend.go)
	searchAnswers searchAnswers // the searches each step answered (search.go)
}

// requestTxTimeout bounds a request's write transaction.
const requestTxTimeout = 30 * time.Second

// Open connects to the database named by url, runs pending migrations and
// returns a Store. postgres:// or postgresql:// selects PostgreSQL;
// sqlite:PATH or a plain path selects the embedded SQLite store; any other
// URL is refused before anything is created (ParseURL).
func Open(ctx context.Context, url string) (*Store, error) {
	loc, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	var s *Store
	if loc.Postgres {
		s, err = openPostgres(loc.URL)
	} else {
		if err := createSQLiteFile(loc.Path); err != nil {
			return nil, err
		}
		s, err = openSQLite(loc.Path)
	}
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.searches = make(chan struct{}, maxConcurrentSearches)
	// Events written before the search migration are indexed now, by the
	// write path's extraction rule (search.go).
	if n, err := s.backfillSearch(ctx); err != nil {
		s.Close()
		return nil, err
	} else if n > 0 {
		slog.Info("indexed existing events for search", "events", n)
	}
	return s, nil
}

// createSQLiteFile creates the SQLite database file, empty and with mode
// 0600, if it does not exist yet, before SQLite opens it. SQLite creates
// the -wal and -shm files with the main file's permissions, so all three
// are then private to aspd's user, whatever the directory's mode and the
// umask. An existing file is left as it is, with a warning if other users
// may read it.
func createSQLiteFile(path string) error {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("store: create data directory: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("store: create %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		slog.Warn("the database file is readable by other users; restrict it (and its -wal and -shm files) to aspd's user",
			"path", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()), "fix", "chmod 600 "+path+"*")
	}
	return nil
}

// Dialect names the backend: "postgres" or "sqlite".
func (s *Store) Dialect() string { return s.d.name }

// SetClock replaces the clock; tests use it to simulate the passage of time.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// Close releases the database connections. Writes after Close (a message
// queued for group commit included) fail at once with ErrClosed.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.stopBatcher()
	err := s.read.Close()
	if s.write != s.read {
		err = errors.Join(err, s.write.Close())
	}
	if s.pool != nil {
		s.pool.Close()
	}
	return err
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.write.PingContext(ctx) }

func (s *Store) migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrations.FS, s.d.name)
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(s.d.goose, s.write, sub)
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	for _, r := range res {
		slog.Debug("applied migration", "dialect", s.d.name, "version", r.Source.Version, "duration", r.Duration)
	}
	return nil
}

// inTx runs fn in a request's write transaction and commits it. fn's error
// rolls back.
//
// The transaction does not follow the caller's cancellation (a client that
// hangs up must not leave a commit half-reported: the caller publishes what
// committed); it is bounded by a timeout of its own instead.
//
// A transaction that failed because its connection was lost before COMMIT
// was sent (a pooled connection the server killed, a backend terminated
// mid-transaction) did not commit, and runs once more on another
// connection. fn may therefore run twice: it must assign what it returns,
// not accumulate it. A failed COMMIT is not retried (unless the driver says
// nothing was sent): it may have committed.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retryLostTx(func() error { return s.runTx(ctx, s.requestTimeout(), fn) })
}

// requestTimeout bounds a request's write transaction: txTimeout, or
// requestTxTimeout when it is not set.
func (s *Store) requestTimeout() time.Duration {
	if s.txTimeout == 0 {
		return requestTxTimeout
	}
	return s.txTimeout
}

// retryLostTx runs a write transaction, run, and runs it once more on
// another connection when it failed in a way that certainly did not commit
// (retryTx: its connection was lost before COMMIT was sent), and logs the
// retry. The request transactions of both interfaces (inTx, and
// inQueuedTx on pgx) retry through it.
func retryLostTx(run func() error) error {
	err := run()
	if retryTx(err) {
		slog.Debug("store: retrying a transaction whose connection was lost", "err", err)
		err = run()
	}
	return err
}

// errCommit marks a failed COMMIT, whose outcome may be unknown.
type errCommit struct{ err error }

func (e errCommit) Error() string { return "store: commit: " + e.err.Error() }
func (e errCommit) Unwrap() error { return e.err }

// retryTx reports whether a transaction that failed with err certainly did
// not commit and may succeed on another connection: its connection was lost
// before COMMIT, or at COMMIT before anything was sent.
func retryTx(err error) bool {
	if err == nil {
		return false
	}
	if _, lost := classify(err); !lost {
		return false
	}
	var ce errCommit
	if errors.As(err, &ce) {
		return pgconn.SafeToRetry(ce.err)
	}
	return true
}

// runTx runs fn in a write transaction bounded by timeout (0: unbounded,
// for an import, which lasts as long as its input takes to arrive) and
// commits it. fn's error rolls back. When ctx carries an operator's audit
// entry not yet written (WithAudit), its row is written in the same
// transaction, after fn. A transaction that runs out of its
// time is the store failing to serve (a lock held elsewhere, a database
// that does not answer): ErrUnavailable's kind.
func (s *Store) runTx(ctx context.Context, timeout time.Duration, fn func(tx *sql.Tx) error) (err error) {
	if s.closed.Load() {
		return ErrClosed
	}
	ctx, end := s.txContext(ctx, timeout)
	defer end(&err)
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	// An operator change's audit row commits with the change or not at
	// all (audit.go).
	audit := pendingAudit(ctx)
	if audit != nil {
		if err := s.writeAudit(ctx, tx, audit); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return errCommit{err}
	}
	if audit != nil {
		audit.written.Store(true)
	}
	return nil
}

// txContext is the context of a write transaction (runTx, runPgxTx)
// started from ctx, and end, which the transaction defers with its error.
// The context does not follow ctx's cancellation (inTx says why) and is
// bounded by timeout instead (0: unbounded). end releases it and turns the
// error of a transaction that ran out of its time into ErrUnavailable's
// kind, reporting it to the health tracker: a lock held elsewhere or a
// database that does not answer is the store failing to serve.
func (s *Store) txContext(ctx context.Context, timeout time.Duration) (_ context.Context, end func(err *error)) {
	ctx = context.WithoutCancel(ctx)
	if timeout <= 0 {
		return ctx, func(*error) {}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func(err *error) {
		// Before cancel: past it, ctx.Err() is set whatever happened.
		if *err != nil && ctx.Err() != nil && errors.Is(*err, context.DeadlineExceeded) {
			s.health.fail(*err)
			*err = unavailable(*err)
		}
		cancel()
	}
}
