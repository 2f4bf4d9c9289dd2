package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", for the pre-search database

	"github.com/aspd/aspd/migrations"
)

// searchAnswer is GET /admin/v1/search's body, decoded strictly enough to
// check the contract the console builds against.
type searchAnswer struct {
	Hits []struct {
		SessionID string          `json:"session_id"`
		Sequence  int64           `json:"sequence"`
		Type      string          `json:"type"`
		Sender    string          `json:"sender"`
		CreatedAt string          `json:"created_at"`
		Event     json.RawMessage `json:"event"`
		Snippet   []struct {
			Text  string `json:"text"`
			Match bool   `json:"match"`
		} `json:"snippet"`
	} `json:"hits"`
	NextCursor string `json:"next_cursor"`
}

func (s *server) search(t *testing.T, params url.Values) searchAnswer {
	t.Helper()
	code, body := s.adminDo("GET", "/search?"+params.Encode(), nil)
	if code != http.StatusOK {
		t.Fatalf("search %v: status %d: %s", params, code, body)
	}
	var out searchAnswer
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("search %v: body %s: %v", params, body, err)
	}
	if out.Hits == nil {
		t.Fatalf("search %v: hits is absent or null, want an array: %s", params, body)
	}
	for _, h := range out.Hits {
		validate(t, "events.json", h.Event)
		if _, err := time.Parse(time.RFC3339, h.CreatedAt); err != nil {
			t.Fatalf("search %v: created_at %q is not RFC 3339", params, h.CreatedAt)
		}
		var ev struct {
			SessionID string `json:"session_id"`
			Sequence  int64  `json:"sequence"`
			Type      string `json:"type"`
		}
		mustUnmarshal(t, h.Event, &ev)
		if ev.SessionID != h.SessionID || ev.Sequence != h.Sequence || ev.Type != h.Type {
			t.Fatalf("search %v: hit %s/%d %s carries event %s/%d %s", params, h.SessionID, h.Sequence, h.Type, ev.SessionID, ev.Sequence, ev.Type)
		}
	}
	return out
}

// seqsOf lists the hits' sequences.
func (a searchAnswer) seqs() []int64 {
	out := []int64{}
	for _, h := range a.Hits {
		out = append(out, h.Sequence)
	}
	return out
}

// TestSearchOverHTTP searches a real aspd's transcripts as the operator, on
// both stores: the hits, their snippets, filters, paging, and every kind of
// bad input (400 with a code, nothing 5xx).
func TestSearchOverHTTP(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@acme.alice", "open")
		b := s.provision("@acme.bob", "open")
		sid := a.createSession(map[string]any{"invite": []string{b.handle}, "topic": "release"})
		b.join(sid)
		m1 := a.send(sid, "Deploy the widget release tonight")
		m2 := b.send(sid, []map[string]any{
			{"type": "text", "text": "Questions to carol@example.com"},
			{"type": "data", "data": map[string]any{"link": "https://status.example.org/incident/42", "who": []any{"@acme.carol", 7}}},
		})
		m3 := b.send(sid, "the widget is broken")
		other := a.createSession(map[string]any{"topic": "solo"})
		m4 := a.send(other, "widget notes for later")

		for _, tc := range []struct {
			params url.Values
			want   []int64
		}{
			{url.Values{"q": {"widget"}, "session": {sid}}, []int64{m3, m1}},
			{url.Values{"q": {`"widget release"`}}, []int64{m1}},
			{url.Values{"q": {"widget -broken"}, "session": {sid}}, []int64{m1}},
			{url.Values{"q": {"tonight or broken"}}, []int64{m3, m1}},
			{url.Values{"q": {"wid"}, "sender": {b.handle}}, []int64{m3}},
			{url.Values{"q": {"carol@example.com"}}, []int64{m2}},
			{url.Values{"q": {"https://status.example.org/incident/42"}}, []int64{m2}},
			{url.Values{"q": {"@acme.carol"}}, []int64{m2}},
			{url.Values{"q": {"widget"}, "participant": {b.handle}, "type": {"session.message"}}, []int64{m3, m1}},
			{url.Values{"q": {"widget"}, "session": {other}}, []int64{m4}},
			{url.Values{"q": {"widget"}, "since": {"2000-01-01T00:00:00Z"}, "until": {"2001-01-01T00:00:00Z"}}, []int64{}},
		} {
			if got := s.search(t, tc.params).seqs(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("search %v: sequences %v, want %v", tc.params, got, tc.want)
			}
		}

		// The snippet flags the match, in plain text.
		ans := s.search(t, url.Values{"q": {"example"}})
		if len(ans.Hits) != 1 {
			t.Fatalf("search example: %d hits, want 1", len(ans.Hits))
		}
		h := ans.Hits[0]
		var matched []string
		for _, p := range h.Snippet {
			if p.Match {
				matched = append(matched, p.Text)
			}
		}
		if len(matched) != 2 || !strings.EqualFold(matched[0], "example") || h.Sender != b.handle || h.Type != "session.message" {
			t.Fatalf("hit %+v: matched %q, want example twice, sender %s", h, matched, b.handle)
		}

		// Paging: one hit per page, following next_cursor, gives every hit.
		var paged []int64
		params := url.Values{"q": {"widget"}, "limit": {"1"}}
		for range 10 {
			page := s.search(t, params)
			paged = append(paged, page.seqs()...)
			if page.NextCursor == "" {
				break
			}
			params.Set("cursor", page.NextCursor)
		}
		all := s.search(t, url.Values{"q": {"widget"}})
		if len(all.Hits) != 3 || !reflect.DeepEqual(paged, all.seqs()) || all.NextCursor != "" {
			t.Fatalf("paged %v, all %v (next_cursor %q): want the same 3 hits", paged, all.seqs(), all.NextCursor)
		}

		// Bad input: 400 invalid_request, and never 5xx.
		for _, raw := range []string{
			"",
			"q=",
			"session=" + sid,
			"q=" + strings.Repeat("a", 257),
			"q=" + url.QueryEscape(strings.Repeat("w ", 9)),
			"q=-widget",
			"q=or",
			"q=widget+or",
			"q=%22%22",
			"q=%40%40",
			"q=widget&cursor=not-a-cursor",
			"q=widget&cursor=" + url.QueryEscape("eyJ0IjotMSwicyI6IngiLCJxIjowfQ"),
			"q=widget&since=yesterday",
			"q=widget&until=2026-13-01T00:00:00Z",
			"q=widget&since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
			"q=widget&limit=0",
			"q=widget&limit=101",
			"q=widget&session=nope",
			"q=widget&sender=alice",
			"q=widget&participant=@@",
			"q=widget&type=session.joined",
			"q=widget&colour=blue",
			"q=widget&q=again",
		} {
			code, body := s.adminDo("GET", "/search?"+raw, nil)
			wantError(t, "search "+raw, code, body, http.StatusBadRequest, "invalid_request")
		}
		// An agent's token is not the operator's.
		code, body := a.do("GET", "/admin/v1/search?q=widget", nil)
		wantError(t, "search with an agent token", code, body, http.StatusUnauthorized, "unauthorized")
	})
}

