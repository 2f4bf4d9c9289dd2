package store_test

// Regression tests for the "delivery integrity" review: trust on session
// creation, what a former participant sees of a session and learns from the
// answers to its requests, and paging of the eligible event log.

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/visibility"
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

// §6.2: "The blocked agent's status becomes left." Its own snapshot shows it
// left, as its listing does, in the session as it was at its horizon. The
// same holds for a participant made left by a reopen that did not re-invite
// it.
func TestReviewFormerParticipantSnapshotShowsItsOwnStatus(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c, d := "@s.a", "@s.b", "@s.c", "@s.d"
		agents(t, s, a, b, c, d)

		// b joined, c only invited, when a blocks them both.
		sid := create(t, s, a, "", b, c, d)
		join(t, s, sid, b, d)
		send(t, s, sid, b, "hi")
		_, err := s.Block(bg, a, b)
		must(t, err)
		_, err = s.Block(bg, a, c)
		must(t, err)
		send(t, s, sid, a, "after the blocks")

		snap := func(h string) *protocol.Session {
			t.Helper()
			sess, err := s.GetSession(bg, sid, h)
			must(t, err)
			return sess
		}
		statuses := func(sess *protocol.Session) map[string]string {
			out := map[string]string{}
			for _, p := range sess.Participants {
				out[p.Handle] = p.Status
			}
			return out
		}
		listed := func(h, id string) protocol.SessionSummary {
			t.Helper()
			rows, err := s.ListSessionsFor(bg, store.SessionFilter{Participant: h, Limit: 100})
			must(t, err)
			for _, r := range rows {
				if r.ID == id {
					return r
				}
			}
			t.Fatalf("%s does not list %s", h, id)
			return protocol.SessionSummary{}
		}

		got := snap(b)
		if want := map[string]string{a: "joined", b: "left", c: "invited", d: "joined"}; got.State != protocol.StateActive || !reflect.DeepEqual(statuses(got), want) {
			t.Fatalf("blocked participant's snapshot: %s %v, want active %v", got.State, statuses(got), want)
		}
		for _, p := range got.Participants {
			if p.Handle == b && p.LeftAt != 0 {
				t.Fatalf("blocked participant learns when it was removed: %+v", p)
			}
		}
		if r := listed(b, sid); r.Status != "left" || r.State != got.State {
			t.Fatalf("listing %+v disagrees with snapshot %s", r, got.State)
		}
		got = snap(c) // as of its own invitation, the last event about it
		if want := map[string]string{a: "joined", b: "invited", c: "left"}; got.State != protocol.StateActive || !reflect.DeepEqual(statuses(got), want) {
			t.Fatalf("blocked invitee's snapshot: %s %v, want active %v", got.State, statuses(got), want)
		}
		if r := listed(c, sid); r.Status != "left" {
			t.Fatalf("blocked invitee's listing %+v", r)
		}
		_, _, err = s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: b, Content: text("x")})
		wantConflict(t, err, protocol.CodeNotJoined)

		// A joined participant not re-invited when the session is reopened.
		sid2 := create(t, s, a, "", d)
		join(t, s, sid2, d)
		_, err = s.End(bg, sid2, a)
		must(t, err)
		_, err = reopen(s, sid2, a, nil, nil)
		must(t, err)
		got2, err := s.GetSession(bg, sid2, d)
		must(t, err)
		if want := map[string]string{a: "joined", d: "left"}; got2.State != protocol.StateEnded || !reflect.DeepEqual(statuses(got2), want) {
			t.Fatalf("participant left out of a reopen sees %s %v, want ended %v", got2.State, statuses(got2), want)
		}
		if r := listed(d, sid2); r.Status != "left" || r.State != protocol.StateEnded {
			t.Fatalf("listing %+v", r)
		}
	})
}

