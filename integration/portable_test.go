package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// portableRun runs `aspd <args...>` with extra environment and stdin, and
// returns its exit code, stdout and stderr.
func portableRun(t *testing.T, env []string, stdin []byte, args ...string) (int, []byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, aspdBin, args...)
	// The test's environment must not choose the store behind our back.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ASPD_DATABASE_URL=") && !strings.HasPrefix(kv, "ASPD_DATA_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("aspd %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.Bytes(), stderr.String()
}

// portableRaw reads a session's eligible events as raw bytes, in order.
func portableRaw(a *agent, sid string) [][]byte {
	a.t.Helper()
	var out [][]byte
	for _, e := range a.events(sid) {
		out = append(out, e.Raw)
	}
	return out
}

func portableSameBytes(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events after the move, %d before", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: event %d differs after the move:\n got %s\nwant %s", what, i, got[i], want[i])
		}
	}
}

// TestPortableSQLiteToPostgres moves a network from the embedded store to
// PostgreSQL with the real binary: run a session flow on SQLite, stop,
// `aspd export --include-token-hashes`, `aspd import` into a fresh
// PostgreSQL database, start aspd there, and check that the history is
// byte-identical, the tokens (seeded and provisioned) still work, delivery
// cursors and idempotency keys came along, and new events continue the
// sequence.
func TestPortableSQLiteToPostgres(t *testing.T) {
	// Help.
	code, _, stderr := portableRun(t, nil, nil, "export", "-h")
	if code != 0 || !strings.Contains(stderr, "--include-token-hashes") || !strings.Contains(stderr, "rotate-token") || !strings.Contains(stderr, "aspd import") {
		t.Fatalf("aspd export -h: exit %d\n%s", code, stderr)
	}

	pgURL := dbtest.Postgres(t) // skips loudly without PostgreSQL
	sqlitePath := dbtest.SQLite(t)
	const aliceTok = "tok_portable_alice_0123456789abcdef"
	seedFile := filepath.Join(t.TempDir(), "seed.json")
	if err := os.WriteFile(seedFile, []byte(`{"@alice.test": {"token": "`+aliceTok+`", "inbound_policy": "open"}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	// ---- On SQLite ----
	src := startServer(t, sqlitePath, "--seed", seedFile)
	alice := &agent{t: t, s: src, handle: "@alice.test", token: aliceTok}
	bob := src.provision("@bob.test", "allowlist", "@alice.test")
	bobLive := bob.connect()

	create := map[string]any{"invite": []string{bob.handle}, "topic": "moving <stores> & co",
		"initial_message": map[string]any{"content": "héllo 😀 \"quoted\""}, "idempotency_key": "create-1"}
	sid := alice.createSession(create)
	bob.join(sid)
	keyed := map[string]any{"content": "from bob", "idempotency_key": "k-1"}
	keyedResp := bob.must(http.StatusCreated, "POST", "/sessions/"+sid+"/messages", keyed, "PostSessionsMessagesResponse")
	lastSeen := alice.send(sid, "second")

	// bob reads everything live, then disconnects: its cursor is the last
	// message, and its session.disconnected is appended while aspd runs.
	for {
		e := bobLive.next()
		if e.SessionID == sid && e.Sequence == lastSeen {
			break
		}
	}
	bobLive.close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := alice.events(sid)
		if last := evs[len(evs)-1]; last.Type == "session.disconnected" && last.field("agent") == bob.handle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session.disconnected for bob within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	sid2 := alice.createSession(map[string]any{"invite": []string{bob.handle},
		"initial_message": map[string]any{"content": "fyi"}, "end_after_send": true})

	beforeAlice, beforeBob, beforeEnded := portableRaw(alice, sid), portableRaw(bob, sid), portableRaw(bob, sid2)
	beforeSnapshot := alice.must(http.StatusOK, "GET", "/sessions/"+sid, nil, "GetSessionResponse")
	src.stop()

	// ---- export / import ----
	file := filepath.Join(t.TempDir(), "network.jsonl")
	code, _, stderr = portableRun(t, nil, nil, "export", "--database-url", sqlitePath, "--include-token-hashes", "-o", file)
	if code != 0 || !strings.Contains(stderr, "exported from sqlite") || !strings.Contains(stderr, "session=2") {
		t.Fatalf("aspd export: exit %d\n%s", code, stderr)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("export file: %v %v, want mode 0600", fi, err)
	}
	exported, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if first := string(bytes.SplitN(exported, []byte("\n"), 2)[0]); !strings.HasPrefix(first, `{"format":"aspd-network","version":1,"exported_at":`) ||
		!strings.HasSuffix(first, `,"dialect":"sqlite"}`) {
		t.Fatalf("header: %s", first)
	}
	if !bytes.Contains(exported, []byte(`"token_hash":`)) {
		t.Fatalf("--include-token-hashes wrote no token hash")
	}

	code, _, stderr = portableRun(t, nil, nil, "import", "--database-url", pgURL, "-i", file)
	if code != 0 || !strings.Contains(stderr, "imported into postgres") || !strings.Contains(stderr, "agent=2") {
		t.Fatalf("aspd import: exit %d\n%s", code, stderr)
	}
	// The target is no longer empty: a second import is refused.
	code, _, stderr = portableRun(t, nil, nil, "import", "--database-url", pgURL, "-i", file)
	if code == 0 || !strings.Contains(stderr, "not empty") {
		t.Fatalf("second import: exit %d\n%s", code, stderr)
	}

	// The environment picks the store like the server does, and the
	// default streams are stdout/stdin: export <ASPD_DATA_DIR>/aspd.db
	// (without token hashes) and pipe it into a fresh SQLite store.
	code, out, stderr := portableRun(t, []string{"ASPD_DATA_DIR=" + filepath.Dir(sqlitePath)}, nil, "export")
	if code != 0 || bytes.Contains(out, []byte(`"token_hash"`)) || !strings.Contains(stderr, "rotate-token") {
		t.Fatalf("aspd export via ASPD_DATA_DIR: exit %d\n%s", code, stderr)
	}
	plain := filepath.Join(t.TempDir(), "plain.db")
	code, _, stderr = portableRun(t, []string{"ASPD_DATABASE_URL=" + plain}, out, "import")
	if code != 0 || !strings.Contains(stderr, "imported into sqlite") || !strings.Contains(stderr, "2 agents have no token") {
		t.Fatalf("aspd import from stdin: exit %d\n%s", code, stderr)
	}
	code, _, stderr = portableRun(t, nil, nil, "export", "--data-dir", filepath.Join(t.TempDir(), "typo"))
	if code == 0 || !strings.Contains(stderr, "no store at") {
		t.Fatalf("export of a missing store: exit %d\n%s", code, stderr)
	}

	// ---- On PostgreSQL ----
	dst := startServer(t, pgURL) // no seed: alice's token comes from the import
	alice = &agent{t: t, s: dst, handle: alice.handle, token: alice.token}
	bob = &agent{t: t, s: dst, handle: bob.handle, token: bob.token}

	portableSameBytes(t, "alice's view of the session", portableRaw(alice, sid), beforeAlice)
	portableSameBytes(t, "bob's view of the session", portableRaw(bob, sid), beforeBob)
	portableSameBytes(t, "the send-and-end session", portableRaw(bob, sid2), beforeEnded)
	if got := alice.must(http.StatusOK, "GET", "/sessions/"+sid, nil, "GetSessionResponse"); !bytes.Equal(got, beforeSnapshot) {
		t.Fatalf("session snapshot differs:\n got %s\nwant %s", got, beforeSnapshot)
	}

	// Idempotency keys came along: retries answer the original responses.
	if got := bob.must(http.StatusCreated, "POST", "/sessions/"+sid+"/messages", keyed, "PostSessionsMessagesResponse"); !bytes.Equal(got, keyedResp) {
		t.Fatalf("message retry after the move: %s, want %s", got, keyedResp)
	}
	var retried struct {
		SessionID string `json:"session_id"`
	}
	mustUnmarshal(t, alice.must(http.StatusCreated, "POST", "/sessions", create, "PostSessionsResponse"), &retried)
	if retried.SessionID != sid {
		t.Fatalf("create retry after the move answered %s, want %s", retried.SessionID, sid)
	}

	// New events continue the sequence.
	var lastBefore event
	mustUnmarshal(t, beforeAlice[len(beforeAlice)-1], &lastBefore)
	next := alice.send(sid, "after the move")
	if next != lastBefore.Sequence+1 {
		t.Fatalf("first message after the move has sequence %d, want %d", next, lastBefore.Sequence+1)
	}

	// bob's delivery cursor came along: on connect it is sent only what it
	// had not received (its disconnect, its reconnect, the new message),
	// never the transcript again. (The send-and-end session, which it never
	// received, is delivered in full.)
	live := bob.connect()
	for {
		e := live.next()
		if e.SessionID == sid2 {
			continue
		}
		if e.SessionID != sid {
			t.Fatalf("unexpected event from another session: %s", e.Raw)
		}
		if e.Sequence <= lastSeen {
			t.Fatalf("bob was re-sent sequence %d (its cursor was %d): %s", e.Sequence, lastSeen, e.Raw)
		}
		if e.Type == "session.message" {
			var m struct {
				Payload struct {
					Content json.RawMessage `json:"content"`
				} `json:"payload"`
			}
			mustUnmarshal(t, e.Raw, &m)
			if !strings.Contains(string(m.Payload.Content), "after the move") {
				t.Fatalf("unexpected message %s", e.Raw)
			}
			break
		}
	}
}
