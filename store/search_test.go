package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/search"
	"github.com/aspd/aspd/migrations"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// searchCorpus writes the messages the search cases look for, one per
// simulated second so that newest-first order is known, and returns the
// label of each hit: label by session id and sequence. Between them are
// events that are not indexed (joins) and that name handles the queries
// look for: they must never be hits.
type searchCorpus struct {
	s1, s2 string
	label  map[string]string // "session/sequence" -> label
	at     map[string]int64  // label -> created_at
}

func writeSearchCorpus(t *testing.T, s *store.Store) *searchCorpus {
	t.Helper()
	clock := time.UnixMilli(1_700_000_000_000)
	s.SetClock(func() time.Time { return clock })
	tick := func() { clock = clock.Add(time.Second) }
	for _, h := range []string{"@a.one", "@b.two", "@c.three", "@kim.assistant"} {
		mustAgent(t, s, h, "open")
	}
	c := &searchCorpus{label: map[string]string{}, at: map[string]int64{}}
	c.s1 = create(t, s, "@a.one", "widget launch", "@b.two")
	join(t, s, c.s1, "@b.two")
	tick()
	c.s2 = create(t, s, "@a.one", "operations", "@c.three", "@kim.assistant")
	join(t, s, c.s2, "@c.three", "@kim.assistant")
	msg := func(label, sid, sender string, content json.RawMessage) {
		tick()
		resp, _, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: sender, Content: content})
		if err != nil {
			t.Fatalf("send %s: %v", label, err)
		}
		c.label[key(sid, resp.Sequence)] = label
		c.at[label] = clock.UnixMilli()
	}
	msg("m1", c.s1, "@a.one", text("Deploy the widget release tonight"))
	msg("m2", c.s1, "@b.two", text("Contact alice@example.com about the invoice"))
	msg("m3", c.s1, "@a.one", json.RawMessage(`[{"type":"text","text":"see the docs"},
		{"type":"data","data":{"url":"https://docs.example.org/guide?x=1","tags":["alpha","beta"],"nested":{"owner":"@kim.assistant"},"count":3}}]`))
	msg("m4", c.s2, "@a.one", text("the widget is broken, the release failed"))
	msg("m5", c.s2, "@c.three", text("Ping @kim.assistant: go live or rollback?"))
	msg("m6", c.s2, "@c.three", text("Quarterly report: revenue grew ==> hire"))
	msg("m7", c.s2, "@kim.assistant", text("Café crème at the Москва office: 日本語のテキスト"))
	// A session created with an initial message: the session.message is
	// indexed, the session.invited events that repeat it and the topic
	// are not.
	tick()
	resp, _, err := s.CreateSession(bg, store.CreateSession{Creator: "@b.two", Invite: []string{"@a.one", "@c.three"}, Topic: "kickoff planning",
		Initial: &protocol.InitialMessage{Content: text("Kickoff agenda attached")}})
	if err != nil || resp.Sequence == nil {
		t.Fatalf("create with an initial message: %+v, %v", resp, err)
	}
	c.label[key(resp.SessionID, *resp.Sequence)] = "m8"
	c.at["m8"] = clock.UnixMilli()
	return c
}

func key(sid string, seq int64) string { return sid + "/" + itoa(seq) }

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func (c *searchCorpus) labels(t *testing.T, hits []store.SearchHit) []string {
	t.Helper()
	out := []string{}
	for _, h := range hits {
		l, ok := c.label[key(h.Event.SessionID, h.Event.Sequence)]
		if !ok {
			t.Fatalf("hit %s/%d (%s) is not a corpus message", h.Event.SessionID, h.Event.Sequence, h.Event.Type)
		}
		out = append(out, l)
	}
	return out
}

