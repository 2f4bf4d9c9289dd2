package store_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Network presence: an agent is online while any node holds it. The first
// node's connect after an offline spell appends session.reconnected, a
// second node's connect nothing; dropping one of two nodes appends nothing,
// dropping the last appends session.disconnected.
func TestClusterPresenceAcrossNodes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		newClock(s)
		a, b := "@a.one", "@b.two"
		agents(t, s, a, b)
		sid := create(t, s, a, "", b)
		join(t, s, sid, b) // 2
		must(t, s.RegisterNode(bg, "n1", "a:1"))
		must(t, s.RegisterNode(bg, "n2", "b:1"))

		wantNone := func(what string, commits []*store.Commit, err error) {
			t.Helper()
			must(t, err)
			if len(commits) != 0 {
				t.Fatalf("%s appended %+v", what, commits)
			}
		}
		// First connect anywhere: b was never offline, nothing to reconnect.
		c, err := s.ConnectOn(bg, "n1", b)
		wantNone("first connect", c, err)
		c, err = s.ConnectOn(bg, "n2", b)
		wantNone("second node's connect", c, err)
		c, err = s.DisconnectOn(bg, "n1", b)
		wantNone("dropping one of two nodes", c, err)
		c, err = s.DisconnectOn(bg, "n2", b)
		must(t, err)
		if len(c) != 1 {
			t.Fatalf("dropping the last node: %+v", c)
		}
		wantEvents(t, "after last drop", tailOf(t, s, sid, 3), step{protocol.EventDisconnected, 3, pAgent(b)})
		c, err = s.DisconnectOn(bg, "n2", b)
		wantNone("dropping again", c, err)
		_, err = s.ConnectOn(bg, "n2", b)
		must(t, err)
		wantEvents(t, "after reconnect", tailOf(t, s, sid, 3),
			step{protocol.EventDisconnected, 3, pAgent(b)}, step{protocol.EventReconnected, 4, pAgent(b)})
		c, err = s.ConnectOn(bg, "n1", b)
		wantNone("connect on a second node", c, err)
		nodes, err := s.Nodes(bg)
		must(t, err)
		if len(nodes) != 2 || nodes[0].Connections != 1 || nodes[1].Connections != 1 {
			t.Fatalf("nodes %+v", nodes)
		}
	})
}

// Two nodes dropping an agent's last connections at the same moment: the
// presence row lock serialises them, so exactly one session.disconnected
// is appended, never none (which would leave the agent online for ever).
func TestClusterPresenceConcurrentDrops(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b := "@a.one", "@b.two"
		agents(t, s, a, b)
		sid := create(t, s, a, "", b)
		join(t, s, sid, b)
		for round := 0; round < 10; round++ {
			for _, n := range []string{"n1", "n2", "n3"} {
				_, err := s.ConnectOn(bg, n, b)
				must(t, err)
			}
			before := len(fullLog(t, s, sid))
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for _, n := range []string{"n1", "n2", "n3"} {
				wg.Add(1)
				go func(n string) {
					defer wg.Done()
					_, err := s.DisconnectOn(bg, n, b)
					errs <- err
				}(n)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				must(t, err)
			}
			log := fullLog(t, s, sid)
			if len(log) != before+1 || log[len(log)-1].Type != protocol.EventDisconnected {
				t.Fatalf("round %d: %d events appended (%s), want one session.disconnected", round, len(log)-before, describe(log[before:]))
			}
		}
	})
}

