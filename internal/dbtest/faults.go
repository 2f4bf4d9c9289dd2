package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Faults breaks one throwaway PostgreSQL database (from Postgres) the way
// an outage does, through the server's maintenance connection: it ends the
// database's backends, or makes it refuse connections. It touches only that
// database, never another: other tests share the server.
type Faults struct {
	admin *sql.DB
	name  string // the database's name, from its URL
}

// PostgresFaults returns the faults of the database at dbURL, which
// Postgres created for this test.
func PostgresFaults(t testing.TB, dbURL string) *Faults {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("dbtest: parse the database URL: %v", err)
	}
	admin, err := sql.Open("pgx", baseURL())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	return &Faults{admin: admin, name: strings.TrimPrefix(u.Path, "/")}
}

// Name is the database's name.
func (f *Faults) Name() string { return f.name }

// Terminate ends every backend of the database (pg_terminate_backend), as
// an administrator or a crashed server would; the connections fail with
// 57P01 on their next use. It does not wait for them to be gone. It may be
// called from any goroutine (a failure is t.Errorf, not t.Fatalf).
func (f *Faults) Terminate(t testing.TB) {
	t.Helper()
	if _, err := f.admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, f.name); err != nil {
		t.Errorf("dbtest: terminate the backends of %s: %v", f.name, err)
	}
}

// TerminateIdle is Terminate, then a wait of up to a second until the
// database has no backend left (none reconnects while the test is idle).
func (f *Faults) TerminateIdle(t testing.TB) {
	t.Helper()
	f.Terminate(t)
	for range 100 {
		var n int
		if err := f.admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, f.name).Scan(&n); err != nil {
			t.Fatalf("dbtest: count the backends of %s: %v", f.name, err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AllowConnections makes the database accept connections, or refuse them
// (55000) as a database that is down does. A test that turns them off gets
// them turned on again when it ends.
func (f *Faults) AllowConnections(t testing.TB, on bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A database name cannot be a parameter; Postgres made it of [a-z0-9_].
	if _, err := f.admin.ExecContext(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, f.name, on)); err != nil {
		t.Fatalf("dbtest: ALLOW_CONNECTIONS %t on %s: %v", on, f.name, err)
	}
	if !on {
		t.Cleanup(func() { _, _ = f.admin.Exec(fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS true`, f.name)) })
	}
}
