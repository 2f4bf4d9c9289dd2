package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/aspdtest"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/server"
)

// TestMain lets the test binary stand in for aspd: started with
// ASPD_TEST_MAIN=1 it runs main with its arguments, so the exec tests see
// exactly what an operator sees (stdout, stderr, exit status) without
// building another binary.
func TestMain(m *testing.M) {
	if os.Getenv("ASPD_TEST_MAIN") == "1" {
		os.Args = append([]string{"aspd"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// aspdExec runs aspd (the test binary as main) in dir with env added, and
// returns its stdout, stderr and exit status.
func aspdExec(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"ASPD_TEST_MAIN=1"}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("aspd %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// The secrets of the tests below; none may appear in any output.
const (
	secretToken  = "admin-SECRET-0123456789abcdef"
	secretDBPass = "dbPASSWORDsecret"
	secretNATS   = "natsPASSWORDsecret"
	secretChorus = "Y2hvcnVzLWtleS1jaG9ydXMta2V5LWNob3J1cy0xMjM=" // base64 of 32 bytes
)

func secretEnv() []string {
	return []string{
		"ASPD_ADMIN_TOKEN=" + secretToken,
		"ASPD_DATABASE_URL=postgres://aspd:" + secretDBPass + "@127.0.0.1:1/aspd",
		"ASPD_CHORUS_KEY=" + secretChorus,
		"ASPD_CLUSTER_NATS=nats://aspd:" + secretNATS + "@127.0.0.1:4222",
	}
}

func assertNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range []string{secretToken, secretDBPass, secretNATS, secretChorus} {
		if strings.Contains(out, s) {
			t.Errorf("%s shows the secret %q:\n%s", what, s, out)
		}
	}
}

// Usage text and flag errors never show a secret: flag defaults used to be
// the environment's values, so `aspd --help` (and any typo, which prints
// the usage) printed the admin token and the database password.
func TestUsageHidesSecrets(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args  []string
		code  int
		hints []string
	}{
		{[]string{"--help"}, 0, []string{"(set from ASPD_ADMIN_TOKEN", "(set from ASPD_DATABASE_URL", "(set from ASPD_CHORUS_KEY", "(set from ASPD_CLUSTER_NATS"}},
		{[]string{"--lissten", "x"}, 2, []string{"(set from ASPD_ADMIN_TOKEN", "(set from ASPD_DATABASE_URL", "(set from ASPD_CHORUS_KEY", "(set from ASPD_CLUSTER_NATS"}},
		{[]string{"--grace-window", "soon"}, 2, []string{"(set from ASPD_DATABASE_URL"}},
		{[]string{"export", "--help"}, 0, []string{"(set from ASPD_DATABASE_URL"}},
		{[]string{"import", "--lissten"}, 2, []string{"(set from ASPD_DATABASE_URL"}},
		{[]string{"extra", "postgres://aspd:" + secretDBPass + "@db/aspd"}, 2, nil},
		{[]string{"export", "postgres://aspd:" + secretDBPass + "@db/aspd"}, 2, nil},
	} {
		stdout, stderr, code := aspdExec(t, dir, secretEnv(), tc.args...)
		out := stdout + stderr
		if code != tc.code {
			t.Errorf("aspd %v: exit %d, want %d\n%s", tc.args, code, tc.code, out)
		}
		assertNoSecret(t, strings.Join(tc.args, " "), out)
		for _, h := range tc.hints {
			if !strings.Contains(out, h) {
				t.Errorf("aspd %v: no %q in\n%s", tc.args, h, out)
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files created: %v", entries)
	}
}

// A URL that is neither PostgreSQL nor SQLite is refused with exit 2 and
// the accepted forms, before anything is created; its password is
// redacted. It used to start on a new SQLite file named after the URL.
func TestForeignDatabaseURLRefused(t *testing.T) {
	const u = "mysql://root:" + secretDBPass + "@127.0.0.1/x"
	const shown = "mysql://root:xxxxx@127.0.0.1/x"
	for _, tc := range []struct {
		env   []string
		args  []string
		shown string
	}{
		{nil, []string{"--database-url", u, "--listen", "127.0.0.1:0"}, shown},
		{[]string{"ASPD_DATABASE_URL=" + u}, []string{"--listen", "127.0.0.1:0"}, shown},
		{nil, []string{"export", "--database-url", u}, shown},
		{[]string{"ASPD_DATABASE_URL=" + u}, []string{"import", "-i", os.DevNull}, shown},
		{nil, []string{"--database-url", "sqlite://aspd.db", "--listen", "127.0.0.1:0"}, "sqlite://aspd.db"},
	} {
		dir := t.TempDir()
		_, stderr, code := aspdExec(t, dir, tc.env, tc.args...)
		if code != 2 {
			t.Errorf("%v %v: exit %d, want 2\n%s", tc.env, tc.args, code, stderr)
		}
		if strings.Contains(stderr, secretDBPass) {
			t.Errorf("%v %v: the password is shown:\n%s", tc.env, tc.args, stderr)
		}
		for _, w := range []string{tc.shown, "postgres://", "sqlite:PATH"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v %v: no %q in\n%s", tc.env, tc.args, w, stderr)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%v %v: files created: %v", tc.env, tc.args, entries)
		}
	}
}

// The start-up log names the database with its password redacted, and
// nothing else secret: a real start on PostgreSQL with a password in the
// URL (the test server trusts local connections, so any password works).
func TestStartupLogRedactsSecrets(t *testing.T) {
	base := dbtest.Postgres(t)
	if !strings.HasPrefix(base, "postgres://postgres@") {
		t.Skipf("needs a postgres://postgres@ test URL without a password, not %s", redactForTest(base))
	}
	dbURL := strings.Replace(base, "postgres://postgres@", "postgres://postgres:"+secretDBPass+"@", 1)
	urlFile := filepath.Join(t.TempDir(), "db-url")
	if err := os.WriteFile(urlFile, []byte(dbURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var log aspdtest.Log
	p, err := aspdtest.Start(self, []string{"--listen", "127.0.0.1:0", "--log-level", "debug"},
		[]string{"ASPD_TEST_MAIN=1", "ASPD_DATABASE_URL_FILE=" + urlFile, "ASPD_ADMIN_TOKEN=" + secretToken, "ASPD_CHORUS_KEY=" + secretChorus}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	p.Stop()
	out := log.String()
	assertNoSecret(t, "the log", out)
	if !strings.Contains(out, "postgres://postgres:xxxxx@") {
		t.Errorf("the log does not name the database, redacted:\n%s", out)
	}
}

func redactForTest(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		return "...@" + s[i+1:]
	}
	return s
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// --database-url-file and ASPD_DATABASE_URL_FILE: the contents without the
// trailing newline; the value and the file together are a mistake; the
// command line wins over the environment; errors name the flag and the
// path, never the contents.
func TestDatabaseURLFile(t *testing.T) {
	const u = "postgres://aspd:" + secretDBPass + "@db/aspd"
	path := writeFile(t, u+"\n\n")
	c, err := parseConfig([]string{"--database-url-file", path})
	if err != nil || c.databaseURL != u {
		t.Fatalf("--database-url-file: %q %v", c.databaseURL, err)
	}
	t.Setenv("ASPD_DATABASE_URL_FILE", path)
	if c, err = parseConfig(nil); err != nil || c.databaseURL != u {
		t.Fatalf("ASPD_DATABASE_URL_FILE: %v", err)
	}
	if c, err = parseConfig([]string{"--database-url", "other.db"}); err != nil || c.databaseURL != "other.db" {
		t.Fatalf("--database-url over ASPD_DATABASE_URL_FILE: %q %v", c.databaseURL, err)
	}
	t.Setenv("ASPD_DATABASE_URL", "env.db")
	_, err = parseConfig(nil)
	if err == nil || !strings.Contains(err.Error(), "ASPD_DATABASE_URL and ASPD_DATABASE_URL_FILE are both set") {
		t.Errorf("value and file in the environment: %v", err)
	}
	if c, err = parseConfig([]string{"--database-url-file", path}); err != nil || c.databaseURL != u {
		t.Errorf("--database-url-file over the environment: %v", err)
	}
	os.Unsetenv("ASPD_DATABASE_URL")
	os.Unsetenv("ASPD_DATABASE_URL_FILE")
	_, err = parseConfig([]string{"--database-url", "x.db", "--database-url-file", path})
	if err == nil || !strings.Contains(err.Error(), "--database-url and --database-url-file are both given") {
		t.Errorf("value and file on the command line: %v", err)
	}

	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		path string
		want []string
	}{
		{missing, []string{"--database-url-file " + missing, "cannot read", "no such file"}},
		{t.TempDir(), []string{"cannot read"}},
		{writeFile(t, "\n  \n"), []string{"is empty"}},
		{writeFile(t, "mysql://root:"+secretDBPass+"@db/x\n"), []string{"--database-url-file", "mysql://root:xxxxx@db/x", "sqlite:PATH"}},
	} {
		_, err := parseConfig([]string{"--database-url-file", tc.path})
		if err == nil {
			t.Errorf("%s accepted", tc.path)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.path, err, w)
			}
		}
		if strings.Contains(err.Error(), secretDBPass) {
			t.Errorf("the error shows the contents: %v", err)
		}
	}
}

// ASPD_ADMIN_TOKEN_FILE names an existing file (a Docker or Kubernetes
// secret) whose token is used; a missing one is still created with a random
// token. --admin-token-file on the command line wins over ASPD_ADMIN_TOKEN.
func TestAdminTokenFile(t *testing.T) {
	path := writeFile(t, secretToken+"\n")
	t.Setenv("ASPD_ADMIN_TOKEN_FILE", path)
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := adminToken(c, discardLogger())
	if err != nil || !bytes.Equal(h, server.HashToken(secretToken)) {
		t.Fatalf("ASPD_ADMIN_TOKEN_FILE: %v", err)
	}
	t.Setenv("ASPD_ADMIN_TOKEN", "another-token-0123456789")
	_, err = parseConfig(nil)
	if err == nil || !strings.Contains(err.Error(), "ASPD_ADMIN_TOKEN and ASPD_ADMIN_TOKEN_FILE are both set") {
		t.Errorf("token and file in the environment: %v", err)
	}
	os.Unsetenv("ASPD_ADMIN_TOKEN_FILE")
	c, err = parseConfig([]string{"--admin-token-file", path})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := adminToken(c, discardLogger()); err != nil || !bytes.Equal(h, server.HashToken(secretToken)) {
		t.Errorf("--admin-token-file did not win over ASPD_ADMIN_TOKEN: %v", err)
	}
	os.Unsetenv("ASPD_ADMIN_TOKEN")
	if _, err := parseConfig([]string{"--admin-token", secretToken, "--admin-token-file", path}); err == nil {
		t.Error("--admin-token and --admin-token-file together accepted")
	}

	created := filepath.Join(t.TempDir(), "sub", "admin.token")
	t.Setenv("ASPD_ADMIN_TOKEN_FILE", created)
	if c, err = parseConfig(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adminToken(c, discardLogger()); err != nil {
		t.Fatalf("creating %s: %v", created, err)
	}
	if fi, err := os.Stat(created); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("created token file: %v %v", fi, err)
	}

	dir := t.TempDir() // a directory cannot be read as the token
	t.Setenv("ASPD_ADMIN_TOKEN_FILE", dir)
	if c, err = parseConfig(nil); err != nil {
		t.Fatal(err)
	}
	_, err = adminToken(c, discardLogger())
	if err == nil || !strings.Contains(err.Error(), "ASPD_ADMIN_TOKEN_FILE="+dir) || !strings.Contains(err.Error(), "cannot read") {
		t.Errorf("unreadable token file: %v", err)
	}
	short := writeFile(t, "short\n")
	_, err = adminToken(&config{adminTokenFile: short, adminTokenFrom: "--admin-token-file " + short}, discardLogger())
	if err == nil || !strings.Contains(err.Error(), "--admin-token-file "+short) || strings.Contains(err.Error(), "short\n") {
		t.Errorf("short token file: %v", err)
	}
}

// The Chorus key: ASPD_CHORUS_KEY or --chorus-key-file (ASPD_CHORUS_KEY_FILE),
// read and checked at start-up (exit 2), never both, never shown.
func TestChorusKeyFile(t *testing.T) {
	key, _ := base64.StdEncoding.DecodeString(secretChorus)
	path := writeFile(t, secretChorus+"\n")
	c, err := parseConfig([]string{"--chorus-key-file", path})
	if err != nil || !bytes.Equal(c.chorus.parsedKey, key) {
		t.Fatalf("--chorus-key-file: %v", err)
	}
	t.Setenv("ASPD_CHORUS_KEY_FILE", path)
	if c, err = parseConfig(nil); err != nil || !bytes.Equal(c.chorus.parsedKey, key) {
		t.Fatalf("ASPD_CHORUS_KEY_FILE: %v", err)
	}
	t.Setenv("ASPD_CHORUS_KEY", secretChorus)
	if _, err = parseConfig(nil); err == nil || !strings.Contains(err.Error(), "ASPD_CHORUS_KEY and ASPD_CHORUS_KEY_FILE are both set") {
		t.Errorf("key and file in the environment: %v", err)
	}
	os.Unsetenv("ASPD_CHORUS_KEY_FILE")
	if c, err = parseConfig(nil); err != nil || !bytes.Equal(c.chorus.parsedKey, key) {
		t.Fatalf("ASPD_CHORUS_KEY: %v", err)
	}
	os.Unsetenv("ASPD_CHORUS_KEY")

	bad := writeFile(t, "not-a-key-"+secretDBPass)
	missing := filepath.Join(t.TempDir(), "nope")
	for p, want := range map[string]string{bad: "base64 encoding of 32 bytes", missing: "cannot read"} {
		_, err := parseConfig([]string{"--chorus-key-file", p})
		if err == nil || !strings.Contains(err.Error(), "--chorus-key-file "+p) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), secretDBPass) {
			t.Errorf("--chorus-key-file %s: %v", p, err)
		}
	}
}

// --cluster-nats-file holds a NATS URL with credentials; a malformed NATS
// URL is refused without showing it.
func TestClusterNATSFile(t *testing.T) {
	u := "nats://aspd:" + secretNATS + "@127.0.0.1:4222"
	c, err := parseConfig([]string{"--cluster-nats-file", writeFile(t, u+"\n")})
	if err != nil || c.cluster.NATSURL != u {
		t.Fatalf("--cluster-nats-file: %v", err)
	}
	_, err = parseConfig([]string{"--cluster-nats", "http://aspd:" + secretNATS + "@h:4222"})
	if err == nil || strings.Contains(err.Error(), secretNATS) || !strings.Contains(err.Error(), "--cluster-nats") {
		t.Errorf("malformed NATS URL: %v", err)
	}
}

// On SQLite with no key given, chorus.key beside the database is created
// once (mode 0600) and read back on the next start; a damaged one is named.
func TestDefaultChorusKey(t *testing.T) {
	db := filepath.Join(t.TempDir(), "aspd.db")
	k1, err := defaultChorusKey(db)
	if err != nil || len(k1) != 32 {
		t.Fatalf("first start: %v", err)
	}
	path := filepath.Join(filepath.Dir(db), "chorus.key")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("chorus.key: %v %v", fi, err)
	}
	if k2, err := defaultChorusKey(db); err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second start: %v", err)
	}
	if k, err := defaultChorusKey(""); k != nil || err != nil {
		t.Fatalf("PostgreSQL: %v %v", k, err)
	}
	os.WriteFile(path, []byte("garbage-"+secretDBPass), 0o600)
	if _, err := defaultChorusKey(db); err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), secretDBPass) {
		t.Fatalf("damaged key file: %v", err)
	}
}
