package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"strings"
)

// The guard wraps the database driver (pgx's or SQLite's) under
// database/sql, so that every error any database call returns (a connect, a
// statement, a row, a commit) passes through one place, health.observe:
// outages become ErrUnavailable's kind for every caller, whichever of the
// store's many statements failed, and the health tracker hears of each
// failure and of each write that commits. (The message path on PostgreSQL
// runs on pgx's own interface, outside database/sql: stmtqueue.go passes
// its errors and commits to the same health tracker itself.)
//
// It also lets database/sql retry, on another connection, what is safe to
// retry when only the connection failed (killed by the server, closed):
// a BEGIN and, outside a transaction, a SELECT. database/sql retries a call
// whose error is driver.ErrBadConn; the guard marks those errors so. Other
// statements outside a transaction are not retried (the server may have run
// them); transactions are retried whole by inTx (store.go).

type guardConnector struct {
	inner  driver.Connector
	h      *health
	writer bool // this pool writes: its commits end an outage
}

func (c *guardConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, c.h.observe(err)
	}
	return &guardConn{c: c, inner: conn}, nil
}

func (c *guardConnector) Driver() driver.Driver { return c.inner.Driver() }

// errBadConn marks err so that database/sql retries it on another
// connection (errors.Is(err, driver.ErrBadConn)), and keeps it err.
type errBadConn struct{ err error }

func (e errBadConn) Error() string   { return e.err.Error() }
func (e errBadConn) Unwrap() []error { return []error{e.err, driver.ErrBadConn} }

// retryable returns err, classified, marked for database/sql to retry on
// another connection when it is a lost connection.
func (c *guardConnector) retryable(err error) error {
	if _, lost := classify(err); lost && !errors.Is(err, driver.ErrBadConn) {
		err = errBadConn{err}
	}
	return c.h.observe(err)
}

type guardConn struct {
	c     *guardConnector
	inner driver.Conn
	tx    *guardTx // the open transaction, if any
}

var (
	_ driver.Conn               = (*guardConn)(nil)
	_ driver.ConnPrepareContext = (*guardConn)(nil)
	_ driver.ConnBeginTx        = (*guardConn)(nil)
	_ driver.ExecerContext      = (*guardConn)(nil)
	_ driver.QueryerContext     = (*guardConn)(nil)
	_ driver.Pinger             = (*guardConn)(nil)
	_ driver.SessionResetter    = (*guardConn)(nil)
	_ driver.Validator          = (*guardConn)(nil)
	_ driver.NamedValueChecker  = (*guardConn)(nil)
)

func (g *guardConn) Prepare(query string) (driver.Stmt, error) {
	return g.PrepareContext(context.Background(), query)
}

func (g *guardConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if p, ok := g.inner.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = g.inner.Prepare(query)
	}
	if err != nil {
		return nil, g.c.h.observe(err)
	}
	return &guardStmt{g: g, inner: st, query: query}, nil
}

func (g *guardConn) Close() error { return g.inner.Close() }

func (g *guardConn) Begin() (driver.Tx, error) {
	return g.BeginTx(context.Background(), driver.TxOptions{})
}

func (g *guardConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var tx driver.Tx
	var err error
	if b, ok := g.inner.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 the fallback database/sql itself uses
		tx, err = g.inner.Begin() //nolint:staticcheck
	}
	if err != nil {
		// A BEGIN that failed on a lost connection did nothing: retry it.
		return nil, g.c.retryable(err)
	}
	g.tx = &guardTx{g: g, inner: tx}
	return g.tx, nil
}

func (g *guardConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := g.inner.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := e.ExecContext(ctx, query, args)
	if err == driver.ErrSkip {
		return nil, err
	}
	if err != nil {
		return nil, g.c.h.observe(err)
	}
	g.wrote(res)
	return res, nil
}

// wrote records a statement that changed rows: in a transaction, its
// commit then counts as a write; outside one, it committed. A statement
// that changed nothing wrote nothing (SQLite commits it even on a full
// disk), so it says nothing about whether writes work.
func (g *guardConn) wrote(res driver.Result) {
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return
	}
	if g.tx != nil {
		g.tx.wrote = true
	} else if g.c.writer {
		g.c.h.ok()
	}
}

func (g *guardConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := g.inner.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := q.QueryContext(ctx, query, args)
	if err == driver.ErrSkip {
		return nil, err
	}
	if err != nil {
		if g.tx == nil && isSelect(query) {
			return nil, g.c.retryable(err) // a read: safe to run again
		}
		return nil, g.c.h.observe(err)
	}
	return &guardRows{g: g, inner: rows}, nil
}

// isSelect reports whether query is a plain SELECT, which changes nothing
// and may run again on another connection.
func isSelect(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n")
	return len(q) >= 6 && strings.EqualFold(q[:6], "select")
}

func (g *guardConn) Ping(ctx context.Context) error {
	if p, ok := g.inner.(driver.Pinger); ok {
		if err := p.Ping(ctx); err != nil {
			return g.c.h.observe(err)
		}
	}
	return nil
}

