// Command aspbench is a load generator for Agent Session Protocol operators.
//
// It speaks only the ASP wire protocol (REST and WS /connect), so it can
// measure any ASP operator, not just aspd. Agents are provisioned either
// through aspd's operator API (POST /admin/v1/agents, with --admin-token) or
// taken from a seed file of handles and tokens in the `aspd --seed` shape
// (--seed), so an operator provisioned by other means can be driven too.
//
// Usage:
//
//	aspbench [global flags] <scenario> [scenario flags]
//
// Scenarios:
//
//	chat    A agents in S sessions of K joined participants, all connected;
//	        senders post as fast as possible (closed loop, --concurrency) or at
//	        a fixed total --rate (open loop: latency is measured from each
//	        message's scheduled send time, so a slow server cannot hide its
//	        latency by slowing the sender down: no coordinated omission).
//	fanout  one session of N joined participants; one sender at a fixed rate;
//	        latency until the first and the last recipient has each message.
//	replay  an agent goes offline while E events accumulate across S sessions;
//	        time from reconnect until every missed event has arrived.
//	idle    C idle connections; server memory per connection (from
//	        /proc/PID/status when --pid is given, and /metrics if present).
//
// Tools (no server; give them first, alone):
//
//	aspbench stamp <in >out
//	        prefixes each line with the Unix µs wall time it was read at.
//	aspbench timeline --messages FILE [--aspd-log FILE] [--pg-log FILE]
//	        attributes the slow messages of a chat --timeline run to what
//	        overlapped them (timeline.go).
//
// Set-up (provisioning, sessions, invitations, joins) happens before any
// agent connects; the agents then connect in waves (--connect-wave), each
// wave caught up with the set-up events before the next dials, and only
// then does the measurement start.
//
// Every scenario checks correctness while it measures: each connection
// tracks, per session, the last sequence it received, and any gap,
// reordering or duplicate, any accepted (201) message missing at a joined
// participant, or any unexpected close fails the run with exit status 1. A
// fast wrong answer is not a result. The one documented exception is the
// join restart: when a stream reaches the agent's own session.joined it may
// start that session over at sequence 1 (the transcript up to the join);
// such restarts are counted (join_restarts), and re-delivered events are
// not counted twice. Usage errors, including a --server that is not a
// loopback address, exit with status 2.
//
// Latencies are measured with the run's monotonic clock: the send time (or,
// in the open loop, the scheduled send time) travels in the message as a
// data part {"bench": {"run", "id", "t"}} and each recipient subtracts it
// from its arrival time. Percentiles come from a log-linear histogram whose
// relative error is below 0.1% (values under 1.024µs are exact; min, max,
// count and mean are exact).
//
// Output is a human-readable table, or with --json a JSON document holding
// the parameters, the machine (cores, memory, load average), every figure,
// the correctness counts and the failed requests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

