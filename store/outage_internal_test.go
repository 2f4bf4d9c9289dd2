package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
)

// Store outages (unavailable.go, guard.go): what every caller of the store
// sees while the database cannot serve, and how the store recovers.

// syncBuffer is a log sink that tests read while the store writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// outageStore opens a store whose outage lines go to the returned buffer,
// with two agents in one session.
func outageStore(t *testing.T, url string) (*Store, *syncBuffer, string) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	logs := &syncBuffer{}
	s.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, h := range []string{"@acme.alice", "@acme.bob"} {
		if err := s.CreateAgent(ctx, NewAgent{Handle: h, InboundPolicy: "open", TokenHash: []byte("hash-" + h)}); err != nil {
			t.Fatal(err)
		}
	}
	resp, _, err := s.CreateSession(ctx, CreateSession{Creator: "@acme.alice", Invite: []string{"@acme.bob"}, Topic: "outage"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Join(ctx, resp.SessionID, "@acme.bob"); err != nil {
		t.Fatal(err)
	}
	return s, logs, resp.SessionID
}

func sendText(s *Store, sid, body string) (protocol.SendMessageResponse, error) {
	content, _ := json.Marshal(body)
	resp, _, err := s.SendMessage(context.Background(), SendMessage{SessionID: sid, Sender: "@acme.alice", Content: content})
	return resp, err
}

// wantUnavailable fails unless err is the store's outage, answered with a
// message that says nothing of the driver.
func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	e := AsError(err)
	if !errors.Is(err, ErrUnavailable) || e == nil || e.Kind != KindUnavailable {
		t.Fatalf("%s: %v, want ErrUnavailable", what, err)
	}
	if e.Message != unavailableMessage {
		t.Fatalf("%s: message %q carries the driver's words", what, e.Message)
	}
}

