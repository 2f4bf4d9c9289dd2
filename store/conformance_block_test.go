package store_test

import (
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Block force-leaves the blocked agent from every active session it shares
// with the blocker: the others see a normal session.left, the blocked agent
// sees nothing from that point on (not even its session.left).
func TestBlockForceLeavesSharedSessions(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c, d := "@a.blocker", "@b.blocked", "@c.other", "@d.other"
		agents(t, s, a, b, c, d)

		shared := create(t, s, a, "", b, c) // a, b, c joined
		join(t, s, shared, b, c)            // 3 4
		send(t, s, shared, b, "hello")      // 5
		sharedInvited := create(t, s, c, "", a, b)
		join(t, s, sharedInvited, a) // b only invited; a joined
		notShared := create(t, s, b, "", c)
		join(t, s, notShared, c)
		formerly := create(t, s, b, "", a, c) // a left before the block
		join(t, s, formerly, a, c)
		_, err := s.Leave(bg, formerly, a)
		must(t, err)
		endedShared := create(t, s, a, "", b, c)
		join(t, s, endedShared, b, c)
		_, err = s.End(bg, endedShared, a)
		must(t, err)

		snapshot := map[string]int{}
		for _, sid := range []string{notShared, formerly, endedShared} {
			snapshot[sid] = len(fullLog(t, s, sid))
		}

		commits, err := s.Block(bg, a, b)
		must(t, err)
		bySession := commitsBySession(t, commits)
		if len(bySession) != 2 || bySession[shared] == nil || bySession[sharedInvited] == nil {
			t.Fatalf("block commits for %d sessions: %+v", len(commits), commits)
		}

		// The shared session continues for the others.
		wantEvents(t, "shared session tail", fullLog(t, s, shared)[5:], step{protocol.EventLeft, 6, pLeft(b, protocol.LeftReasonLeft)})
		wantState(t, s, shared, protocol.StateActive)
		wantParticipants(t, s, shared, map[string]string{a: "joined", b: "left", c: "joined"})
		for _, h := range []string{a, c} {
			if got := visible(t, s, shared, h); lastSeq(got) != 6 || got[5].Type != protocol.EventLeft {
				t.Fatalf("%s sees %s", h, describe(got))
			}
		}
		send(t, s, shared, c, "after the block") // 7
		if got := visible(t, s, shared, b); len(got) != 5 || lastSeq(got) != 5 {
			t.Fatalf("blocked agent sees %s; want 1..5, stopping before its session.left", describe(got))
		}
		// The commit carries just that session.left, for the others to hear.
		if bc := bySession[shared]; len(bc.Events) != 1 || bc.Events[0].Sequence != 6 || !contains(bc.Recipients, a) || !contains(bc.Recipients, c) {
			t.Fatalf("block commit %+v", bc)
		}

		// The blocked invitee is removed too, silently.
		tail := fullLog(t, s, sharedInvited)
		wantEvents(t, "invited session tail", tail[len(tail)-1:], step{protocol.EventLeft, lastSeq(tail), pLeft(b, protocol.LeftReasonLeft)})
		wantEvents(t, "blocked invitee", visible(t, s, sharedInvited, b), step{protocol.EventInvited, 2, nil})
		wantState(t, s, sharedInvited, protocol.StateActive)

		// Sessions not shared (or no longer shared, or ended) are untouched.
		for sid, n := range snapshot {
			if got := len(fullLog(t, s, sid)); got != n {
				t.Fatalf("block touched session %s: %d events, was %d", sid, got, n)
			}
		}
		wantParticipants(t, s, notShared, map[string]string{b: "joined", c: "joined"})
		wantParticipants(t, s, formerly, map[string]string{a: "left", b: "joined", c: "joined"})

		// The block refuses future contact, in both directions.
		_, _, err = s.CreateSession(bg, store.CreateSession{Creator: b, Invite: []string{a}})
		wantNotFound(t, err)
		_, _, err = s.CreateSession(bg, store.CreateSession{Creator: a, Invite: []string{b}})
		wantNotFound(t, err)
		_, _, err = s.Invite(bg, shared, c, []string{b})
		wantNotFound(t, err)
		// Blocking again changes nothing.
		commits, err = s.Block(bg, a, b)
		must(t, err)
		if len(commits) != 0 {
			t.Fatalf("second block: %+v", commits)
		}
		ag, err := s.GetAgent(bg, a)
		must(t, err)
		if len(ag.Blocks) != 1 || ag.Blocks[0] != b {
			t.Fatalf("blocks %v", ag.Blocks)
		}
		_, err = s.Block(bg, "@no.body", b)
		wantNotFound(t, err)

		// Unblock lifts the refusal but restores no membership.
		must(t, s.Unblock(bg, a, b))
		wantParticipants(t, s, shared, map[string]string{a: "joined", b: "left", c: "joined"})
		_, err = s.Join(bg, shared, b)
		wantConflict(t, err, protocol.CodeNotInvited)
		if got := visible(t, s, shared, b); lastSeq(got) != 5 {
			t.Fatalf("after unblock the blocked agent sees %s", describe(got))
		}
		invited, _, err := s.Invite(bg, shared, c, []string{b})
		must(t, err)
		if len(invited) != 1 {
			t.Fatalf("re-invite after unblock: %v", invited)
		}
		join(t, s, shared, b)
		if got := visible(t, s, shared, b); lastSeq(got) != 9 || len(got) != 9 {
			t.Fatalf("after re-invite and join: %s", describe(got))
		}
		wantNotFound(t, s.Unblock(bg, "@no.body", b))
	})
}

