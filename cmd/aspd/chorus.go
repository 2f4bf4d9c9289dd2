package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/chorus"
)

// chorusFlags are the Chorus webhook settings (docs/chorus.md).
type chorusFlags struct {
	keyText       string // ASPD_CHORUS_KEY or the contents of --chorus-key-file
	key           *secretFlag
	keyFile       string
	allowLoopback bool
	schedule      string
	failingAfter  time.Duration
	timeout       time.Duration
	pollInterval  time.Duration
	callbackTTL   time.Duration
	mcpTokenTTL   time.Duration
	publicURL     string

	parsed    []time.Duration
	parsedKey []byte // nil: none given (on SQLite, the default key file is used)
}

func (f *chorusFlags) register(e *envFlags) {
	d := chorus.DefaultConfig()
	// The key itself has no flag: the environment or a file only.
	f.key = e.secretEnv(&f.keyText, "ASPD_CHORUS_KEY").
		withFile(e, "chorus-key-file", true, "file holding the Chorus key (base64 of 32 bytes) that seals connection strings and signing secrets; ASPD_CHORUS_KEY gives the key itself. Default on SQLite: <database dir>/chorus.key, created if missing. Required on PostgreSQL, else Chorus is off")
	e.bool(&f.allowLoopback, "chorus-allow-loopback", false, "let Chorus deliveries reach loopback addresses (127.0.0.0/8, ::1), for local development and tests; other internal addresses stay refused")
	e.str(&f.schedule, "chorus-retry-schedule", "5s,5m,30m,2h,5h,10h,10h", "delays before each Chorus retry, comma-separated (±20% jitter); after the last, a delivery is dead-lettered")
	e.dur(&f.failingAfter, "chorus-failing-after", d.FailingAfter, "how long a Chorus endpoint may fail without a success before it is marked failing and its agent counts as offline")
	e.dur(&f.timeout, "chorus-timeout", d.Timeout, "bound on one Chorus delivery attempt, up to the response headers")
	e.dur(&f.pollInterval, "chorus-poll-interval", d.PollInterval, "how often the Chorus worker polls the outbox when nothing wakes it (retries are due at this granularity)")
	e.dur(&f.callbackTTL, "chorus-callback-ttl", 6*time.Hour, "lifetime of a Chorus callback URL")
	e.dur(&f.mcpTokenTTL, "chorus-mcp-token-ttl", 15*time.Minute, "lifetime of the MCP token handed to a webhook agent")
	e.str(&f.publicURL, "chorus-public-url", "", "aspd's base URL as webhook agents reach it, for callback and MCP URLs (default http://<listen address>)")
}

func (f *chorusFlags) check(e *envFlags) error {
	s, err := chorus.ParseSchedule(f.schedule)
	if err != nil {
		return fmt.Errorf("%s: %w", e.describe("chorus-retry-schedule"), err)
	}
	f.parsed = s
	const positiveDur = "a positive duration, e.g. 30s"
	if err := e.check(
		bound{f.failingAfter <= 0, "chorus-failing-after", positiveDur},
		bound{f.timeout <= 0, "chorus-timeout", positiveDur},
		bound{f.pollInterval <= 0, "chorus-poll-interval", positiveDur},
		bound{f.callbackTTL <= 0, "chorus-callback-ttl", positiveDur},
		bound{f.mcpTokenTTL <= 0, "chorus-mcp-token-ttl", positiveDur},
		bound{f.publicURL != "" && !strings.HasPrefix(f.publicURL, "http://") && !strings.HasPrefix(f.publicURL, "https://"),
			"chorus-public-url", "an http:// or https:// URL, e.g. https://aspd.example.com"},
	); err != nil {
		return err
	}
	f.keyFile = *f.key.filePath
	if f.keyText != "" {
		k, err := decodeKey(f.keyText, f.key.source)
		if err != nil {
			return err
		}
		f.parsedKey = k
	}
	return nil
}

// chorusConfig resolves the Chorus key and builds Chorus's configuration:
// the application's rules and the delivery worker's. Without a key on
// PostgreSQL, Chorus is off (every node must seal and unseal with the same
// key, so none may invent its own).
func chorusConfig(cfg *config, dbURL, listenAddr string, log *slog.Logger) (app.ChorusConfig, chorus.Config, error) {
	f := cfg.chorus
	d := chorus.DefaultConfig()
	d.AllowLoopback, d.Schedule, d.FailingAfter, d.Timeout, d.PollInterval = f.allowLoopback, f.parsed, f.failingAfter, f.timeout, f.pollInterval
	pub := f.publicURL
	if pub == "" {
		pub = "http://" + listenAddr
	}
	rules := app.ChorusConfig{PublicURL: pub, CallbackTTL: f.callbackTTL, MCPTokenTTL: f.mcpTokenTTL}
	key := f.parsedKey
	if key == nil {
		var err error
		if key, err = defaultChorusKey(sqlitePath(dbURL)); err != nil {
			return rules, d, err
		}
	}
	if key == nil {
		log.Warn("Chorus webhooks are off: on PostgreSQL they need an explicit key shared by every node (--chorus-key-file or ASPD_CHORUS_KEY)")
		return rules, d, nil
	}
	if f.allowLoopback {
		log.Warn("Chorus deliveries may reach loopback addresses (--chorus-allow-loopback): for development and tests only")
	}
	rules.Key = key
	return rules, d, nil
}

// defaultChorusKey returns, for an SQLite store, the key in chorus.key
// beside the database, created (0600) with a random key on first use; nil
// for PostgreSQL, whose nodes must share a key given explicitly (parsed by
// chorusFlags.check from ASPD_CHORUS_KEY or --chorus-key-file).
func defaultChorusKey(sqlite string) ([]byte, error) {
	if sqlite == "" {
		return nil, nil
	}
	keyFile := filepath.Join(filepath.Dir(sqlite), "chorus.key")
	if _, err := os.Stat(keyFile); errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		fh, err := os.OpenFile(keyFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("chorus key: %w", err)
		}
		_, werr := fh.WriteString(base64.StdEncoding.EncodeToString(raw) + "\n")
		if err := errors.Join(werr, fh.Close()); err != nil {
			return nil, fmt.Errorf("chorus key: %w", err)
		}
		return raw, nil
	}
	v, err := readSecretFile(keyFile, "the default Chorus key file "+keyFile)
	if err != nil {
		return nil, err
	}
	return decodeKey(v, keyFile)
}

func decodeKey(v, source string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("the Chorus key from %s must be the base64 encoding of 32 bytes (e.g. openssl rand -base64 32)", source)
	}
	return k, nil
}