// A node whose heartbeat is older than the cutoff is expired: its agents
// that no other node holds are marked disconnected (once), the others stay
// online, and its row is gone (its heartbeat then says ErrNodeExpired).
// Agents recorded online that no node holds are marked offline too.
func TestClusterExpireNodes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		clk := newClock(s)
		a, b, c, d := "@a.one", "@b.two", "@c.three", "@d.four"
		agents(t, s, a, b, c, d)
		sid := create(t, s, a, "", b, c, d)
		join(t, s, sid, b, c, d) // 6
		must(t, s.RegisterNode(bg, "dead", ""))
		must(t, s.RegisterNode(bg, "live", ""))
		for _, h := range []string{b, c} {
			_, err := s.ConnectOn(bg, "dead", h)
			must(t, err)
		}
		_, err := s.ConnectOn(bg, "live", c)
		must(t, err)
		_, err = s.MarkOnline(bg, d) // online without a node: a single-node era row
		must(t, err)

		clk.advance(10 * time.Second)
		must(t, s.Heartbeat(bg, "live"))
		commits, dead, err := s.ExpireNodes(bg, clk.ms()-5000, "self", false)
		must(t, err)
		if len(dead) != 1 || dead[0] != "dead" {
			t.Fatalf("expired nodes %v", dead)
		}
		if len(commits) != 2 {
			t.Fatalf("commits %+v, want b's and d's disconnects", commits)
		}
		wantEvents(t, "after expiry", tailOf(t, s, sid, 7),
			step{protocol.EventDisconnected, 7, pAgent(b)}, step{protocol.EventDisconnected, 8, pAgent(d)})
		if err := s.Heartbeat(bg, "dead"); !errors.Is(err, store.ErrNodeExpired) {
			t.Fatalf("heartbeat of an expired node: %v", err)
		}
		// Again: nothing left to expire.
		commits, dead, err = s.ExpireNodes(bg, clk.ms()-5000, "self", false)
		must(t, err)
		if len(commits) != 0 || len(dead) != 0 {
			t.Fatalf("second expiry: %+v %v", commits, dead)
		}
		// b's grace window runs from the expiry.
		clk.advance(time.Minute)
		left, err := s.ExpireGrace(bg, clk.ms()-30_000)
		must(t, err)
		if len(left) != 2 {
			t.Fatalf("grace expiry %+v", left)
		}
		// A retired node is expired by the next sweep, whatever the cutoff.
		must(t, s.RetireNode(bg, "live"))
		_, dead, err = s.ExpireNodes(bg, 1, "self", false)
		must(t, err)
		if len(dead) != 1 || dead[0] != "live" {
			t.Fatalf("retired node not expired: %v", dead)
		}
		wantEvents(t, "after the grace and the retirement", tailOf(t, s, sid, 9),
			step{protocol.EventLeft, 9, pLeft(b, protocol.LeftReasonGraceExpired)}, step{protocol.EventLeft, 10, pLeft(d, protocol.LeftReasonGraceExpired)},
			step{protocol.EventDisconnected, 11, pAgent(c)})
	})
}

// The catch-up and wake-up reads: heads per participant, participants per
// session, and events of several ranges in one read.
func TestClusterReads(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@a.one", "@b.two", "@c.three"
		agents(t, s, a, b, c)
		s1 := create(t, s, a, "", b) // 1 invited
		join(t, s, s1, b)            // 2
		send(t, s, s1, a, "x")       // 3
		s2 := create(t, s, c, "")
		send(t, s, s2, c, "y")

		heads, err := s.SessionHeads(bg, []string{a, b})
		must(t, err)
		got := map[string]int64{}
		for _, h := range heads {
			got[h.Handle+" "+h.SessionID] = h.LastSeq
		}
		if len(got) != 2 || got[a+" "+s1] != 3 || got[b+" "+s1] != 3 {
			t.Fatalf("heads %+v", heads)
		}
		parts, err := s.Participants(bg, []string{s1, s2})
		must(t, err)
		if len(parts[s1]) != 2 || len(parts[s2]) != 1 || parts[s2][0] != c {
			t.Fatalf("participants %+v", parts)
		}
		evs, err := s.EventsIn(bg, []store.EventRange{{SessionID: s1, After: 1, Through: 3}, {SessionID: s2, After: 0, Through: 100}})
		must(t, err)
		if want := 2 + len(fullLog(t, s, s2)); len(evs) != want {
			t.Fatalf("events %s, want %d", describe(evs), want)
		}
		for _, e := range evs {
			if e.SessionID == s1 && (e.Sequence < 2 || e.Sequence > 3) {
				t.Fatalf("event outside the range: %s %d", e.SessionID, e.Sequence)
			}
		}
	})
}

// WithSweepLock: on PostgreSQL, while one holder runs, another attempt does
// not run; once released, it runs. On SQLite it always runs (one node).
func TestClusterSweepLock(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		other := open(t, url) // a second node's pool
		inside := make(chan struct{})
		release := make(chan struct{})
		done := make(chan bool)
		go func() {
			ran, err := s.WithSweepLock(bg, 42, 0, func(context.Context) error {
				close(inside)
				<-release
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			done <- ran
		}()
		<-inside
		ran, err := other.WithSweepLock(bg, 42, 0, func(context.Context) error { return nil })
		must(t, err)
		if want := s.Dialect() != "postgres"; ran != want {
			t.Fatalf("second holder ran=%v while the first held the lock (dialect %s)", ran, s.Dialect())
		}
		close(release)
		if !<-done {
			t.Fatal("first holder did not run")
		}
		ran, err = other.WithSweepLock(bg, 42, 0, func(context.Context) error { return nil })
		must(t, err)
		if !ran {
			t.Fatal("lock not released")
		}
	})
}

