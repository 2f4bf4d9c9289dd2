package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/search"
)

// growForPlans fills a PostgreSQL store with n events (100 per session,
// 3 participants each) whose texts come from a vocabulary in which some
// words are common and some rare, with e-mail addresses, URLs and
// handles, then ANALYZEs: big enough that the planner prefers indexes,
// as on a grown store (bench/grow.sql is the full-size version).
func growForPlans(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	stmts := []string{
		`INSERT INTO sessions (id, topic, state, created_by, created_at, last_seq)
		SELECT 'sess_' || lpad(s::text, 26, '0'), '', 'active', '@plan.a' || (s % 100), 1700000000000 + s * 4000, 100
		FROM generate_series(0, $1 / 100 - 1) s`,
		`INSERT INTO participants (session_id, handle, status, visible_through)
		SELECT 'sess_' || lpad(s::text, 26, '0'), '@plan.a' || ((s + m) % 100), 'joined', 9223372036854775807
		FROM generate_series(0, $1 / 100 - 1) s, generate_series(0, 2) m`,
		`WITH v(w) AS (SELECT string_to_array('the to and a of in is for that it on we with this be you are as have not '
			'release widget deploy invoice refund build test review report customer order team plan update please '
			'thanks need today tomorrow friday meeting notes draft ticket issue fix bug change version server', ' '))
		INSERT INTO events (session_id, sequence, event_id, type, subject, created_at, body, search_text, search_words)
		SELECT sid, q, 'evt_' || lpad(g::text, 26, '0'), 'session.message', '@plan.a' || (g % 100), 1700000000000 + g * 40, '{}', txt,
			to_tsvector('simple', lower(regexp_replace(txt, '[^[:alnum:]]+', ' ', 'g')))
		FROM (SELECT g, 'sess_' || lpad((g / 100)::text, 26, '0') AS sid, g % 100 + 1 AS q,
			(SELECT string_agg(v.w[floor(exp((abs(hashint4(g * 37 + k)) % 10000) / 10000.0 * ln(array_length(v.w, 1) + 1)))::int]
				|| CASE WHEN abs(hashint4(g * 11 + k)) % 3 = 0 THEN ' zy' || (abs(hashint4(g + k * 7)) % 3000) ELSE '' END, ' ')
				FROM generate_series(1, 8 + g % 16) k, v)
			|| CASE WHEN g % 20 = 3 THEN ' write to user' || (g % 5000) || '@example.com' ELSE '' END
			|| CASE WHEN g % 33 = 5 THEN ' see https://tickets.example.org/issue/' || (g % 9000) ELSE '' END
			|| CASE WHEN g % 20 = 11 THEN ' ask @acme.agent' || (g % 1000) ELSE '' END
			|| CASE WHEN g % 10000 = 777 THEN ' the quokka report' ELSE '' END AS txt
			FROM generate_series(0, $1 - 1) g) x`,
		`ANALYZE`,
	}
	for _, q := range stmts {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{n}
		}
		if _, err := s.write.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("grow: %v\n%s", err, q)
		}
	}
}

// planShapes are the query shapes of docs/search.md that the plans and
// the grown-store answers are checked for.
var planShapes = []string{
	`"widget release"`, "quokka", "kubernetes", "the", "deploy invoice", "invoice or refund",
	"widget -broken", "wid", "uokk", "user42@example.com", "tickets.example.org/issue/4242",
	"@acme.agent42", "go",
}

// planFilters are the filters each shape is run with.
var planFilters = map[string]func(f *SearchFilter){
	"no filter":   func(f *SearchFilter) {},
	"session":     func(f *SearchFilter) { f.Session = "sess_" + strings.Repeat("0", 23) + "123" },
	"participant": func(f *SearchFilter) { f.Participant = "@plan.a7" },
	"sender":      func(f *SearchFilter) { f.Sender = "@plan.a7" },
	"since":       func(f *SearchFilter) { f.Since = 1700000000000 + 40*40000 },
	// The newest 500 of the grown store's 60,000 events: fewer than the
	// first walk reads, so that walk answers (TestSearchPlansOnGrownStore).
	"recent": func(f *SearchFilter) { f.Since = 1700000000000 + 40*59500 },
	"cursor": func(f *SearchFilter) {
		f.After = &SearchCursor{CreatedAt: 1700000000000 + 40*30000, SessionID: "sess_" + strings.Repeat("0", 23) + "300", Sequence: 1}
	},
}

// planSteps are the steps of search whose plans are checked: a walk, the
// capped index step and the index step with every hit.
var planSteps = []searchStep{{walk: searchWalkShort}, {limit: searchIndexCap, budget: searchIndexBudget}, {}}

// planCase is one query shape with one filter.
type planCase struct {
	name string
	f    SearchFilter
}

// planCases are every shape of planShapes with every filter of
// planFilters.
func planCases(t *testing.T) []planCase {
	t.Helper()
	var out []planCase
	for _, shape := range planShapes {
		q, err := search.Parse(shape)
		if err != nil {
			t.Fatal(err)
		}
		for name, filter := range planFilters {
			f := SearchFilter{Query: q, Limit: 20}
			filter(&f)
			out = append(out, planCase{name: shape + ", " + name, f: f})
		}
	}
	return out
}

