package store

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pressly/goose/v3"
)

// dialect holds everything that differs between the two SQL backends. All
// statements elsewhere are written once, in the common subset ($N
// placeholders, ON CONFLICT, RETURNING) that both PostgreSQL and SQLite speak.
type dialect struct {
	name  string
	goose goose.Dialect
	// forUpdate is appended to the SELECT that locks a session row. SQLite has
	// no row locks; its single write connection serialises transactions.
	forUpdate string
	// forUpdateOfSessions locks only the sessions rows of a join (alias s).
	forUpdateOfSessions string
	// dataModifyingCTE: the dialect runs UPDATE inside WITH of an INSERT.
	dataModifyingCTE bool
}

var (
	postgresDialect = dialect{name: "postgres", goose: goose.DialectPostgres, forUpdate: " FOR UPDATE", forUpdateOfSessions: " FOR UPDATE OF s", dataModifyingCTE: true}
	sqliteDialect   = dialect{name: "sqlite", goose: goose.DialectSQLite3, forUpdate: ""}
)

func openPostgres(url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	return &Store{read: db, write: db, d: postgresDialect, now: timeNow}, nil
}

// openSQLite opens the embedded store at path. Pragmas go in the DSN so every
// pooled connection gets them (busy_timeout first); writes go through one
// connection so "database is locked" cannot happen, reads use a WAL pool.
func openSQLite(path string) (*Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: create data directory: %w", err)
		}
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)"
	write, err := sql.Open("sqlite", dsn+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite: %w", err)
	}
	write.SetMaxOpenConns(1)
	read, err := sql.Open("sqlite", dsn)
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open sqlite: %w", err)
	}
	read.SetMaxOpenConns(8)
	return &Store{read: read, write: write, d: sqliteDialect, now: timeNow}, nil
}
