package store_test

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// readsFixture creates four sessions one second apart:
//
//	s1 (t0)    a creates, b joins           active
//	s2 (t0+1s) a creates, invites c, ends   ended (c left)
//	s3 (t0+2s) b alone                      active
//	s4 (t0+3s) c creates, invites a         active (a invited)
func readsFixture(t *testing.T, s *store.Store) (t0 int64, ids [4]string) {
	t.Helper()
	clk := newClock(s)
	t0 = clk.ms()
	agents(t, s, "@a.one", "@b.two", "@c.three")
	ids[0] = create(t, s, "@a.one", "one", "@b.two")
	join(t, s, ids[0], "@b.two")
	send(t, s, ids[0], "@b.two", "hi")
	clk.advance(time.Second)
	ids[1] = create(t, s, "@a.one", "two", "@c.three")
	_, err := s.End(bg, ids[1], "@a.one")
	must(t, err)
	clk.advance(time.Second)
	ids[2] = create(t, s, "@b.two", "three")
	send(t, s, ids[2], "@b.two", "alone")
	clk.advance(time.Second)
	ids[3] = create(t, s, "@c.three", "four", "@a.one")
	return t0, ids
}

func TestListSessionsFilters(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		t0, id := readsFixture(t, s)
		s1, s2, s3, s4 := id[0], id[1], id[2], id[3]
		cases := []struct {
			name string
			f    store.SessionFilter
			want []string
		}{
			{"all, newest first", store.SessionFilter{}, []string{s4, s3, s2, s1}},
			{"participant (any status)", store.SessionFilter{Participant: "@a.one"}, []string{s4, s2, s1}},
			{"participant invited", store.SessionFilter{Participant: "@a.one", Status: "invited"}, []string{s4}},
			{"participant joined", store.SessionFilter{Participant: "@a.one", Status: "joined"}, []string{s2, s1}},
			{"participant left", store.SessionFilter{Participant: "@c.three", Status: "left"}, []string{s2}},
			{"state ended", store.SessionFilter{State: "ended"}, []string{s2}},
			{"state active", store.SessionFilter{State: "active"}, []string{s4, s3, s1}},
			{"participant and state", store.SessionFilter{Participant: "@c.three", State: "active"}, []string{s4}},
			{"since (inclusive)", store.SessionFilter{Since: t0 + 1000}, []string{s4, s3, s2}},
			{"until (exclusive)", store.SessionFilter{Until: t0 + 2000}, []string{s2, s1}},
			{"since and until", store.SessionFilter{Since: t0 + 1000, Until: t0 + 3000}, []string{s3, s2}},
			{"before", store.SessionFilter{Before: s3}, []string{s2, s1}},
			{"only", store.SessionFilter{Only: s2}, []string{s2}},
			{"nobody's", store.SessionFilter{Participant: "@x.nobody"}, []string{}},
			{"limit", store.SessionFilter{Limit: 2}, []string{s4, s3}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				f := tc.f
				if f.Limit == 0 {
					f.Limit = 100
				}
				rows, err := s.ListSessions(bg, f)
				must(t, err)
				got := []string{}
				for _, r := range rows {
					got = append(got, r.ID)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			})
		}

		// Paging with before: pages of two walk the whole list once.
		var walked []string
		before := ""
		for range 5 {
			rows, err := s.ListSessions(bg, store.SessionFilter{Before: before, Limit: 2})
			must(t, err)
			if len(rows) == 0 {
				break
			}
			for _, r := range rows {
				walked = append(walked, r.ID)
			}
			before = rows[len(rows)-1].ID
		}
		if !reflect.DeepEqual(walked, []string{s4, s3, s2, s1}) {
			t.Fatalf("paged walk %v", walked)
		}

		// The operator's snapshot carries participants and times.
		rows, err := s.ListSessions(bg, store.SessionFilter{Only: s2, Limit: 1})
		must(t, err)
		got := rows[0]
		if got.State != "ended" || got.Topic != "two" || got.CreatedAt != t0+1000 || got.EndedAt != t0+1000 ||
			!reflect.DeepEqual(got.Participants, []protocol.Participant{{Handle: "@a.one", Status: "joined", JoinedAt: t0 + 1000}, {Handle: "@c.three", Status: "left", LeftAt: t0 + 1000}}) {
			t.Fatalf("snapshot %+v", got)
		}
	})
}