// TestSearchFindsEventsFromBeforeSearch: a database last migrated before
// search existed (migration 3), with messages in it, is upgraded by aspd
// at start-up, and its older messages are found over HTTP.
func TestSearchFindsEventsFromBeforeSearch(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		driver, dsn, dialect, dir := "pgx", dbURL, goose.DialectPostgres, "postgres"
		if !strings.HasPrefix(dbURL, "postgres") {
			driver, dsn, dialect, dir = "sqlite", "file:"+dbURL, goose.DialectSQLite3, "sqlite"
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		sub, err := fs.Sub(migrations.FS, dir)
		if err != nil {
			t.Fatal(err)
		}
		p, err := goose.NewProvider(dialect, db, sub)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.UpTo(ctx, 3); err != nil {
			t.Fatalf("migrate to 3: %v", err)
		}
		const sid = "sess_01HZZZZZZZZZZZZZZZZZZZZZZZ"
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		texts := []string{"the old deployment notes", "ping ops@legacy.example about it", "nothing to see"}
		exec(`INSERT INTO sessions (id, topic, state, created_by, created_at, last_seq) VALUES ($1, '', 'active', '@acme.old', 1000, $2)`, sid, len(texts))
		exec(`INSERT INTO participants (session_id, handle, status, visible_through) VALUES ($1, '@acme.old', 'joined', 9223372036854775807)`, sid)
		for i, text := range texts {
			seq := int64(i + 1)
			content, _ := json.Marshal(text)
			payload := fmt.Sprintf(`{"id":"msg_%d","session_id":%q,"sender":"@acme.old","sequence":%d,"content":%s,"created_at":%d}`, seq, sid, seq, content, 1000+seq)
			body := fmt.Sprintf(`{"type":"session.message","session_id":%q,"event_id":"evt_%d","sequence":%d,"created_at":%d,"payload":%s}`, sid, seq, seq, 1000+seq, payload)
			exec(`INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body) VALUES ($1, $2, $3, 'session.message', '@acme.old', '', $4, $5)`,
				sid, seq, fmt.Sprintf("evt_%d", seq), 1000+seq, body)
		}
		db.Close()

		s := startServer(t, dbURL)
		for q, want := range map[string][]int64{"deployment": {1}, "legacy.example": {2}, "ops@legacy.example or notes": {2, 1}} {
			if got := s.search(t, url.Values{"q": {q}}).seqs(); !reflect.DeepEqual(got, want) {
				t.Errorf("search %q: sequences %v, want %v", q, got, want)
			}
		}
	})
}

