// Package dbtest gives tests throwaway databases on every backend aspd
// supports: a fresh SQLite file, and a fresh PostgreSQL database on the
// server named by ASPD_TEST_DATABASE_URL (default: the local server). When no
// PostgreSQL server is reachable the PostgreSQL variant is skipped loudly, or
// fails when ASPD_REQUIRE_POSTGRES=1 (as in CI).
package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// DefaultPostgresURL is used when ASPD_TEST_DATABASE_URL is not set.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var counter atomic.Int64

// Backend is one database backend under test.
type Backend struct {
	Name string                          // "sqlite" or "postgres"
	New  func(t testing.TB) (url string) // a fresh, empty database
}

// Backends returns every backend; tests loop over it with t.Run.
func Backends() []Backend {
	return []Backend{{Name: "sqlite", New: SQLite}, {Name: "postgres", New: Postgres}}
}

// ForEach runs fn once per backend as a subtest named after the backend.
func ForEach(t *testing.T, fn func(t *testing.T, url string)) {
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.New(t)) })
	}
}

// baseURL is the PostgreSQL server the tests use: ASPD_TEST_DATABASE_URL,
// else DefaultPostgresURL.
func baseURL() string {
	if u := os.Getenv("ASPD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// SQLite returns the path of a new SQLite database in the test's temp dir.
func SQLite(t testing.TB) string {
	return filepath.Join(t.TempDir(), "aspd.db")
}

// Postgres creates a throwaway database and returns its URL; it is dropped
// when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	base := baseURL()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		unreachable(t, base, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		unreachable(t, base, err)
	}
	name := fmt.Sprintf("aspd_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, counter.Add(1))
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("dbtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dbtest: drop database %s: %v", name, err)
		}
		admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("dbtest: parse %s: %v", base, err)
	}
	u.Path = "/" + name
	return u.String()
}

func unreachable(t testing.TB, base string, err error) {
	t.Helper()
	msg := fmt.Sprintf("\n*** PostgreSQL is not reachable at %s: %v\n*** PostgreSQL tests are SKIPPED. Set ASPD_TEST_DATABASE_URL to a server with CREATE DATABASE rights.\n", redact(base), err)
	if os.Getenv("ASPD_REQUIRE_POSTGRES") == "1" {
		t.Fatal(msg + "*** ASPD_REQUIRE_POSTGRES=1: failing instead of skipping.")
	}
	fmt.Fprint(os.Stderr, msg)
	t.Skip(msg)
}

func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	return strings.TrimSpace(s)
}
