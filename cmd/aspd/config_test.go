package main

import (
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseSeed(t *testing.T) {
	got, err := parseSeed([]byte(`{"@alice.test": {"token": "tok_alice", "inbound_policy": "allowlist", "allowlist": ["@bob.*"]}, "@bob.test": "tok_bob"}`))
	if err != nil {
		t.Fatal(err)
	}
	if a := got["@alice.test"]; a.Token != "tok_alice" || a.InboundPolicy != "allowlist" || len(a.Allowlist) != 1 {
		t.Errorf("alice: %+v", a)
	}
	if b := got["@bob.test"]; b.Token != "tok_bob" || b.InboundPolicy != "open" {
		t.Errorf("bob (bare string = token, policy open): %+v", b)
	}
	for _, bad := range []string{
		`[]`,
		`{"alice": "t"}`,
		`{"@a.b": {"token": ""}}`,
		`{"@a.b": {"token": "t", "inbound_policy": "closed"}}`,
		`{"@a.b": {"token": "t", "allowlist": ["@x"]}}`,
		`{"@a.b": {"token": "t", "role": "x"}}`,
	} {
		if _, err := parseSeed([]byte(bad)); err == nil {
			t.Errorf("seed %s accepted", bad)
		}
	}
}

func TestParseConfigFlagsAndEnvironment(t *testing.T) {
	t.Setenv("ASPD_GRACE_WINDOW", "5s")
	t.Setenv("ASPD_LISTEN", "127.0.0.1:9999")
	c, err := parseConfig([]string{"--listen", "127.0.0.1:7777", "--max-parts", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if c.graceWindow != 5*time.Second {
		t.Errorf("grace window from env: %v", c.graceWindow)
	}
	if c.listen != "127.0.0.1:7777" {
		t.Errorf("the flag must win over the environment: %s", c.listen)
	}
	if c.http.readTimeout != 20*time.Second || c.http.readHeaderTimeout != 10*time.Second || c.http.idleTimeout != 60*time.Second || c.http.maxHeaderBytes != 64<<10 {
		t.Errorf("HTTP defaults: %+v", c.http)
	}
	if c.limits.MaxParts != 3 || c.limits.MaxInvitees != 100 {
		t.Errorf("limits: %+v", c.limits)
	}
	for _, args := range [][]string{
		{"--grace-window", "0s"},
		{"--max-body-bytes", "10"},
		{"--frame-max-reach", "2", "--frame-max-streams", "3"},
		{"--frame-rate", "0"},
		{"--contact-rate", "-1"},
		{"--message-rate", "x"},
		{"--message-burst", "0"},
		{"--frame-max-age", "-1s"},
		{"--http-read-timeout", "0s"},
		{"--http-read-header-timeout", "-1s"},
		{"--http-idle-timeout", "0s"},
		{"--http-max-header-bytes", "100"},
		{"extra"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("%s accepted", strings.Join(args, " "))
		}
	}
	t.Setenv("ASPD_MAX_PARTS", "many")
	if _, err := parseConfig(nil); err == nil {
		t.Error("a malformed environment value was accepted")
	}
}

// TestParseConfigLogSettings: an unknown --log-level or --log-format is
// refused like every other bad flag, not silently replaced by a default.
func TestParseConfigLogSettings(t *testing.T) {
	for _, args := range [][]string{
		{"--log-level", "verbose"},
		{"--log-level", ""},
		{"--log-format", "xml"},
		{"--log-format", "JSON "},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	t.Setenv("ASPD_LOG_LEVEL", "loud")
	if _, err := parseConfig(nil); err == nil {
		t.Error("ASPD_LOG_LEVEL=loud accepted")
	}
	t.Setenv("ASPD_LOG_LEVEL", "")
	for _, ok := range [][]string{
		{"--log-level", "debug", "--log-format", "json"},
		{"--log-level", "WARN", "--log-format", "text"},
		{"--log-level", "error"},
	} {
		c, err := parseConfig(ok)
		if err != nil {
			t.Errorf("%q refused: %v", ok, err)
			continue
		}
		if _, err := newLogger(io.Discard, c.logFormat, c.logLevel); err != nil {
			t.Errorf("newLogger(%q, %q): %v", c.logFormat, c.logLevel, err)
		}
	}
	if _, err := newLogger(io.Discard, "text", "chatty"); err == nil {
		t.Error("newLogger accepted an unknown level")
	}
}

// TestParseConfigHelp: -h returns flag.ErrHelp (main exits 0 after the
// usage) instead of exiting inside parseConfig.
func TestParseConfigHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		if _, err := parseConfig([]string{h}); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: err %v, want flag.ErrHelp", h, err)
		}
	}
}

// Every refused setting is named with the value given and what it must be,
// so that the message says what to fix: grouped messages such as "limits
// must be positive" did not say which flag.
func TestValidationMessages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--grace-window", "0s"}, []string{"--grace-window 0s", "positive duration", "default 1m0s"}},
		{[]string{"--max-body-bytes", "10"}, []string{"--max-body-bytes 10", "at least 1024", "default 1048576"}},
		{[]string{"--max-content-bytes", "0"}, []string{"--max-content-bytes 0", "positive"}},
		{[]string{"--max-parts", "0"}, []string{"--max-parts 0", "positive", "default 64"}},
		{[]string{"--max-invitees", "-1"}, []string{"--max-invitees -1", "positive"}},
		{[]string{"--max-topic-bytes", "0"}, []string{"--max-topic-bytes 0", "positive"}},
		{[]string{"--max-metadata-bytes", "0"}, []string{"--max-metadata-bytes 0", "positive"}},
		{[]string{"--frame-rate", "0"}, []string{"--frame-rate 0", "positive number"}},
		{[]string{"--frame-rate", "fast"}, []string{"--frame-rate fast", "positive number"}},
		{[]string{"--contact-rate", "-1"}, []string{"--contact-rate -1", ">= 0"}},
		{[]string{"--message-rate", "x"}, []string{"--message-rate x", ">= 0"}},
		{[]string{"--contact-burst", "0"}, []string{"--contact-burst 0", "at least 1"}},
		{[]string{"--message-burst", "0"}, []string{"--message-burst 0", "at least 1"}},
		{[]string{"--frame-burst", "0"}, []string{"--frame-burst 0", "positive"}},
		{[]string{"--frame-max-reach", "0", "--frame-max-streams", "0"}, []string{"--frame-max-reach 0", "positive"}},
		{[]string{"--frame-max-streams", "0"}, []string{"--frame-max-streams 0", "positive"}},
		{[]string{"--frame-max-reach", "2", "--frame-max-streams", "3"}, []string{"--frame-max-reach 2", "--frame-max-streams 3", "at least"}},
		{[]string{"--frame-retain-count", "-1"}, []string{"--frame-retain-count -1", ">= 0"}},
		{[]string{"--frame-retain-bytes", "-1"}, []string{"--frame-retain-bytes -1", ">= 0"}},
		{[]string{"--frame-max-bytes", "100"}, []string{"--frame-max-bytes 100", "at least 1024"}},
		{[]string{"--frame-stream-buffer", "0"}, []string{"--frame-stream-buffer 0", "positive"}},
		{[]string{"--frame-keepalive", "0s"}, []string{"--frame-keepalive 0s", "positive duration"}},
		{[]string{"--frame-max-age", "-1s"}, []string{"--frame-max-age -1s", ">= 0"}},
		{[]string{"--frame-max-future", "-1s"}, []string{"--frame-max-future -1s", ">= 0"}},
		{[]string{"--http-read-timeout", "0s"}, []string{"--http-read-timeout 0s", "positive duration"}},
		{[]string{"--http-read-header-timeout", "-1s"}, []string{"--http-read-header-timeout -1s", "positive duration"}},
		{[]string{"--http-idle-timeout", "0s"}, []string{"--http-idle-timeout 0s", "positive duration"}},
		{[]string{"--http-max-header-bytes", "100"}, []string{"--http-max-header-bytes 100", "at least 4096"}},
		{[]string{"--ws-ping-interval", "0s"}, []string{"--ws-ping-interval 0s", "positive duration"}},
		{[]string{"--ws-write-timeout", "0s"}, []string{"--ws-write-timeout 0s", "positive duration"}},
		{[]string{"--ws-max-lag", "0"}, []string{"--ws-max-lag 0", "positive"}},
		{[]string{"--ws-read-limit", "0"}, []string{"--ws-read-limit 0", "positive number of bytes", "default 4096"}},
		{[]string{"--ring-size", "0"}, []string{"--ring-size 0", "positive"}},
		{[]string{"--cursor-flush-interval", "0s"}, []string{"--cursor-flush-interval 0s", "positive duration"}},
		{[]string{"--ws-confirm-interval", "0s"}, []string{"--ws-confirm-interval 0s", "positive duration"}},
		{[]string{"--cluster-heartbeat", "0s"}, []string{"--cluster-heartbeat 0s", "positive duration"}},
		{[]string{"--cluster-poll", "-1s"}, []string{"--cluster-poll -1s", "positive duration"}},
		{[]string{"--cluster-node-expiry", "21s"}, []string{"--cluster-node-expiry 21s", "at most 20s"}},
		{[]string{"--cluster-heartbeat", "5s", "--cluster-node-expiry", "10s"}, []string{"--cluster-node-expiry 10s", "--cluster-heartbeat 5s", "more than twice"}},
		{[]string{"--cluster-nats-subject", "a b"}, []string{`--cluster-nats-subject "a b"`, "dot-separated"}},
		{[]string{"--chorus-failing-after", "0s"}, []string{"--chorus-failing-after 0s", "positive duration"}},
		{[]string{"--chorus-timeout", "0s"}, []string{"--chorus-timeout 0s", "positive duration"}},
		{[]string{"--chorus-poll-interval", "0s"}, []string{"--chorus-poll-interval 0s", "positive duration"}},
		{[]string{"--chorus-callback-ttl", "0s"}, []string{"--chorus-callback-ttl 0s", "positive duration"}},
		{[]string{"--chorus-mcp-token-ttl", "0s"}, []string{"--chorus-mcp-token-ttl 0s", "positive duration"}},
		{[]string{"--chorus-public-url", "aspd.example"}, []string{"--chorus-public-url aspd.example", "https://"}},
		{[]string{"--chorus-retry-schedule", "soon"}, []string{"--chorus-retry-schedule soon"}},
		{[]string{"--listen", "nonsense"}, []string{"--listen nonsense", "ASPD_LISTEN", "host:port", "127.0.0.1:8080"}},
		{[]string{"--listen", "127.0.0.1"}, []string{"--listen 127.0.0.1", "host:port"}},
		{[]string{"--listen", "127.0.0.1:http"}, []string{"--listen 127.0.0.1:http", "port number"}},
		{[]string{"--listen", ":70000"}, []string{"--listen :70000", "port number"}},
		{[]string{"--pprof", "6060"}, []string{"--pprof 6060", "ASPD_PPROF", "127.0.0.1:6060"}},
		{[]string{"extra"}, []string{`unexpected arguments "extra"`, "flags only"}},
	} {
		_, err := parseConfig(tc.args)
		if err == nil {
			t.Errorf("%s accepted", strings.Join(tc.args, " "))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", strings.Join(tc.args, " "), err, w)
			}
		}
	}

	// A value from the environment is named by its variable.
	t.Setenv("ASPD_WS_READ_LIMIT", "0")
	_, err := parseConfig(nil)
	if err == nil || !strings.Contains(err.Error(), "ASPD_WS_READ_LIMIT=0 (--ws-read-limit)") {
		t.Errorf("from the environment: %v", err)
	}
	t.Setenv("ASPD_WS_READ_LIMIT", "")
	t.Setenv("ASPD_LISTEN", "nonsense")
	if _, err := parseConfig(nil); err == nil || !strings.Contains(err.Error(), "ASPD_LISTEN=nonsense (--listen)") {
		t.Errorf("ASPD_LISTEN: %v", err)
	}
	t.Setenv("ASPD_LISTEN", "")
	t.Setenv("ASPD_MAX_PARTS", "many")
	if _, err := parseConfig(nil); err == nil || !strings.Contains(err.Error(), "ASPD_MAX_PARTS=many (--max-parts) is not an integer") {
		t.Errorf("ASPD_MAX_PARTS: %v", err)
	}
	t.Setenv("ASPD_MAX_PARTS", "")

	for _, ok := range [][]string{{"--listen", ":8080"}, {"--listen", "0.0.0.0:0"}, {"--listen", "[::1]:8080"}, {"--listen", "localhost:8080"}} {
		if _, err := parseConfig(ok); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
}