// A term whose hits are all older than the newest events: the first walk
// (the newest 1,000 events) finds none, so on PostgreSQL the search races
// its index step against the time windows (and, with a participant,
// against reading the participant's sessions by key); on SQLite the FTS5
// index step answers. Every page, over HTTP, is exactly the newest hits,
// whichever step answered.
func TestSearchBelowTheNewestEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 1,645 messages")
	}
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@acme.alice", "open")
		b := s.provision("@acme.bob", "open")
		sid := a.createSession(map[string]any{"invite": []string{b.handle}, "topic": "needles"})
		b.join(sid)
		var needles []int64 // newest first
		for i := range 45 {
			needles = append([]int64{a.send(sid, fmt.Sprintf("the needle report %d is ready", i))}, needles...)
		}
		// 1,600 messages of other words on top, in four other sessions.
		done := make(chan struct{}, 4)
		for g := range 4 {
			other := a.createSession(map[string]any{"topic": fmt.Sprint("hay ", g)})
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range 400 {
					code, body := a.do("POST", "/sessions/"+other+"/messages", map[string]any{"content": fmt.Sprintf("plain hay chatter %d", i)})
					if code != http.StatusCreated {
						t.Errorf("send: %d %s", code, body)
						return
					}
				}
			}()
		}
		for range 4 {
			<-done
		}
		answers := func() map[string]int64 {
			out := map[string]int64{}
			for _, step := range []string{"walk", "index", "windows", "sessions_walk", "sessions", "all_hits"} {
				out[step] = clusterMetric(t, s, `aspd_search_answers_total{step="`+step+`"}`)
			}
			return out
		}
		before := answers()
		if got := s.search(t, url.Values{"q": {"needle"}}).seqs(); !reflect.DeepEqual(got, needles[:20]) {
			t.Errorf("search needle: %v, want %v", got, needles[:20])
		}
		// One search, one answer; not the walk's (1,000 events of hay), and
		// on SQLite never a PostgreSQL step.
		after := answers()
		sum := int64(0)
		for step, n := range after {
			sum += n - before[step]
		}
		switch {
		case sum != 1 || after["walk"] != before["walk"]:
			t.Errorf("aspd_search_answers_total before %v, after %v: want one answer, not the walk's", before, after)
		case strings.HasPrefix(dbURL, "postgres") && after["index"]+after["windows"] != before["index"]+before["windows"]+1:
			t.Errorf("PostgreSQL: answered by %v -> %v, want the index step or the windows (the race)", before, after)
		case !strings.HasPrefix(dbURL, "postgres") && after["index"] != before["index"]+1:
			t.Errorf("SQLite: answered by %v -> %v, want the index step", before, after)
		}
		// With a participant, on PostgreSQL, the index step races the
		// participant's walks (store/searchparticipant.go).
		before = answers()
		if got := s.search(t, url.Values{"q": {"needle"}, "participant": {b.handle}}).seqs(); !reflect.DeepEqual(got, needles[:20]) {
			t.Errorf("search needle, participant %s: %v, want %v", b.handle, got, needles[:20])
		}
		after = answers()
		if strings.HasPrefix(dbURL, "postgres") && after["index"]+after["sessions_walk"]+after["sessions"] != before["index"]+before["sessions_walk"]+before["sessions"]+1 {
			t.Errorf("PostgreSQL, participant: answered by %v -> %v, want the index step or the participant's steps (the race)", before, after)
		}
		for _, q := range []url.Values{
			{"q": {"needle"}},
			{"q": {`"needle report"`}},
			{"q": {"needl"}},
			{"q": {"needle"}, "participant": {b.handle}},
			{"q": {"report -hay"}},
		} {
			var got []int64
			cursor := ""
			for page := 0; page < 5; page++ {
				params := url.Values{"limit": {"20"}}
				for k, v := range q {
					params[k] = v
				}
				if cursor != "" {
					params.Set("cursor", cursor)
				}
				ans := s.search(t, params)
				got = append(got, ans.seqs()...)
				if cursor = ans.NextCursor; cursor == "" {
					break
				}
			}
			if !reflect.DeepEqual(got, needles) {
				t.Errorf("search %v, every page: sequences %v, want %v", q, got, needles)
			}
		}
		if got := s.search(t, url.Values{"q": {"needle"}, "participant": {"@acme.nobody"}}).seqs(); len(got) != 0 {
			t.Errorf("search needle with a participant in none of the sessions: %v", got)
		}
	})
}
