package store

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/search"
)

// The word pairs aspd writes (search.PairLexemes) are those PostgreSQL
// computes from the words' positions (aspd_search_pairs, which the pairs
// index uses for the events written without them): the two halves of the
// index agree, so a phrase finds old and new events alike.
func TestWordPairsMatchTheIndexFunction(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, dbtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, text := range []string{
		"", "one", "widget release", "Deploy the widget release tonight", "the miniwidget released today",
		"widget-release\nnotes", "go go go live", "a b c d", "write to user42@example.com now",
		"see https://tickets.example.org/issue/4242", "Café crème at the Москва office: 日本語のテキスト",
		"Zoë's x1 Ünïcode wörds ab", "the the the the",
	} {
		in := newSearchInput(s.d, text)
		var fromGo, fromSQL string
		if err := s.read.QueryRowContext(ctx, `SELECT CAST($1 AS tsvector)::text,
			coalesce(aspd_search_pairs(to_tsvector('simple', NULLIF($2, ''))), '')::text`, in.pairs, in.words).Scan(&fromGo, &fromSQL); err != nil {
			t.Fatal(err)
		}
		if fromGo != fromSQL {
			t.Errorf("%q: aspd writes the pairs %s, the index function computes %s", text, fromGo, fromSQL)
		}
	}
}

// Phrases and e-mail addresses, which PostgreSQL's index steps answer
// through the word pairs, give the hits a walk of every event gives, as
// words in a row and as substrings (whose first and last words may be
// parts of longer words), on events written with their pairs and on
// events written without them (before migration 00013). The walk reads
// the events themselves, never the pairs. On SQLite, which has no pairs,
// the same hits.
func TestSearchWordPairs(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := openStore(t, url)
		texts := map[string]string{
			"p1":  "Deploy the widget release tonight",
			"p2":  "the miniwidget released today",
			"p3":  "widget-release notes",
			"p4":  "widget and release apart",
			"p5":  "WIDGET RELEASE shouted",
			"p6":  "a budget release is not it",
			"p7":  "ago lively",
			"p8":  "reship a fixture",
			"p9":  "write to user42@example.com now",
			"p10": "write to user142@example.com",
			"p11": "widget\nrelease",
			"p12": "Zoë's widget release",
			"p13": "widget — release",
		}
		cases := []struct {
			q    string
			want []string
		}{
			{`"widget release"`, []string{"p1", "p11", "p12", "p13", "p2", "p3", "p5"}},
			{`"go live"`, []string{"p7"}},
			{`"ship a fix"`, []string{"p8"}},
			{`user42@example.com`, []string{"p9"}},
			{`"release tonight"`, []string{"p1"}},
			{`"widget release" or "ship a fix"`, []string{"p1", "p11", "p12", "p13", "p2", "p3", "p5", "p8"}},
			{`"widget release" -shouted`, []string{"p1", "p11", "p12", "p13", "p2", "p3"}},
			{`"budget release"`, []string{"p6"}},
		}
		for _, h := range []string{"@pairs.a", "@pairs.b"} {
			if err := s.CreateAgent(ctx, NewAgent{Handle: h, InboundPolicy: "open", TokenHash: []byte("hash-" + h)}); err != nil {
				t.Fatal(err)
			}
		}
		label := map[string]string{} // "session/sequence" -> label
		for _, old := range []bool{false, true} {
			resp, _, err := s.CreateSession(ctx, CreateSession{Creator: "@pairs.a", Invite: []string{"@pairs.b"}, Topic: "pairs"})
			if err != nil {
				t.Fatal(err)
			}
			sid := resp.SessionID
			for _, l := range sortedKeys(texts) {
				content, _ := json.Marshal(texts[l])
				resp, _, err := s.SendMessage(ctx, SendMessage{SessionID: sid, Sender: "@pairs.a", Content: content})
				if err != nil {
					t.Fatal(err)
				}
				label[hitKey(sid, resp.Sequence)] = l
			}
			if old && s.d.name == "postgres" {
				// As written by aspd before 00013: the index computes them.
				if _, err := s.write.ExecContext(ctx, `UPDATE events SET search_pairs = NULL WHERE session_id = $1`, sid); err != nil {
					t.Fatal(err)
				}
			}
		}
		labels := func(hits []SearchHit) []string {
			var out []string
			for _, k := range hitKeys(hits) {
				out = append(out, label[k])
			}
			sort.Strings(out)
			return out
		}
		for _, c := range cases {
			q, err := search.Parse(c.q)
			if err != nil {
				t.Fatal(err)
			}
			f := SearchFilter{Query: q, Limit: 100}
			var want []string
			for _, l := range c.want {
				want = append(want, l, l) // one in each session
			}
			sort.Strings(want)
			for name, st := range map[string]searchStep{
				"the walk of every event":  {walk: 1 << 20},
				"the index step":           {limit: searchIndexCap},
				"the step with every hit":  {},
				"the participant's bitmap": {sessions: true, bitmap: true},
			} {
				g := f
				if st.sessions {
					if !s.searchWordsOnly(q) {
						continue
					}
					g.Participant = "@pairs.b"
				}
				hits, _, err := s.searchStep(ctx, g, st)
				if err != nil {
					t.Fatalf("%s, %s: %v", c.q, name, err)
				}
				if got := labels(hits); !slices.Equal(got, want) {
					t.Errorf("%s, %s: %v, want %v", c.q, name, got, want)
				}
			}
			hits, err := s.Search(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if got := labels(hits); !slices.Equal(got, want) {
				t.Errorf("%s, search: %v, want %v", c.q, got, want)
			}
		}
	})
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