// waitReady polls Ready until the store says it serves again by itself.
func waitReady(t *testing.T, s *Store, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := s.Ready(context.Background())
		if err == nil && s.Available() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready again within %v: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantAcknowledged fails unless every acknowledged message is in the log.
func wantAcknowledged(t *testing.T, s *Store, sid string, acked []protocol.SendMessageResponse) {
	t.Helper()
	evs, err := s.EventsAfter(context.Background(), sid, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range evs {
		if e.Type == protocol.EventMessage {
			var ev struct {
				Payload protocol.Message `json:"payload"`
			}
			if err := json.Unmarshal(e.Body, &ev); err != nil {
				t.Fatal(err)
			}
			have[ev.Payload.ID] = true
		}
	}
	for _, a := range acked {
		if !have[a.MessageID] {
			t.Fatalf("acknowledged message %s (sequence %d) is missing from the log", a.MessageID, a.Sequence)
		}
	}
}

// wantOutageLogged fails unless the outage was logged once when it began
// and once when it ended, and nothing at ERROR.
func wantOutageLogged(t *testing.T, logs string) {
	t.Helper()
	if n := strings.Count(logs, "msg=\"store unavailable"); n != 1 {
		t.Fatalf("%d \"store unavailable\" lines, want 1:\n%s", n, logs)
	}
	if n := strings.Count(logs, "msg=\"store available again\""); n != 1 || !strings.Contains(logs, "failed_operations=") {
		t.Fatalf("%d \"store available again\" lines, want 1 with the count:\n%s", n, logs)
	}
	if strings.Contains(logs, "level=ERROR") {
		t.Fatalf("an outage logged at ERROR:\n%s", logs)
	}
}

// TestOutageSQLiteFull: the database cannot grow (PRAGMA max_page_count
// makes SQLite answer SQLITE_FULL, as a full disk does): writes fail as
// ErrUnavailable, the store is not ready, reads still work, an agent is not
// half created; once it may grow again, the store is ready again by itself
// and nothing acknowledged is lost.
func TestOutageSQLiteFull(t *testing.T) {
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("group-commit=%v", grouped), func(t *testing.T) {
			ctx := context.Background()
			s, logs, sid := outageStore(t, dbtest.SQLite(t))
			if grouped {
				s.EnableGroupCommit(0)
			}
			pages, err := s.QueryIntForTest(ctx, `PRAGMA page_count`)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.QueryIntForTest(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+4)); err != nil {
				t.Fatal(err)
			}
			var acked []protocol.SendMessageResponse
			var failed error
			for i := 0; i < 1000 && failed == nil; i++ {
				resp, err := sendText(s, sid, fmt.Sprintf("%04d %s", i, strings.Repeat("x", 1500)))
				if err != nil {
					failed = err
					break
				}
				acked = append(acked, resp)
			}
			wantUnavailable(t, "a message when the database is full", failed)
			if s.Available() {
				t.Fatal("Available after a write failed for a full database")
			}
			// Past the settle time, a statement that changes nothing commits
			// even on a full disk: it must not end the outage.
			s.SetHealthClockForTest(func() time.Time { return time.Now().Add(2 * settle) })
			if err := s.ExecForTest(ctx, `UPDATE agents SET inbound_policy = 'open' WHERE handle = 'nobody'`); err != nil {
				t.Fatal(err)
			}
			if s.Available() {
				t.Fatal("a write that changed nothing ended the outage")
			}
			s.SetHealthClockForTest(time.Now)
			wantUnavailable(t, "Ready when the database is full", s.Ready(ctx))
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("ping: %v (a full disk does not stop pings, which is why Ready writes)", err)
			}
			if _, err := s.EventsAfter(ctx, sid, 0, 10); err != nil {
				t.Fatalf("reads must still work: %v", err)
			}
			if _, err := s.Authenticate(ctx, []byte("hash-@acme.bob")); err != nil {
				t.Fatalf("authentication must still work: %v", err)
			}

			// An agent with a long allowlist and roles: its row fits, its
			// allowlist does not. Nothing of it may remain.
			var allow []string
			for i := range 300 {
				allow = append(allow, fmt.Sprintf("@owner%03d.agent-with-a-rather-long-name", i))
			}
			_, err = s.CreateAgentRecord(ctx, NewAgent{Handle: "@acme.carol", InboundPolicy: "allowlist", Allowlist: allow,
				Roles: []string{"ops"}, TokenHash: []byte("hash-carol")})
			wantUnavailable(t, "creating an agent when the database is full", err)
			if _, err := s.GetAgent(ctx, "@acme.carol"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("agent half created: %v", err)
			}

			// A rotation either stores the new token and answers with the
			// record, or leaves the old one working. (Here it may succeed:
			// max_page_count, unlike a full disk, lets a write that needs no
			// new page through.)
			if rec, err := s.RotateTokenHash(ctx, "@acme.bob", []byte("hash-bob-2")); err == nil {
				if rec == nil || !rec.HasToken {
					t.Fatalf("a rotation that committed answered %+v", rec)
				}
			} else {
				wantUnavailable(t, "rotating a token when the database is full", err)
				if h, err := s.Authenticate(ctx, []byte("hash-@acme.bob")); err != nil || h != "@acme.bob" {
					t.Fatalf("the old token after a refused rotation: %q %v", h, err)
				}
			}

			// Space again: the store recovers by itself, at the next probe.
			if _, err := s.QueryIntForTest(ctx, `PRAGMA max_page_count = 1073741823`); err != nil {
				t.Fatal(err)
			}
			waitReady(t, s, 5*time.Second)
			resp, err := sendText(s, sid, "after")
			if err != nil {
				t.Fatalf("a message after recovery: %v", err)
			}
			acked = append(acked, resp)
			wantAcknowledged(t, s, sid, acked)
			a, err := s.CreateAgentRecord(ctx, NewAgent{Handle: "@acme.carol", InboundPolicy: "allowlist", Allowlist: allow,
				Roles: []string{"ops"}, TokenHash: []byte("hash-carol")})
			if err != nil || len(a.Allowlist) != len(allow) || len(a.Roles) != 1 {
				t.Fatalf("the agent after recovery: %+v %v", a, err)
			}
			rec, err := s.RotateTokenHash(ctx, "@acme.bob", []byte("hash-bob-2"))
			if err != nil || rec == nil || rec.Handle != "@acme.bob" || !rec.HasToken {
				t.Fatalf("rotation after recovery: %+v %v", rec, err)
			}
			wantOutageLogged(t, logs.String())
		})
	}
}

// TestOutageSQLiteBusy: another process holds SQLite's write lock past the
// busy timeout: ErrUnavailable, not a failure of aspd.
func TestOutageSQLiteBusy(t *testing.T) {
	ctx := context.Background()
	path := dbtest.SQLite(t)
	s, _, sid := outageStore(t, path)
	if _, err := s.QueryIntForTest(ctx, `PRAGMA busy_timeout = 100`); err != nil {
		t.Fatal(err)
	}
	other, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.write.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	_, err = sendText(s, sid, "blocked")
	wantUnavailable(t, "a message while another process holds the lock", err)
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitReady(t, s, 5*time.Second)
	if _, err := sendText(s, sid, "unblocked"); err != nil {
		t.Fatal(err)
	}
}

