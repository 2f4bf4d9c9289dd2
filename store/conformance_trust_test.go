package store_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// trustAgent is an agent of a trust case. Handles are written with short
// owners and namespaced per case (see ns), so one database serves every case.
type trustAgent struct {
	handle string
	policy string
	allow  []string
	blocks []string
}

// trustCase: @me.creator contacts the invitees; ok says whether trust allows it.
type trustCase struct {
	name    string
	agents  []trustAgent // the creator @me.creator is always among them
	invite  []string
	allowed bool
}

var trustCases = []trustCase{
	{name: "open invitee",
		agents:  []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "open"}},
		invite:  []string{"@x.peer"},
		allowed: true},
	{name: "invitee does not exist",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}},
		invite: []string{"@x.ghost"}},
	{name: "invitee allowlist empty (closed by default)",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "allowlist"}},
		invite: []string{"@x.peer"}},
	{name: "invitee allowlist without the creator",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@me.other", "@you.*"}}},
		invite: []string{"@x.peer"}},
	{name: "both allowlist, each lists the other",
		agents:  []trustAgent{{handle: "@me.creator", policy: "allowlist", allow: []string{"@x.peer"}}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@me.creator"}}},
		invite:  []string{"@x.peer"},
		allowed: true},
	{name: "both allowlist, creator does not list the invitee",
		agents: []trustAgent{{handle: "@me.creator", policy: "allowlist", allow: []string{"@x.other"}}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@me.creator"}}},
		invite: []string{"@x.peer"}},
	{name: "mixed: open creator, invitee allowlist lists it",
		agents:  []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@me.creator"}}},
		invite:  []string{"@x.peer"},
		allowed: true},
	{name: "mixed: allowlist creator without the open invitee",
		agents: []trustAgent{{handle: "@me.creator", policy: "allowlist"}, {handle: "@x.peer", policy: "open"}},
		invite: []string{"@x.peer"}},
	{name: "mixed: allowlist creator lists the open invitee",
		agents:  []trustAgent{{handle: "@me.creator", policy: "allowlist", allow: []string{"@x.peer"}}, {handle: "@x.peer", policy: "open"}},
		invite:  []string{"@x.peer"},
		allowed: true},
	{name: "owner glob matches",
		agents:  []trustAgent{{handle: "@me.creator", policy: "allowlist", allow: []string{"@x.*"}}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@me.*"}}},
		invite:  []string{"@x.peer"},
		allowed: true},
	{name: "owner glob of another owner",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@mine.*", "@x.*"}}},
		invite: []string{"@x.peer"}},
	{name: "owner glob is not a prefix match",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@m.*"}}},
		invite: []string{"@x.peer"}},
	{name: "creator's owner glob does not cover the invitee",
		agents: []trustAgent{{handle: "@me.creator", policy: "allowlist", allow: []string{"@xx.*"}}, {handle: "@x.peer", policy: "open"}},
		invite: []string{"@x.peer"}},
	{name: "invitee blocked the creator (both open)",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "open", blocks: []string{"@me.creator"}}},
		invite: []string{"@x.peer"}},
	{name: "creator blocked the invitee (both open)",
		agents: []trustAgent{{handle: "@me.creator", policy: "open", blocks: []string{"@x.peer"}}, {handle: "@x.peer", policy: "open"}},
		invite: []string{"@x.peer"}},
	{name: "block beats a mutual allowlist",
		agents: []trustAgent{{handle: "@me.creator", policy: "allowlist", allow: []string{"@x.peer"}}, {handle: "@x.peer", policy: "allowlist", allow: []string{"@me.creator"}, blocks: []string{"@me.creator"}}},
		invite: []string{"@x.peer"}},
	{name: "reachable and missing invitees",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "open"}},
		invite: []string{"@x.peer", "@x.ghost"}},
	{name: "reachable and refusing invitees",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "open"}, {handle: "@y.closed", policy: "allowlist"}, {handle: "@z.open", policy: "open"}},
		invite: []string{"@x.peer", "@y.closed", "@z.open"}},
	{name: "reachable and blocking invitees",
		agents: []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "open"}, {handle: "@y.blocker", policy: "open", blocks: []string{"@me.creator"}}},
		invite: []string{"@y.blocker", "@x.peer"}},
	{name: "several reachable invitees",
		agents:  []trustAgent{{handle: "@me.creator", policy: "open"}, {handle: "@x.peer", policy: "open"}, {handle: "@y.listed", policy: "allowlist", allow: []string{"@me.*"}}},
		invite:  []string{"@x.peer", "@y.listed"},
		allowed: true},
}

