package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestClassifyRealErrors: the classifier (unavailable.go) on errors the two
// drivers really return, not on errors built by hand.
func TestClassifyRealErrors(t *testing.T) {
	type want struct{ unavailable, lost bool }
	check := func(t *testing.T, what string, err error, w want) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		u, l := classify(err)
		if u != w.unavailable || l != w.lost {
			t.Fatalf("%s: classify(%v) = unavailable %v lost %v, want %v %v", what, err, u, l, w.unavailable, w.lost)
		}
	}
	ctx := context.Background()

	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.db")
		dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(50)"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		if _, err := db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB)`); err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`INSERT INTO t VALUES ('a', x'00'), ('a', x'00')`)
		check(t, "a constraint violation", err, want{false, false})
		_, err = db.Exec(`INSERT INTO nope VALUES (1)`)
		check(t, "a missing table", err, want{false, false})

		// Another connection (as another process would) holds the write
		// lock past busy_timeout: SQLITE_BUSY.
		other, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		conn, err := other.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`INSERT INTO t VALUES ('b', x'00')`)
		check(t, "a write lock held elsewhere", err, want{true, false})
		if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
		conn.Close()

		// The database may not grow: SQLITE_FULL, as on a full disk.
		var pages int
		if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)); err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`INSERT INTO t VALUES ('c', randomblob(100000))`)
		check(t, "a full database", err, want{true, false})

		if _, err := db.Exec(`PRAGMA query_only = 1`); err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`DELETE FROM t`)
		check(t, "a read-only database", err, want{true, false})

		// Outside the driver: the file system full or read-only.
		check(t, "ENOSPC", fmt.Errorf("store: create: %w", &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}), want{true, false})
		check(t, "EROFS", fmt.Errorf("store: create: %w", &fs.PathError{Op: "open", Path: path, Err: syscall.EROFS}), want{true, false})
		check(t, "not a store failure", fmt.Errorf("store: create: %w", fs.ErrExist), want{false, false})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = db.ExecContext(cctx, `INSERT INTO t VALUES ('d', x'00')`)
		check(t, "the caller's cancellation", err, want{false, false})
	})

	t.Run("postgres", func(t *testing.T) {
		u := dbtest.Postgres(t)
		faults := dbtest.PostgresFaults(t, u)
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`INSERT INTO t VALUES ('a'), ('a')`)
		check(t, "a unique violation", err, want{false, false})
		_, err = db.Exec(`SELEC 1`)
		check(t, "a syntax error", err, want{false, false})
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = db.ExecContext(tctx, `SELECT pg_sleep(5)`)
		cancel()
		check(t, "the caller's time bound", err, want{false, false})

		// A read-only transaction (a standby, a demoted primary): 25006.
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `SET default_transaction_read_only = on`); err != nil {
			t.Fatal(err)
		}
		_, err = conn.ExecContext(ctx, `INSERT INTO t VALUES ('b')`)
		check(t, "a read-only transaction", err, want{true, false})

		// The server terminates the connection (57P01): lost, the next
		// connection may work.
		faults.TerminateIdle(t)
		_, err = conn.ExecContext(ctx, `SELECT 1`)
		check(t, "a terminated backend", err, want{true, true})
		_, err = conn.ExecContext(ctx, `SELECT 1`)
		check(t, "the closed connection after it", err, want{true, true})
		conn.Close()

		// The database does not accept connections (55000, in a connect
		// error): unavailable, and not just one connection.
		faults.AllowConnections(t, false)
		faults.TerminateIdle(t)
		err = db.PingContext(ctx)
		check(t, "a database not accepting connections", err, want{true, false})
		faults.AllowConnections(t, true)

		// Nothing listens (connection refused).
		closed, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		defer closed.Close()
		err = closed.PingContext(ctx)
		check(t, "connection refused", err, want{true, false})
	})
}