// ResetSession is how database/sql checks a pooled connection before
// reuse; driver.ErrBadConn discards it, and database/sql either tries
// another connection or, out of tries, returns that error itself: so it is
// classified here too (it still matches driver.ErrBadConn).
func (g *guardConn) ResetSession(ctx context.Context) error {
	g.tx = nil
	if r, ok := g.inner.(driver.SessionResetter); ok {
		if err := r.ResetSession(ctx); err != nil {
			return g.c.h.observe(err)
		}
	}
	return nil
}

func (g *guardConn) IsValid() bool {
	if v, ok := g.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// CheckNamedValue defers to the driver's checker, or to database/sql's
// default conversion (ErrSkip) where the driver has none.
func (g *guardConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := g.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type guardTx struct {
	g     *guardConn
	inner driver.Tx
	wrote bool // a statement in it changed rows: its commit is a write
}

func (t *guardTx) Commit() error {
	t.g.tx = nil
	if err := t.inner.Commit(); err != nil {
		return t.g.c.h.observe(err)
	}
	if t.wrote && t.g.c.writer {
		t.g.c.h.ok()
	}
	return nil
}

func (t *guardTx) Rollback() error {
	t.g.tx = nil
	if err := t.inner.Rollback(); err != nil {
		return t.g.c.h.observe(err)
	}
	return nil
}

type guardStmt struct {
	g     *guardConn
	inner driver.Stmt
	query string
}

var (
	_ driver.StmtExecContext   = (*guardStmt)(nil)
	_ driver.StmtQueryContext  = (*guardStmt)(nil)
	_ driver.NamedValueChecker = (*guardStmt)(nil)
)

func (s *guardStmt) Close() error  { return s.inner.Close() }
func (s *guardStmt) NumInput() int { return s.inner.NumInput() }

func (s *guardStmt) Exec(args []driver.Value) (driver.Result, error) {
	//lint:ignore SA1019 the driver's own non-context method
	res, err := s.inner.Exec(args) //nolint:staticcheck
	if err != nil {
		return nil, s.g.c.h.observe(err)
	}
	s.g.wrote(res)
	return res, nil
}

func (s *guardStmt) Query(args []driver.Value) (driver.Rows, error) {
	//lint:ignore SA1019 the driver's own non-context method
	rows, err := s.inner.Query(args) //nolint:staticcheck
	if err != nil {
		return nil, s.g.c.h.observe(err)
	}
	return &guardRows{g: s.g, inner: rows}, nil
}

func (s *guardStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	e, ok := s.inner.(driver.StmtExecContext)
	if !ok {
		vals, err := namedValues(args)
		if err != nil {
			return nil, err
		}
		return s.Exec(vals)
	}
	res, err := e.ExecContext(ctx, args)
	if err != nil {
		return nil, s.g.c.h.observe(err)
	}
	s.g.wrote(res)
	return res, nil
}

func (s *guardStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.inner.(driver.StmtQueryContext)
	if !ok {
		vals, err := namedValues(args)
		if err != nil {
			return nil, err
		}
		return s.Query(vals)
	}
	rows, err := q.QueryContext(ctx, args)
	if err != nil {
		return nil, s.g.c.h.observe(err)
	}
	return &guardRows{g: s.g, inner: rows}, nil
}

// CheckNamedValue follows database/sql's order: the statement's checker,
// else the connection's, else the default conversion.
func (s *guardStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return s.g.CheckNamedValue(nv)
}

// namedValues is database/sql's fallback for a driver without the context
// methods: positional values only.
func namedValues(named []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(named))
	for i, nv := range named {
		if nv.Name != "" {
			return nil, errors.New("store: the driver does not support named parameters")
		}
		out[i] = nv.Value
	}
	return out, nil
}

type guardRows struct {
	g     *guardConn
	inner driver.Rows
}

var (
	_ driver.RowsNextResultSet              = (*guardRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*guardRows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*guardRows)(nil)
	_ driver.RowsColumnTypeLength           = (*guardRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*guardRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*guardRows)(nil)
)

func (r *guardRows) Columns() []string { return r.inner.Columns() }

func (r *guardRows) Close() error {
	if err := r.inner.Close(); err != nil {
		return r.g.c.h.observe(err)
	}
	return nil
}

func (r *guardRows) Next(dest []driver.Value) error {
	err := r.inner.Next(dest)
	if err == nil || err == io.EOF { // io.EOF: the end of the rows, compared as database/sql does
		return err
	}
	return r.g.c.h.observe(err)
}

// The optional interfaces answer as database/sql does for a driver that
// lacks them.

func (r *guardRows) HasNextResultSet() bool {
	if n, ok := r.inner.(driver.RowsNextResultSet); ok {
		return n.HasNextResultSet()
	}
	return false
}

func (r *guardRows) NextResultSet() error {
	if n, ok := r.inner.(driver.RowsNextResultSet); ok {
		err := n.NextResultSet()
		if err == nil || err == io.EOF {
			return err
		}
		return r.g.c.h.observe(err)
	}
	return io.EOF
}

func (r *guardRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.inner.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *guardRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.inner.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *guardRows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.inner.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *guardRows) ColumnTypeNullable(i int) (bool, bool) {
	if t, ok := r.inner.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *guardRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if t, ok := r.inner.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