func TestListSessionsForParticipant(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		t0, id := readsFixture(t, s)
		rows, err := s.ListSessionsFor(bg, store.SessionFilter{Participant: "@c.three", Limit: 100})
		must(t, err)
		want := []protocol.SessionSummary{
			{ID: id[3], State: "active", Topic: "four", Status: "joined", CreatedAt: t0 + 3000, LastSeq: 1, Participants: []protocol.Participant{
				{Handle: "@a.one", Status: "invited"}, {Handle: "@c.three", Status: "joined", JoinedAt: t0 + 3000}}},
			{ID: id[1], State: "ended", Topic: "two", Status: "left", CreatedAt: t0 + 1000, EndedAt: t0 + 1000, LastSeq: 2, Participants: []protocol.Participant{
				{Handle: "@a.one", Status: "joined", JoinedAt: t0 + 1000}, {Handle: "@c.three", Status: "left", LeftAt: t0 + 1000}}},
		}
		if !reflect.DeepEqual(rows, want) {
			t.Fatalf("sessions for c:\n got %+v\nwant %+v", rows, want)
		}
		rows, err = s.ListSessionsFor(bg, store.SessionFilter{Participant: "@a.one", Status: "invited", Limit: 100})
		must(t, err)
		if len(rows) != 1 || rows[0].ID != id[3] || rows[0].Status != "invited" {
			t.Fatalf("a's invitations %+v", rows)
		}
		rows, err = s.ListSessionsFor(bg, store.SessionFilter{Participant: "@a.one", Before: id[3], Limit: 1})
		must(t, err)
		if len(rows) != 1 || rows[0].ID != id[1] {
			t.Fatalf("a's page before s4 %+v", rows)
		}
		// GetSession: current and former participants, invitees included.
		for _, h := range []string{"@a.one", "@c.three"} {
			if _, err := s.GetSession(bg, id[1], h); err != nil {
				t.Fatalf("%s reads s2: %v", h, err)
			}
		}
		_, err = s.GetSession(bg, id[1], "@b.two")
		wantNotFound(t, err)
		_, err = s.AdminSession(bg, "sess_NOPE")
		wantNotFound(t, err)
	})
}

// ExportEvents yields every event, unfiltered, of each matching session, in
// sequence order, sessions oldest first.
func TestExportEvents(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		_, id := readsFixture(t, s)
		// Enough events in one session to cross the export's 1000-row page.
		// Sent concurrently through group commit to keep the test fast.
		s.EnableGroupCommit(0)
		var wg sync.WaitGroup
		for w := range 15 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 67 {
					if _, _, err := s.SendMessage(bg, store.SendMessage{SessionID: id[2], Sender: "@b.two", Content: text("bulk")}); err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if n := len(fullLog(t, s, id[2])); n != 1+15*67 {
			t.Fatalf("bulk session has %d events", n)
		}
		collect := func(f store.SessionFilter) []store.StoredEvent {
			t.Helper()
			var out []store.StoredEvent
			must(t, s.ExportEvents(bg, f, func(e *store.StoredEvent) error {
				out = append(out, *e)
				return nil
			}))
			return out
		}
		expect := func(sids ...string) []store.StoredEvent {
			var out []store.StoredEvent
			for _, sid := range sids {
				out = append(out, fullLog(t, s, sid)...)
			}
			return out
		}
		same := func(name string, got, want []store.StoredEvent) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("%s: exported %d events, want %d", name, len(got), len(want))
			}
			for i := range want {
				if got[i].SessionID != want[i].SessionID || got[i].Sequence != want[i].Sequence || string(got[i].Body) != string(want[i].Body) {
					t.Fatalf("%s: event %d is %s/%d, want %s/%d", name, i, got[i].SessionID, got[i].Sequence, want[i].SessionID, want[i].Sequence)
				}
			}
		}
		same("everything", collect(store.SessionFilter{}), expect(id[0], id[1], id[2], id[3]))
		same("one session", collect(store.SessionFilter{Only: id[1]}), expect(id[1]))
		same("ended", collect(store.SessionFilter{State: "ended"}), expect(id[1]))
		// The participant filter selects sessions; their events are not
		// filtered by eligibility (the operator's export).
		same("participant", collect(store.SessionFilter{Participant: "@b.two"}), expect(id[0], id[2]))
		same("none", collect(store.SessionFilter{Participant: "@x.nobody"}), nil)

		// The callback's error stops the export and is returned.
		stop := errors.New("stop")
		n := 0
		err := s.ExportEvents(bg, store.SessionFilter{}, func(*store.StoredEvent) error {
			n++
			if n == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 3 {
			t.Fatalf("export with failing callback: %v after %d events", err, n)
		}
	})
}