func main() {
	watchdog = true
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// watchdog, set by main, adds a last resort on top of the context
// deadlines: the process exits if it outlives --timeout plus the cleanup
// bound by a minute (a stuck write, a server that never answers).
var watchdog bool

// options are the global flags.
type options struct {
	server         string
	servers        []string // --server split: every node (nodes.go)
	adminToken     string
	adminTokenFile string
	seedFile       string
	jsonOut        bool
	duration       time.Duration
	timeout        time.Duration
	pid            int
	setupConc      int
	connectWave    int
	inviteBatch    int
	keepAgents     bool
	cleanupTimeout time.Duration
	drainTimeout   time.Duration
	requestIDs     bool // chat --timeline: POSTs of benchmark messages carry X-Request-Id
}

func defaultOptions() *options {
	return &options{
		server:         "http://127.0.0.1:8080",
		adminToken:     os.Getenv("ASPBENCH_ADMIN_TOKEN"),
		timeout:        2 * time.Minute,
		setupConc:      32,
		connectWave:    100,
		inviteBatch:    100,
		cleanupTimeout: 60 * time.Second,
		drainTimeout:   30 * time.Second,
	}
}

// addGlobals binds the global flags to o, with o's current values as
// defaults, so they may appear before or after the scenario name.
func addGlobals(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.server, "server", o.server, "base URL of the ASP operator; loopback hosts only (127.0.0.0/8, ::1, localhost). Several nodes of one cluster, comma-separated (http://127.0.0.1:8080,http://127.0.0.1:8081), get the agents round-robin; operator calls, /metrics and --pid use the first")
	fs.StringVar(&o.adminToken, "admin-token", o.adminToken, "aspd operator token: provision agents through POST /admin/v1/agents (env ASPBENCH_ADMIN_TOKEN)")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", o.adminTokenFile, "file holding the aspd operator token")
	fs.StringVar(&o.seedFile, "seed", o.seedFile, `seed file of agents in the aspd --seed shape ({"@a.b": {"token": "..."}, "@c.d": "token"}); the scenario uses the first N handles in file order`)
	fs.BoolVar(&o.jsonOut, "json", o.jsonOut, "print the result as a JSON document on stdout instead of the table")
	fs.DurationVar(&o.duration, "duration", o.duration, "chat: measured window (default 10s); idle: how long the connections are held idle before measuring (default 10s)")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "hard bound on the whole run (set-up, measurement, drain); cleanup has its own bound, --cleanup-timeout")
	fs.IntVar(&o.pid, "pid", o.pid, "pid of the server process: read its memory, threads, open files and CPU time from /proc/PID before and after the measurement")
	fs.IntVar(&o.setupConc, "setup-concurrency", o.setupConc, "parallel requests while provisioning, setting up sessions, connecting and cleaning up")
	fs.IntVar(&o.connectWave, "connect-wave", o.connectWave, "chat, fanout, replay: connect this many agents at a time, each wave caught up with the set-up events before the next dials")
	fs.IntVar(&o.inviteBatch, "invite-batch", o.inviteBatch, "handles per invite request (the operator's invite-list limit; aspd's default is 100)")
	fs.BoolVar(&o.keepAgents, "keep-agents", o.keepAgents, "do not delete the agents provisioned through the operator API at the end")
	fs.DurationVar(&o.cleanupTimeout, "cleanup-timeout", o.cleanupTimeout, "bound on cleanup (closing connections, ending sessions, deleting provisioned agents)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", o.drainTimeout, "how long to wait, after sending stops, for every accepted message to reach every participant")
}

// scenario is one benchmark.
type scenario interface {
	// flags binds the scenario's flags.
	flags(fs *flag.FlagSet)
	// prepare validates the flags (after parsing) and applies defaults.
	prepare(o *options) error
	// agentsNeeded is how many agents the scenario drives.
	agentsNeeded() int
	// connectionsNeeded is how many WebSocket connections it opens at once.
	connectionsNeeded() int
	// params records the effective parameters.
	params(p *ordered)
	// run runs the scenario; figures go to b.rep.
	run(ctx context.Context, b *bench) error
}

var scenarios = map[string]func() scenario{
	"chat":   func() scenario { return &chatScenario{} },
	"fanout": func() scenario { return &fanoutScenario{} },
	"replay": func() scenario { return &replayScenario{} },
	"idle":   func() scenario { return &idleScenario{} },
}

var scenarioHelp = map[string]string{
	"chat":   "A agents in S sessions of K joined participants; closed-loop (--concurrency) or open-loop (--rate) senders; accepted messages/s, delivered events/s, send-to-deliver latency",
	"fanout": "one session of N joined participants; latency until the first and the last recipient has each message",
	"replay": "an agent goes offline while E events accumulate across S sessions; time from reconnect until every missed event has arrived",
	"idle":   "C idle connections; server memory per connection (--pid) and /metrics if present",
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func printUsage(w io.Writer, global *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: aspbench [global flags] <scenario> [scenario flags]\n\nScenarios:\n")
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-7s %s\n", n, scenarioHelp[n])
	}
	fmt.Fprintf(w, "\nTools (no server):\n  stamp    prefix each line of stdin with the Unix µs wall time it was read at\n  timeline attribute the slow messages of a chat --timeline run (aspbench timeline --help)\n")
	fmt.Fprintf(w, "\nRun 'aspbench <scenario> --help' for a scenario's flags.\n\nGlobal flags:\n")
	global.SetOutput(w)
	global.PrintDefaults()
}

