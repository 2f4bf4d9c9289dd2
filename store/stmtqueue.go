package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The message path (appendMessages: a lone message and a group-commit
// batch alike) is the store's hot path. Its statements are queued on a
// stmtQueue and sent together when the path needs their answers (Flush):
// the reads that lock the sessions and load the idempotency keys go
// together, the writes that append the events and record the keys go
// together. On PostgreSQL the queue is a pgx.Batch on a connection of the
// pgxpool.Pool, outside database/sql: BEGIN rides with the first flush and
// COMMIT with the last, so a group commit costs two round trips (four to six
// through database/sql), and pgx's statement cache keeps each statement
// prepared on its connection. On SQLite (one in-process writer, no round
// trips to save) the queue runs the statements one by one on a *sql.Tx of
// inTx. The SQL is the same on both: only the way it travels differs.
//
// Every other path keeps database/sql (built on the same pool on
// PostgreSQL: openPostgres) and its inTx/runTx.

// rowScanner is the rows of one queued query (pgx.Rows or *sql.Rows).
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
}

// stmtQueue is a write transaction's statements, queued in order and sent
// together by Flush. A queued query's scan reads its rows during Flush.
// what names the statement in errors ("lock sessions").
type stmtQueue interface {
	Query(what, query string, args []any, scan func(rows rowScanner) error)
	Exec(what, query string, args []any)
	Flush(ctx context.Context) error
}

type queued struct {
	what, query string
	args        []any
	scan        func(rowScanner) error // nil: an Exec
}

// stmtList is the queue part of a stmtQueue: the statements in order.
type stmtList struct{ q []queued }

func (l *stmtList) Query(what, query string, args []any, scan func(rowScanner) error) {
	l.q = append(l.q, queued{what: what, query: query, args: args, scan: scan})
}

func (l *stmtList) Exec(what, query string, args []any) {
	l.q = append(l.q, queued{what: what, query: query, args: args})
}

// take returns the queued statements and empties the queue.
func (l *stmtList) take() []queued {
	stmts := l.q
	l.q = nil
	return stmts
}

// sqlQueue runs queued statements on a database/sql transaction, one by
// one, at Flush.
type sqlQueue struct {
	stmtList
	tx *sql.Tx
}

func (q *sqlQueue) Flush(ctx context.Context) error {
	stmts := q.take()
	for _, st := range stmts {
		if st.scan == nil {
			if _, err := q.tx.ExecContext(ctx, st.query, st.args...); err != nil {
				return fmt.Errorf("store: %s: %w", st.what, err)
			}
			continue
		}
		if err := q.query(ctx, st); err != nil {
			return fmt.Errorf("store: %s: %w", st.what, err)
		}
	}
	return nil
}

func (q *sqlQueue) query(ctx context.Context, st queued) error {
	rows, err := q.tx.QueryContext(ctx, st.query, st.args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := st.scan(rows); err != nil {
		return err
	}
	return rows.Err()
}

// pgxQueue sends queued statements as one pgx.Batch (one round trip) on
// a connection of its own transaction, which its first Flush begins.
type pgxQueue struct {
	stmtList
	conn   *pgx.Conn
	h      *health
	begun  bool // BEGIN was sent
	wrote  bool // a statement changed rows: the commit is a write (health.ok)
	commit bool // the next Flush ends with COMMIT
	// committing is set when the failed Flush had reached COMMIT or lost
	// the connection: the transaction's outcome may be unknown.
	committing bool
}

func (q *pgxQueue) Flush(ctx context.Context) error {
	stmts := q.take()
	var b pgx.Batch
	if !q.begun {
		b.Queue("BEGIN")
	}
	for _, st := range stmts {
		b.Queue(st.query, st.args...)
	}
	if q.commit {
		b.Queue("COMMIT")
	}
	if b.Len() == 0 {
		return nil
	}
	br := q.conn.SendBatch(ctx, &b)
	err := q.results(br, stmts)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("store: %s: %w", q.last(stmts), cerr)
	}
	if err != nil {
		// A statement the server refused ends the transaction's work
		// (the server skips the rest of the batch, COMMIT included); a
		// lost connection leaves a COMMIT it carried in doubt.
		if q.commit && (q.conn.IsClosed() || errors.As(err, new(errCommit))) {
			q.committing = true
		}
		return q.h.observe(err)
	}
	return nil
}

// results reads the batch's results in order: BEGIN's, the statements',
// COMMIT's.
func (q *pgxQueue) results(br pgx.BatchResults, stmts []queued) error {
	if !q.begun {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("store: begin: %w", err)
		}
		q.begun = true
	}
	for _, st := range stmts {
		if st.scan == nil {
			tag, err := br.Exec()
			if err != nil {
				return fmt.Errorf("store: %s: %w", st.what, err)
			}
			if tag.RowsAffected() > 0 {
				q.wrote = true
			}
			continue
		}
		rows, err := br.Query()
		if err == nil {
			err = st.scan(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			return fmt.Errorf("store: %s: %w", st.what, err)
		}
	}
	if q.commit {
		if _, err := br.Exec(); err != nil {
			return errCommit{err}
		}
	}
	return nil
}

func (q *pgxQueue) last(stmts []queued) string {
	switch {
	case q.commit:
		return "commit"
	case len(stmts) > 0:
		return stmts[len(stmts)-1].what
	}
	return "begin"
}

// inQueuedTx runs fn in a request's write transaction whose statements go
// through a stmtQueue, and commits it: what fn leaves queued is sent with
// the COMMIT. It keeps inTx's rules: bounded by the request timeout, not
// by the caller's cancellation; a transaction whose connection was lost
// before COMMIT was sent runs once more on another connection, so fn may
// run twice and must assign what it returns.
func (s *Store) inQueuedTx(ctx context.Context, fn func(q stmtQueue) error) error {
	if s.pool == nil {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			q := &sqlQueue{tx: tx}
			if err := fn(q); err != nil {
				return err
			}
			return q.Flush(ctx)
		})
	}
	return retryLostTx(func() error { return s.runPgxTx(ctx, fn) })
}

// runPgxTx is runTx on a pgx connection of the pool.
func (s *Store) runPgxTx(ctx context.Context, fn func(q stmtQueue) error) (err error) {
	if s.closed.Load() {
		return ErrClosed
	}
	ctx, end := s.txContext(ctx, s.requestTimeout())
	defer end(&err)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: begin: %w", s.health.observe(err))
	}
	// Release destroys a connection that is broken or still in a
	// transaction, so that it is never reused in that state.
	defer conn.Release()
	q := &pgxQueue{conn: conn.Conn(), h: s.health}
	if err := fn(q); err != nil {
		q.rollback()
		return err
	}
	q.commit = true
	if err := q.Flush(ctx); err != nil {
		if q.committing {
			return unknownCommit(err)
		}
		q.rollback()
		return err
	}
	if q.wrote {
		s.health.ok()
	}
	return nil
}

// unknownCommit marks err, which failed a batch that carried COMMIT, as
// errCommit (whose retry is up to pgconn.SafeToRetry), keeping its
// classification as an outage.
func unknownCommit(err error) error {
	if errors.As(err, new(errCommit)) {
		return err
	}
	return errCommit{err}
}

// rollback ends a transaction that did not commit, so that its
// connection can go back to the pool; one that cannot is destroyed by
// Release.
func (q *pgxQueue) rollback() {
	if !q.begun || q.conn.IsClosed() || q.conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = q.conn.Exec(ctx, "ROLLBACK")
}
