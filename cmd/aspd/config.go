package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/cluster"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// usageHead opens `aspd --help`: the subcommands, then the server's flags.
const usageHead = `Usage:
  aspd [flags]            serve the Agent Session Protocol
  aspd export [flags]     write the whole network (agents, sessions, events) as JSON Lines; see aspd export --help
  aspd import [flags]     load an export into an empty store; see aspd import --help
  aspd version            print the version and the revision aspd was built from (also --version)

Every flag can also be set by the environment variable named beside it; a
flag on the command line wins. Secrets (the database URL, the admin token,
the Chorus key, the NATS URL) belong in the environment or in the files named
by their -file flags, not on the command line; their values are never shown.

Flags:
`

type config struct {
	listen         string
	databaseURL    string
	dataDir        string
	adminToken     string
	adminTokenFile string
	adminTokenFrom string // where the token or its file was given, for messages
	seed           string
	graceWindow    time.Duration
	maxBodyBytes   int64
	limits         protocol.Limits
	pingInterval   time.Duration
	wsReadLimit    int64
	hub            replay.Config
	frames         app.FramesConfig
	frameKeepalive time.Duration // SSE keepalive comments on GET /stream
	frameRate      string
	contactRate    string
	contactRateV   float64
	messageRateV   float64
	messageRate    string
	contactBurst   int
	messageBurst   int
	pprof          string
	groupCommit    bool
	committers     int
	logFormat      string
	logLevel       string
	http           httpConfig
	chorus         chorusFlags    // chorus.go
	cluster        cluster.Config // used on PostgreSQL (cluster.go)
	retention      app.RetentionConfig
}

// httpConfig bounds what one HTTP connection may cost the server.
type httpConfig struct {
	readTimeout       time.Duration // a whole request, headers and body
	readHeaderTimeout time.Duration // the request line and headers
	idleTimeout       time.Duration // an idle keep-alive connection between requests
	maxHeaderBytes    int           // request line and headers
}

// envFlags binds each flag to an ASPD_* environment variable that provides
// its default, so the flag wins over the environment.
type envFlags struct {
	fs      *flag.FlagSet
	err     error
	defs    map[string]string // each flag's built-in default, for error messages
	secrets []*secretFlag
	set     map[string]bool // flags given on the command line, after resolve
}

func newEnvFlags(fs *flag.FlagSet) *envFlags {
	return &envFlags{fs: fs, defs: map[string]string{}}
}

func envName(flagName string) string {
	return "ASPD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (e *envFlags) env(name string) (string, bool) {
	v, ok := os.LookupEnv(envName(name))
	return v, ok && v != ""
}

func (e *envFlags) usage(name, help string) string {
	return fmt.Sprintf("%s (env %s)", help, envName(name))
}

func (e *envFlags) str(p *string, name, def, help string) {
	e.defs[name] = def
	if v, ok := e.env(name); ok {
		def = v
	}
	e.fs.StringVar(p, name, def, e.usage(name, help))
}

func (e *envFlags) bool(p *bool, name string, def bool, help string) {
	e.defs[name] = strconv.FormatBool(def)
	if v, ok := e.env(name); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.err = fmt.Errorf("%s=%s (--%s) is not true or false", envName(name), v, name)
		}
		def = b
	}
	e.fs.BoolVar(p, name, def, e.usage(name, help))
}

func (e *envFlags) dur(p *time.Duration, name string, def time.Duration, help string) {
	e.defs[name] = def.String()
	if v, ok := e.env(name); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.err = fmt.Errorf("%s=%s (--%s) is not a duration: write it like 250ms, 30s or 2m", envName(name), v, name)
		}
		def = d
	}
	e.fs.DurationVar(p, name, def, e.usage(name, help))
}

// days is a duration flag that also takes whole days ("90d"): retention
// periods are counted in days, which time.ParseDuration does not know.
type days struct{ p *time.Duration }

func (d days) String() string {
	if d.p == nil {
		return "0s"
	}
	if *d.p > 0 && *d.p%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*d.p/(24*time.Hour)), 10) + "d"
	}
	return d.p.String()
}