// A participant that is no longer joined learns nothing, from the codes of
// refused requests, about what happened after its horizon: the same request
// gets the same answer whether the session went on, ended or was reopened
// since.
func TestReviewRefusalsDoNotRevealLaterFate(t *testing.T) {
	t.Parallel()
	forEachSendMode(t, func(t *testing.T, s *store.Store, grouped bool) {
		a, b, c, d, z := "@f.a", "@f.b", "@f.c", "@f.d", "@f.z"
		agents(t, s, a, b, c, d, z)

		// answers returns the code of every state-changing request by h.
		answers := func(sid, h string) map[string]string {
			t.Helper()
			code := func(err error) string {
				if err == nil {
					t.Fatalf("%s's request in %s succeeded", h, sid)
				}
				pe, ok := answerTo(err)
				if !ok {
					t.Fatalf("%s: %v", h, err)
				}
				return fmt.Sprint(pe.Status, " ", pe.Code)
			}
			before := len(fullLog(t, s, sid))
			out := map[string]string{}
			_, err := s.Join(bg, sid, h)
			out["join"] = code(err)
			_, _, err = s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: h, Content: text("still here?")})
			out["send"] = code(err)
			_, _, err = s.Invite(bg, sid, h, []string{z})
			out["invite"] = code(err)
			_, err = s.Leave(bg, sid, h)
			out["leave"] = code(err)
			_, err = s.End(bg, sid, h)
			out["end"] = code(err)
			_, err = reopen(s, sid, h, nil, nil)
			out["reopen"] = code(err)
			if n := len(fullLog(t, s, sid)); n != before {
				t.Fatalf("refused requests by %s appended %d events", h, n-before)
			}
			return out
		}
		same := func(what string, want, got map[string]string) {
			t.Helper()
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("%s: answers changed\nbefore %v\nafter  %v", what, want, got)
			}
		}
		leftWhileActive := map[string]string{"join": "409 not_invited", "send": "409 not_joined", "invite": "409 not_joined",
			"leave": "409 not_joined", "end": "409 not_joined", "reopen": "409 not_joined"}

		// b leaves, c is blocked; the session goes on, ends, is reopened.
		sid := create(t, s, a, "", b, c, d)
		join(t, s, sid, b, c, d)
		_, err := s.Leave(bg, sid, b)
		must(t, err)
		_, err = s.Block(bg, a, c)
		must(t, err)
		same("left, session active", leftWhileActive, answers(sid, b))
		same("blocked, session active", leftWhileActive, answers(sid, c))
		_, err = s.End(bg, sid, a)
		must(t, err)
		same("left, session ended since", leftWhileActive, answers(sid, b))
		same("blocked, session ended since", leftWhileActive, answers(sid, c))
		_, err = reopen(s, sid, a, nil, nil)
		must(t, err)
		same("left, session reopened since", leftWhileActive, answers(sid, b))
		same("blocked, session reopened since", leftWhileActive, answers(sid, c))

		// An invitee whose invitation lapsed when the session ended saw
		// that end; it keeps seeing the session ended after a reopen that
		// leaves it out. So does a joined participant left out of a reopen.
		sid2 := create(t, s, a, "", b, d)
		join(t, s, sid2, d)
		_, err = s.End(bg, sid2, a)
		must(t, err)
		lapsed := answers(sid2, b)
		same("lapsed invitee, session ended", map[string]string{"join": "409 session_ended", "send": "409 session_ended",
			"invite": "409 session_ended", "leave": "409 session_ended", "end": "409 session_ended", "reopen": "409 not_joined"}, lapsed)
		_, err = reopen(s, sid2, a, nil, nil)
		must(t, err)
		same("lapsed invitee, session reopened since", lapsed, answers(sid2, b))
		leftOut := answers(sid2, d)
		same("joined at the end, left out of the reopen", map[string]string{"join": "409 session_ended", "send": "409 session_ended",
			"invite": "409 session_ended", "leave": "409 session_ended", "end": "409 session_ended", "reopen": "409 not_joined"}, leftOut)
		_, err = s.End(bg, sid2, a)
		must(t, err)
		same("lapsed invitee, session ended again", lapsed, answers(sid2, b))
		same("left out of the reopen, session ended again", leftOut, answers(sid2, d))

		// Joined participants still get the live state.
		_, _, err = s.SendMessage(bg, store.SendMessage{SessionID: sid2, Sender: a, Content: text("x")})
		wantConflict(t, err, protocol.CodeSessionEnded)
		_, err = s.Join(bg, sid2, a)
		wantConflict(t, err, protocol.CodeSessionEnded)
		_, err = reopen(s, sid2, a, nil, nil)
		must(t, err)
		_, err = reopen(s, sid2, a, nil, nil)
		wantConflict(t, err, protocol.CodeSessionActive)
	})
}

// Pages of the eligible log are short only at its end. Handles may contain
// "_", a LIKE wildcard: audience events naming a handle that "_" matches
// must not be taken for the viewer's.
func TestReviewVisibleEventsPagesAreFull(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, v, w1, w2, w3 := "@p.a", "@p_p.v_", "@p-p.v_", "@pxp.vx", "@p_p.v-"
		agents(t, s, a, v, w1, w2, w3)
		sid := create(t, s, a, "", v, w1, w2, w3)
		join(t, s, sid, v)
		send(t, s, sid, a, "before v leaves")
		_, err := s.Leave(bg, sid, v)
		must(t, err)
		// Cycles of end and reopen whose audiences name only the others.
		for i := 0; i < 3; i++ {
			_, err = s.End(bg, sid, a)
			must(t, err)
			_, err = reopen(s, sid, a, []string{w1, w2, w3}, nil)
			must(t, err)
		}
		_, err = s.End(bg, sid, a)
		must(t, err)
		_, err = reopen(s, sid, a, []string{v}, nil) // v sees this reopen and its invitation
		must(t, err)
		send(t, s, sid, a, "v does not see this")
		_, err = s.End(bg, sid, a)
		must(t, err)

		for _, h := range []string{v, w1, w2, w3} {
			view, err := s.View(bg, sid, h)
			must(t, err)
			var want []int64
			for _, e := range fullLog(t, s, sid) {
				if visibility.Visible(view, e.Meta()) {
					want = append(want, e.Sequence)
				}
			}
			for _, limit := range []int{1, 2, 3, 1000} {
				var got []int64
				after := int64(0)
				for {
					page, more, err := s.VisibleEvents(bg, sid, h, after, limit)
					must(t, err)
					for _, e := range page {
						got = append(got, e.Sequence)
					}
					if !more {
						break
					}
					if len(page) != limit {
						t.Fatalf("%s limit %d after %d: a short page (%d events) before the end", h, limit, after, len(page))
					}
					after = page[len(page)-1].Sequence
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s with limit %d pages through %v, want %v", h, limit, got, want)
				}
			}
		}
	})
}
