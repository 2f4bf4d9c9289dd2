package store_test

import (
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// clock is a settable test clock for Store.SetClock.
type clock struct{ now time.Time }

func (c *clock) get() time.Time          { return c.now }
func (c *clock) advance(d time.Duration) { c.now = c.now.Add(d) }
func (c *clock) ms() int64               { return c.now.UnixMilli() }
func newClock(s *store.Store) *clock {
	c := &clock{now: time.UnixMilli(1_800_000_000_000)}
	s.SetClock(c.get)
	return c
}
func tailOf(t *testing.T, s *store.Store, sid string, from int64) []store.StoredEvent {
	t.Helper()
	return fullLog(t, s, sid)[from-1:]
}

// MarkOffline appends session.disconnected in every active session where the
// agent is joined, and nowhere else; MarkOnline appends session.reconnected
// only where it was marked disconnected.
func TestPresenceDisconnectReconnect(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		newClock(s)
		a, b, c := "@a.one", "@b.two", "@c.three"
		agents(t, s, a, b, c)
		joined1 := create(t, s, a, "", b)
		join(t, s, joined1, b) // 2
		joined2 := create(t, s, b, "")
		invitedOnly := create(t, s, c, "", b) // b only invited
		ended := create(t, s, a, "", b)
		join(t, s, ended, b)
		_, err := s.End(bg, ended, a)
		must(t, err)
		leftSession := create(t, s, c, "", b)
		join(t, s, leftSession, b)
		_, err = s.Leave(bg, leftSession, b)
		must(t, err)
		untouched := map[string]int{}
		for _, sid := range []string{invitedOnly, ended, leftSession} {
			untouched[sid] = len(fullLog(t, s, sid))
		}

		commits, err := s.MarkOffline(bg, b)
		must(t, err)
		by := commitsBySession(t, commits)
		if len(by) != 2 || by[joined1] == nil || by[joined2] == nil {
			t.Fatalf("offline commits %+v", commits)
		}
		wantEvents(t, "joined1", tailOf(t, s, joined1, 3), step{protocol.EventDisconnected, 3, pAgent(b)})
		wantEvents(t, "joined2", tailOf(t, s, joined2, 1), step{protocol.EventDisconnected, 1, pAgent(b)})
		// The disconnected agent's status stays joined; others see the event.
		wantParticipants(t, s, joined1, map[string]string{a: "joined", b: "joined"})
		if lastSeq(visible(t, s, joined1, a)) != 3 {
			t.Fatal("peer does not see session.disconnected")
		}

		// Marking offline again appends nothing.
		commits, err = s.MarkOffline(bg, b)
		must(t, err)
		if len(commits) != 0 {
			t.Fatalf("second offline: %+v", commits)
		}

		// While offline, b joins another session: it is not disconnected there.
		joinedWhileOffline := create(t, s, c, "", b)
		join(t, s, joinedWhileOffline, b) // 2
		send(t, s, joined1, a, "while away")

		commits, err = s.MarkOnline(bg, b)
		must(t, err)
		by = commitsBySession(t, commits)
		if len(by) != 2 || by[joined1] == nil || by[joined2] == nil {
			t.Fatalf("online commits %+v", commits)
		}
		wantEvents(t, "joined1", tailOf(t, s, joined1, 3),
			step{protocol.EventDisconnected, 3, pAgent(b)}, step{protocol.EventMessage, 4, nil}, step{protocol.EventReconnected, 5, pAgent(b)})
		wantEvents(t, "joined2", tailOf(t, s, joined2, 1),
			step{protocol.EventDisconnected, 1, pAgent(b)}, step{protocol.EventReconnected, 2, pAgent(b)})
		if n := len(fullLog(t, s, joinedWhileOffline)); n != 2 {
			t.Fatalf("session joined while offline has %d events, want 2 (no reconnected)", n)
		}
		// Online again: nothing more.
		commits, err = s.MarkOnline(bg, b)
		must(t, err)
		if len(commits) != 0 {
			t.Fatalf("second online: %+v", commits)
		}
		for sid, n := range untouched {
			if got := len(fullLog(t, s, sid)); got != n {
				t.Fatalf("presence touched session %s: %d events, was %d", sid, got, n)
			}
		}
	})
}