// TestSearchSameHitsOnBothStores runs every query of the language on both
// stores, each with the hits it must give, newest first.
func TestSearchSameHitsOnBothStores(t *testing.T) {
	type tc struct {
		name, q string
		filter  func(c *searchCorpus, f *store.SearchFilter)
		want    []string
	}
	cases := []tc{
		{name: "word", q: "widget", want: []string{"m4", "m1"}},
		{name: "case-insensitive", q: "DEPLOY", want: []string{"m1"}},
		{name: "two words ANDed", q: "widget release", want: []string{"m4", "m1"}},
		{name: "phrase", q: `"widget release"`, want: []string{"m1"}},
		{name: "exclusion", q: "widget -broken", want: []string{"m1"}},
		{name: "excluded phrase", q: `widget -"widget release"`, want: []string{"m4"}},
		{name: "or", q: "invoice or revenue", want: []string{"m6", "m2"}},
		{name: "or with an AND", q: "the widget or invoice", want: []string{"m4", "m2", "m1"}},
		{name: "partial word", q: "wid", want: []string{"m4", "m1"}},
		{name: "partial word inside a word", q: "uarterl", want: []string{"m6"}},
		{name: "e-mail address", q: "alice@example.com", want: []string{"m2"}},
		{name: "part of an e-mail address", q: "alice", want: []string{"m2"}},
		{name: "domain in an e-mail and a URL", q: "example", want: []string{"m3", "m2"}},
		{name: "URL", q: "https://docs.example.org/guide", want: []string{"m3"}},
		// Inner words and the start of the last one (PostgreSQL asks the
		// word index for them first: search.Term.SubstringWords).
		{name: "part of a URL, cut inside its first and last words", q: "OCS.EXAMPLE.ORG/GUI", want: []string{"m3"}},
		{name: "part of a URL whose last word goes on", q: "example.org/guid", want: []string{"m3"}},
		{name: "a URL's words in another order", q: "org.example.docs", want: []string{}},
		{name: "handle", q: "@kim.assistant", want: []string{"m5", "m3"}},
		{name: "handle without its @", q: "kim.assistant", want: []string{"m5", "m3"}},
		{name: "phrase of an address's words", q: `"alice example"`, want: []string{"m2"}},
		{name: "short term matches whole words only", q: "go", want: []string{"m5"}},
		{name: "short term is not a substring", q: "ui", want: []string{}},
		{name: "string in a data array", q: "alpha", want: []string{"m3"}},
		{name: "object keys are not indexed", q: "nested", want: []string{}},
		{name: "numbers in data are not text", q: "count", want: []string{}},
		{name: "no match", q: "kubernetes", want: []string{}},
		{name: "symbols only, as a substring", q: "==>", want: []string{"m6"}},
		{name: "initial message once, not its invitations", q: "agenda", want: []string{"m8"}},
		{name: "topics are not indexed", q: "planning", want: []string{}},
		{name: "handles of membership events are not indexed", q: "@c.three", want: []string{}},
		{name: "accented word, any case", q: "CAFÉ", want: []string{"m7"}},
		{name: "accents are not folded", q: "cafe", want: []string{}},
		{name: "Cyrillic word, any case", q: "москва", want: []string{"m7"}},
		{name: "CJK substring", q: "日本語", want: []string{"m7"}},
		{name: "CJK phrase of two characters is a whole word only", q: "日本", want: []string{}},
		{name: "session filter", q: "widget", want: []string{"m4"},
			filter: func(c *searchCorpus, f *store.SearchFilter) { f.Session = c.s2 }},
		{name: "sender filter", q: "the", want: []string{"m2"},
			filter: func(c *searchCorpus, f *store.SearchFilter) { f.Sender = "@b.two" }},
		{name: "participant filter", q: "widget", want: []string{"m1"},
			filter: func(c *searchCorpus, f *store.SearchFilter) { f.Participant = "@b.two" }},
		{name: "type filter", q: "widget", want: []string{"m4", "m1"},
			filter: func(c *searchCorpus, f *store.SearchFilter) { f.Type = protocol.EventMessage }},
		{name: "type filter of an unindexed type", q: "widget", want: []string{},
			filter: func(c *searchCorpus, f *store.SearchFilter) { f.Type = protocol.EventJoined }},
		{name: "time range", q: "the", want: []string{"m4", "m3"},
			filter: func(c *searchCorpus, f *store.SearchFilter) { f.Since, f.Until = c.at["m3"], c.at["m5"] }},
	}
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		c := writeSearchCorpus(t, s)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				q, err := search.Parse(tc.q)
				if err != nil {
					t.Fatalf("parse %q: %v", tc.q, err)
				}
				f := store.SearchFilter{Query: q, Limit: 100}
				if tc.filter != nil {
					tc.filter(c, &f)
				}
				hits, err := s.Search(bg, f)
				if err != nil {
					t.Fatalf("search %q: %v", tc.q, err)
				}
				if got := c.labels(t, hits); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("search %q: hits %v, want %v", tc.q, got, tc.want)
				}
				// Each kind of step alone gives the same hits (the walk
				// above read the whole corpus and answered alone).
				steps, err := s.SearchStepsForTest(bg, f)
				if err != nil {
					t.Fatalf("search %q, steps: %v", tc.q, err)
				}
				for name, stepHits := range steps {
					if got := c.labels(t, stepHits); !reflect.DeepEqual(got, tc.want) {
						t.Fatalf("search %q, the %s step alone: hits %v, want %v", tc.q, name, got, tc.want)
					}
				}
				for _, h := range hits {
					if parts := search.Snippet(h.Text, q); !hasMatch(parts) {
						t.Errorf("search %q: hit %s/%d's snippet %+v flags no match", tc.q, h.Event.SessionID, h.Event.Sequence, parts)
					}
				}
			})
		}
	})
}

