package store_test

import (
	"net/http"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

func agents(t *testing.T, s *store.Store, handles ...string) {
	t.Helper()
	for _, h := range handles {
		mustAgent(t, s, h, "open")
	}
}

// Invitee sees only its invitation; after joining, the whole transcript;
// after leaving, everything up to and including its own session.left.
func TestEligibilityInviteJoinLeave(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@nick.assistant", "@acme.support", "@acme.engineer"
		agents(t, s, a, b, c)
		resp, _, err := s.CreateSession(bg, store.CreateSession{Creator: a, Invite: []string{b}, Topic: "widget",
			Initial: &protocol.InitialMessage{Content: text("hi")}})
		must(t, err)
		sid := resp.SessionID

		inv := step{protocol.EventInvited, 2, pInvited(b, a, "widget")}
		wantEvents(t, "invitee", visible(t, s, sid, b), inv)
		if p := decode(t, visible(t, s, sid, b)[0]).P; p["initial_message"] != nil {
			t.Fatalf("ordinary invitation carries the message inline: %v", p)
		}
		// Content sent while b is invited stays hidden from it.
		send(t, s, sid, a, "still waiting") // 3
		wantEvents(t, "invitee after a message", visible(t, s, sid, b), inv)
		// A stranger sees nothing at all.
		_, _, err = s.VisibleEvents(bg, sid, c, 0, 100)
		wantNotFound(t, err)

		c1, err := s.Join(bg, sid, b) // 4
		must(t, err)
		if c1 == nil || len(c1.Events) != 1 {
			t.Fatalf("join commit %+v", c1)
		}
		full := []step{{protocol.EventMessage, 1, nil}, inv, {protocol.EventMessage, 3, nil}, {protocol.EventJoined, 4, pAgent(b)}}
		wantEvents(t, "joiner replays from sequence 1", visible(t, s, sid, b), full...)
		wantMessage(t, visible(t, s, sid, b)[0], sid, a, "hi")
		wantEvents(t, "creator", visible(t, s, sid, a), full...)

		// Joining again: no event, no commit.
		c2, err := s.Join(bg, sid, b)
		must(t, err)
		if c2 != nil || len(fullLog(t, s, sid)) != 4 {
			t.Fatalf("second join appended %+v", c2)
		}

		send(t, s, sid, b, "yo")     // 5
		_, err = s.Leave(bg, sid, b) // 6
		must(t, err)
		send(t, s, sid, a, "after b left") // 7
		full = append(full, step{protocol.EventMessage, 5, nil}, step{protocol.EventLeft, 6, pLeft(b, protocol.LeftReasonLeft)})
		wantEvents(t, "leaver stops at its own session.left", visible(t, s, sid, b), full...)
		wantEvents(t, "creator sees everything", visible(t, s, sid, a), append(full, step{protocol.EventMessage, 7, nil})...)

		// Paging through VisibleEvents: limit and "more".
		page, more, err := s.VisibleEvents(bg, sid, b, 0, 2)
		must(t, err)
		if !more || len(page) != 2 || page[1].Sequence != 2 {
			t.Fatalf("first page %v more=%v", describe(page), more)
		}
		page, more, err = s.VisibleEvents(bg, sid, b, 5, 2)
		must(t, err)
		if more || len(page) != 1 || page[0].Sequence != 6 {
			t.Fatalf("last page %v more=%v", describe(page), more)
		}

		// A left participant needs a new invitation; it can do nothing else.
		_, err = s.Join(bg, sid, b)
		wantConflict(t, err, protocol.CodeNotInvited)
		_, _, err = s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: b, Content: text("x")})
		wantConflict(t, err, protocol.CodeNotJoined)
		_, err = s.Leave(bg, sid, b)
		wantConflict(t, err, protocol.CodeNotJoined)
		_, err = s.End(bg, sid, b)
		wantConflict(t, err, protocol.CodeNotJoined)
		_, _, err = s.Invite(bg, sid, b, []string{c})
		wantConflict(t, err, protocol.CodeNotJoined)
		// It can still read its snapshot.
		sess, err := s.GetSession(bg, sid, b)
		must(t, err)
		if sess.State != protocol.StateActive || len(sess.Participants) != 2 {
			t.Fatalf("snapshot for the leaver %+v", sess)
		}
		_, err = s.GetSession(bg, sid, c)
		wantNotFound(t, err)
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "left"})
		fullLog(t, s, sid)
	})
}