// ExpireGrace turns a disconnect older than the cutoff into session.left
// {reason: grace_expired}; the agent then sees up to that session.left.
func TestGraceExpiry(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		clk := newClock(s)
		a, b, c := "@a.one", "@b.two", "@c.three"
		agents(t, s, a, b, c)
		withPeer := create(t, s, a, "", b)
		join(t, s, withPeer, b)         // 2
		alone := create(t, s, b, "", c) // b joined, c invited
		comeback := create(t, s, a, "", c)
		join(t, s, comeback, c) // 2

		t0 := clk.ms()
		_, err := s.MarkOffline(bg, b) // withPeer 3, alone 2
		must(t, err)
		_, err = s.MarkOffline(bg, c) // comeback 3
		must(t, err)
		clk.advance(10 * time.Second)
		_, err = s.MarkOnline(bg, c) // comeback 4: c is back
		must(t, err)

		// A cutoff before the disconnect expires nobody.
		commits, err := s.ExpireGrace(bg, t0-1)
		must(t, err)
		if len(commits) != 0 {
			t.Fatalf("early expiry: %+v", commits)
		}
		wantParticipants(t, s, withPeer, map[string]string{a: "joined", b: "joined"})

		// offline_since <= cutoff: b leaves with reason grace_expired; c, who
		// came back, is untouched.
		clk.advance(time.Minute)
		commits, err = s.ExpireGrace(bg, t0)
		must(t, err)
		by := commitsBySession(t, commits)
		if len(by) != 2 || by[withPeer] == nil || by[alone] == nil {
			t.Fatalf("expiry commits %+v", commits)
		}
		wantEvents(t, "withPeer", tailOf(t, s, withPeer, 3),
			step{protocol.EventDisconnected, 3, pAgent(b)}, step{protocol.EventLeft, 4, pLeft(b, protocol.LeftReasonGraceExpired)})
		wantState(t, s, withPeer, protocol.StateActive)
		wantParticipants(t, s, withPeer, map[string]string{a: "joined", b: "left"})
		// b was the only joined participant of `alone`: it ends, and the
		// invitee sees the end.
		wantEvents(t, "alone", fullLog(t, s, alone),
			step{protocol.EventInvited, 1, nil}, step{protocol.EventDisconnected, 2, pAgent(b)},
			step{protocol.EventLeft, 3, pLeft(b, protocol.LeftReasonGraceExpired)}, step{protocol.EventEnded, 4, pEnded("")})
		wantEvents(t, "invitee of alone", visible(t, s, alone, c), step{protocol.EventInvited, 1, nil}, step{protocol.EventEnded, 4, nil})
		// The evicted agent sees up to and including its own session.left.
		send(t, s, withPeer, a, "after eviction") // 5
		if got := visible(t, s, withPeer, b); lastSeq(got) != 4 {
			t.Fatalf("evicted agent sees %s", describe(got))
		}
		// c came back online: nothing happened to it.
		wantEvents(t, "comeback", tailOf(t, s, comeback, 3), step{protocol.EventDisconnected, 3, pAgent(c)}, step{protocol.EventReconnected, 4, pAgent(c)})
		wantParticipants(t, s, comeback, map[string]string{a: "joined", c: "joined"})

		// Expiry is done once: a later pass appends nothing.
		commits, err = s.ExpireGrace(bg, clk.ms())
		must(t, err)
		if len(commits) != 0 {
			t.Fatalf("second expiry: %+v", commits)
		}
		// Re-entry is by invitation only.
		_, err = s.Join(bg, withPeer, b)
		wantConflict(t, err, protocol.CodeNotInvited)
	})
}

// RecoverPresence at start-up: agents that were online become offline with
// session.disconnected and a fresh grace window; nobody is evicted by it, and
// agents already offline keep their deadline.
func TestRecoverPresence(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		clk := newClock(s)
		a, b, c := "@a.online", "@b.offline", "@c.never"
		agents(t, s, a, b, c)
		sid := create(t, s, a, "", b, c)
		join(t, s, sid, b, c) // 3 4
		_, err := s.MarkOnline(bg, a)
		must(t, err)
		_, err = s.MarkOnline(bg, b)
		must(t, err)
		if n := len(fullLog(t, s, sid)); n != 4 {
			t.Fatalf("first connections appended events: %d", n)
		}
		tb := clk.ms()
		_, err = s.MarkOffline(bg, b) // 5
		must(t, err)

		clk.advance(5 * time.Minute) // "restart"
		restart := clk.ms()
		commits, err := s.RecoverPresence(bg)
		must(t, err)
		if len(commits) != 1 || commits[0].SessionID != sid {
			t.Fatalf("recover commits %+v", commits)
		}
		wantEvents(t, "tail", tailOf(t, s, sid, 5),
			step{protocol.EventDisconnected, 5, pAgent(b)}, step{protocol.EventDisconnected, 6, pAgent(a)})
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "joined", c: "joined"})
		// Running it again finds nobody online.
		commits, err = s.RecoverPresence(bg)
		must(t, err)
		if len(commits) != 0 {
			t.Fatalf("second recover: %+v", commits)
		}

		// A grace window of one minute: b (offline since before the restart)
		// expires, a (offline since the restart) does not.
		commits, err = s.ExpireGrace(bg, restart-time.Minute.Milliseconds())
		must(t, err)
		if tb > restart-time.Minute.Milliseconds() || len(commits) != 1 {
			t.Fatalf("expiry after restart: %+v", commits)
		}
		wantEvents(t, "tail", tailOf(t, s, sid, 7), step{protocol.EventLeft, 7, pLeft(b, protocol.LeftReasonGraceExpired)})
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "left", c: "joined"})
		// a reconnects within its fresh window.
		_, err = s.MarkOnline(bg, a)
		must(t, err)
		wantEvents(t, "tail", tailOf(t, s, sid, 8), step{protocol.EventReconnected, 8, pAgent(a)})
	})
}