func (d days) Set(v string) error {
	x, err := parseDays(v)
	if err != nil {
		return err
	}
	*d.p = x
	return nil
}

// parseDays parses a Go duration or a whole number of days ("90d").
func parseDays(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		d, err := strconv.ParseInt(n, 10, 64)
		if err != nil || d < 0 || d > 100*365 {
			return 0, fmt.Errorf("%q is not a number of days, e.g. 90d", v)
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	x, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: write it like 90d, 36h or 30m", v)
	}
	return x, nil
}

func (e *envFlags) days(p *time.Duration, name string, def time.Duration, help string) {
	*p = def
	e.defs[name] = days{p}.String()
	if v, ok := e.env(name); ok {
		d, err := parseDays(v)
		if err != nil {
			e.err = fmt.Errorf("%s=%s (--%s): %v", envName(name), v, name, err)
		}
		*p = d
	}
	e.fs.Var(days{p}, name, e.usage(name, help))
}

func (e *envFlags) int(p *int, name string, def int, help string) {
	e.defs[name] = strconv.Itoa(def)
	if v, ok := e.env(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.err = fmt.Errorf("%s=%s (--%s) is not an integer", envName(name), v, name)
		}
		def = n
	}
	e.fs.IntVar(p, name, def, e.usage(name, help))
}

func (e *envFlags) int64(p *int64, name string, def int64, help string) {
	e.defs[name] = strconv.FormatInt(def, 10)
	if v, ok := e.env(name); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			e.err = fmt.Errorf("%s=%s (--%s) is not an integer", envName(name), v, name)
		}
		def = n
	}
	e.fs.Int64Var(p, name, def, e.usage(name, help))
}

// secretFlag is a value that must never be shown: not by --help (package
// flag prints a flag's default, so the environment's value is not made the
// default but applied by resolve), not in errors, not in logs. It may also
// be given in a file named by a companion flag (the Docker and Kubernetes
// secrets convention: ASPD_DATABASE_URL_FILE=/run/secrets/...), which keeps
// it out of the process's command line and environment.
type secretFlag struct {
	p        *string
	name     string // the value's flag; "" when it has none (ASPD_CHORUS_KEY)
	env      string
	file     string  // the companion flag naming a file that holds the value
	filePath *string // its value
	read     bool    // resolve reads the file (else the caller does: the admin token file may be created)
	source   string  // where the value came from, for messages (never the value)
}

// secret registers the secret flag name (env ASPD_NAME).
func (e *envFlags) secret(p *string, name, help string) *secretFlag {
	env := envName(name)
	e.defs[name] = ""
	e.fs.StringVar(p, name, "", secretUsage(fmt.Sprintf("%s (env %s)", help, env), env))
	s := &secretFlag{p: p, name: name, env: env}
	e.secrets = append(e.secrets, s)
	return s
}

// secretEnv binds a secret given only by the environment variable env (no
// flag: a secret on the command line is readable in /proc/PID/cmdline).
func (e *envFlags) secretEnv(p *string, env string) *secretFlag {
	s := &secretFlag{p: p, env: env}
	e.secrets = append(e.secrets, s)
	return s
}

// secretUsage marks a secret's help when the environment sets it: the
// value itself is never shown.
func secretUsage(help, env string) string {
	if os.Getenv(env) != "" {
		return help + " (set from " + env + "; value not shown)"
	}
	return help
}

// withFile registers the flag name (env ASPD_NAME) naming a file that holds
// s's value. read: resolve reads it; otherwise it is only the path.
func (s *secretFlag) withFile(e *envFlags, name string, read bool, help string) *secretFlag {
	s.file, s.filePath, s.read = name, new(string), read
	e.defs[name] = ""
	def, _ := e.env(name) // a path, not a secret: shown as the default
	usage := e.usage(name, help)
	if s.name == "" { // the value has no flag of its own to carry the hint
		usage = secretUsage(usage, s.env)
	}
	e.fs.StringVar(s.filePath, name, def, usage)
	return s
}