func hasMatch(parts []search.Part) bool {
	for _, p := range parts {
		if p.Match {
			return true
		}
	}
	return false
}

// TestSearchCursorPages pages through hits two at a time and gets every
// hit once, in the order of the one-page answer.
func TestSearchCursorPages(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		c := writeSearchCorpus(t, s)
		q, _ := search.Parse("the")
		all, err := s.Search(bg, store.SearchFilter{Query: q, Limit: 100})
		must(t, err)
		var paged []store.SearchHit
		var after *store.SearchCursor
		for range 10 {
			page, err := s.Search(bg, store.SearchFilter{Query: q, Limit: 2, After: after})
			must(t, err)
			paged = append(paged, page...)
			if len(page) < 2 {
				break
			}
			last := page[len(page)-1].Event
			after = &store.SearchCursor{CreatedAt: last.CreatedAt, SessionID: last.SessionID, Sequence: last.Sequence}
		}
		if got, want := c.labels(t, paged), c.labels(t, all); len(want) < 3 || !reflect.DeepEqual(got, want) {
			t.Fatalf("paged hits %v, one-page hits %v (want at least 3, equal)", got, want)
		}
	})
}

// TestSearchBackfillIndexesOlderEvents writes events with the schema as it
// was before search (migration 3), then opens the store: the migration and
// its backfill index them, by the write path's extraction rule.
func TestSearchBackfillIndexesOlderEvents(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		db, dialect, name := rawDB(t, url)
		sub, err := fs.Sub(migrations.FS, name)
		must(t, err)
		p, err := goose.NewProvider(dialect, db, sub)
		must(t, err)
		if _, err := p.UpTo(ctx, 3); err != nil {
			t.Fatalf("migrate to 3: %v", err)
		}
		const sid = "sess_01HZZZZZZZZZZZZZZZZZZZZZZZ"
		mustExec(t, db, `INSERT INTO sessions (id, topic, state, created_by, created_at, last_seq) VALUES ($1, '', 'active', '@a.one', 1000, 3)`, sid)
		mustExec(t, db, `INSERT INTO participants (session_id, handle, status, visible_through) VALUES ($1, '@a.one', 'joined', 9223372036854775807)`, sid)
		// Enough events for more than one backfill batch.
		const n = 1203
		for seq := int64(1); seq <= n; seq++ {
			content := text("routine status update")
			switch seq {
			case 7:
				content = json.RawMessage(`[{"type":"data","data":{"contact":"ops@legacy.example"}}]`)
			case 1100:
				content = text("the legacy migration finished")
			}
			m := protocol.Message{ID: "msg_" + itoa(seq), SessionID: sid, Sender: "@a.one", Sequence: seq, Content: content, CreatedAt: 1000 + seq}
			payload, _ := json.Marshal(m)
			body, _ := json.Marshal(protocol.Event{Type: protocol.EventMessage, SessionID: sid, EventID: "evt_" + itoa(seq), Sequence: seq, CreatedAt: 1000 + seq, Payload: payload})
			mustExec(t, db, `INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body) VALUES ($1, $2, $3, $4, '@a.one', '', $5, $6)`,
				sid, seq, "evt_"+itoa(seq), protocol.EventMessage, 1000+seq, string(body))
		}
		mustExec(t, db, `UPDATE sessions SET last_seq = $1 WHERE id = $2`, int64(n), sid)
		db.Close()

		s := open(t, url)
		for q, want := range map[string][]int64{"legacy": {1100, 7}, "ops@legacy.example": {7}, "routine": nil} {
			pq, err := search.Parse(q)
			must(t, err)
			hits, err := s.Search(bg, store.SearchFilter{Query: pq, Limit: 100})
			must(t, err)
			var got []int64
			for _, h := range hits {
				got = append(got, h.Event.Sequence)
			}
			if want == nil {
				if len(got) != 100 {
					t.Fatalf("search %q after backfill: %d hits, want a full page of 100", q, len(got))
				}
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("search %q after backfill: sequences %v, want %v", q, got, want)
			}
		}
	})
}