// An invitee can neither send, leave, end nor invite; a stranger gets 404.
func TestInviteeAndStrangerPermissions(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, x := "@a.one", "@b.two", "@x.stranger"
		agents(t, s, a, b, x)
		sid := create(t, s, a, "", b)
		cases := []struct {
			name   string
			caller string
			op     func(caller string) error
			status int
			code   string
		}{
			{"invitee sends", b, func(h string) error {
				_, _, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: h, Content: text("x")})
				return err
			}, http.StatusConflict, protocol.CodeNotJoined},
			{"invitee leaves", b, func(h string) error { _, err := s.Leave(bg, sid, h); return err }, http.StatusConflict, protocol.CodeNotJoined},
			{"invitee ends", b, func(h string) error { _, err := s.End(bg, sid, h); return err }, http.StatusConflict, protocol.CodeNotJoined},
			{"invitee invites", b, func(h string) error { _, _, err := s.Invite(bg, sid, h, []string{x}); return err }, http.StatusConflict, protocol.CodeNotJoined},
			{"stranger joins", x, func(h string) error { _, err := s.Join(bg, sid, h); return err }, http.StatusNotFound, protocol.CodeNotFound},
			{"stranger sends", x, func(h string) error {
				_, _, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: h, Content: text("x")})
				return err
			}, http.StatusNotFound, protocol.CodeNotFound},
			{"stranger leaves", x, func(h string) error { _, err := s.Leave(bg, sid, h); return err }, http.StatusNotFound, protocol.CodeNotFound},
			{"stranger ends", x, func(h string) error { _, err := s.End(bg, sid, h); return err }, http.StatusNotFound, protocol.CodeNotFound},
			{"stranger reopens", x, func(h string) error { _, err := reopen(s, sid, h, nil, nil); return err }, http.StatusNotFound, protocol.CodeNotFound},
			{"stranger reads", x, func(h string) error { _, err := s.GetSession(bg, sid, h); return err }, http.StatusNotFound, protocol.CodeNotFound},
			{"joined creator reopens an active session", a, func(h string) error { _, err := reopen(s, sid, h, nil, nil); return err }, http.StatusConflict, protocol.CodeSessionActive},
			{"join of a missing session", a, func(h string) error { _, err := s.Join(bg, "sess_MISSING", h); return err }, http.StatusNotFound, protocol.CodeNotFound},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				wantErr(t, tc.op(tc.caller), tc.status, tc.code)
			})
		}
		wantEvents(t, "nothing appended", fullLog(t, s, sid), step{protocol.EventInvited, 1, pInvited(b, a, "")})
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "invited"})
	})
}

// The session ends when its last joined participant leaves: session.ended
// without ended_by, invitees become left and still see that session.ended.
func TestLastLeaveEndsSession(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@a.one", "@b.two", "@c.three"
		agents(t, s, a, b, c)
		sid := create(t, s, a, "t", b, c) // 1 invited b, 2 invited c
		join(t, s, sid, b)                // 3
		_, err := s.Leave(bg, sid, a)     // 4
		must(t, err)
		wantState(t, s, sid, protocol.StateActive)
		c1, err := s.Leave(bg, sid, b) // 5 left, 6 ended
		must(t, err)
		if c1 == nil || len(c1.Events) != 2 {
			t.Fatalf("last leave commit %+v", c1)
		}
		wantEvents(t, "log", fullLog(t, s, sid),
			step{protocol.EventInvited, 1, pInvited(b, a, "t")},
			step{protocol.EventInvited, 2, pInvited(c, a, "t")},
			step{protocol.EventJoined, 3, pAgent(b)},
			step{protocol.EventLeft, 4, pLeft(a, protocol.LeftReasonLeft)},
			step{protocol.EventLeft, 5, pLeft(b, protocol.LeftReasonLeft)},
			step{protocol.EventEnded, 6, pEnded("")})
		wantState(t, s, sid, protocol.StateEnded)
		wantParticipants(t, s, sid, map[string]string{a: "left", b: "left", c: "left"})
		wantEvents(t, "invitee", visible(t, s, sid, c),
			step{protocol.EventInvited, 2, nil}, step{protocol.EventEnded, 6, pEnded("")})
		wantEvents(t, "first leaver", visible(t, s, sid, a),
			step{protocol.EventInvited, 1, nil}, step{protocol.EventInvited, 2, nil}, step{protocol.EventJoined, 3, nil}, step{protocol.EventLeft, 4, nil})
		if got := visible(t, s, sid, b); lastSeq(got) != 5 {
			t.Fatalf("last leaver sees %s", describe(got))
		}
		// Nobody was joined at the end, so nobody may reopen.
		for _, h := range []string{a, b, c} {
			_, err := reopen(s, sid, h, nil, nil)
			wantConflict(t, err, protocol.CodeNotJoined)
		}
	})
}