// A listen error that parseConfig cannot foresee says what went wrong and
// what to do; only a taken address says to stop the other process.
func TestListenErrorHints(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}, "stop the other process"},
		{&net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EACCES)}, "ports below 1024"},
		{&net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRNOTAVAIL)}, "an address of this host"},
		{&net.OpError{Op: "listen", Err: &net.DNSError{Err: "no such host", Name: "nohost"}}, "resolvable host name"},
		{errors.New("something else"), "check --listen (ASPD_LISTEN)"},
	} {
		msg := (&errListen{addr: "x:1", err: tc.err}).Error()
		if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "--listen") {
			t.Errorf("%v: %q lacks %q", tc.err, msg, tc.want)
		}
		if tc.want != "stop the other process" && strings.Contains(msg, "stop the other process") {
			t.Errorf("%v: %q tells to stop another process", tc.err, msg)
		}
	}
}

// --retention-closed-sessions is off by default and takes days ("90d") as
// well as Go durations, from the flag or ASPD_RETENTION_CLOSED_SESSIONS.
func TestParseConfigRetention(t *testing.T) {
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.retention.ClosedSessions != 0 || c.retention.Interval != time.Minute || c.retention.Batch != 500 {
		t.Errorf("defaults: %+v", c.retention)
	}
	c, err = parseConfig([]string{"--retention-closed-sessions", "90d"})
	if err != nil || c.retention.ClosedSessions != 90*24*time.Hour {
		t.Errorf("90d: %v %v", c.retention.ClosedSessions, err)
	}
	t.Setenv("ASPD_RETENTION_CLOSED_SESSIONS", "36h")
	c, err = parseConfig(nil)
	if err != nil || c.retention.ClosedSessions != 36*time.Hour {
		t.Errorf("from the environment: %v %v", c.retention.ClosedSessions, err)
	}
	c, err = parseConfig([]string{"--retention-closed-sessions", "2d"})
	if err != nil || c.retention.ClosedSessions != 48*time.Hour {
		t.Errorf("the flag must win: %v %v", c.retention.ClosedSessions, err)
	}
	for _, bad := range []string{"90", "d", "-1d", "x9d", "1.5d"} {
		if _, err := parseConfig([]string{"--retention-closed-sessions", bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	t.Setenv("ASPD_RETENTION_CLOSED_SESSIONS", "ninety days")
	if _, err := parseConfig(nil); err == nil {
		t.Error("a bad environment value accepted")
	}
}
