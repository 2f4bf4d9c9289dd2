// Command aspd is the Agent Session Protocol operator: it serves the ASP REST
// and WebSocket API and an operator API, on PostgreSQL or, with no database
// configured, on an embedded SQLite store in a local data directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served only with --pprof, on its own listener
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/daemon"
	"github.com/aspd/aspd/internal/logwriter"
	"github.com/aspd/aspd/server"
	"github.com/aspd/aspd/store"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "version" || os.Args[1] == "--version" || os.Args[1] == "-version") {
		printVersion(os.Stdout, server.ReadBuild())
		os.Exit(0)
	}
	if len(os.Args) > 1 && (os.Args[1] == "export" || os.Args[1] == "import") {
		// Moving a network between stores: see portable.go.
		os.Exit(runPortable(os.Args[1], os.Args[2:]))
	}
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // the usage was printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "aspd:", err)
		os.Exit(2)
	}
	// Lines that follow each other within a millisecond leave in one
	// write (internal/logwriter): under load, one write(2) for many
	// access-log lines.
	logOut := logwriter.New(os.Stderr, 256<<10, time.Millisecond)
	if err := run(cfg, logOut); err != nil {
		var locked *errStoreLocked
		var listen *errListen
		if errors.As(err, &locked) || errors.As(err, &listen) {
			fmt.Fprintln(os.Stderr, "aspd:", err)
		} else {
			slog.Error("aspd stopped", "err", err)
		}
		logOut.Sync()
		os.Exit(1)
	}
	logOut.Sync()
}

