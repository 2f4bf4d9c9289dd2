package app

import (
	"slices"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
)

// Retention with a clock the test controls: the store's clock stamps
// ended_at, PurgeExpired is handed "now". Only what ended before now minus
// the period goes; an active session, one reopened and one ended within
// the period stay; the counters say what went; with retention off nothing
// goes.
func TestPurgeExpired(t *testing.T) {
	const period = 90 * 24 * time.Hour
	forEach(t, func(c *Config) { c.Retention = RetentionConfig{ClosedSessions: period, Interval: time.Hour, Batch: 3} },
		func(t *testing.T, a *App) {
			clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			a.st.SetClock(func() time.Time { return clock })
			mkAgent(t, a, "@acme.alice")
			mkAgent(t, a, "@acme.bob")
			session := func(msgs int) string {
				t.Helper()
				r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.bob"}})
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Join(ctx, "@acme.bob", r.SessionID); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < msgs; i++ {
					if _, err := a.SendMessage(ctx, "@acme.alice", r.SessionID, protocol.SendMessageRequest{Content: content("m")}); err != nil {
						t.Fatal(err)
					}
				}
				return r.SessionID
			}
			end := func(id string) {
				t.Helper()
				if err := a.End(ctx, "@acme.alice", id); err != nil {
					t.Fatal(err)
				}
			}
			old := session(7) // invite, join, 7 messages, end: 10 events
			end(old)
			reopened := session(1)
			end(reopened)
			active := session(1)
			clock = clock.Add(period) // later: old and reopened are due from here on, by an hour
			if err := a.Reopen(ctx, "@acme.alice", reopened, protocol.ReopenRequest{}); err != nil {
				t.Fatal(err)
			}
			recent := session(1)
			end(recent)

			// Just before the period has passed: nothing is due.
			if n, ev, err := a.PurgeExpired(ctx, clock.Add(-time.Minute)); err != nil || n != 0 || ev != 0 {
				t.Fatalf("early sweep purged %d sessions, %d events, err %v", n, ev, err)
			}
			now := clock.Add(time.Hour)
			n, ev, err := a.PurgeExpired(ctx, now)
			if err != nil || n != 1 || ev != 10 {
				t.Fatalf("sweep purged %d sessions, %d events, err %v; want 1 and 10", n, ev, err)
			}
			if _, err := a.AdminSession(ctx, old); err == nil {
				t.Fatal("the expired session is still there")
			}
			for _, id := range []string{reopened, active, recent} {
				if _, err := a.AdminSession(ctx, id); err != nil {
					t.Fatalf("session %s: %v", id, err)
				}
			}
			if st := a.RetentionStats(); st.Sessions.Load() != 1 || st.Events.Load() != 10 {
				t.Fatalf("counters: %d sessions, %d events", st.Sessions.Load(), st.Events.Load())
			}
			// Nothing more is due, however often it runs.
			if n, _, err := a.PurgeExpired(ctx, now); err != nil || n != 0 {
				t.Fatalf("second sweep purged %d, err %v", n, err)
			}
			// A year on, the recent session is due; the active and the
			// reopened ones never are.
			if n, _, err := a.PurgeExpired(ctx, now.Add(365*24*time.Hour)); err != nil || n != 1 {
				t.Fatalf("year-later sweep purged %d, err %v", n, err)
			}
			for _, id := range []string{reopened, active} {
				if _, err := a.AdminSession(ctx, id); err != nil {
					t.Fatalf("session %s: %v", id, err)
				}
			}
		})
}

// A session listed as due but reopened before its purge is not purged,
// and keeps what this node holds of it: its ring in the hub, from which
// its agents' connections read its new events.
func TestPurgeExpiredKeepsReopenedSessionsRing(t *testing.T) {
	const period = time.Hour
	forEach(t, func(c *Config) { c.Retention = RetentionConfig{ClosedSessions: period, Interval: time.Hour} },
		func(t *testing.T, a *App) {
			mkAgent(t, a, "@acme.alice")
			mkAgent(t, a, "@acme.bob")
			r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.bob"}})
			if err != nil {
				t.Fatal(err)
			}
			id := r.SessionID
			if err := a.End(ctx, "@acme.alice", id); err != nil {
				t.Fatal(err)
			}
			reopened := false
			a.retentionListed = func(ids []string) {
				if reopened || !slices.Contains(ids, id) {
					return
				}
				reopened = true
				if err := a.Reopen(ctx, "@acme.alice", id, protocol.ReopenRequest{}); err != nil {
					t.Errorf("reopen: %v", err)
				}
			}
			if n, _, err := a.PurgeExpired(ctx, time.Now().Add(2*period)); err != nil || n != 0 {
				t.Fatalf("sweep purged %d sessions, err %v; want none", n, err)
			}
			if !reopened {
				t.Fatal("the ended session was not listed as due")
			}
			if _, err := a.AdminSession(ctx, id); err != nil {
				t.Fatalf("the reopened session: %v", err)
			}
			if !a.hub.HoldsRing(id) {
				t.Fatal("the reopened session's ring was dropped from the hub")
			}
		})
}

// With no retention period, nothing is ever purged.
func TestPurgeExpiredOff(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		mkAgent(t, a, "@acme.alice")
		r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.End(ctx, "@acme.alice", r.SessionID); err != nil {
			t.Fatal(err)
		}
		if n, _, err := a.PurgeExpired(ctx, time.Now().Add(100*365*24*time.Hour)); err != nil || n != 0 {
			t.Fatalf("purged %d with retention off, err %v", n, err)
		}
		if _, err := a.AdminSession(ctx, r.SessionID); err != nil {
			t.Fatal(err)
		}
	})
}