// End: only joined callers; invitees become left and see session.ended; the
// ended session refuses everything but reads.
func TestEndSession(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@a.one", "@b.two", "@c.three"
		agents(t, s, a, b, c)
		sid := create(t, s, a, "t", b, c)
		join(t, s, sid, b)      // 3
		send(t, s, sid, b, "m") // 4
		_, err := s.End(bg, sid, c)
		wantConflict(t, err, protocol.CodeNotJoined)
		commit, err := s.End(bg, sid, b) // 5
		must(t, err)
		if commit == nil || len(commit.Events) != 1 {
			t.Fatalf("end commit %+v", commit)
		}
		wantEvents(t, "log tail", fullLog(t, s, sid)[4:], step{protocol.EventEnded, 5, pEnded(b)})
		wantState(t, s, sid, protocol.StateEnded)
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "joined", c: "left"})
		wantEvents(t, "invitee", visible(t, s, sid, c), step{protocol.EventInvited, 2, nil}, step{protocol.EventEnded, 5, pEnded(b)})
		if n := len(visible(t, s, sid, a)); n != 5 {
			t.Fatalf("joined participant sees %d events after end, want 5", n)
		}

		for _, tc := range []struct {
			name   string
			caller string
			op     func(h string) error
			code   string
		}{
			{"send", a, func(h string) error {
				_, _, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: h, Content: text("x")})
				return err
			}, protocol.CodeSessionEnded},
			{"end again", a, func(h string) error { _, err := s.End(bg, sid, h); return err }, protocol.CodeSessionEnded},
			{"leave", a, func(h string) error { _, err := s.Leave(bg, sid, h); return err }, protocol.CodeSessionEnded},
			{"invite", a, func(h string) error { _, _, err := s.Invite(bg, sid, h, []string{"@c.three"}); return err }, protocol.CodeSessionEnded},
			{"join by an invitee turned left", c, func(h string) error { _, err := s.Join(bg, sid, h); return err }, protocol.CodeSessionEnded},
			{"join by a joined participant", a, func(h string) error { _, err := s.Join(bg, sid, h); return err }, protocol.CodeSessionEnded},
			{"reopen by an invitee turned left", c, func(h string) error { _, err := reopen(s, sid, h, nil, nil); return err }, protocol.CodeNotJoined},
		} {
			t.Run(tc.name, func(t *testing.T) { wantConflict(t, tc.op(tc.caller), tc.code) })
		}
		if n := len(fullLog(t, s, sid)); n != 5 {
			t.Fatalf("refused operations appended: %d events", n)
		}
	})
}