func run(cfg *config, logOut io.Writer) error {
	log, err := newLogger(logOut, cfg.logFormat, cfg.logLevel)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Listen before anything is opened or written (the store's lock,
	// migrations, the admin token file): a taken port fails at once.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return &errListen{addr: cfg.listen, err: err}
	}
	defer ln.Close()

	dbURL := cfg.databaseURL
	if dbURL == "" {
		// sqlite: so that a data directory with a colon in its name is
		// still a path.
		path := filepath.Join(cfg.dataDir, "aspd.db")
		dbURL = "sqlite:" + path
		log.Info("using the embedded store (single node); for production set ASPD_DATABASE_URL (or ASPD_DATABASE_URL_FILE) to a postgres:// URL",
			"path", path)
	}
	if err := checkClusterStore(cfg, dbURL); err != nil {
		return err
	}
	// One embedded store, one aspd: take its lock before anything is
	// written (migrations, presence recovery, the admin token).
	if path := sqlitePath(dbURL); path != "" {
		lock, err := lockStore(path)
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
	if cfg.groupCommit {
		st.EnableGroupCommit(cfg.committers)
	}
	log.Info("store ready", "dialect", st.Dialect(), "database", store.RedactURL(dbURL), "group_commit", cfg.groupCommit)

	adminHash, err := adminToken(cfg, log)
	if err != nil {
		return err
	}
	if cfg.seed != "" {
		n, err := seed(ctx, st, cfg.seed)
		if err != nil {
			return err
		}
		log.Info("seeded agents", "file", cfg.seed, "agents", n)
	}

	chorusRules, chorusDelivery, err := chorusConfig(cfg, dbURL, ln.Addr().String(), log)
	if err != nil {
		return err
	}
	d := daemon.New(daemon.Config{
		App: app.Config{
			Limits:       cfg.limits,
			GraceWindow:  cfg.graceWindow,
			Hub:          cfg.hub,
			Frames:       cfg.frames,
			ContactRate:  cfg.contactRateV,
			ContactBurst: cfg.contactBurst,
			MessageRate:  cfg.messageRateV,
			MessageBurst: cfg.messageBurst,
			Chorus:       chorusRules,
			Cluster:      clusterConfig(cfg, dbURL, cfg.hub.RingSize),
			Retention:    cfg.retention,
		},
		HTTP: server.Config{
			MaxBodyBytes:    cfg.maxBodyBytes,
			AdminTokenHash:  adminHash,
			PingInterval:    cfg.pingInterval,
			WSReadLimit:     cfg.wsReadLimit,
			StreamKeepalive: cfg.frameKeepalive,
		},
		Chorus: chorusDelivery,
	}, st, log)
	if err := d.Start(ctx); err != nil {
		return err
	}
	if cfg.pprof != "" {
		go func() {
			// The default mux carries the net/http/pprof handlers.
			if err := http.ListenAndServe(cfg.pprof, http.DefaultServeMux); err != nil {
				log.Error("pprof listener failed", "addr", cfg.pprof, "err", err)
			}
		}()
		log.Info("pprof enabled", "addr", "http://"+cfg.pprof+"/debug/pprof/")
	}
	httpSrv := newHTTPServer(cfg.http, d.Handler())
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	log.Info("aspd listening", "addr", "http://"+ln.Addr().String(), "grace_window", cfg.graceWindow)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.Close() // closes WebSockets (1001) and flushes cursors
	if err := httpSrv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// errListen is a listen address aspd cannot bind: main prints it as it is.
type errListen struct {
	addr string
	err  error
}

func (e *errListen) Error() string {
	var msg, hint string
	var dns *net.DNSError
	switch {
	case errors.Is(e.err, syscall.EADDRINUSE):
		msg = "the address is already in use (another aspd, or another program, listens on it)"
		hint = "stop the other process or choose another address with --listen (ASPD_LISTEN)"
	case errors.Is(e.err, syscall.EACCES):
		msg = "permission denied"
		hint = "ports below 1024 need privileges: choose a port above 1023 with --listen (ASPD_LISTEN), e.g. 127.0.0.1:8080, and put a reverse proxy in front if needed"
	case errors.Is(e.err, syscall.EADDRNOTAVAIL):
		msg = "no interface of this host has that address"
		hint = "give an address of this host with --listen (ASPD_LISTEN): 127.0.0.1:8080 for this host only, 0.0.0.0:8080 for every interface"
	case errors.As(e.err, &dns):
		msg = "the host name does not resolve (" + dns.Err + ")"
		hint = "give an IP address or a resolvable host name with --listen (ASPD_LISTEN), e.g. 127.0.0.1:8080"
	default:
		msg = e.err.Error()
		hint = "check --listen (ASPD_LISTEN): host:port, e.g. 127.0.0.1:8080"
	}
	return fmt.Sprintf("cannot listen on %s: %s; %s", e.addr, msg, hint)
}

func (e *errListen) Unwrap() error { return e.err }

// adminToken returns the SHA-256 of the operator token: from --admin-token
// or ASPD_ADMIN_TOKEN, else from the token file, which is created with a
// fresh random token (mode 0600) when it does not exist.
func adminToken(cfg *config, log *slog.Logger) ([]byte, error) {
	if cfg.adminToken != "" {
		return server.HashToken(cfg.adminToken), nil
	}
	path, source := cfg.adminTokenFile, cfg.adminTokenFrom
	if path == "" {
		path = filepath.Join(cfg.dataDir, "admin.token")
		source = "the admin token file " + path + " (default <data-dir>/admin.token)"
	} else if source == "" {
		source = "--admin-token-file " + path
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("%s: cannot create its directory: %w", source, pathErr(err))
		}
		tok := server.NewToken()
		if err := writeNewFile(path, []byte(tok+"\n")); err != nil {
			return nil, fmt.Errorf("%s: the file does not exist and cannot be created with a new token: %w", source, pathErr(err))
		}
		log.Info("generated the operator (admin) token", "file", path)
		return server.HashToken(tok), nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the file: %w", source, pathErr(err))
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the admin token file is readable by other users; restrict it to aspd's user",
			"file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()), "fix", "chmod 600 "+path)
	}
	tok := strings.TrimSpace(string(b))
	if err := checkAdminToken(tok, source); err != nil {
		return nil, err
	}
	log.Info("operator (admin) token loaded", "file", path)
	return server.HashToken(tok), nil
}

// writeNewFile creates path with mode 0600 (never replacing an existing
// file) and writes b to it; a partly written file is removed.
func writeNewFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// newLogger builds the logger of --log-format and --log-level; parseConfig
// has refused any other value, and so does newLogger.
func newLogger(out io.Writer, format, level string) (*slog.Logger, error) {
	lv, err := parseLogLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(out, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
}
