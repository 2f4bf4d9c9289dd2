package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// BenchmarkConsoleLists measures the console's session list at 100,000
// sessions (docs/benchmarks.md "Console lists at 100,000 sessions"): one
// page of 50, as GET /admin/v1/sessions answers it (ListSessions, then the
// page's activity: message count and last activity), first page, a page
// deep in the keyset, filtered by participant and by state. The sessions
// are written with one INSERT ... SELECT per table (a recursive counter),
// not through the API: 100,000 API transactions would take minutes and
// measure nothing the list reads. Each session has two joined participants
// (@cl.alice and one of 100 others) and five events (invited, joined,
// three messages); every tenth is ended.
// Run: go test ./store -run '^$' -bench ConsoleLists -benchtime 200x
func BenchmarkConsoleLists(b *testing.B) {
	const n = 100_000
	for _, be := range dbtest.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, be.New(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			start := time.Now()
			fillSessions(ctx, b, s, n)
			b.Logf("%s: %d sessions, %d events written in %v", be.Name, n, 5*n, time.Since(start).Round(time.Millisecond))

			page := func(b *testing.B, f SessionFilter) {
				f.Limit = 50
				for b.Loop() {
					ss, err := s.ListSessions(ctx, f)
					if err != nil || len(ss) != 50 {
						b.Fatalf("%d sessions, %v", len(ss), err)
					}
					ids := make([]string, len(ss))
					for i, x := range ss {
						ids[i] = x.ID
					}
					act, err := s.SessionsActivity(ctx, ids)
					if err != nil || len(act) != 50 || act[ids[0]].MessageCount != 3 {
						b.Fatalf("activity %v, %v", act[ids[0]], err)
					}
				}
			}
			b.Run("first-page", func(b *testing.B) { page(b, SessionFilter{}) })
			b.Run("deep-page", func(b *testing.B) { page(b, SessionFilter{Before: benchSessionID(n / 10)}) })
			b.Run("participant", func(b *testing.B) { page(b, SessionFilter{Participant: "@cl.p7"}) })
			b.Run("participant-deep", func(b *testing.B) { page(b, SessionFilter{Participant: "@cl.p7", Before: benchSessionID(n / 10)}) })
			b.Run("ended", func(b *testing.B) { page(b, SessionFilter{State: "ended"}) })
		})
	}
}

// benchSessionID is the id of the i-th benchmark session (ids sort as i).
func benchSessionID(i int) string { return fmt.Sprintf("sess_%08d", i) }

// fillSessions writes n sessions, their participants and events, in one
// transaction of three INSERT ... SELECT statements over a counter.
func fillSessions(ctx context.Context, b *testing.B, s *Store, n int) {
	b.Helper()
	id := "'sess_' || printf('%08d', c.i)"
	if s.Dialect() == "postgres" {
		id = "'sess_' || lpad(c.i::text, 8, '0')"
	}
	counter := fmt.Sprintf(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %d) `, n)
	base := time.Now().Add(-48 * time.Hour).UnixMilli()
	stmts := []string{
		counter + `INSERT INTO sessions (id, topic, state, created_by, created_at, ended_at, last_seq)
			SELECT ` + id + `, 'topic ' || c.i, CASE WHEN c.i % 10 = 0 THEN 'ended' ELSE 'active' END, '@cl.alice',
				` + fmt.Sprint(base) + ` + c.i * 1000, CASE WHEN c.i % 10 = 0 THEN ` + fmt.Sprint(base) + ` + c.i * 1000 + 500 END, 5 FROM c`,
		counter + `INSERT INTO participants (session_id, handle, status, visible_through, last_change_seq, invited_at, joined_at)
			SELECT ` + id + `, '@cl.alice', 'joined', 9223372036854775807, 0, NULL, ` + fmt.Sprint(base) + ` + c.i * 1000 FROM c
			UNION ALL
			SELECT ` + id + `, '@cl.p' || (c.i % 100), 'joined', 9223372036854775807, 2, ` + fmt.Sprint(base) + ` + c.i * 1000, ` + fmt.Sprint(base) + ` + c.i * 1000 FROM c`,
		`WITH RECURSIVE e(q, t) AS (SELECT 1, 'session.invited' UNION ALL SELECT 2, 'session.joined' UNION ALL SELECT 3, 'session.message'
				UNION ALL SELECT 4, 'session.message' UNION ALL SELECT 5, 'session.message'),
			c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ` + fmt.Sprint(n) + `)
			INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body)
			SELECT ` + id + `, e.q, 'evt_' || c.i || '_' || e.q, e.t, '', '', ` + fmt.Sprint(base) + ` + c.i * 1000 + e.q, '{}' FROM c CROSS JOIN e`,
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			b.Fatalf("filling: %v\n%s", err, q)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{"ANALYZE"} {
		if _, err := s.write.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}