// Send-and-end: the invitee sees session.invited carrying the message inline,
// then session.ended, and nothing else.
func TestSendAndEnd(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@nick.assistant", "@acme.support", "@acme.engineer"
		agents(t, s, a, b, c)
		resp, commit, err := s.CreateSession(bg, store.CreateSession{Creator: a, Invite: []string{b, c}, Topic: "fyi",
			Initial: &protocol.InitialMessage{Content: text("FYI: fixed")}, EndAfterSend: true})
		must(t, err)
		sid := resp.SessionID
		if resp.Sequence == nil || *resp.Sequence != 1 || commit == nil || len(commit.Events) != 4 {
			t.Fatalf("response %+v commit %+v", resp, commit)
		}
		evs := fullLog(t, s, sid)
		wantEvents(t, "log", evs,
			step{protocol.EventMessage, 1, nil}, step{protocol.EventInvited, 2, nil}, step{protocol.EventInvited, 3, nil},
			step{protocol.EventEnded, 4, pEnded(a)})
		msg := wantMessage(t, evs[0], sid, a, "FYI: fixed")
		for _, h := range []string{b, c} {
			got := visible(t, s, sid, h)
			if len(got) != 2 {
				t.Fatalf("%s sees %s", h, describe(got))
			}
			inv := decode(t, got[0])
			if inv.Type != protocol.EventInvited || inv.P["invitee"] != h || inv.P["by"] != a || inv.P["topic"] != "fyi" {
				t.Fatalf("%s first event %s", h, got[0].Body)
			}
			im, ok := inv.P["initial_message"].(map[string]any)
			if !ok {
				t.Fatalf("%s invitation lacks initial_message: %s", h, got[0].Body)
			}
			if im["id"] != msg.P["id"] || im["sequence"] != float64(1) || im["content"] != "FYI: fixed" || im["sender"] != a ||
				im["session_id"] != sid || im["created_at"] != msg.P["created_at"] {
				t.Fatalf("inline message %v, logged message %v", im, msg.P)
			}
			wantEvents(t, h, got[1:], step{protocol.EventEnded, 4, pEnded(a)})
		}
		wantState(t, s, sid, protocol.StateEnded)
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "left", c: "left"})
		// The invitee cannot join the ended session; it replies by reopening
		// it (§7.2), becoming the joined reopener. Only that first reopen is
		// an invitee's privilege.
		_, err = s.Join(bg, sid, b)
		wantConflict(t, err, protocol.CodeSessionEnded)
		_, err = reopen(s, sid, b, []string{a}, nil)
		must(t, err)
		wantParticipants(t, s, sid, map[string]string{a: "invited", b: "joined", c: "left"})
		wantEvents(t, "log after the invitee's reopen", fullLog(t, s, sid)[4:],
			step{protocol.EventReopened, 5, pReopened(b)}, step{protocol.EventInvited, 6, pInvited(a, b, "fyi")})
		if got := visible(t, s, sid, b); len(got) != 6 {
			t.Fatalf("the invitee, joined by reopening, sees %s", describe(got))
		}
		wantEvents(t, "creator re-invited", visible(t, s, sid, a), step{protocol.EventMessage, 1, nil}, step{protocol.EventInvited, 2, nil},
			step{protocol.EventInvited, 3, nil}, step{protocol.EventEnded, 4, nil}, step{protocol.EventReopened, 5, nil}, step{protocol.EventInvited, 6, nil})
		wantEvents(t, "other invitee, not re-invited", visible(t, s, sid, c), step{protocol.EventInvited, 3, nil}, step{protocol.EventEnded, 4, nil})
		_, err = s.End(bg, sid, b)
		must(t, err)
		_, err = reopen(s, sid, a, nil, nil)
		wantConflict(t, err, protocol.CodeNotJoined)
		// The other send-and-end invitee lost that privilege with the first reopen.
		_, err = reopen(s, sid, c, nil, nil)
		wantConflict(t, err, protocol.CodeNotJoined)

		// Without end_after_send no invitation carries the message.
		r2, _, err := s.CreateSession(bg, store.CreateSession{Creator: a, Invite: []string{b}, Initial: &protocol.InitialMessage{Content: text("x")}})
		must(t, err)
		if p := decode(t, visible(t, s, r2.SessionID, b)[0]).P; p["initial_message"] != nil {
			t.Fatalf("plain create inlined the message: %v", p)
		}
	})
}

