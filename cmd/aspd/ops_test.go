package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aspd/aspd/server"
)

func TestVersionPrintsBuildInfo(t *testing.T) {
	var b bytes.Buffer
	printVersion(&b, server.ReadBuild())
	out := b.String()
	if !strings.HasPrefix(out, "aspd ") || !strings.Contains(out, "go: go") {
		t.Errorf("version output:\n%s", out)
	}
	b.Reset()
	printVersion(&b, server.Build{Version: "v1.2.3", Revision: "abc123", Modified: true, Time: "2026-11-24T07:00:00Z", GoVersion: "go1.26.8"})
	want := "aspd v1.2.3\nrevision: abc123 (modified)\ncommit time: 2026-11-24T07:00:00Z\ngo: go1.26.8\n"
	if b.String() != want {
		t.Errorf("version output:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	c, err := parseConfig([]string{"--help"})
	if c != nil || !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, sub := range []string{"aspd export", "aspd import", "aspd version", "--version"} {
		if !strings.Contains(usageHead, sub) {
			t.Errorf("usage does not mention %q", sub)
		}
	}
}

func TestAdminTokenSameRuleEverywhere(t *testing.T) {
	for _, tok := range []string{"short", placeholderAdminToken} {
		if _, err := parseConfig([]string{"--admin-token", tok}); err == nil {
			t.Errorf("flag token %q accepted", tok)
		}
		t.Setenv("ASPD_ADMIN_TOKEN", tok)
		if _, err := parseConfig(nil); err == nil {
			t.Errorf("env token %q accepted", tok)
		}
		os.Unsetenv("ASPD_ADMIN_TOKEN")
		dir := t.TempDir()
		path := filepath.Join(dir, "admin.token")
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := adminToken(&config{adminTokenFile: path}, discardLogger())
		if err == nil {
			t.Errorf("file token %q accepted", tok)
		}
	}
	_, err := parseConfig([]string{"--admin-token", placeholderAdminToken})
	if err == nil || !strings.Contains(err.Error(), "placeholder") || !strings.Contains(err.Error(), "set a real one") {
		t.Errorf("placeholder refusal: %v", err)
	}
	if _, err := parseConfig([]string{"--admin-token", "0123456789abcdef"}); err != nil {
		t.Errorf("16-character token refused: %v", err)
	}
}

// A taken port fails before the store is opened: nothing is written in the
// data directory.
func TestTakenPortFailsBeforeWriting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "data")
	cfg, err := parseConfig([]string{"--listen", ln.Addr().String(), "--data-dir", dir, "--log-level", "error"})
	if err != nil {
		t.Fatal(err)
	}
	err = run(cfg, io.Discard)
	var le *errListen
	if !errors.As(err, &le) || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("run on a taken port: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data directory was created before listening: %v", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
