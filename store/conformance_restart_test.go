package store_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Closing the store and opening the same URL again loses nothing: agents,
// sessions, participants, the log, the sequence counters, idempotency keys,
// cursors and presence all survive.
func TestRestartDurability(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s1, err := store.Open(bg, url)
		must(t, err)
		a, b, c := "@a.one", "@b.two", "@c.three"
		agents(t, s1, a, b, c)
		must(t, s1.SetRoles(bg, a, []string{"ops"}))
		_, err = s1.Block(bg, c, a)
		must(t, err)

		create1 := store.CreateSession{Creator: a, Invite: []string{b}, Topic: "durable",
			Initial: &protocol.InitialMessage{Content: text("first")}, IdempotencyKey: "ck", RequestHash: "ch"}
		r1, _, err := s1.CreateSession(bg, create1)
		must(t, err)
		sid := r1.SessionID
		join(t, s1, sid, b)
		msg := keyed(sid, b, "mk", "mh", "keyed")
		m1, _, err := s1.SendMessage(bg, msg)
		must(t, err)
		ended := create(t, s1, b, "gone", a)
		join(t, s1, ended, a)
		_, err = s1.End(bg, ended, b)
		must(t, err)
		must(t, s1.SaveCursors(bg, []visibility.Cursor{{Handle: b, SessionID: sid, Seq: 2}}))
		_, err = s1.MarkOnline(bg, a)
		must(t, err)

		beforeLog := map[string][]store.StoredEvent{sid: fullLog(t, s1, sid), ended: fullLog(t, s1, ended)}
		beforeSess := map[string]*protocol.Session{}
		for _, id := range []string{sid, ended} {
			beforeSess[id], err = s1.AdminSession(bg, id)
			must(t, err)
		}
		beforeAgents, err := s1.ListAgents(bg, "")
		must(t, err)
		must(t, s1.Close())

		s2 := open(t, url)
		afterAgents, err := s2.ListAgents(bg, "")
		must(t, err)
		if !reflect.DeepEqual(afterAgents, beforeAgents) {
			t.Fatalf("agents after restart %+v, before %+v", afterAgents, beforeAgents)
		}
		if h, err := s2.Authenticate(bg, []byte("hash-"+b)); err != nil || h != b {
			t.Fatalf("token after restart: %q %v", h, err)
		}
		for id, before := range beforeLog {
			after := fullLog(t, s2, id)
			if len(after) != len(before) {
				t.Fatalf("session %s: %d events after restart, %d before", id, len(after), len(before))
			}
			for i := range before {
				if !bytes.Equal(after[i].Body, before[i].Body) || !reflect.DeepEqual(after[i].Meta(), before[i].Meta()) || after[i].EventID != before[i].EventID {
					t.Fatalf("event %d changed across restart:\n%s\n%s", i+1, before[i].Body, after[i].Body)
				}
			}
			sess, err := s2.AdminSession(bg, id)
			must(t, err)
			if !reflect.DeepEqual(sess, beforeSess[id]) {
				t.Fatalf("session after restart %+v, before %+v", sess, beforeSess[id])
			}
		}
		// Eligibility survives: b's view and what it sees.
		if got := visible(t, s2, sid, b); len(got) != 4 {
			t.Fatalf("b sees %s after restart", describe(got))
		}
		wantEvents(t, "invitee of the ended session", visible(t, s2, ended, a),
			step{protocol.EventInvited, 1, nil}, step{protocol.EventJoined, 2, nil}, step{protocol.EventEnded, 3, pEnded(b)})

		// Idempotency keys survive: retries answer with the originals.
		r2, commit, err := s2.CreateSession(bg, create1)
		must(t, err)
		if r2.SessionID != sid || *r2.Sequence != 1 || commit != nil {
			t.Fatalf("create retry after restart %+v %+v", r2, commit)
		}
		m2, commit, err := s2.SendMessage(bg, msg)
		must(t, err)
		if m2 != m1 || commit != nil {
			t.Fatalf("message retry after restart %+v, want %+v", m2, m1)
		}
		_, _, err = s2.SendMessage(bg, keyed(sid, b, "mk", "other", "changed"))
		wantConflict(t, err, protocol.CodeIdempotencyKey)
		// The counter continues where it stopped.
		if r := send(t, s2, sid, a, "after restart"); r.Sequence != int64(len(beforeLog[sid])+1) {
			t.Fatalf("first sequence after restart %d, want %d", r.Sequence, len(beforeLog[sid])+1)
		}
		// Blocks, roles, cursors and presence survive.
		_, _, err = s2.CreateSession(bg, store.CreateSession{Creator: a, Invite: []string{c}})
		wantNotFound(t, err)
		ag, err := s2.GetAgent(bg, a)
		must(t, err)
		if !reflect.DeepEqual(ag.Roles, []string{"ops"}) {
			t.Fatalf("roles %v", ag.Roles)
		}
		if cur, err := s2.Cursor(bg, b, sid); err != nil || cur != 2 {
			t.Fatalf("cursor after restart %d %v", cur, err)
		}
		commits, err := s2.RecoverPresence(bg)
		must(t, err)
		if len(commits) != 1 || commits[0].SessionID != sid {
			t.Fatalf("a was online before the restart; recover commits %+v", commits)
		}
		wantEvents(t, "recover", tailOf(t, s2, sid, int64(len(beforeLog[sid])+2)),
			step{protocol.EventDisconnected, int64(len(beforeLog[sid]) + 2), pAgent(a)})
	})
}