// ns namespaces a handle or owner glob for case i: "@me.creator" -> "@me-c3.creator".
func ns(i int, h string) string {
	owner, rest, ok := strings.Cut(strings.TrimPrefix(h, "@"), ".")
	if !ok {
		panic(h)
	}
	return fmt.Sprintf("@%s-c%d.%s", owner, i, rest)
}

func nsAll(i int, hs []string) []string {
	out := make([]string, len(hs))
	for j, h := range hs {
		out[j] = ns(i, h)
	}
	return out
}

// setupTrustCase creates the case's agents and blocks; it returns the
// namespaced creator and invitees.
func setupTrustCase(t *testing.T, s *store.Store, i int, tc trustCase) (string, []string) {
	t.Helper()
	for _, a := range tc.agents {
		mustAgent(t, s, ns(i, a.handle), a.policy, nsAll(i, a.allow)...)
	}
	for _, a := range tc.agents {
		for _, b := range a.blocks {
			if _, err := s.Block(bg, ns(i, a.handle), ns(i, b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ns(i, "@me.creator"), nsAll(i, tc.invite)
}

func TestTrustCreateSessionIsAllOrNothing(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		created := 0
		for i, tc := range trustCases {
			t.Run(tc.name, func(t *testing.T) {
				creator, invite := setupTrustCase(t, s, i, tc)
				resp, commit, err := s.CreateSession(bg, store.CreateSession{Creator: creator, Invite: invite, Topic: "t",
					Initial: &protocol.InitialMessage{Content: text("hello")}, IdempotencyKey: "k", RequestHash: "h"})
				if tc.allowed {
					must(t, err)
					created++
					want := []step{{protocol.EventMessage, 1, nil}}
					for j, h := range invite {
						want = append(want, step{protocol.EventInvited, int64(j + 2), pInvited(h, creator, "t")})
					}
					wantEvents(t, "created session", fullLog(t, s, resp.SessionID), want...)
					if commit == nil || len(commit.Events) != len(want) {
						t.Fatalf("commit %+v", commit)
					}
					return
				}
				wantNotFound(t, err)
				if resp.SessionID != "" || resp.Sequence != nil || commit != nil {
					t.Fatalf("denied create returned %+v %+v", resp, commit)
				}
				// Nothing was written: no session for the creator or any invitee.
				for _, h := range append([]string{creator}, invite...) {
					if ids := sessionsOf(t, s, h); len(ids) != 0 {
						t.Fatalf("denied create left sessions %v for %s", ids, h)
					}
					list, err := s.ListSessions(bg, store.SessionFilter{Participant: h, Limit: 100})
					must(t, err)
					if len(list) != 0 {
						t.Fatalf("denied create: operator lists %d sessions for %s", len(list), h)
					}
				}
			})
		}
		// Only the allowed cases created sessions (and the listing works).
		if got := allSessions(t, s); len(got) != created || created == 0 {
			t.Fatalf("%d sessions exist, want %d", len(got), created)
		}
	})
}

func TestTrustInviteIsAllOrNothing(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		for i, tc := range trustCases {
			t.Run(tc.name, func(t *testing.T) {
				creator, invite := setupTrustCase(t, s, i, tc)
				sid := create(t, s, creator, "t")
				send(t, s, sid, creator, "before")
				invited, commit, err := s.Invite(bg, sid, creator, invite)
				if tc.allowed {
					must(t, err)
					if !reflect.DeepEqual(invited, invite) {
						t.Fatalf("invited %v, want %v", invited, invite)
					}
					want := []step{{protocol.EventMessage, 1, nil}}
					for j, h := range invite {
						want = append(want, step{protocol.EventInvited, int64(j + 2), pInvited(h, creator, "t")})
					}
					wantEvents(t, "after invite", fullLog(t, s, sid), want...)
					if commit == nil || len(commit.Events) != len(invite) {
						t.Fatalf("commit %+v", commit)
					}
					return
				}
				wantNotFound(t, err)
				if len(invited) != 0 || commit != nil {
					t.Fatalf("denied invite returned %v %+v", invited, commit)
				}
				wantEvents(t, "log after denied invite", fullLog(t, s, sid), step{protocol.EventMessage, 1, nil})
				wantParticipants(t, s, sid, map[string]string{creator: protocol.StatusJoined})
				for _, h := range invite {
					if ids := sessionsOf(t, s, h); len(ids) != 0 {
						t.Fatalf("denied invite left sessions %v for %s", ids, h)
					}
				}
			})
		}
	})
}

