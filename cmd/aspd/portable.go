package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/aspd/aspd/store"
)

const portableHelp = `Usage:
  aspd export [--database-url-file FILE | --data-dir DIR] [--include-token-hashes] [-o FILE]
  aspd import [--database-url-file FILE | --data-dir DIR] [-i FILE]

Move a whole network - agents with their allowlists, blocks and roles,
sessions, participants, every event, idempotency keys, delivery cursors and
presence - from one store to another, e.g. from the embedded SQLite store to
PostgreSQL or back, without losing history.

  aspd export --data-dir aspd-data --include-token-hashes -o network.jsonl
  ASPD_DATABASE_URL=postgres://aspd@db/aspd aspd import -i network.jsonl

The store is chosen as the server chooses it: the database URL
(postgres:// or postgresql:// for PostgreSQL, sqlite:PATH or a file path for
SQLite; any other URL is refused) from --database-url, ASPD_DATABASE_URL or
the file named by --database-url-file (ASPD_DATABASE_URL_FILE), else the
embedded store <data-dir>/aspd.db, with --data-dir defaulting to
"aspd-data". Keep a password out of the command line: other users can read
it there. The environment variables give the defaults.

export reads one consistent snapshot and writes JSON Lines to FILE (default
standard output): a header line, then one line per record, then an end record
with the counts. Event bodies are carried verbatim, so every event keeps its
exact bytes, ids and sequence. Token hashes are written only with
--include-token-hashes (the file is then as sensitive as the database);
without them the imported agents have no token and each needs a new one
(aspctl agent rotate-token). The operator (admin) token is not exported.
Stop aspd first, or export while it runs (export takes no lock and only
reads): the snapshot stays consistent, but events written after it are not
in the file.

import reads FILE (default standard input) into a store that must be empty
(no agents, no sessions): it refuses anything else. The import is one
transaction: it loads the whole file or writes nothing. It fails if the file
is truncated or corrupted, including when a session's events are not exactly
1..last_seq. Run it while no aspd serves the target store: on an embedded
(SQLite) store it takes the store's lock, so it refuses to run while an aspd
holds it, and an aspd cannot start on the store until the import is done.

Counts are printed to standard error.

Flags:
`

// runPortable implements `aspd export` and `aspd import`.
func runPortable(cmd string, args []string) int {
	fs := flag.NewFlagSet("aspd "+cmd, flag.ContinueOnError)
	e := newEnvFlags(fs)
	var dbURL, dataDir, file string
	var withHashes bool
	dbFlag := registerDatabaseURL(e, &dbURL)
	e.str(&dataDir, "data-dir", "aspd-data", "directory of the embedded store (<data-dir>/aspd.db) when --database-url is empty")
	if cmd == "export" {
		fs.BoolVar(&withHashes, "include-token-hashes", false, "also export each agent's token hash, so existing agent tokens keep working after import")
		fs.StringVar(&file, "o", "", "write to FILE instead of standard output (created mode 0600, replaced only when the export succeeds)")
	} else {
		fs.StringVar(&file, "i", "", "read from FILE instead of standard input")
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), portableHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if e.err != nil {
		fmt.Fprintf(os.Stderr, "aspd %s: %v\n", cmd, e.err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "aspd %s: %v\n", cmd, unexpectedArgs(fs.Args(), "see aspd "+cmd+" --help"))
		return 2
	}
	// A foreign URL is refused here, before a file is created or a lock taken.
	err := e.resolve()
	if err == nil {
		err = checkDatabaseURL(dbURL, dbFlag.source)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aspd %s: %v\n", cmd, err)
		return 2
	}
	if dbURL == "" {
		dbURL = "sqlite:" + filepath.Join(dataDir, "aspd.db")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd == "export" {
		err = runExport(ctx, dbURL, file, withHashes)
	} else {
		err = runImport(ctx, dbURL, file)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aspd %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func isPostgresURL(u string) bool {
	loc, err := store.ParseURL(u)
	return err == nil && loc.Postgres
}

func runExport(ctx context.Context, dbURL, file string, withHashes bool) error {
	// Opening a SQLite path that does not exist would create an empty store
	// and export an empty network; a typo must not look like success.
	if path := sqlitePath(dbURL); path != "" {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("no store at %s: %w", path, err)
		}
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer st.Close()

	var w io.Writer = os.Stdout
	var tmp *os.File
	if file != "" && file != "-" {
		tmp, err = os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name()) // no-op after the rename
		if err := tmp.Chmod(0o600); err != nil {
			tmp.Close()
			return err
		}
		w = tmp
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	stats, err := st.Export(ctx, bw, store.ExportOptions{IncludeTokenHashes: withHashes})
	if err == nil {
		err = bw.Flush()
	}
	if tmp != nil {
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), file)
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "aspd export: exported from %s: %s\n", st.Dialect(), stats.Counts)
	if withHashes {
		fmt.Fprintf(os.Stderr, "aspd export: wrote %d token hashes; keep the file as safe as the database\n", stats.TokenHashes)
	} else if stats.Counts[store.KindAgent] > 0 {
		fmt.Fprintln(os.Stderr, "aspd export: token hashes not included (--include-token-hashes): imported agents will need new tokens (aspctl agent rotate-token)")
	}
	return nil
}

func runImport(ctx context.Context, dbURL, file string) error {
	var r io.Reader = os.Stdin
	if file != "" && file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	// The target must not be served while it is loaded: take the lock aspd
	// takes, so that neither can start while the other runs.
	if path := sqlitePath(dbURL); path != "" {
		lock, err := lockStore(path)
		var locked *errStoreLocked
		if errors.As(err, &locked) {
			return fmt.Errorf("the store %s is in use by %s (lock %s): stop it before importing", locked.db, locked.holder(), locked.lock)
		}
		if err != nil {
			return err
		}
		defer lock.release()
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer st.Close()
	stats, err := st.Import(ctx, bufio.NewReaderSize(r, 256<<10))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "aspd import: imported into %s: %s\n", st.Dialect(), stats.Counts)
	if stats.AgentsWithoutToken > 0 {
		fmt.Fprintf(os.Stderr, "aspd import: %d agents have no token; give each a new one with aspctl agent rotate-token\n", stats.AgentsWithoutToken)
	}
	return nil
}
