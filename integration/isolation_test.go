package integration

import (
	"context"
	"database/sql"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// ---- request ids and abandoned requests ----

// TestRequestIDs: every answer carries an X-Request-Id: the client's own
// when it is sane, a fresh one otherwise.
func TestRequestIDs(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t))
	a := s.provision("@rid.a", "open")
	get := func(path, id string) string {
		t.Helper()
		req, err := http.NewRequest("GET", s.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+a.token)
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Request-Id")
	}
	fresh := regexp.MustCompile(`^[0-9a-f]{32}$`)
	if got := get("/sessions", "trace-42/abc:DEF"); got != "trace-42/abc:DEF" {
		t.Fatalf("a sane X-Request-Id came back as %q", got)
	}
	first, second := get("/sessions", ""), get("/sessions/not-a-session", "")
	if !fresh.MatchString(first) || !fresh.MatchString(second) || first == second {
		t.Fatalf("generated request ids %q and %q, want two different 32-hex-digit ids", first, second)
	}
	for _, bad := range []string{strings.Repeat("x", 65), "has space", "tab\there", "caf\u00e9"} {
		if got := get("/sessions", bad); !fresh.MatchString(got) {
			t.Fatalf("X-Request-Id %q was answered with %q, want a fresh id", bad, got)
		}
	}
}

// TestAbandonedRequestIsNotAFailure: a client that hangs up while aspd is
// waiting on the database is not a server failure. Before, this logged
// ERROR "request failed ... context canceled" and wrote a 500 to nobody. A
// real failure is still a 500 logged at ERROR, with its request id.
func TestAbandonedRequestIsNotAFailure(t *testing.T) {
	dbURL := dbtest.Postgres(t)
	s := startServer(t, dbURL, "--log-level", "debug")
	a := s.provision("@gone.a", "open")
	sid := a.createSession(map[string]any{})
	a.send(sid, "hello")
	a.events(sid) // the token is cached: only the events read will wait

	// Hold a lock that makes any read of the event log wait.
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`LOCK TABLE events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/sessions/"+sid+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("X-Request-Id", "abandoned-1")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the events read answered %d while the log was locked", resp.StatusCode)
	}
	// aspd notices the hang-up, cancels the query and logs it, at DEBUG.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(s.logs(), "request_id=abandoned-1") && !strings.Contains(s.logs(), "context canceled") {
		if time.Now().After(deadline) {
			t.Fatalf("aspd never logged the abandoned request:\n%s", s.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	a.events(sid) // the server is fine
	if !strings.Contains(s.logs(), "request_id=abandoned-1") {
		t.Errorf("the abandoned request was not logged with its request id")
	}
	logs := s.logs()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Fatalf("an abandoned request was logged as an error:\n%s", line)
		}
		if strings.Contains(line, "request_id=abandoned-1") && (!strings.Contains(line, "level=DEBUG") || strings.Contains(line, "failed")) {
			t.Fatalf("the abandoned request's log line is not a DEBUG line without \"failed\":\n%s", line)
		}
	}

	// A real failure, by contrast, is a 500 logged at ERROR with method,
	// route, request id and the error.
	if _, err := db.Exec(`ALTER TABLE events RENAME TO events_away`); err != nil {
		t.Fatal(err)
	}
	req, err = http.NewRequest("GET", s.url+"/sessions/"+sid+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("X-Request-Id", "fails-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := db.Exec(`ALTER TABLE events_away RENAME TO events`); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("X-Request-Id") != "fails-1" {
		t.Fatalf("read of a missing table: %d, X-Request-Id %q; want 500 and fails-1", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	failed := regexp.MustCompile(`level=ERROR msg="request failed" method=GET route=/sessions/:id/events request_id=fails-1 status=500 err=".*events.*"`)
	if !failed.MatchString(s.logs()[len(logs):]) {
		t.Fatalf("the 500 was not logged as wanted:\n%s", s.logs()[len(logs):])
	}
}