// resolve runs after parsing: it records the flags given on the command
// line and settles each secret. The command line wins over the
// environment; the value and its file given together at the same level are
// a mistake (exit 2), not a silent choice.
func (e *envFlags) resolve() error {
	e.set = map[string]bool{}
	e.fs.Visit(func(f *flag.Flag) { e.set[f.Name] = true })
	for _, s := range e.secrets {
		valFlag := s.name != "" && e.set[s.name]
		fileFlag := s.file != "" && e.set[s.file]
		var fileSource string
		switch {
		case valFlag && fileFlag:
			return fmt.Errorf("--%s and --%s are both given: give the value or the file that holds it, not both", s.name, s.file)
		case valFlag:
			s.source = "--" + s.name
			continue
		case fileFlag:
			fileSource = "--" + s.file + " " + *s.filePath
		default:
			v := os.Getenv(s.env)
			switch {
			case v != "" && s.file != "" && *s.filePath != "":
				return fmt.Errorf("%s and %s are both set: set the value or the file that holds it, not both", s.env, envName(s.file))
			case v != "":
				*s.p, s.source = v, s.env
				continue
			case s.file == "" || *s.filePath == "":
				continue
			}
			fileSource = envName(s.file) + "=" + *s.filePath
		}
		if !s.read {
			s.source = fileSource
			continue
		}
		v, err := readSecretFile(*s.filePath, fileSource)
		if err != nil {
			return err
		}
		*s.p, s.source = v, fileSource
	}
	return nil
}

// secretSource says where the secret flag name's value came from.
func (e *envFlags) secretSource(name string) string {
	for _, s := range e.secrets {
		if s.name == name {
			return s.source
		}
	}
	return "--" + name
}

// maxSecretFile bounds what readSecretFile reads: a secret is a line, and a
// path mistaken for another file must not fill memory.
const maxSecretFile = 64 << 10

// readSecretFile returns the contents of the file at path without their
// trailing whitespace (the newline editors and `echo` add). Errors name the
// file and source, never the contents.
func readSecretFile(path, source string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: cannot read the file: %w", source, pathErr(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("%s: cannot read the file: %w", source, pathErr(err))
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("%s: the file is larger than %d bytes; it should hold the value only", source, maxSecretFile)
	}
	v := strings.TrimRight(string(b), " \t\r\n")
	if v == "" {
		return "", fmt.Errorf("%s: the file is empty; write the value in it", source)
	}
	return v, nil
}

// pathErr drops the path from an *fs.PathError, whose message repeats it.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// describe names a flag and its value as the operator set it, for errors:
// "--ws-read-limit 0", or "ASPD_WS_READ_LIMIT=0 (--ws-read-limit)" when it
// came from the environment. Never for a secret.
func (e *envFlags) describe(name string) string {
	v := e.fs.Lookup(name).Value.String()
	if v == "" || strings.ContainsAny(v, " \t") {
		v = strconv.Quote(v)
	}
	if _, fromEnv := e.env(name); fromEnv && !e.set[name] {
		return fmt.Sprintf("%s=%s (--%s)", envName(name), v, name)
	}
	return fmt.Sprintf("--%s %s", name, v)
}

// invalid is the error of a flag whose value is out of range: it names the
// flag, its value, what it must be and the default.
func (e *envFlags) invalid(name, want string) error {
	def := e.defs[name]
	if def == "" {
		def = `""`
	}
	return fmt.Errorf("%s is not allowed: it must be %s (default %s)", e.describe(name), want, def)
}

// bound is one range check of parseConfig: when bad, flag name must be want.
type bound struct {
	bad  bool
	name string
	want string
}

func (e *envFlags) check(bounds ...bound) error {
	for _, b := range bounds {
		if b.bad {
			return e.invalid(b.name, b.want)
		}
	}
	return nil
}

