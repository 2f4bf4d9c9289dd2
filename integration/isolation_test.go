package integration

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
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
		if strings.Contains(line, "msg=request ") {
			// The access-log line (INFO, status 499) is not about a failure.
			if strings.Contains(line, "request_id=abandoned-1") && !strings.Contains(line, "status=499") {
				t.Fatalf("the abandoned request's access-log line: %s", line)
			}
			continue
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

// ---- one request's failure never fails another's ----

// TestBadSenderCannotFailOthers: with group commit on (the default) and
// PostgreSQL, one agent floods its session with concurrent bad messages
// while another agent sends 300 good ones concurrently in another session.
// Every bad message is 400 invalid_request; every good one is accepted, and
// not one answer to the good agent is a 5xx. Before, a bad message reached
// the shared transaction, PostgreSQL refused its bytes, and every message
// batched with it failed with 500.
func TestBadSenderCannotFailOthers(t *testing.T) {
	s := startServer(t, dbtest.Postgres(t))
	good := s.provision("@iso.good", "open")
	bad := s.provision("@iso.bad", "open")
	goodSid := good.createSession(map[string]any{})
	badSid := bad.createSession(map[string]any{})

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 400}, Timeout: 60 * time.Second}
	post := func(a *agent, sid, body string) (int, string) {
		req, err := http.NewRequest("POST", s.url+"/sessions/"+sid+"/messages", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		req.Header.Set("Authorization", "Bearer "+a.token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	badBodies := []string{
		"{\"content\":\"\xff\"}",
		`{"content":"nul \u0000"}`,
		`{"content":"half \ud800"}`,
		"{\"content\":[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"data\",\"data\":{\"k\":[\"\xc3\"]}}]}",
		"{\"content\":\"x\",\"metadata\":{\"k\xfe\":1}}",
		`{"content":"x","idempotency_key":"\u0000"}`,
		`{"content":[{"type":"data","data":` + strings.Repeat("[", 80) + strings.Repeat("]", 80) + `}]}`,
	}

	const goodN, badN = 300, 140
	var wg sync.WaitGroup
	var mu sync.Mutex
	var goodFail, badWrong []string
	start := make(chan struct{})
	for i := range goodN {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, out := post(good, goodSid, fmt.Sprintf(`{"content":"good %d","metadata":{"n":%d}}`, i, i))
			if code != http.StatusCreated {
				mu.Lock()
				goodFail = append(goodFail, fmt.Sprintf("%d %s", code, out))
				mu.Unlock()
			}
		}()
	}
	for i := range badN {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, out := post(bad, badSid, badBodies[i%len(badBodies)])
			if code != http.StatusBadRequest || !strings.Contains(out, `"invalid_request"`) {
				mu.Lock()
				badWrong = append(badWrong, fmt.Sprintf("%d %s", code, out))
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(goodFail) > 0 {
		t.Errorf("%d of %d good messages failed, e.g. %s", len(goodFail), goodN, goodFail[0])
	}
	if len(badWrong) > 0 {
		t.Errorf("%d of %d bad messages were not 400 invalid_request, e.g. %s", len(badWrong), badN, badWrong[0])
	}
	n := 0
	for _, e := range good.events(goodSid) {
		if e.Type == "session.message" {
			n++
		}
	}
	if n != goodN {
		t.Errorf("the good session holds %d messages, want %d", n, goodN)
	}
	if evs := bad.events(badSid); len(evs) != 0 {
		t.Errorf("the bad session holds %d events, want none", len(evs))
	}
	if strings.Contains(s.logs(), "level=ERROR") {
		t.Errorf("aspd logged an error")
	}
}