// If the blocker and the blocked agent were the only participants, the
// session ends (§6.2); the blocked agent sees neither its session.left nor the
// end.
func TestBlockEndsTwoPartySession(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b := "@a.blocker", "@b.blocked"
		agents(t, s, a, b)
		sid := create(t, s, b, "", a)
		join(t, s, sid, a)                // 2
		send(t, s, sid, b, "hi")          // 3
		commits, err := s.Block(bg, a, b) // 4 left, 5 ended
		must(t, err)
		if len(commits) != 1 || len(commits[0].Events) != 2 {
			t.Fatalf("block commits %+v", commits)
		}
		wantEvents(t, "log", fullLog(t, s, sid),
			step{protocol.EventInvited, 1, nil}, step{protocol.EventJoined, 2, nil}, step{protocol.EventMessage, 3, nil},
			step{protocol.EventLeft, 4, pLeft(b, protocol.LeftReasonLeft)},
			step{protocol.EventEnded, 5, pEnded("")})
		wantState(t, s, sid, protocol.StateEnded)
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "left"})
		if got := visible(t, s, sid, b); lastSeq(got) != 3 {
			t.Fatalf("blocked agent sees %s", describe(got))
		}
		if got := visible(t, s, sid, a); lastSeq(got) != 5 {
			t.Fatalf("blocker sees %s", describe(got))
		}
		// The blocker was joined at the end and may reopen, but not with b.
		_, err = reopen(s, sid, a, []string{b}, nil)
		wantNotFound(t, err)
		wantState(t, s, sid, protocol.StateEnded)
	})
}

// A block by an invitee also force-leaves the joined blocked agent; if that
// leaves nobody joined, the session ends like any other and the blocker, an
// invitee, sees session.ended.
func TestBlockByInviteeEndsSessionWithoutJoinedParticipants(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b := "@a.blocker", "@b.blocked"
		agents(t, s, a, b)
		sid := create(t, s, b, "", a) // a only invited
		_, err := s.Block(bg, a, b)   // 2 left, 3 ended
		must(t, err)
		wantEvents(t, "log", fullLog(t, s, sid),
			step{protocol.EventInvited, 1, nil},
			step{protocol.EventLeft, 2, pLeft(b, protocol.LeftReasonLeft)},
			step{protocol.EventEnded, 3, pEnded("")})
		wantEvents(t, "blocker (invitee)", visible(t, s, sid, a), step{protocol.EventInvited, 1, nil}, step{protocol.EventEnded, 3, nil})
		wantEvents(t, "blocked", visible(t, s, sid, b), step{protocol.EventInvited, 1, nil})
	})
}

// With a third participant still present, even one only invited, the session
// continues after the block (§6.2: it ends only if the blocker and the blocked
// agent were the only participants).
func TestBlockKeepsSessionWithAnotherInvitee(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@a.blocker", "@b.blocked", "@c.invitee"
		agents(t, s, a, b, c)
		sid := create(t, s, a, "", b, c) // 1 2
		join(t, s, sid, b)               // 3
		_, err := s.Block(bg, a, b)      // 4
		must(t, err)
		tail := fullLog(t, s, sid)[3:]
		wantEvents(t, "tail", tail, step{protocol.EventLeft, 4, pLeft(b, protocol.LeftReasonLeft)})
		wantState(t, s, sid, protocol.StateActive)
		join(t, s, sid, c)
		if got := visible(t, s, sid, c); len(got) != 5 {
			t.Fatalf("invitee joining after the block sees %s", describe(got))
		}
	})
}
