package main

import (
	"errors"
	"flag"
	"strings"
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
		if _, err := newLogger(c.logFormat, c.logLevel); err != nil {
			t.Errorf("newLogger(%q, %q): %v", c.logFormat, c.logLevel, err)
		}
	}
	if _, err := newLogger("text", "chatty"); err == nil {
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
