package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
)

// Retention purges exactly the sessions ended before the cutoff, in
// bounded batches, with the log gap-free at every commit; it leaves active
// sessions, reopened ones and those ended after the cutoff alone. The
// store's clock is set, so ended_at is what the test says.
func TestPurgeSession(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		now := time.UnixMilli(1_800_000_000_000)
		s.SetClock(func() time.Time { return now })
		mustAgent(t, s, "@ann.a", "open")
		mustAgent(t, s, "@bob.b", "open")
		session := func(msgs int) string {
			sid := create(t, s, "@ann.a", "t", "@bob.b")
			join(t, s, sid, "@bob.b")
			for i := 0; i < msgs; i++ {
				send(t, s, sid, "@ann.a", "m")
			}
			return sid
		}
		end := func(sid string) {
			t.Helper()
			if _, err := s.End(bg, sid, "@ann.a"); err != nil {
				t.Fatal(err)
			}
		}
		old := session(22) // 1 invite + 1 join + 22 messages + 1 end = 25 events
		end(old)
		reopened := session(3)
		end(reopened)
		active := session(3)
		now = now.Add(24 * time.Hour)
		_, err := reopen(s, reopened, "@ann.a", nil, nil)
		must(t, err)
		recent := session(3)
		end(recent)
		cutoff := now.Add(-time.Hour).UnixMilli() // old's end is before, recent's after

		ids, err := s.SessionsEndedBefore(bg, cutoff, 10)
		must(t, err)
		if len(ids) != 1 || ids[0] != old {
			t.Fatalf("due %v, want only %s", ids, old)
		}
		for _, sid := range []string{reopened, active, recent} {
			n, purged, err := s.PurgeSession(bg, sid, cutoff, 10, nil)
			if err != nil || purged || n != 0 {
				t.Fatalf("purge of a session not due: %d %v %v", n, purged, err)
			}
		}

		var batches []int64
		n, purged, err := s.PurgeSession(bg, old, cutoff, 10, func(n int64) {
			batches = append(batches, n)
			// Between two batches the log is still 1..last_seq, and agents
			// no longer see the session.
			evs, err := s.EventsAfter(bg, old, 0, 1000)
			must(t, err)
			for i, e := range evs {
				if e.Sequence != int64(i+1) {
					t.Fatalf("gap midway: event %d has sequence %d", i, e.Sequence)
				}
			}
			if _, err := s.GetSession(bg, old, "@ann.a"); err == nil {
				t.Fatal("a participant still sees a session being purged")
			}
		})
		must(t, err)
		if !purged || n != 25 || len(batches) != 3 || batches[0] != 10 || batches[2] != 5 {
			t.Fatalf("purged %v, %d events in batches %v", purged, n, batches)
		}
		if _, err := s.AdminSession(bg, old); err == nil {
			t.Fatal("the session is still there")
		}
		if evs, _ := s.EventsAfter(bg, old, 0, 10); len(evs) != 0 {
			t.Fatalf("%d events left", len(evs))
		}
		// Again: nothing to do.
		if n, purged, err := s.PurgeSession(bg, old, cutoff, 10, nil); err != nil || purged || n != 0 {
			t.Fatalf("second purge: %d %v %v", n, purged, err)
		}
		// The others are whole.
		for sid, state := range map[string]string{reopened: protocol.StateActive, active: protocol.StateActive, recent: protocol.StateEnded} {
			wantState(t, s, sid, state)
			fullLog(t, s, sid)
		}
		for _, sid := range []string{reopened, active} {
			send(t, s, sid, "@ann.a", "still here")
		}
		if all := allSessions(t, s); len(all) != 3 {
			t.Fatalf("sessions left: %v", all)
		}
	})
}

// A purge interrupted midway (here: its context cancelled after the first
// batch) leaves a consistent, invisible session, which the next purge
// finishes.
func TestPurgeSessionResumes(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@ann.a", "open")
		sid := create(t, s, "@ann.a", "t")
		for i := 0; i < 5; i++ {
			send(t, s, sid, "@ann.a", "m")
		}
		if _, err := s.End(bg, sid, "@ann.a"); err != nil {
			t.Fatal(err)
		}
		cutoff := time.Now().Add(time.Hour).UnixMilli()
		ctx, cancel := context.WithCancel(bg)
		n, purged, err := s.PurgeSession(ctx, sid, cutoff, 2, func(int64) { cancel() })
		if !errors.Is(err, context.Canceled) || purged || n != 2 {
			t.Fatalf("interrupted purge: %d %v %v", n, purged, err)
		}
		if evs := fullLog(t, s, sid); len(evs) != 4 { // 5 messages and the end, the top 2 gone
			t.Fatalf("%d events left midway", len(evs))
		}
		ids, err := s.SessionsEndedBefore(bg, cutoff, 10)
		must(t, err)
		if len(ids) != 1 {
			t.Fatalf("the half-purged session is not due any more: %v", ids)
		}
		n, purged, err = s.PurgeSession(bg, sid, cutoff, 2, nil)
		if err != nil || !purged || n != 4 {
			t.Fatalf("resumed purge: %d %v %v", n, purged, err)
		}
		if _, err := s.AdminSession(bg, sid); err == nil {
			t.Fatal("the session is still there")
		}
	})
}