// On a grown PostgreSQL store, no step of a search reads the whole log:
// the index steps never scan events sequentially nor walk
// events_created_at (the plan that took seconds in issue 21: the planner
// misjudges an OR of a word match and an ILIKE), and the walks read
// events_created_at under their LIMIT. And every query shape, with every
// filter, gets the same hits from search's steps as from sorting every
// index hit (the last step alone, which is exact by construction).
func TestSearchPlansOnGrownStore(t *testing.T) {
	if testing.Short() {
		t.Skip("grows a store of 60,000 events")
	}
	s, err := Open(context.Background(), dbtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	growForPlans(t, s, 60000)
	ctx := context.Background()
	for _, c := range planCases(t) {
		f := c.f
		for _, st := range planSteps {
			sqlText, args := s.searchSQL(f, st)
			plan := explain(t, s, sqlText, args, st)
			where := fmt.Sprintf("%s, step %+v", c.name, st)
			if strings.Contains(plan, "Seq Scan on events ") {
				t.Errorf("%s: a sequential scan of events:\n%s", where, plan)
			}
			walksTime := strings.Contains(plan, "Index Scan Backward using events_created_at")
			switch {
			case st.walk > 0 && !walksTime:
				t.Errorf("%s: the walk does not read events_created_at:\n%s", where, plan)
			case st.walk == 0 && walksTime:
				t.Errorf("%s: the index step walks events_created_at:\n%s", where, plan)
			case st.walk == 0 && f.Since == 0 && f.After == nil && strings.Contains(plan, "events_created_at"):
				t.Errorf("%s: the index step reads events_created_at without a time bound:\n%s", where, plan)
			}
		}
		steps := 0
		searchStepRan = func(searchStep) { steps++ }
		got, err := s.search(ctx, f)
		searchStepRan = nil
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := s.searchStep(ctx, f, searchStep{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(hitKeys(got), hitKeys(want)) {
			t.Errorf("%s: search gave %v, sorting every index hit gave %v", c.name, hitKeys(got), hitKeys(want))
		}
		// A walk that read every event within the bounds answers, hits
		// or none: the rare and absent terms too.
		if strings.HasSuffix(c.name, ", recent") && steps != 1 {
			t.Errorf("%s: %d steps, want the first walk alone (it read all 500 events in range)", c.name, steps)
		}
	}
	// With the index step's time budget spent at once (1 ms), the next
	// steps still give the exact answer.
	// Both budgets spent at once: the walks of searchWalksOverBudget
	// answer.
	defer func(b, all time.Duration) { searchIndexBudget, searchAllHitsBudget = b, all }(searchIndexBudget, searchAllHitsBudget)
	searchIndexBudget, searchAllHitsBudget = time.Millisecond, time.Millisecond
	for _, c := range planCases(t) {
		if !strings.HasSuffix(c.name, ", no filter") {
			continue
		}
		got, err := s.search(ctx, c.f)
		if err != nil {
			t.Fatalf("%s, budget spent: %v", c.name, err)
		}
		want, _, err := s.searchStep(ctx, c.f, searchStep{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(hitKeys(got), hitKeys(want)) {
			t.Errorf("%s, budget spent: search gave %v, sorting every index hit gave %v", c.name, hitKeys(got), hitKeys(want))
		}
	}
}

func explain(t *testing.T, s *Store, q string, args []any, st searchStep) string {
	t.Helper()
	ctx := context.Background()
	tx, err := s.read.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	if set := s.d.searchSettings(st); set != "" {
		if _, err := tx.ExecContext(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := tx.QueryContext(ctx, "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, q)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func hitKeys(hits []SearchHit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = fmt.Sprintf("%s/%d", h.Event.SessionID, h.Event.Sequence)
	}
	return out
}

// On SQLite, the walk reads events_created_at (SQLite 3.54, with the
// statistics of ANALYZE, rather scanned and sorted the whole table: 10 s
// at a million events), and no step scans the events table whole: the
// index steps start from the FTS5 tables' answers.
func TestSearchPlansOnSQLite(t *testing.T) {
	s, err := Open(context.Background(), dbtest.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.write.Exec("ANALYZE"); err != nil {
		t.Fatal(err)
	}
	for _, c := range planCases(t) {
		f := c.f
		for _, st := range planSteps {
			sqlText, args := s.searchSQL(f, st)
			rows, err := s.read.Query("EXPLAIN QUERY PLAN "+sqlText, args...)
			if err != nil {
				t.Fatalf("%s: %v", sqlText, err)
			}
			var plan strings.Builder
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan.WriteString(detail + "\n")
			}
			rows.Close()
			where := fmt.Sprintf("%s, step %+v", c.name, st)
			p := plan.String()
			// "SCAN e" is a full scan of events where e is events (the
			// last step, and the first line of the capped step's CTE
			// c); in a walk, e is the CTE of the walked events.
			lines := strings.Split(p, "\n")
			for i, line := range lines {
				full := line == "SCAN events" || line == "SCAN h" ||
					(line == "SCAN e" && (st.walk == 0 && st.limit == 0 || i > 0 && lines[i-1] == "MATERIALIZE c"))
				if full {
					t.Errorf("%s: a scan of the whole events table:\n%s", where, p)
				}
			}
			if st.walk > 0 && !strings.Contains(p, "USING INDEX events_created_at") {
				t.Errorf("%s: the walk does not read events_created_at:\n%s", where, p)
			}
		}
	}
}
