package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
)

// growSQLiteForPlans writes n events to an embedded store as growForPlans
// writes them to PostgreSQL: n/100 sessions of 100 events, three of the
// hundred @plan.aN handles in each, and texts of words of skewed
// frequency, with e-mail addresses, URLs, handles and a rare "quokka".
// The FTS5 tables are filled by the events' insert trigger.
func growSQLiteForPlans(t *testing.T, s *Store, n int) {
	t.Helper()
	words := strings.Fields(`the to and a of in is for that it on we with this be you are as have not
		release widget deploy invoice refund build test review report customer order team plan update please
		thanks need today tomorrow friday meeting notes draft ticket issue fix bug change version server`)
	hash := func(x int) int { // any fixed mix: the texts need only be skewed and repeatable
		x = (x ^ 61) ^ (x >> 16)
		x *= 9
		x ^= x >> 4
		x *= 0x27d4eb2d
		x ^= x >> 15
		return x & math.MaxInt32
	}
	sid := func(s int) string { return fmt.Sprintf("sess_%026d", s) }
	tx, err := s.write.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for i := 0; i < n/100; i++ {
		if _, err := tx.Exec(`INSERT INTO sessions (id, state, created_by, created_at, last_seq) VALUES ($1, 'active', $2, $3, 100)`,
			sid(i), fmt.Sprintf("@plan.a%d", i%100), 1700000000000+int64(i)*4000); err != nil {
			t.Fatal(err)
		}
		for m := 0; m < 3; m++ {
			if _, err := tx.Exec(`INSERT INTO participants (session_id, handle, status, visible_through) VALUES ($1, $2, 'joined', 9223372036854775807)`,
				sid(i), fmt.Sprintf("@plan.a%d", (i+m)%100)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ins, err := tx.Prepare(`INSERT INTO events (session_id, sequence, event_id, type, subject, created_at, body, search_text)
		VALUES ($1, $2, $3, 'session.message', $4, $5, '{}', $6)`)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for g := 0; g < n; g++ {
		b.Reset()
		for k := 1; k <= 8+g%16; k++ {
			if k > 1 {
				b.WriteByte(' ')
			}
			// The first words are the commonest (as growForPlans's exp).
			i := int(math.Exp(float64(hash(g*37+k)%10000)/10000*math.Log(float64(len(words)+1)))) - 1
			b.WriteString(words[min(max(i, 0), len(words)-1)])
			if hash(g*11+k)%3 == 0 {
				fmt.Fprintf(&b, " zy%d", hash(g+k*7)%3000)
			}
		}
		if g%20 == 3 {
			fmt.Fprintf(&b, " write to user%d@example.com", g%5000)
		}
		if g%33 == 5 {
			fmt.Fprintf(&b, " see https://tickets.example.org/issue/%d", g%9000)
		}
		if g%20 == 11 {
			fmt.Fprintf(&b, " ask @acme.agent%d", g%1000)
		}
		if g%10000 == 777 {
			b.WriteString(" the quokka report")
		}
		if _, err := ins.Exec(sid(g/100), g%100+1, fmt.Sprintf("evt_%026d", g), fmt.Sprintf("@plan.a%d", g%100),
			1700000000000+int64(g)*40, b.String()); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.write.Exec("ANALYZE"); err != nil {
		t.Fatal(err)
	}
}

// On SQLite, a search with a participant reads the participant's events
// and ANDs them with the FTS5 tables' hits (search's participant step)
// instead of looking up every hit of the term in the log. Its answers are
// those of sorting every hit (the last step, exact by construction), for
// every query shape with every filter beside the participant.
func TestSearchParticipantStepOnSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("grows a store of 60,000 events")
	}
	s, err := Open(context.Background(), dbtest.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	growSQLiteForPlans(t, s, 60000)
	ctx := context.Background()
	sessionsSteps := 0
	setSearchStepRan(func(st searchStep) {
		if st.sessions {
			sessionsSteps++
		}
	})
	defer setSearchStepRan(nil)
	for _, c := range planCases(t) {
		f := c.f
		f.Participant = "@plan.a7"
		got, err := s.search(ctx, f)
		if err != nil {
			t.Fatalf("%s, participant: %v", c.name, err)
		}
		if exact := exactKeys(t, s, f); !slices.Equal(hitKeys(got), exact) {
			t.Errorf("%s, participant: search gave %v, sorting every hit gave %v", c.name, hitKeys(got), exact)
		}
	}
	if sessionsSteps == 0 {
		t.Error("no search took the participant step")
	}
	// With the statistics of a grown store, and a bound on created_at, the
	// step reads the participant's events by their sessions' key, not along
	// events_created_at (most of the log).
	for _, filter := range []string{"since", "cursor", "no filter"} {
		f := SearchFilter{Query: planCases(t)[0].f.Query, Limit: 20, Participant: "@plan.a7"}
		planFilters[filter](&f)
		f.Participant = "@plan.a7"
		q, args := s.searchSQL(f, searchStep{sessions: true})
		if p := sqlitePlan(t, s, q, args); strings.Contains(p, "events_created_at") || !strings.Contains(p, "(session_id=?)") {
			t.Errorf("%s: the participant's events are not read by their sessions' key:\n%s", filter, p)
		}
	}
	// @plan.a7 is in 18 sessions of 600 (three of each hundred): 1,800
	// events.
	for _, c := range []struct {
		n    int
		more bool
	}{{1799, true}, {1800, false}, {50000, false}} {
		more, err := s.participantHasMore(ctx, "@plan.a7", c.n)
		if err != nil || more != c.more {
			t.Errorf("participantHasMore(@plan.a7, %d) = %v, %v; want %v", c.n, more, err, c.more)
		}
	}
}