// TestOutagePostgresKilledConnections: the server kills aspd's connections
// (pg_terminate_backend, as a restart or an operator does). Idle pooled
// connections it killed are not handed out, and work that failed on a
// killed connection is retried where that is safe: a burst right after the
// kill succeeds whole. Kills in the middle of a burst cost at most
// ErrUnavailable answers, never another error, and nothing acknowledged is
// lost.
func TestOutagePostgresKilledConnections(t *testing.T) {
	ctx := context.Background()
	u := dbtest.Postgres(t)
	s, logs, sid := outageStore(t, u)
	faults := dbtest.PostgresFaults(t, u)

	burst := func(n int, each func(i int) error) []error {
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := each(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return errs
	}
	var mu sync.Mutex
	var acked []protocol.SendMessageResponse
	work := func(i int) error {
		switch i % 4 {
		case 0:
			resp, err := sendText(s, sid, fmt.Sprintf("burst %d", i))
			if err == nil {
				mu.Lock()
				acked = append(acked, resp)
				mu.Unlock()
			}
			return err
		case 1:
			_, err := s.Authenticate(ctx, []byte("hash-@acme.bob"))
			return err
		case 2:
			_, _, err := s.VisibleEvents(ctx, sid, "@acme.bob", 0, 50)
			return err
		default:
			return s.SetPolicy(ctx, "@acme.bob", "open")
		}
	}
	// Fill the pool with idle connections, kill them all, and use the pool
	// at once (well within the second after which pgx pings an idle
	// connection anyway).
	if errs := burst(24, work); len(errs) > 0 {
		t.Fatalf("warm-up: %v", errs)
	}
	faults.TerminateIdle(t)
	time.Sleep(20 * time.Millisecond)
	if errs := burst(48, work); len(errs) > 0 {
		t.Fatalf("after the server killed the pool's connections, %d operations failed: %v", len(errs), errs)
	}

	// Three rounds of kills during a burst (as a failover or an operator
	// ending connections would): each kills every connection of the pool,
	// busy or idle.
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for _, at := range []time.Duration{20, 150, 300} {
			time.Sleep(at * time.Millisecond)
			faults.Terminate(t)
		}
	}()
	start := time.Now()
	errs := burst(200, work)
	<-killed
	t.Logf("the burst under kills took %v", time.Since(start))
	for _, err := range errs {
		wantUnavailable(t, "an operation whose connection was killed", err)
	}
	t.Logf("kills during a burst of 200: %d operations failed with ErrUnavailable, %d messages acknowledged", len(errs), len(acked))
	waitReady(t, s, 10*time.Second)
	if errs := burst(24, work); len(errs) > 0 {
		t.Fatalf("after the kills: %v", errs)
	}
	wantAcknowledged(t, s, sid, acked)
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("killed connections logged at ERROR:\n%s", logs)
	}
}

// TestOutagePostgresRefused: the database refuses connections (as while
// PostgreSQL is down or restarting): reads, authentication and writes fail
// as ErrUnavailable, the store is not ready; when it accepts connections
// again, the store is ready again by itself. The outage is logged once
// when it begins and once when it ends.
func TestOutagePostgresRefused(t *testing.T) {
	ctx := context.Background()
	u := dbtest.Postgres(t)
	s, logs, sid := outageStore(t, u)
	faults := dbtest.PostgresFaults(t, u)
	before, err := sendText(s, sid, "before")
	if err != nil {
		t.Fatal(err)
	}

	faults.AllowConnections(t, false)
	faults.TerminateIdle(t)
	_, err = s.Authenticate(ctx, []byte("hash-@acme.bob"))
	wantUnavailable(t, "authentication", err)
	_, err = sendText(s, sid, "during")
	wantUnavailable(t, "a message", err)
	_, _, err = s.VisibleEvents(ctx, sid, "@acme.bob", 0, 50)
	wantUnavailable(t, "a read", err)
	_, err = s.CreateAgentRecord(ctx, NewAgent{Handle: "@acme.carol", InboundPolicy: "open", Roles: []string{"ops"}})
	wantUnavailable(t, "creating an agent", err)
	if s.Available() {
		t.Fatal("Available while the database refuses connections")
	}
	wantUnavailable(t, "Ready", s.Ready(ctx))
	for range 20 { // an outage is one WARN line, however many requests fail
		_, _ = sendText(s, sid, "during")
	}

	faults.AllowConnections(t, true)
	waitReady(t, s, 10*time.Second)
	after, err := sendText(s, sid, "after")
	if err != nil {
		t.Fatal(err)
	}
	wantAcknowledged(t, s, sid, []protocol.SendMessageResponse{before, after})
	if _, err := s.GetAgent(ctx, "@acme.carol"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("agent created during the outage: %v", err)
	}
	wantOutageLogged(t, logs.String())
}