// A node whose liveness lock is free (its connection is gone: the process
// died) is dead at once on PostgreSQL, whatever its heartbeat; one holding
// it, and the sweeping node itself, are not. Without byLock, and on
// SQLite, only the heartbeat counts.
func TestClusterExpireNodesByLock(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		for _, n := range []string{"held", "gone", "self"} {
			must(t, s.RegisterNode(bg, n, ""))
		}
		_, err := s.ConnectOn(bg, "gone", "@x.y")
		must(t, err)
		if s.Dialect() == "postgres" {
			db, err := sql.Open("pgx", url)
			must(t, err)
			t.Cleanup(func() { db.Close() })
			hold := func(node string) *sql.Conn {
				c, err := db.Conn(bg)
				must(t, err)
				_, err = c.ExecContext(bg, store.NodeLockSQL, node)
				must(t, err)
				return c
			}
			held := hold("held")
			t.Cleanup(func() { held.Close() })
			gone := hold("gone")
			// The process dies: its connection goes, and the lock with it.
			_ = gone.Raw(func(any) error { return driver.ErrBadConn }) // closes it
		}
		_, dead, err := s.ExpireNodes(bg, 0, "self", false)
		must(t, err)
		if len(dead) != 0 {
			t.Fatalf("without byLock, fresh heartbeats: expired %v", dead)
		}
		want := "[]"
		if s.Dialect() == "postgres" {
			want = "[gone]"
		}
		// The server frees the lock when the dead connection's backend has
		// exited, a moment after the close: sweep until then (bounded).
		for deadline := time.Now().Add(5 * time.Second); ; {
			_, dead, err = s.ExpireNodes(bg, 0, "self", true)
			must(t, err)
			if fmt.Sprint(dead) == want || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if fmt.Sprint(dead) != want {
			t.Fatalf("expired %v, want %s", dead, want)
		}
		// The lock tried is released again: the next sweep can try it too,
		// and a live node's lock was never taken from it.
		_, dead, err = s.ExpireNodes(bg, 0, "self", true)
		must(t, err)
		if len(dead) != 0 {
			t.Fatalf("second sweep expired %v", dead)
		}
	})
}

// Rows of a node that has no nodes row (it had been expired and died
// before registering again) are expired like a dead node's.
func TestClusterExpireUnregisteredNode(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		newClock(s)
		a, b := "@a.one", "@b.two"
		agents(t, s, a, b)
		sid := create(t, s, a, "", b)
		join(t, s, sid, b) // 2
		must(t, s.RegisterNode(bg, "self", ""))
		_, err := s.ConnectOn(bg, "ghost", b) // no nodes row
		must(t, err)
		_, err = s.ConnectOn(bg, "self", a)
		must(t, err)
		// An external holder (a Chorus endpoint) is no node: never expired.
		_, err = s.ConnectOn(bg, store.ExternalHolder, a)
		must(t, err)
		commits, dead, err := s.ExpireNodes(bg, 0, "self", true)
		must(t, err)
		if fmt.Sprint(dead) != "[ghost]" || len(commits) != 1 {
			t.Fatalf("expired %v with %d commits", dead, len(commits))
		}
		wantEvents(t, "after", tailOf(t, s, sid, 3), step{protocol.EventDisconnected, 3, pAgent(b)})
		// a stays online through the external holder when its node's row goes.
		c, err := s.DisconnectOn(bg, "self", a)
		must(t, err)
		if len(c) != 0 {
			t.Fatalf("dropping a's node row with an external holder appended %+v", c)
		}
		c, err = s.DisconnectOn(bg, store.ExternalHolder, a)
		must(t, err)
		if len(c) != 1 {
			t.Fatalf("dropping the last holder: %+v", c)
		}
	})
}

// WithSweepLock's hold: a holder that stops answering (here: fn blocks,
// leaving the lock's connection idle past hold) loses the lock, so another
// node can sweep; the stalled holder's own release then finds its
// connection gone and drops it.
func TestClusterSweepLockHold(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		other := open(t, url)
		inside := make(chan struct{})
		release := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := s.WithSweepLock(bg, 43, 200*time.Millisecond, func(context.Context) error {
				close(inside)
				<-release
				return nil
			})
			done <- err
		}()
		<-inside
		deadline := time.Now().Add(10 * time.Second)
		for {
			ran, err := other.WithSweepLock(bg, 43, 0, func(context.Context) error { return nil })
			must(t, err)
			if ran {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the stalled holder kept the sweep lock for 10 s; want about its 200ms hold")
			}
			time.Sleep(50 * time.Millisecond)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The pool is usable after the stalled holder's connection was ended.
		ran, err := s.WithSweepLock(bg, 43, 0, func(context.Context) error { return nil })
		must(t, err)
		if !ran {
			t.Fatal("lock not free after both holders finished")
		}
	})
}
