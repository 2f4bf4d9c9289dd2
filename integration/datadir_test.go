//go:build unix

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/aspdtest"
)

// The embedded store's data directory: file modes, and one aspd per store.

// ddEnv clears the environment variables that would choose another store
// or admin token than the data directory's.
var ddEnv = []string{"ASPD_DATABASE_URL=", "ASPD_ADMIN_TOKEN=", "ASPD_ADMIN_TOKEN_FILE="}

// ddStart starts aspd on the embedded store in dir (no --database-url, the
// admin token in dir/admin.token) and returns it as a server the helpers
// can drive. The umask of the test process is passed on to aspd.
func ddStart(t *testing.T, dir string, log *aspdtest.Log) *server {
	t.Helper()
	p, err := aspdtest.Start(aspdBin, []string{"--listen", "127.0.0.1:0", "--data-dir", dir}, ddEnv, log)
	if err != nil {
		t.Fatalf("%v:\n%s", err, log.String())
	}
	tok, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		p.Stop()
		t.Fatal(err)
	}
	s := &server{t: t, url: p.URL, dir: dir, admin: strings.TrimSpace(string(tok)), proc: p}
	responseCheck.Own(t, s.url)
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("aspd log:\n%s", log.String())
		}
	})
	return s
}

// ddRun runs `aspd args...` to completion (at most 10s: a second aspd that
// does start is killed then) and returns its exit code and stderr.
func ddRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, aspdBin, args...)
	cmd.Env = append(os.Environ(), ddEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, stderr.String() + "\n(still running after 10s: killed)"
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stderr.String()
	} else if err != nil {
		t.Fatalf("aspd %v: %v", args, err)
	}
	return 0, stderr.String()
}

func ddMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestDataDirFileModes: in an existing data directory of mode 0755, and
// even under umask 0, aspd creates the database (aspd.db and its -wal and
// -shm files), the admin token file and the lock file with mode 0600. An
// existing database or token file that others may read is left alone, with
// a warning.
func TestDataDirFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0)
	var log aspdtest.Log
	s := ddStart(t, dir, &log)
	syscall.Umask(old)

	a := s.provision("@dd.alice", "open")
	s.provision("@dd.bob", "open")
	sid := a.createSession(map[string]any{"invite": []string{"@dd.bob"}})
	a.send(sid, "written through the WAL")

	files := []string{"aspd.db", "aspd.db-wal", "aspd.db-shm", "admin.token", "aspd.db.lock"}
	for _, name := range files {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); os.IsNotExist(err) && (name == "aspd.db-wal" || name == "aspd.db-shm") {
			continue
		}
		if m := ddMode(t, path); m != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", name, m)
		}
	}
	if m := ddMode(t, dir); m != 0o755 {
		t.Errorf("the data directory's mode changed to %04o", m)
	}

	// Existing files that others may read: aspd warns, and starts.
	s.stop()
	for _, name := range []string{"aspd.db", "admin.token"} {
		if err := os.Chmod(filepath.Join(dir, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var log2 aspdtest.Log
	ddStart(t, dir, &log2)
	for _, want := range []string{"database file is readable by other users", "admin token file is readable by other users"} {
		if !strings.Contains(log2.String(), want) {
			t.Errorf("no warning %q in the log:\n%s", want, log2.String())
		}
	}
}

// TestDataDirOneAspd: a second aspd on a data directory that an aspd
// serves exits 1 at once, naming the holder's pid and what to do instead
// (another --data-dir, PostgreSQL), whether it names the store by
// --data-dir or by --database-url; the first one's live session is
// untouched (no session.disconnected, delivery continues). aspd import
// refuses the served store too, while aspd export reads it. Once the first
// aspd is gone, stopped or killed, the store can be served again.
func TestDataDirOneAspd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var log aspdtest.Log
	s := ddStart(t, dir, &log)
	alice := s.provision("@one.alice", "open")
	bob := s.provision("@one.bob", "open")
	as, bs := alice.connect(), bob.connect()
	sid := alice.createSession(map[string]any{"invite": []string{bob.handle}})
	bob.join(sid)
	alice.send(sid, "before")
	pid := s.proc.PID()

	db := filepath.Join(dir, "aspd.db")
	for _, args := range [][]string{
		{"--data-dir", dir},
		{"--database-url", db, "--data-dir", t.TempDir()},
		{"--database-url", "sqlite:" + db, "--data-dir", t.TempDir()},
	} {
		t0 := time.Now()
		code, stderr := ddRun(t, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
		if code != 1 {
			t.Fatalf("second aspd %v: exit %d, want 1; stderr:\n%s", args, code, stderr)
		}
		for _, want := range []string{fmt.Sprintf("pid %d", pid), "--data-dir", "PostgreSQL", "--database-url postgres://", db} {
			if !strings.Contains(stderr, want) {
				t.Errorf("second aspd %v: stderr does not say %q:\n%s", args, want, stderr)
			}
		}
		if strings.Contains(stderr, "aspd listening") || strings.Contains(stderr, "store ready") {
			t.Errorf("second aspd %v opened the store before refusing:\n%s", args, stderr)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("second aspd %v took %v to refuse", args, d)
		}
	}

	// The first aspd's session is untouched: nothing but the next message.
	alice.send(sid, "after")
	for _, st := range []*stream{as, bs} {
		for {
			e := st.next()
			if e.Type == "session.disconnected" || e.Type == "session.left" || e.Type == "session.reconnected" {
				t.Fatalf("live connection got %s after the second aspd: %s", e.Type, e.Raw)
			}
			if e.Type == "session.message" && strings.Contains(string(e.Payload), `"after"`) {
				break
			}
		}
	}
	code2, body := s.adminDo("GET", "/sessions/"+sid+"/events?after_sequence=0&limit=1000", nil)
	if code2 != http.StatusOK {
		t.Fatalf("admin events: %d %s", code2, body)
	}
	var page struct {
		Events []event `json:"events"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Events {
		if e.Type == "session.disconnected" || e.Type == "session.left" {
			t.Fatalf("the session's log has %s (seq %d) after the second aspd", e.Type, e.Sequence)
		}
	}

	// import refuses a served store; export reads it.
	code, stderr := ddRun(t, "import", "--data-dir", dir)
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("pid %d", pid)) || !strings.Contains(stderr, "stop it before importing") {
		t.Fatalf("import into the served store: exit %d:\n%s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "net.jsonl")
	if code, stderr := ddRun(t, "export", "--data-dir", dir, "-o", out); code != 0 {
		t.Fatalf("export of the served store: exit %d:\n%s", code, stderr)
	}

	// Gone gracefully, or killed: the lock goes with the process.
	s.stop()
	var log2 aspdtest.Log
	s2 := ddStart(t, dir, &log2)
	s2.proc.Kill()
	s2.proc = nil
	var log3 aspdtest.Log
	ddStart(t, dir, &log3)
}