// An invitation is also refused when the invitee and a current participant
// other than the inviter block each other, in either direction, whether that
// participant is joined or only invited.
func TestTrustInviteRefusedByBlockWithOtherParticipant(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		otherJoined bool
		otherBlocks bool // else the invitee blocks the other participant
	}{
		{"joined participant blocked the invitee", true, true},
		{"invitee blocked a joined participant", true, false},
		{"invited participant blocked the invitee", false, true},
		{"invitee blocked an invited participant", false, false},
	}
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				a, b, c := ns(i, "@a.inviter"), ns(i, "@b.other"), ns(i, "@c.invitee")
				mustAgent(t, s, a, "open")
				mustAgent(t, s, b, "open")
				mustAgent(t, s, c, "open")
				sid := create(t, s, a, "", b)
				want := map[string]string{a: protocol.StatusJoined, b: protocol.StatusInvited}
				if tc.otherJoined {
					join(t, s, sid, b)
					want[b] = protocol.StatusJoined
				}
				if tc.otherBlocks {
					_, err := s.Block(bg, b, c)
					must(t, err)
				} else {
					_, err := s.Block(bg, c, b)
					must(t, err)
				}
				before := fullLog(t, s, sid)
				invited, commit, err := s.Invite(bg, sid, a, []string{c})
				wantNotFound(t, err)
				if len(invited) != 0 || commit != nil {
					t.Fatalf("denied invite returned %v %+v", invited, commit)
				}
				if after := fullLog(t, s, sid); len(after) != len(before) {
					t.Fatalf("denied invite appended events:%s", describe(after[len(before):]))
				}
				wantParticipants(t, s, sid, want)
				// The inviter can still reach c in a session without b.
				create(t, s, a, "", c)
			})
		}
	})
}

// Invite rules beyond trust: who may invite, where, and what is skipped.
func TestInviteRulesAndSkips(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		for _, h := range []string{"@a.one", "@b.two", "@c.three", "@d.four", "@e.out"} {
			mustAgent(t, s, h, "open")
		}
		sid := create(t, s, "@a.one", "topic", "@b.two", "@c.three")
		join(t, s, sid, "@b.two")

		// Already joined and already invited handles are skipped.
		invited, commit, err := s.Invite(bg, sid, "@b.two", []string{"@a.one", "@c.three", "@d.four"})
		must(t, err)
		if !reflect.DeepEqual(invited, []string{"@d.four"}) || commit == nil || len(commit.Events) != 1 {
			t.Fatalf("invited %v commit %+v", invited, commit)
		}
		wantEvents(t, "log", fullLog(t, s, sid),
			step{protocol.EventInvited, 1, pInvited("@b.two", "@a.one", "topic")},
			step{protocol.EventInvited, 2, pInvited("@c.three", "@a.one", "topic")},
			step{protocol.EventJoined, 3, pAgent("@b.two")},
			step{protocol.EventInvited, 4, pInvited("@d.four", "@b.two", "topic")})
		// Nothing new: empty list, no commit.
		invited, commit, err = s.Invite(bg, sid, "@a.one", []string{"@d.four"})
		must(t, err)
		if len(invited) != 0 || invited == nil || commit != nil {
			t.Fatalf("re-invite of an invitee: %#v %+v", invited, commit)
		}

		// An invitee may not invite; a stranger does not see the session.
		_, _, err = s.Invite(bg, sid, "@c.three", []string{"@e.out"})
		wantConflict(t, err, protocol.CodeNotJoined)
		_, _, err = s.Invite(bg, sid, "@e.out", []string{"@d.four"})
		wantNotFound(t, err)
		_, _, err = s.Invite(bg, "sess_NOSUCHSESSION", "@a.one", []string{"@d.four"})
		wantNotFound(t, err)

		// A left participant is re-invited with a fresh session.invited.
		_, err = s.Leave(bg, sid, "@b.two")
		must(t, err)
		invited, _, err = s.Invite(bg, sid, "@a.one", []string{"@b.two"})
		must(t, err)
		if !reflect.DeepEqual(invited, []string{"@b.two"}) {
			t.Fatalf("re-invite of a left participant: %v", invited)
		}
		evs := fullLog(t, s, sid)
		wantEvents(t, "tail", evs[4:],
			step{protocol.EventLeft, 5, pLeft("@b.two", protocol.LeftReasonLeft)},
			step{protocol.EventInvited, 6, pInvited("@b.two", "@a.one", "topic")})
		wantParticipants(t, s, sid, map[string]string{"@a.one": "joined", "@b.two": "invited", "@c.three": "invited", "@d.four": "invited"})

		// Ended sessions take no invitations.
		_, err = s.End(bg, sid, "@a.one")
		must(t, err)
		_, _, err = s.Invite(bg, sid, "@a.one", []string{"@e.out"})
		wantConflict(t, err, protocol.CodeSessionEnded)
	})
}