func parseConfig(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("aspd", flag.ContinueOnError)
	e := newEnvFlags(fs)
	lim := protocol.DefaultLimits()
	hc := replay.DefaultConfig()
	fc := app.DefaultFramesConfig()
	e.str(&c.contactRate, "contact-rate", "0", "contact attempts (POST /sessions, /invite, /reopen) per agent per second; 0 = unlimited (429 rate_limited with Retry-After beyond)")
	e.int(&c.contactBurst, "contact-burst", 20, "contact attempts an agent may make in a burst")
	e.str(&c.messageRate, "message-rate", "0", "messages (POST /sessions/{id}/messages) per agent per second; 0 = unlimited (429 rate_limited with Retry-After beyond)")
	e.int(&c.messageBurst, "message-burst", 200, "messages an agent may send in a burst")
	e.str(&c.frameRate, "frame-rate", "20", "frame submissions per sender per second (POST /frames; 429 rate_limited with Retry-After beyond)")

	c.chorus.register(e)
	clusterFlags(e, c)
	e.str(&c.listen, "listen", "127.0.0.1:8080", "address to serve HTTP and WebSocket on, host:port")
	dbURL := registerDatabaseURL(e, &c.databaseURL)
	e.str(&c.dataDir, "data-dir", "aspd-data", "directory for the embedded store and the generated admin token")
	admin := e.secret(&c.adminToken, "admin-token", "operator token for /admin/v1; prefer the environment or --admin-token-file, since the command line is visible to other users").
		withFile(e, "admin-token-file", false, "file holding the operator token; created with a random token (mode 0600) if missing (default <data-dir>/admin.token)")
	e.str(&c.seed, "seed", "", `JSON file of agents to provision at start-up, idempotently: {"@alice.test": {"token": "...", "inbound_policy": "open", "allowlist": []}, "@bob.test": "token"}`)
	e.bool(&c.groupCommit, "group-commit", true, "append concurrent messages in shared transactions (one commit per batch); false = one transaction per message")
	e.int(&c.committers, "committers", 0, "group-commit workers (0 = 2 on PostgreSQL, 1 on SQLite)")
	e.dur(&c.graceWindow, "grace-window", 60*time.Second, "how long a joined agent whose last connection dropped stays joined before session.left {reason: grace_expired}")
	e.int64(&c.maxBodyBytes, "max-body-bytes", 1<<20, "largest accepted request body, in bytes (413 body_too_large)")
	e.int(&lim.MaxContentBytes, "max-content-bytes", lim.MaxContentBytes, "largest message content, encoded JSON bytes (413 content_too_large)")
	e.int(&lim.MaxParts, "max-parts", lim.MaxParts, "most content parts in one message (413 content_too_large)")
	e.int(&lim.MaxInvitees, "max-invitees", lim.MaxInvitees, "most handles in one invite list (400 invalid_request)")
	e.int(&lim.MaxTopicBytes, "max-topic-bytes", lim.MaxTopicBytes, "longest session topic, in bytes (400 invalid_request)")
	e.int(&lim.MaxMetadataBytes, "max-metadata-bytes", lim.MaxMetadataBytes, "largest message metadata, encoded JSON bytes (413 content_too_large)")
	e.dur(&c.pingInterval, "ws-ping-interval", 30*time.Second, "WebSocket keepalive ping interval; a peer that does not answer within it is closed")
	e.dur(&hc.WriteTimeout, "ws-write-timeout", hc.WriteTimeout, "bound on one WebSocket write; a connection that exceeds it is closed 1008 slow consumer")
	e.int64(&hc.MaxLag, "ws-max-lag", hc.MaxLag, "events a live connection may fall behind before it is closed 1008 slow consumer")
	e.int64(&c.wsReadLimit, "ws-read-limit", 4096, "largest client-to-server WebSocket message, in bytes")
	e.int(&hc.RingSize, "ring-size", hc.RingSize, "recent events kept in memory per active session for live delivery")
	e.dur(&hc.ConfirmInterval, "ws-confirm-interval", hc.ConfirmInterval, "at most one delivery-confirmation ping per connection this often (a pong confirms every event written before its ping)")
	e.dur(&hc.CursorFlushInterval, "cursor-flush-interval", hc.CursorFlushInterval, "how often advanced delivery cursors are persisted (one batched write)")
	e.int(&fc.Burst, "frame-burst", fc.Burst, "frame submissions a sender may make in a burst (POST /frames; 429 rate_limited beyond)")
	e.int(&fc.MaxReach, "frame-max-reach", fc.MaxReach, "most streams one frame submission may reach (429 rate_limited beyond)")
	e.int(&fc.MaxStreams, "frame-max-streams", fc.MaxStreams, "most open frame streams (GET /stream) per agent (429 rate_limited beyond)")
	e.int(&fc.Retention.RetainCount, "frame-retain-count", fc.Retention.RetainCount, "frames kept per agent for Last-Event-ID resumption (a privacy setting: keep it small; 0 disables)")
	e.int64(&fc.Retention.RetainBytes, "frame-retain-bytes", fc.Retention.RetainBytes, "most frame bytes kept for resumption over all agents (0 = no byte bound); beyond it frames are delivered live but not retained")
	e.int(&fc.MaxFrameBytes, "frame-max-bytes", fc.MaxFrameBytes, "largest frame accepted on POST /frames, in bytes (413 content_too_large)")
	e.dur(&fc.Retention.RetainAge, "frame-retain-age", fc.Retention.RetainAge, "how long frames are kept for Last-Event-ID resumption")
	e.int(&fc.Retention.Buffer, "frame-stream-buffer", fc.Retention.Buffer, "frames queued per stream before a slow stream is closed")
	e.days(&c.retention.ClosedSessions, "retention-closed-sessions", 0, "purge sessions ended longer ago than this, e.g. 90d (0 = keep every session; docs/operators.md, \"Redaction and retention\": run aspd export first)")
	e.dur(&c.retention.Interval, "retention-interval", app.RetentionInterval, "how often the retention sweeper looks for sessions to purge (with --retention-closed-sessions)")
	e.int(&c.retention.Batch, "retention-batch", app.RetentionBatch, "most events deleted in one transaction by a retention purge: smaller holds the write lock for less time")
	e.dur(&c.frameKeepalive, "frame-keepalive", 15*time.Second, "interval of SSE keepalive comments on GET /stream")
	e.dur(&fc.Validation.MaxSkewPast, "frame-max-age", fc.Validation.MaxSkewPast, "oldest accepted frame created_at, relative to now")
	e.dur(&fc.Validation.MaxSkewFuture, "frame-max-future", fc.Validation.MaxSkewFuture, "furthest-future accepted frame created_at, relative to now")
	e.dur(&c.http.readTimeout, "http-read-timeout", 20*time.Second, "longest time to read one whole request, headers and body; a slower client is cut off. Long-lived WebSocket and SSE streams are not bounded by it")
	e.dur(&c.http.readHeaderTimeout, "http-read-header-timeout", 10*time.Second, "longest time to read a request's line and headers")
	e.dur(&c.http.idleTimeout, "http-idle-timeout", 60*time.Second, "how long an idle keep-alive connection is kept open waiting for its next request")
	e.int(&c.http.maxHeaderBytes, "http-max-header-bytes", 64<<10, "largest request line and headers, in bytes (431 beyond)")
	e.str(&c.pprof, "pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060); empty = off. Keep it on loopback")
	e.str(&c.logFormat, "log-format", "text", "log format: text or json")
	e.str(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	// -h and --help return flag.ErrHelp after the usage is printed: main
	// exits 0 on it.
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	if fs.NArg() > 0 {
		return nil, unexpectedArgs(fs.Args(), "aspd takes flags only (and the subcommands export, import and version first); see aspd --help")
	}
	if err := e.resolve(); err != nil {
		return nil, err
	}
	c.adminTokenFile, c.adminTokenFrom = *admin.filePath, admin.source
	if err := checkDatabaseURL(c.databaseURL, dbURL.source); err != nil {
		return nil, err
	}
	if c.adminToken != "" {
		if err := checkAdminToken(c.adminToken, admin.source); err != nil {
			return nil, err
		}
	}
	if err := checkAddr(e, "listen", "127.0.0.1:8080 (this host only) or 0.0.0.0:8080 (every interface)"); err != nil {
		return nil, err
	}
	if c.pprof != "" {
		if err := checkAddr(e, "pprof", "127.0.0.1:6060"); err != nil {
			return nil, err
		}
	}
	if _, err := parseLogLevel(c.logLevel); err != nil {
		return nil, err
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return nil, fmt.Errorf("--log-format must be text or json, not %q", c.logFormat)
	}
	if frameRate, err := strconv.ParseFloat(c.frameRate, 64); err != nil || frameRate <= 0 {
		return nil, e.invalid("frame-rate", "a positive number of submissions per second, e.g. 0.5 or 20")
	} else {
		fc.RatePerSecond = frameRate
	}
	for _, r := range []struct {
		name string
		v    string
		out  *float64
	}{{"contact-rate", c.contactRate, &c.contactRateV}, {"message-rate", c.messageRate, &c.messageRateV}} {
		f, err := strconv.ParseFloat(r.v, 64)
		if err != nil || f < 0 {
			return nil, e.invalid(r.name, "a number >= 0 (per agent per second; 0 = unlimited)")
		}
		*r.out = f
	}
	if err := e.check(
		bound{c.contactBurst < 1, "contact-burst", "at least 1"},
		bound{c.messageBurst < 1, "message-burst", "at least 1"},
	); err != nil {
		return nil, err
	}
	if err := c.chorus.check(e); err != nil {
		return nil, err
	}
	if err := checkCluster(c, e); err != nil {
		return nil, err
	}
	c.limits = lim
	c.hub = hc
	c.frames = fc
	const positive, positiveDur = "a positive number", "a positive duration, e.g. 30s"
	if err := e.check(
		bound{c.graceWindow <= 0, "grace-window", positiveDur},
		bound{c.maxBodyBytes < 1024, "max-body-bytes", "at least 1024 (bytes)"},
		bound{lim.MaxContentBytes <= 0, "max-content-bytes", "a positive number of bytes"},
		bound{lim.MaxParts <= 0, "max-parts", positive},
		bound{lim.MaxInvitees <= 0, "max-invitees", positive},
		bound{lim.MaxTopicBytes <= 0, "max-topic-bytes", "a positive number of bytes"},
		bound{lim.MaxMetadataBytes <= 0, "max-metadata-bytes", "a positive number of bytes"},
		bound{fc.Validation.MaxSkewPast < 0, "frame-max-age", "a duration >= 0"},
		bound{fc.Validation.MaxSkewFuture < 0, "frame-max-future", "a duration >= 0"},
		bound{fc.MaxFrameBytes < 1024, "frame-max-bytes", "at least 1024 (bytes)"},
		bound{fc.Retention.RetainBytes < 0, "frame-retain-bytes", "a number of bytes >= 0 (0 = no byte bound)"},
		bound{fc.Burst <= 0, "frame-burst", positive},
		bound{fc.MaxReach <= 0, "frame-max-reach", positive},
		bound{fc.MaxStreams <= 0, "frame-max-streams", positive},
		bound{fc.Retention.RetainCount < 0, "frame-retain-count", "a number >= 0 (0 disables resumption)"},
		bound{fc.Retention.Buffer <= 0, "frame-stream-buffer", positive},
		bound{c.frameKeepalive <= 0, "frame-keepalive", positiveDur},
		bound{c.retention.ClosedSessions < 0, "retention-closed-sessions", "a duration >= 0, e.g. 90d (0 = off)"},
		bound{c.retention.Interval <= 0, "retention-interval", positiveDur},
		bound{c.retention.Batch <= 0, "retention-batch", positive},
		bound{c.http.readTimeout <= 0, "http-read-timeout", positiveDur},
		bound{c.http.readHeaderTimeout <= 0, "http-read-header-timeout", positiveDur},
		bound{c.http.idleTimeout <= 0, "http-idle-timeout", positiveDur},
		bound{c.http.maxHeaderBytes < 4096, "http-max-header-bytes", "at least 4096 (bytes)"},
		bound{c.pingInterval <= 0, "ws-ping-interval", positiveDur},
		bound{hc.WriteTimeout <= 0, "ws-write-timeout", positiveDur},
		bound{hc.MaxLag <= 0, "ws-max-lag", "a positive number of events"},
		bound{hc.RingSize <= 0, "ring-size", "a positive number of events"},
		bound{hc.CursorFlushInterval <= 0, "cursor-flush-interval", positiveDur},
		bound{hc.ConfirmInterval <= 0, "ws-confirm-interval", positiveDur},
		bound{c.wsReadLimit <= 0, "ws-read-limit", "a positive number of bytes"},
	); err != nil {
		return nil, err
	}
	if fc.MaxReach < fc.MaxStreams {
		// Otherwise a 429 on another agent's scope would reveal that it has
		// more than --frame-max-reach streams, which the coarsened count hides.
		return nil, fmt.Errorf("%s is below %s: --frame-max-reach must be at least --frame-max-streams; raise the one or lower the other",
			e.describe("frame-max-reach"), e.describe("frame-max-streams"))
	}
	return c, nil
}

// registerDatabaseURL registers --database-url and --database-url-file, for
// the server and for export and import.
func registerDatabaseURL(e *envFlags, p *string) *secretFlag {
	return e.secret(p, "database-url", "postgres://... or postgresql://... for PostgreSQL; sqlite:PATH or a file path for SQLite; empty = embedded store in --data-dir. A PostgreSQL password belongs in the environment or in --database-url-file, not on the command line").
		withFile(e, "database-url-file", true, "file holding the database URL (trailing newline ignored), e.g. a Docker or Kubernetes secret")
}

// checkDatabaseURL refuses a database URL that names no store aspd has,
// before anything is created; the message shows it redacted.
func checkDatabaseURL(u, source string) error {
	if u == "" {
		return nil
	}
	if _, err := store.ParseURL(u); err != nil {
		return fmt.Errorf("the database URL from %s: %w", source, err)
	}
	return nil
}

// checkAddr refuses a listen address that is not host:port with a numeric
// port, before anything is started.
func checkAddr(e *envFlags, name, example string) error {
	v := e.fs.Lookup(name).Value.String()
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
			err = errors.New("bad port")
		}
	}
	if err != nil {
		return fmt.Errorf("%s is not a listen address: set --%s (%s) to host:port with a port number, e.g. %s", e.describe(name), name, envName(name), example)
	}
	return nil
}

