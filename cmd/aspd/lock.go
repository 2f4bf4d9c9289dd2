package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aspd/aspd/store"
)

// An embedded (SQLite) store serves one aspd at a time. A second process on
// the same file would run its start-up presence recovery against the
// first one's live agents (marking them disconnected and ending their
// sessions' presence) and deliver none of the first one's events. So aspd,
// and aspd import, take an exclusive lock on <database file>.lock before
// they write anything, and hold it until they exit; a process that cannot
// take it refuses to start. The lock is an advisory flock(2) on the open
// file, released by the kernel when the process exits however it exits, so
// a lock file left behind by a crash never blocks a restart. The file holds
// the pid of the process that last took the lock, for the refusal message.

// storeLock is a held lock; keep it referenced for as long as it must hold.
type storeLock struct {
	f *os.File
}

// errStoreLocked says the store is in use by another process.
type errStoreLocked struct {
	db, lock string
	pid      int // 0 if unknown
}

// holder names the process holding the lock.
func (e *errStoreLocked) holder() string {
	if e.pid > 0 {
		return fmt.Sprintf("another aspd process (pid %d)", e.pid)
	}
	return "another aspd process"
}

func (e *errStoreLocked) Error() string {
	holder := e.holder()
	return fmt.Sprintf("the embedded store %s is in use by %s, which holds the lock %s. "+
		"One store serves one aspd: a second would mark the first one's agents disconnected. "+
		"Stop the other aspd first, give this one its own store (another --data-dir, or --database-url with another SQLite file), "+
		"or, for production and to run several aspd nodes on one network, use PostgreSQL (--database-url postgres://...; docs/cluster.md)",
		e.db, holder, e.lock)
}

// sqlitePath returns the SQLite file a store URL names, or "" for PostgreSQL.
func sqlitePath(dbURL string) string {
	loc, err := store.ParseURL(dbURL)
	if err != nil || loc.Postgres {
		return "" // parseConfig has refused a URL that does not parse
	}
	return loc.Path
}

// lockStore takes the exclusive lock of the SQLite store at dbPath, creating
// its directory (mode 0700) and the lock file (mode 0600) if needed. It
// fails with *errStoreLocked if another process holds it.
func lockStore(dbPath string) (*storeLock, error) {
	lockPath := dbPath + ".lock"
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := flockExclusive(f); err != nil {
		defer f.Close()
		if errors.Is(err, errLockHeld) {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, &errStoreLocked{db: dbPath, lock: lockPath, pid: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &storeLock{f: f}, nil
}

// release gives the lock up. Exiting does the same.
func (l *storeLock) release() {
	if l != nil {
		_ = l.f.Close()
	}
}
