package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const (
	ctlAgentSecret = "asp_AGENT-secret-token-1234"
	ctlAdminSecret = "ADMIN-secret-token-1234567"
)

// The usage never shows a token: --token's default used to be
// ASPCTL_TOKEN's value, which -h and every flag mistake printed.
func TestUsageHidesTokens(t *testing.T) {
	t.Setenv("ASPCTL_TOKEN", ctlAgentSecret)
	t.Setenv("ASPCTL_ADMIN_TOKEN", ctlAdminSecret)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, 0},
		{[]string{"-h"}, 0},
		{[]string{"--tokn", "x", "session", "list"}, 2},
		{[]string{"--server"}, 2},
	} {
		r := ctl(t, tc.args...)
		out := r.stdout + r.stderr
		if r.code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, r.code, tc.code, out)
		}
		for _, s := range []string{ctlAgentSecret, ctlAdminSecret} {
			if strings.Contains(out, s) {
				t.Errorf("%v shows the token %q:\n%s", tc.args, s, out)
			}
		}
		for _, h := range []string{"(set from ASPCTL_TOKEN;", "(set from ASPCTL_ADMIN_TOKEN;"} {
			if !strings.Contains(out, h) {
				t.Errorf("%v: no %q in\n%s", tc.args, h, out)
			}
		}
	}
}

// authServer answers every request with {} and records the bearer tokens.
func authServer(t *testing.T) (url string, seen func() []string) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"sessions":[],"agents":[]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
}

// --token-file and ASPCTL_TOKEN_FILE: the token without surrounding
// whitespace; the command line wins over the environment; a token and a
// token file at the same level are a usage error; errors name the flag and
// path, never the contents.
func TestTokenFile(t *testing.T) {
	url, seen := authServer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(ctlAgentSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(want string, args ...string) {
		t.Helper()
		ctl(t, append([]string{"--server", url}, args...)...).ok(t, nil)
		if got := seen(); len(got) != 1 || got[0] != want {
			t.Errorf("%v: sent tokens %q, want %q", args, got, want)
		}
	}
	check(ctlAgentSecret, "--token-file", path, "session", "list")
	t.Setenv("ASPCTL_TOKEN_FILE", path)
	check(ctlAgentSecret, "session", "list")
	check("flag-token", "--token", "flag-token", "session", "list")
	t.Setenv("ASPCTL_TOKEN", "env-token")
	r := ctl(t, "--server", url, "session", "list")
	if r.code != 2 || !strings.Contains(r.stderr, "ASPCTL_TOKEN and ASPCTL_TOKEN_FILE are both set") {
		t.Errorf("token and file in the environment: exit %d %s", r.code, r.stderr)
	}
	check(ctlAgentSecret, "--token-file", path, "session", "list")
	t.Setenv("ASPCTL_TOKEN_FILE", "")
	check("env-token", "session", "list")
	r = ctl(t, "--server", url, "--token", "x", "--token-file", path, "session", "list")
	if r.code != 2 || !strings.Contains(r.stderr, "--token and --token-file are both given") {
		t.Errorf("--token and --token-file: exit %d %s", r.code, r.stderr)
	}

	missing := filepath.Join(dir, "nope")
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for p, want := range map[string]string{missing: "--token-file " + missing + ": cannot read the file", empty: "is empty"} {
		r := ctl(t, "--server", url, "--token-file", p, "session", "list")
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("--token-file %s: exit %d %s", p, r.code, r.stderr)
		}
	}
	if got := seen(); len(got) != 0 {
		t.Errorf("requests sent despite the errors: %q", got)
	}

	// The operator token follows the same rules.
	adminPath := filepath.Join(dir, "admin")
	os.WriteFile(adminPath, []byte(ctlAdminSecret+"\n"), 0o600)
	check(ctlAdminSecret, "--admin-token-file", adminPath, "agent", "list")
	r = ctl(t, "--server", url, "--admin-token", "x", "--admin-token-file", adminPath, "agent", "list")
	if r.code != 2 || !strings.Contains(r.stderr, "--admin-token and --admin-token-file are both given") {
		t.Errorf("--admin-token and --admin-token-file: exit %d %s", r.code, r.stderr)
	}
	t.Setenv("ASPCTL_ADMIN_TOKEN", "env-admin")
	t.Setenv("ASPCTL_ADMIN_TOKEN_FILE", adminPath)
	r = ctl(t, "--server", url, "agent", "list")
	if r.code != 2 || !strings.Contains(r.stderr, "ASPCTL_ADMIN_TOKEN and ASPCTL_ADMIN_TOKEN_FILE are both set") {
		t.Errorf("admin token and file in the environment: exit %d %s", r.code, r.stderr)
	}
	t.Setenv("ASPCTL_ADMIN_TOKEN", "")
	t.Setenv("ASPCTL_ADMIN_TOKEN_FILE", missing)
	r = ctl(t, "--server", url, "agent", "list")
	if r.code != 2 || !strings.Contains(r.stderr, "ASPCTL_ADMIN_TOKEN_FILE="+missing+": cannot read the file") {
		t.Errorf("missing admin token file: exit %d %s", r.code, r.stderr)
	}
}