// unexpectedArgs reports positional arguments, with anything URL-like
// redacted: a stray argument may be a database URL (--database-url = URL).
func unexpectedArgs(args []string, hint string) error {
	shown := make([]string, len(args))
	for i, a := range args {
		shown[i] = strconv.Quote(store.RedactURL(a))
	}
	return fmt.Errorf("unexpected arguments %s: %s", strings.Join(shown, " "), hint)
}

// parseLogLevel reads --log-level: debug, info, warn or error (any case,
// with an optional offset such as warn+2, as log/slog reads them).
func parseLogLevel(level string) (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return 0, fmt.Errorf("--log-level must be debug, info, warn or error, not %q", level)
	}
	return lv, nil
}

// minAdminTokenLen is the shortest operator token aspd accepts, wherever it
// comes from (the flag, the environment or the token file).
const minAdminTokenLen = 16

// placeholderAdminToken is docker-compose.yml's default ASPD_ADMIN_TOKEN:
// anyone who has read the file knows it.
const placeholderAdminToken = "change-me-to-a-long-random-secret"

// checkAdminToken refuses an operator token that is too short or is the
// published placeholder; source names where it came from.
func checkAdminToken(tok, source string) error {
	if tok == placeholderAdminToken {
		return fmt.Errorf("the admin token from %s is docker-compose.yml's placeholder %q; set a real one, e.g. export ASPD_ADMIN_TOKEN=\"$(openssl rand -hex 32)\"", source, tok)
	}
	if len(tok) < minAdminTokenLen {
		return fmt.Errorf("the admin token from %s is shorter than %d characters; set a longer one, e.g. $(openssl rand -hex 32)", source, minAdminTokenLen)
	}
	return nil
}