// TestSearchAfterImport: an imported network is searchable (the import
// indexes what it loaded, by the backfill's rule).
func TestSearchAfterImport(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		src := open(t, dbtest.SQLite(t))
		c := writeSearchCorpus(t, src)
		var buf bytes.Buffer
		if _, err := src.Export(bg, &buf, store.ExportOptions{}); err != nil {
			t.Fatal(err)
		}
		dst := open(t, url)
		if _, err := dst.Import(bg, &buf); err != nil {
			t.Fatal(err)
		}
		q, _ := search.Parse("alice@example.com or widget")
		hits, err := dst.Search(bg, store.SearchFilter{Query: q, Limit: 100})
		must(t, err)
		if got, want := c.labels(t, hits), []string{"m4", "m2", "m1"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("search after import: %v, want %v", got, want)
		}
	})
}

// TestSearchMigrationDownAndUp: migration 4 goes down cleanly (the
// columns, indexes, FTS5 tables and triggers go) and up again, and the
// events are indexed again by the backfill.
func TestSearchMigrationDownAndUp(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s, err := store.Open(bg, url)
		must(t, err)
		mustAgent(t, s, "@a.one", "open")
		sid := create(t, s, "@a.one", "")
		seq := send(t, s, sid, "@a.one", "before the downgrade").Sequence
		s.Close()

		db, dialect, name := rawDB(t, url)
		sub, err := fs.Sub(migrations.FS, name)
		must(t, err)
		p, err := goose.NewProvider(dialect, db, sub)
		must(t, err)
		if _, err := p.DownTo(bg, 3); err != nil {
			t.Fatalf("down to 3: %v", err)
		}
		db.Close()

		s = open(t, url)
		send(t, s, sid, "@a.one", "after the upgrade")
		for q, want := range map[string]int64{"downgrade": seq, "upgrade": seq + 1} {
			pq, _ := search.Parse(q)
			hits, err := s.Search(bg, store.SearchFilter{Query: pq, Limit: 10})
			must(t, err)
			if len(hits) != 1 || hits[0].Event.Sequence != want {
				t.Fatalf("search %q after down and up: %d hits, want sequence %d", q, len(hits), want)
			}
		}
	})
}

// TestSearchIndexesLargeMessages: messages near the content limit (256
// KiB) are stored and indexed on both stores, whatever their words: many
// distinct ones, many distinct CJK characters, one word repeated, words
// too long for PostgreSQL's word index (it skips them; the trigram index
// still has them). Indexing must never refuse a message the protocol
// accepts.
func TestSearchIndexesLargeMessages(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@a.one", "open")
		sid := create(t, s, "@a.one", "")
		for name, word := range map[string]func(i int) string{
			"distinct words":          func(i int) string { return fmt.Sprintf("w%x", i) },
			"distinct CJK characters": func(i int) string { return string(rune(0x4E00 + i%20000)) },
			"one word repeated":       func(int) string { return "again" },
			"over-long words":         func(i int) string { return fmt.Sprintf("%05d", i) + strings.Repeat("x", 3000) },
		} {
			var b strings.Builder
			for i := 0; b.Len() < 250_000; i++ {
				b.WriteString(word(i))
				b.WriteByte(' ')
			}
			content, _ := json.Marshal(b.String())
			if _, _, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: "@a.one", Content: content}); err != nil {
				t.Fatalf("%s: send %d bytes: %v", name, len(content), err)
			}
		}
		for _, q := range []string{"w1f3", "again", "00042xxx"} {
			pq, _ := search.Parse(q)
			hits, err := s.Search(bg, store.SearchFilter{Query: pq, Limit: 10})
			must(t, err)
			if len(hits) != 1 {
				t.Fatalf("search %q: %d hits, want 1", q, len(hits))
			}
		}
	})
}

// rawDB opens url without the store (no migrations) and names its
// dialect.
func rawDB(t *testing.T, url string) (*sql.DB, goose.Dialect, string) {
	t.Helper()
	var db *sql.DB
	var err error
	d, name := goose.DialectPostgres, "postgres"
	if strings.HasPrefix(url, "postgres") {
		db, err = sql.Open("pgx", url)
	} else {
		d, name = goose.DialectSQLite3, "sqlite"
		db, err = sql.Open("sqlite", "file:"+url+"?_pragma=foreign_keys(1)")
	}
	must(t, err)
	t.Cleanup(func() { db.Close() })
	return db, d, name
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