// parseArgs parses the command line into options and a scenario.
func parseArgs(args []string, stderr io.Writer) (*options, string, scenario, error) {
	o := defaultOptions()
	global := flag.NewFlagSet("aspbench", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	addGlobals(global, o)
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stderr, global)
			return nil, "", nil, flag.ErrHelp
		}
		return nil, "", nil, usagef("%v", err)
	}
	rest := global.Args()
	if len(rest) == 0 {
		printUsage(stderr, global)
		return nil, "", nil, usagef("no scenario given (chat, fanout, replay, idle)")
	}
	name := rest[0]
	mk, ok := scenarios[name]
	if !ok {
		return nil, "", nil, usagef("unknown scenario %q (chat, fanout, replay, idle)", name)
	}
	sc := mk()
	fs := flag.NewFlagSet("aspbench "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addGlobals(fs, o)
	sc.flags(fs)
	if err := fs.Parse(rest[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: aspbench %s [flags]\n\n%s\n\nFlags (global flags may also be given here):\n", name, scenarioHelp[name])
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil, "", nil, flag.ErrHelp
		}
		return nil, "", nil, usagef("%s: %v", name, err)
	}
	if fs.NArg() > 0 {
		return nil, "", nil, usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.servers = splitServers(o.server)
	if len(o.servers) == 0 {
		return nil, "", nil, usagef("--server: no URL")
	}
	for _, s := range o.servers {
		if err := checkLoopback(s); err != nil {
			return nil, "", nil, usagef("%v", err)
		}
	}
	o.server = o.servers[0]
	if o.adminTokenFile != "" && o.adminToken == "" {
		b, err := os.ReadFile(o.adminTokenFile)
		if err != nil {
			return nil, "", nil, usagef("--admin-token-file: %v", err)
		}
		o.adminToken = strings.TrimSpace(string(b))
	}
	if o.seedFile == "" && o.adminToken == "" {
		return nil, "", nil, usagef("no way to get agents: give --admin-token (or ASPBENCH_ADMIN_TOKEN, or --admin-token-file) to provision through aspd's operator API, or --seed FILE")
	}
	if o.timeout <= 0 || o.cleanupTimeout <= 0 || o.drainTimeout <= 0 {
		return nil, "", nil, usagef("--timeout, --cleanup-timeout and --drain-timeout must be positive")
	}
	if o.setupConc < 1 || o.inviteBatch < 1 || o.connectWave < 1 {
		return nil, "", nil, usagef("--setup-concurrency, --connect-wave and --invite-batch must be at least 1")
	}
	if o.duration < 0 {
		return nil, "", nil, usagef("--duration must not be negative")
	}
	if err := sc.prepare(o); err != nil {
		return nil, "", nil, usagef("%s: %v", name, err)
	}
	return o, name, sc, nil
}

// checkLoopback refuses any server that is not on this machine's loopback
// interface: aspbench generates load and must never be pointed elsewhere.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--server %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("--server %q: scheme must be http or https", raw)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--server %q: give only scheme://host[:port]", raw)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("--server %q: no host", raw)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--server %q: refusing a target that is not a loopback address (127.0.0.0/8, ::1, localhost); aspbench generates load and only runs against this machine", raw)
	}
	return nil
}

// run is the whole command: it returns the exit status (0 ok, 1 failed, 2
// usage).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "stamp":
			return runStamp(args[1:], os.Stdin, stdout, stderr)
		case "timeline":
			return runTimeline(args[1:], stdout, stderr)
		}
	}
	o, name, sc, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "aspbench:", err)
		return 2
	}
	if watchdog {
		limit := o.timeout + o.cleanupTimeout + time.Minute
		t := time.AfterFunc(limit, func() {
			fmt.Fprintf(stderr, "aspbench: FAILED: still running after %s (--timeout + --cleanup-timeout + 1m); exiting\n", limit)
			os.Exit(1)
		})
		defer t.Stop()
	}
	b := newBench(o, name, stderr)
	sc.params(b.rep.Parameters)
	b.rep.Parameters.set("setup_concurrency", o.setupConc)
	if name != "idle" {
		b.rep.Parameters.set("connect_wave", o.connectWave)
	}
	if o.pid > 0 {
		b.rep.Parameters.set("pid", o.pid)
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	runErr := b.execute(ctx, sc)
	var ue *usageError
	if errors.As(runErr, &ue) {
		fmt.Fprintln(stderr, "aspbench:", runErr)
		b.cleanup()
		return 2
	}
	if runErr != nil && ctx.Err() != nil {
		runErr = fmt.Errorf("%w (the run exceeded --timeout %s)", runErr, o.timeout)
	}
	b.cleanup()
	b.finish(runErr)

	if o.jsonOut {
		if err := writeJSON(stdout, b.rep); err != nil {
			fmt.Fprintln(stderr, "aspbench:", err)
			return 1
		}
	} else {
		writeTable(stdout, b.rep)
	}
	if !b.rep.OK {
		for _, f := range b.rep.Failures {
			fmt.Fprintln(stderr, "aspbench: FAILED:", f)
		}
		return 1
	}
	return 0
}
