package store_test

// Regression tests for the "delivery integrity" review: trust on session
// creation, what a former participant sees of a session and learns from the
// answers to its requests, and paging of the eligible event log.

import (
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// §6.2: a blocked agent "cannot be invited to new ones", whoever invites
// it. A third party's POST /sessions or /invite naming both the blocker and
// the blocked agent is the 404 of every trust denial, and writes nothing.
func TestReviewInvitingBlockerAndBlockedTogetherIsRefused(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		blocker, blocked, third, other := "@r.blocker", "@r.blocked", "@r.third", "@r.other"
		agents(t, s, blocker, blocked, third, other)
		_, err := s.Block(bg, blocker, blocked)
		must(t, err)

		for _, invite := range [][]string{{blocker, blocked}, {blocked, blocker}, {other, blocked, blocker}} {
			resp, commit, err := s.CreateSession(bg, store.CreateSession{Creator: third, Invite: invite,
				Initial: &protocol.InitialMessage{Content: text("hello both")}, IdempotencyKey: "k1", RequestHash: "h1"})
			wantNotFound(t, err)
			if resp.SessionID != "" || commit != nil {
				t.Fatalf("refused create %v answered %+v %+v", invite, resp, commit)
			}
		}
		for _, h := range []string{blocker, blocked, third, other} {
			if ids := sessionsOf(t, s, h); len(ids) != 0 {
				t.Fatalf("refused creates left sessions for %s: %v", h, ids)
			}
		}
		if ids := allSessions(t, s); len(ids) != 0 {
			t.Fatalf("refused creates left sessions: %v", ids)
		}

		// The same for an invitation of both into an existing session.
		sid := create(t, s, third, "", other)
		before := len(fullLog(t, s, sid))
		invited, commit, err := s.Invite(bg, sid, third, []string{blocker, blocked})
		wantNotFound(t, err)
		if len(invited) != 0 || commit != nil {
			t.Fatalf("refused invite answered %v %+v", invited, commit)
		}
		if n := len(fullLog(t, s, sid)); n != before {
			t.Fatalf("refused invite appended %d events", n-before)
		}
		wantParticipants(t, s, sid, map[string]string{third: "joined", other: "invited"})

		// And reopen (already refused before this review; one rule for all).
		_, err = s.End(bg, sid, third)
		must(t, err)
		_, err = reopen(s, sid, third, []string{blocked, blocker}, nil)
		wantNotFound(t, err)
		wantState(t, s, sid, protocol.StateEnded)

		// The refused creates left their idempotency key unused.
		resp, _, err := s.CreateSession(bg, store.CreateSession{Creator: third, Invite: []string{blocker}, IdempotencyKey: "k1", RequestHash: "h2"})
		must(t, err)
		if resp.SessionID == "" {
			t.Fatal("no session")
		}
		// Each of them alone is still reachable by the third party.
		create(t, s, third, "", blocked)
	})
}