// Reopen: who may, what each kind of prior participant sees, and that
// re-invitations pass trust.
func TestReopen(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c, d, e, f := "@a.one", "@b.two", "@c.three", "@d.four", "@e.five", "@f.six"
		agents(t, s, a, b, c, d, e, f)
		sid := create(t, s, a, "t", b, c, d, f) // 1..4 invited b c d f
		join(t, s, sid, b, c, f)                // 5 6 7
		send(t, s, sid, b, "before")            // 8
		_, err := s.Leave(bg, sid, f)           // 9: f left before the end
		must(t, err)
		_, err = s.End(bg, sid, a) // 10: d (invited) becomes left
		must(t, err)
		wantParticipants(t, s, sid, map[string]string{a: "joined", b: "joined", c: "joined", d: "left", f: "left"})

		// Only a participant joined at the end may reopen.
		for _, h := range []string{d, f} {
			_, err := reopen(s, sid, h, []string{a}, nil)
			wantConflict(t, err, protocol.CodeNotJoined)
		}
		_, err = reopen(s, sid, e, nil, nil)
		wantNotFound(t, err)

		// c reopens, re-inviting b (prior joined) and f (prior left), inviting e (new).
		commit, err := reopen(s, sid, c, []string{b, f, e}, &protocol.InitialMessage{Content: text("follow-up")})
		must(t, err)
		if commit == nil || len(commit.Events) != 5 {
			t.Fatalf("reopen commit %+v", commit)
		}
		send(t, s, sid, c, "after reopen") // 16
		log := fullLog(t, s, sid)
		wantEvents(t, "log after reopen", log[9:],
			step{protocol.EventEnded, 10, pEnded(a)},
			step{protocol.EventReopened, 11, pReopened(c)},
			step{protocol.EventInvited, 12, pInvited(b, c, "t")},
			step{protocol.EventInvited, 13, pInvited(f, c, "t")},
			step{protocol.EventInvited, 14, pInvited(e, c, "t")},
			step{protocol.EventMessage, 15, nil},
			step{protocol.EventMessage, 16, nil})
		wantMessage(t, log[14], sid, c, "follow-up")
		wantState(t, s, sid, protocol.StateActive)
		wantParticipants(t, s, sid, map[string]string{a: "left", b: "invited", c: "joined", d: "left", e: "invited", f: "invited"})

		upTo := func(n int64) []step {
			var out []step
			for _, ev := range log[:n] {
				out = append(out, step{ev.Type, ev.Sequence, nil})
			}
			return out
		}
		// b: the transcript through the end, then reopened + its new invitation,
		// but not the messages after the reopen.
		wantEvents(t, "re-invited prior participant", visible(t, s, sid, b),
			append(upTo(10), step{protocol.EventReopened, 11, pReopened(c)}, step{protocol.EventInvited, 12, nil})...)
		// f left before the end: up to its own left, then reopened + invitation.
		wantEvents(t, "re-invited participant who had left", visible(t, s, sid, f),
			append(upTo(9), step{protocol.EventReopened, 11, nil}, step{protocol.EventInvited, 13, nil})...)
		// a was joined at the end but is not re-invited: nothing after the end.
		wantEvents(t, "prior participant not re-invited", visible(t, s, sid, a), upTo(10)...)
		// d was an invitee when it ended: its invitation and the end, nothing more.
		wantEvents(t, "invitee at the end", visible(t, s, sid, d), step{protocol.EventInvited, 3, nil}, step{protocol.EventEnded, 10, nil})
		// e is new: only its invitation (not session.reopened).
		wantEvents(t, "new invitee", visible(t, s, sid, e), step{protocol.EventInvited, 14, pInvited(e, c, "t")})
		wantEvents(t, "reopener", visible(t, s, sid, c), upTo(16)...)

		// After joining, b sees everything.
		join(t, s, sid, b) // 17
		if got := visible(t, s, sid, b); len(got) != 17 {
			t.Fatalf("b after joining sees %s", describe(got))
		}
		// a is left now, and its horizon is the end: to it the session is
		// ended, whether or not it was reopened since (errors.md).
		_, err = s.Join(bg, sid, a)
		wantConflict(t, err, protocol.CodeSessionEnded)
	})
}

// Re-invitations on reopen pass trust: a refusal is 404 and the session stays
// ended with nothing written.
func TestReopenReinvitationPassesTrust(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@a.one", "@b.two", "@c.three"
		agents(t, s, a, b, c)
		sid := create(t, s, a, "t", b, c)
		join(t, s, sid, b, c)
		_, err := s.End(bg, sid, a)
		must(t, err)
		before := fullLog(t, s, sid)
		parts := participants(t, s, sid)

		cases := []struct {
			name   string
			setup  func()
			invite []string
		}{
			{"re-invitee switched to an allowlist without the reopener", func() { must(t, s.SetPolicy(bg, b, "allowlist")) }, []string{b}},
			{"one of two re-invitees refuses", nil, []string{c, b}},
			{"re-invitee blocked the reopener", func() {
				must(t, s.SetPolicy(bg, b, "open"))
				_, err := s.Block(bg, b, a)
				must(t, err)
			}, []string{b}},
			{"two re-invitees block each other", func() {
				must(t, s.Unblock(bg, b, a))
				_, err := s.Block(bg, c, b)
				must(t, err)
			}, []string{b, c}},
			{"re-invitee deleted", func() {
				must(t, s.Unblock(bg, c, b))
				_, err := s.DeleteAgent(bg, c)
				must(t, err)
			}, []string{c}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.setup != nil {
					tc.setup()
				}
				commit, err := reopen(s, sid, a, tc.invite, &protocol.InitialMessage{Content: text("again?")})
				wantNotFound(t, err)
				if commit != nil {
					t.Fatalf("refused reopen committed %+v", commit)
				}
				wantState(t, s, sid, protocol.StateEnded)
				wantParticipants(t, s, sid, parts)
				if after := fullLog(t, s, sid); len(after) != len(before) {
					t.Fatalf("refused reopen appended:%s", describe(after[len(before):]))
				}
			})
		}
		// Once trust allows it, the same reopen succeeds.
		_, err = reopen(s, sid, a, []string{b}, nil)
		must(t, err)
		wantState(t, s, sid, protocol.StateActive)
	})
}
