package store_test

import (
	"reflect"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Every row of ListSessionsFor carries the participants GetSession shows the
// same viewer (upstream ASP clients read them from list items as from
// snapshots), with the same state, ended_at, topic and created_at: for the
// creator, joined members, pending invitees and former participants (left,
// removed by a block or by a reopen that did not re-invite them), whether
// their view is live or as of their horizon, on every page.
func TestListSessionsParticipantsAreTheSnapshots(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c, d, e := "@l.a", "@l.b", "@l.c", "@l.d", "@l.e"
		agents(t, s, a, b, c, d, e)

		// s1: b joins, c stays invited while the session goes on and d is
		// invited after it: c's view stops at its invitation.
		s1 := create(t, s, a, "one", b, c)
		join(t, s, s1, b)
		send(t, s, s1, b, "hi")
		_, _, err := s.Invite(bg, s1, a, []string{d})
		must(t, err)
		send(t, s, s1, a, "welcome d")
		// s2: b joins and leaves; later e is invited and joins.
		s2 := create(t, s, a, "two", b)
		join(t, s, s2, b)
		_, err = s.Leave(bg, s2, b)
		must(t, err)
		_, _, err = s.Invite(bg, s2, a, []string{e})
		must(t, err)
		join(t, s, s2, e)
		send(t, s, s2, e, "after b")
		// s3: ended; c invited and never joined.
		s3 := create(t, s, a, "three", b, c)
		join(t, s, s3, b)
		_, err = s.End(bg, s3, a)
		must(t, err)
		// s4: d left out of a reopen.
		s4 := create(t, s, a, "", d)
		join(t, s, s4, d)
		_, err = s.End(bg, s4, a)
		must(t, err)
		_, err = reopen(s, s4, a, nil, nil)
		must(t, err)
		send(t, s, s4, a, "without d")
		// s5: c's own session with a invited; nothing after the invitation.
		s5 := create(t, s, c, "five", a)
		// s6: e removed by a's block while joined, the session going on.
		s6 := create(t, s, a, "six", e, b)
		join(t, s, s6, e, b)
		send(t, s, s6, e, "hello")
		_, err = s.Block(bg, a, e)
		must(t, err)
		send(t, s, s6, b, "e is gone")

		rows := map[string][]protocol.SessionSummary{}
		for _, h := range []string{a, b, c, d, e} {
			list, err := s.ListSessionsFor(bg, store.SessionFilter{Participant: h, Limit: 100})
			must(t, err)
			if len(list) == 0 {
				t.Fatalf("%s lists no session", h)
			}
			rows[h] = list
			for _, r := range list {
				snap, err := s.GetSession(bg, r.ID, h)
				must(t, err)
				if r.Participants == nil || !reflect.DeepEqual(r.Participants, snap.Participants) {
					t.Errorf("%s lists %s with participants\n %+v\nits snapshot has\n %+v", h, r.ID, r.Participants, snap.Participants)
				}
				if r.State != snap.State || r.EndedAt != snap.EndedAt || r.Topic != snap.Topic || r.CreatedAt != snap.CreatedAt {
					t.Errorf("%s lists %s as %+v, its snapshot is %+v", h, r.ID, r, snap)
				}
			}
			// Pages of one: each row as in the full page.
			before := ""
			for i := 0; ; i++ {
				page, err := s.ListSessionsFor(bg, store.SessionFilter{Participant: h, Before: before, Limit: 1})
				must(t, err)
				if len(page) == 0 {
					if i != len(list) {
						t.Fatalf("%s: %d pages of one for %d sessions", h, i, len(list))
					}
					break
				}
				if !reflect.DeepEqual(page[0], list[i]) {
					t.Fatalf("%s: page %d is\n %+v\nthe full listing has\n %+v", h, i, page[0], list[i])
				}
				before = page[0].ID
			}
		}

		// The cases are what they claim to be: the past views differ from
		// the live ones.
		row := func(h, id string) protocol.SessionSummary {
			t.Helper()
			for _, r := range rows[h] {
				if r.ID == id {
					return r
				}
			}
			t.Fatalf("%s does not list %s", h, id)
			return protocol.SessionSummary{}
		}
		statuses := func(ps []protocol.Participant) map[string]string {
			out := map[string]string{}
			for _, p := range ps {
				out[p.Handle] = p.Status
			}
			return out
		}
		for _, tc := range []struct {
			h, id string
			want  map[string]string
		}{
			{a, s1, map[string]string{a: "joined", b: "joined", c: "invited", d: "invited"}}, // creator, live
			{b, s1, map[string]string{a: "joined", b: "joined", c: "invited", d: "invited"}}, // joined member, live
			{c, s1, map[string]string{a: "joined", b: "invited", c: "invited"}},              // invitee, as of its invitation
			{b, s2, map[string]string{a: "joined", b: "left"}},                               // left, as of its leave
			{c, s3, map[string]string{a: "joined", b: "joined", c: "left"}},                  // invitee of an ended session
			{d, s4, map[string]string{a: "joined", d: "left"}},                               // left out of the reopen
			{a, s5, map[string]string{c: "joined", a: "invited"}},                            // invitee, live
			{e, s6, map[string]string{a: "joined", e: "left", b: "joined"}},                  // blocked
		} {
			if got := statuses(row(tc.h, tc.id).Participants); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s sees %s with %v, want %v", tc.h, tc.id, got, tc.want)
			}
		}
	})
}
