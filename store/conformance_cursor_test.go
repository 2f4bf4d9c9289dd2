package store_test

import (
	"reflect"
	"sort"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// PendingSessions lists exactly the sessions where the agent can still see
// an event past its cursor; Cursor reads back what SaveCursors wrote.
func TestCursorsAndPendingSessions(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@a.one", "@b.me", "@c.three"
		agents(t, s, a, b, c)
		type sess struct {
			name    string
			id      string
			cursor  int64 // saved for b; -1 = none
			pending bool
		}
		var all []*sess
		add := func(name string, cursor int64, pending bool, build func() string) {
			all = append(all, &sess{name: name, id: build(), cursor: cursor, pending: pending})
		}

		add("joined, events past the cursor", 2, true, func() string {
			sid := create(t, s, a, "", b) // 1
			join(t, s, sid, b)            // 2
			send(t, s, sid, a, "new")     // 3
			return sid
		})
		add("joined, no cursor yet", -1, true, func() string {
			sid := create(t, s, a, "", b)
			join(t, s, sid, b)
			return sid
		})
		add("joined, caught up", 3, false, func() string {
			sid := create(t, s, a, "", b)
			join(t, s, sid, b)
			send(t, s, sid, b, "mine") // 3
			return sid
		})
		add("left, delivered through its session.left, later events", 3, false, func() string {
			sid := create(t, s, a, "", b)
			join(t, s, sid, b)
			_, err := s.Leave(bg, sid, b) // 3
			must(t, err)
			send(t, s, sid, a, "after") // 4
			return sid
		})
		add("left, its session.left not yet delivered", 2, true, func() string {
			sid := create(t, s, a, "", b)
			join(t, s, sid, b)
			_, err := s.Leave(bg, sid, b) // 3
			must(t, err)
			send(t, s, sid, a, "after") // 4
			return sid
		})
		add("invited, only content past the invitation", 2, false, func() string {
			sid := create(t, s, a, "", c, b) // 1 c, 2 b
			join(t, s, sid, c)               // 3
			send(t, s, sid, c, "hidden")     // 4
			return sid
		})
		add("invited, invitation not delivered", -1, true, func() string {
			sid := create(t, s, a, "", b)
			send(t, s, sid, a, "hidden")
			return sid
		})
		add("invited, then the session ended", 1, true, func() string {
			sid := create(t, s, a, "", b) // 1
			send(t, s, sid, a, "hidden")  // 2
			_, err := s.End(bg, sid, a)   // 3
			must(t, err)
			return sid
		})
		add("re-invited on reopen", 3, true, func() string {
			sid := create(t, s, a, "", b) // 1
			join(t, s, sid, b)            // 2
			_, err := s.End(bg, sid, a)   // 3
			must(t, err)
			_, err = reopen(s, sid, a, []string{b}, nil) // 4 reopened, 5 invited
			must(t, err)
			return sid
		})
		add("not re-invited on reopen, later events", 3, false, func() string {
			sid := create(t, s, a, "", b) // 1
			join(t, s, sid, b)            // 2
			_, err := s.End(bg, sid, a)   // 3
			must(t, err)
			_, err = reopen(s, sid, a, nil, &protocol.InitialMessage{Content: text("without b")}) // 4 reopened, 5 message
			must(t, err)
			return sid
		})
		add("blocked out, delivered up to the block, later events", 4, false, func() string {
			x := "@x.blocker"
			mustAgent(t, s, x, "open")
			sid := create(t, s, x, "", b, a) // 1 2
			join(t, s, sid, b, a)            // 3 4
			_, err := s.Block(bg, x, b)      // 5 left (b sees through 4)
			must(t, err)
			send(t, s, sid, a, "after") // 6
			return sid
		})
		add("a session b was never part of", -1, false, func() string {
			sid := create(t, s, a, "", c)
			send(t, s, sid, a, "x")
			return sid
		})

		var cursors []visibility.Cursor
		for _, ss := range all {
			if ss.cursor >= 0 {
				cursors = append(cursors, visibility.Cursor{Handle: b, SessionID: ss.id, Seq: ss.cursor})
			}
		}
		// A stale value first: SaveCursors overwrites.
		must(t, s.SaveCursors(bg, []visibility.Cursor{{Handle: b, SessionID: all[0].id, Seq: 1}}))
		must(t, s.SaveCursors(bg, cursors))
		// Another agent's cursors are independent.
		must(t, s.SaveCursors(bg, []visibility.Cursor{{Handle: a, SessionID: all[0].id, Seq: 3}}))

		for _, ss := range all {
			got, err := s.Cursor(bg, b, ss.id)
			must(t, err)
			want := max(ss.cursor, 0)
			if got != want {
				t.Fatalf("%s: cursor %d, want %d", ss.name, got, want)
			}
			// Ground truth: can b see anything past its cursor?
			evs, _, err := s.VisibleEvents(bg, ss.id, b, want, 1000)
			if ss.name == "a session b was never part of" {
				wantNotFound(t, err)
				continue
			}
			must(t, err)
			if (len(evs) > 0) != ss.pending {
				t.Fatalf("%s: test premise wrong, b sees %s past %d", ss.name, describe(evs), want)
			}
		}
		if got, _ := s.Cursor(bg, a, all[0].id); got != 3 {
			t.Fatalf("a's cursor %d", got)
		}

		pending, err := s.PendingSessions(bg, b)
		must(t, err)
		byID := map[string]store.Pending{}
		var got []string
		for _, p := range pending {
			byID[p.SessionID] = p
			got = append(got, p.SessionID)
		}
		var want []string
		names := map[string]string{}
		for _, ss := range all {
			names[ss.id] = ss.name
			if ss.pending {
				want = append(want, ss.id)
			}
		}
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			var gn, wn []string
			for _, id := range got {
				gn = append(gn, names[id])
			}
			for _, id := range want {
				wn = append(wn, names[id])
			}
			t.Fatalf("pending sessions:\n got %q\nwant %q", gn, wn)
		}
		for _, ss := range all {
			if !ss.pending {
				continue
			}
			p := byID[ss.id]
			v, err := s.View(bg, ss.id, b)
			must(t, err)
			if p.Cursor != max(ss.cursor, 0) || p.LastSeq != lastSeq(fullLog(t, s, ss.id)) || p.View != v {
				t.Fatalf("%s: pending %+v, view %+v", ss.name, p, v)
			}
		}

		// Delivering everything empties the list.
		cursors = cursors[:0]
		for _, ss := range all[:len(all)-1] {
			cursors = append(cursors, visibility.Cursor{Handle: b, SessionID: ss.id, Seq: lastSeq(fullLog(t, s, ss.id))})
		}
		must(t, s.SaveCursors(bg, cursors))
		pending, err = s.PendingSessions(bg, b)
		must(t, err)
		if len(pending) != 0 {
			t.Fatalf("after delivering everything: %+v", pending)
		}
	})
}

// SaveCursors handles batches larger than one statement.
func TestSaveCursorsLargeBatch(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		var batch []visibility.Cursor
		for i := range 450 {
			batch = append(batch, visibility.Cursor{Handle: "@a.one", SessionID: "sess_" + string(rune('A'+i%26)) + string(rune('A'+i/26)), Seq: int64(i + 1)})
		}
		must(t, s.SaveCursors(bg, batch))
		for _, i := range []int{0, 199, 200, 449} {
			got, err := s.Cursor(bg, "@a.one", batch[i].SessionID)
			must(t, err)
			if got != int64(i+1) {
				t.Fatalf("cursor %d: %d", i, got)
			}
		}
	})
}
