package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aspd/aspd/internal/cluster"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/server"
)

// usageHead opens `aspd --help`: the subcommands, then the server's flags.
const usageHead = `Usage:
  aspd [flags]            serve the Agent Session Protocol
  aspd export [flags]     write the whole network (agents, sessions, events) as JSON Lines; see aspd export --help
  aspd import [flags]     load an export into an empty store; see aspd import --help
  aspd version            print the version and the revision aspd was built from (also --version)

Every flag can also be set by the environment variable named beside it.

Flags:
`

type config struct {
	listen         string
	databaseURL    string
	dataDir        string
	adminToken     string
	adminTokenFile string
	seed           string
	graceWindow    time.Duration
	maxBodyBytes   int64
	limits         protocol.Limits
	pingInterval   time.Duration
	wsReadLimit    int64
	hub            replay.Config
	frames         server.FramesConfig
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
	fs  *flag.FlagSet
	err error
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
	if v, ok := e.env(name); ok {
		def = v
	}
	e.fs.StringVar(p, name, def, e.usage(name, help))
}

func (e *envFlags) bool(p *bool, name string, def bool, help string) {
	if v, ok := e.env(name); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.err = fmt.Errorf("%s: %w", envName(name), err)
		}
		def = b
	}
	e.fs.BoolVar(p, name, def, e.usage(name, help))
}

func (e *envFlags) dur(p *time.Duration, name string, def time.Duration, help string) {
	if v, ok := e.env(name); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.err = fmt.Errorf("%s: %w", envName(name), err)
		}
		def = d
	}
	e.fs.DurationVar(p, name, def, e.usage(name, help))
}

func (e *envFlags) int(p *int, name string, def int, help string) {
	if v, ok := e.env(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.err = fmt.Errorf("%s: %w", envName(name), err)
		}
		def = n
	}
	e.fs.IntVar(p, name, def, e.usage(name, help))
}

func (e *envFlags) int64(p *int64, name string, def int64, help string) {
	if v, ok := e.env(name); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			e.err = fmt.Errorf("%s: %w", envName(name), err)
		}
		def = n
	}
	e.fs.Int64Var(p, name, def, e.usage(name, help))
}

func parseConfig(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("aspd", flag.ContinueOnError)
	e := &envFlags{fs: fs}
	lim := protocol.DefaultLimits()
	hc := replay.DefaultConfig()
	fc := server.DefaultFramesConfig()
	e.str(&c.contactRate, "contact-rate", "0", "contact attempts (POST /sessions, /invite, /reopen) per agent per second; 0 = unlimited (429 rate_limited with Retry-After beyond)")
	e.int(&c.contactBurst, "contact-burst", 20, "contact attempts an agent may make in a burst")
	e.str(&c.messageRate, "message-rate", "0", "messages (POST /sessions/{id}/messages) per agent per second; 0 = unlimited (429 rate_limited with Retry-After beyond)")
	e.int(&c.messageBurst, "message-burst", 200, "messages an agent may send in a burst")
	e.str(&c.frameRate, "frame-rate", "20", "frame submissions per sender per second (POST /frames; 429 rate_limited with Retry-After beyond)")

	c.chorus.register(e)
	clusterFlags(e, c)
	e.str(&c.listen, "listen", "127.0.0.1:8080", "address to serve HTTP and WebSocket on")
	e.str(&c.databaseURL, "database-url", "", "postgres://... for PostgreSQL; a file path or sqlite:PATH for SQLite; empty = embedded store in --data-dir")
	e.str(&c.dataDir, "data-dir", "aspd-data", "directory for the embedded store and the generated admin token")
	e.str(&c.adminToken, "admin-token", "", "operator token for /admin/v1 (prefer the env var or the token file)")
	e.str(&c.adminTokenFile, "admin-token-file", "", "file holding the operator token; created with a random token (mode 0600) if missing (default <data-dir>/admin.token)")
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
	e.dur(&fc.Keepalive, "frame-keepalive", fc.Keepalive, "interval of SSE keepalive comments on GET /stream")
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
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.adminToken != "" {
		if err := checkAdminToken(c.adminToken, "--admin-token (or ASPD_ADMIN_TOKEN)"); err != nil {
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
		return nil, fmt.Errorf("--frame-rate must be a positive number")
	} else {
		fc.RatePerSecond = frameRate
	}
	for _, r := range []struct {
		name string
		v    string
		out  *float64
	}{{"--contact-rate", c.contactRate, &c.contactRateV}, {"--message-rate", c.messageRate, &c.messageRateV}} {
		f, err := strconv.ParseFloat(r.v, 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("%s must be a number >= 0", r.name)
		}
		*r.out = f
	}
	if c.contactBurst < 1 || c.messageBurst < 1 {
		return nil, fmt.Errorf("--contact-burst and --message-burst must be at least 1")
	}
	if err := c.chorus.check(); err != nil {
		return nil, err
	}
	if err := checkCluster(c); err != nil {
		return nil, err
	}
	c.limits = lim
	c.hub = hc
	c.frames = fc
	switch {
	case c.graceWindow <= 0:
		return nil, fmt.Errorf("--grace-window must be positive")
	case c.maxBodyBytes < 1024:
		return nil, fmt.Errorf("--max-body-bytes must be at least 1024")
	case lim.MaxContentBytes <= 0 || lim.MaxParts <= 0 || lim.MaxInvitees <= 0 || lim.MaxTopicBytes <= 0 || lim.MaxMetadataBytes <= 0:
		return nil, fmt.Errorf("limits must be positive")
	case fc.MaxReach < fc.MaxStreams:
		// Otherwise a 429 on another agent's scope would reveal that it has
		// more than --frame-max-reach streams, which the coarsened count hides.
		return nil, fmt.Errorf("--frame-max-reach (%d) must be at least --frame-max-streams (%d)", fc.MaxReach, fc.MaxStreams)
	case fc.Validation.MaxSkewPast < 0 || fc.Validation.MaxSkewFuture < 0:
		return nil, fmt.Errorf("--frame-max-age and --frame-max-future must not be negative")
	case fc.MaxFrameBytes < 1024 || fc.Retention.RetainBytes < 0:
		return nil, fmt.Errorf("--frame-max-bytes must be at least 1024 and --frame-retain-bytes not negative")
	case fc.Burst <= 0 || fc.MaxReach <= 0 || fc.MaxStreams <= 0 || fc.Retention.RetainCount < 0 || fc.Retention.Buffer <= 0 || fc.Keepalive <= 0:
		return nil, fmt.Errorf("frame settings must be positive")
	case c.http.readTimeout <= 0 || c.http.readHeaderTimeout <= 0 || c.http.idleTimeout <= 0:
		return nil, fmt.Errorf("--http-read-timeout, --http-read-header-timeout and --http-idle-timeout must be positive")
	case c.http.maxHeaderBytes < 4096:
		return nil, fmt.Errorf("--http-max-header-bytes must be at least 4096")
	case c.pingInterval <= 0 || hc.WriteTimeout <= 0 || hc.MaxLag <= 0 || hc.RingSize <= 0 || hc.CursorFlushInterval <= 0 || hc.ConfirmInterval <= 0 || c.wsReadLimit <= 0:
		return nil, fmt.Errorf("WebSocket and delivery settings must be positive")
	}
	return c, nil
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
