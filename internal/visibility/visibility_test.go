package visibility

import (
	"fmt"
	"testing"

	"github.com/aspd/aspd/protocol"
)

func TestVisible(t *testing.T) {
	const me = "@acme.support"
	tests := []struct {
		name string
		v    View
		m    Meta
		want bool
	}{
		{"joined sees a message", View{me, "joined", Joined}, Meta{Sequence: 9, Type: protocol.EventMessage}, true},
		{"invitee does not see a message", View{me, "invited", 0}, Meta{Sequence: 1, Type: protocol.EventMessage}, false},
		{"invitee sees its own invitation", View{me, "invited", 0}, Meta{Sequence: 2, Type: protocol.EventInvited, Subject: me}, true},
		{"invitee does not see another's invitation", View{me, "invited", 0}, Meta{Sequence: 3, Type: protocol.EventInvited, Subject: "@acme.engineer"}, false},
		{"invitee sees ended when in its audience", View{me, "left", 0}, Meta{Sequence: 4, Type: protocol.EventEnded, Audience: []string{"@x.y", me}}, true},
		{"invitee does not see ended outside its audience", View{me, "left", 0}, Meta{Sequence: 4, Type: protocol.EventEnded}, false},
		{"left sees up to its own left", View{me, "left", 7}, Meta{Sequence: 7, Type: protocol.EventLeft, Subject: me}, true},
		{"left sees nothing after its left", View{me, "left", 7}, Meta{Sequence: 8, Type: protocol.EventMessage}, false},
		{"block-silenced left does not see its own left", View{me, "left", 6}, Meta{Sequence: 7, Type: protocol.EventLeft, Subject: me}, false},
		{"re-invited prior participant sees reopened", View{me, "invited", 10}, Meta{Sequence: 11, Type: protocol.EventReopened, Audience: []string{me}}, true},
		{"prior participant not re-invited does not see reopened", View{me, "left", 10}, Meta{Sequence: 11, Type: protocol.EventReopened}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Visible(tt.v, tt.m); got != tt.want {
				t.Errorf("Visible = %v, want %v", got, tt.want)
			}
		})
	}
}

// A walk test's log: each event, and the horizon of the walking agent (me)
// right after it, where it changes.
type ev struct {
	typ, subj string
	aud       []string
	hz        int64 // me's horizon after the event; same: unchanged
}

const (
	me    = "@me.agent"
	other = "@o.agent"
	third = "@t.agent"
	same  = -1
)

func msg() ev                { return ev{typ: protocol.EventMessage, subj: other, hz: same} }
func inv(h string) ev        { return ev{typ: protocol.EventInvited, subj: h, hz: same} }
func join(h string) ev       { return ev{typ: protocol.EventJoined, subj: h, hz: same} }
func left(h string) ev       { return ev{typ: protocol.EventLeft, subj: h, hz: same} }
func ended(aud ...string) ev { return ev{typ: protocol.EventEnded, subj: other, aud: aud, hz: same} }
func reopened(aud ...string) ev {
	return ev{typ: protocol.EventReopened, subj: other, aud: aud, hz: same}
}
func (e ev) to(hz int64) ev { e.hz = hz; return e }
func (e ev) meta(seq int64) *Meta {
	return &Meta{Sequence: seq, Type: e.typ, Subject: e.subj, Audience: e.aud}
}

// horizons returns me's horizon after each event of log, starting from
// before (its horizon before the first event).
func horizons(log []ev, before int64) []int64 {
	out := make([]int64, len(log))
	hz := before
	for i, e := range log {
		if e.hz != same {
			hz = e.hz
		}
		out[i] = hz
	}
	return out
}

// walkMode is how a caller keeps the walk's view.
type walkMode int

const (
	// atHead: the view read with the head, kept for the whole pass
	// (wait_for_events, Chorus, a WebSocket replay on connect).
	atHead walkMode = iota
	// following: a view as of the cursor, replaced at each event Turns
	// reports by the view right after it, or a newer one (a live WebSocket
	// connection that has followed the session: it takes the view a commit
	// carried or the store's, never one older than it holds).
	following
	// resumed: atHead, but the pass is cut after every event it shows and
	// resumed from there with a new Walk and the ResetAt reached, as
	// wait_for_events does at max_events (here 1).
	resumed
)

// walkCase is a log and where a pass over it starts.
type walkCase struct {
	log             []ev
	before          int64 // me's horizon before the first event
	cursor, resetAt int64
	viewAt          int64 // following: the first view is the one after this event (0: the cursor's)
}

// pass walks the log as a caller does, from the cursor, and returns the
// sequences it delivers, in order, and the walk's ResetAt at the end.
func pass(t *testing.T, c walkCase, mode walkMode) ([]int64, int64) {
	t.Helper()
	hz := horizons(c.log, c.before)
	viewAt := int64(len(c.log))
	if mode == following {
		viewAt = max(c.cursor, c.viewAt)
	}
	view := func(at int64) View {
		if at == 0 {
			return View{Handle: me, VisibleThrough: c.before}
		}
		return View{Handle: me, VisibleThrough: hz[at-1]}
	}
	w := NewWalk(view(viewAt), c.cursor, c.resetAt)
	out := []int64{}
	sent := c.cursor
	for steps := 0; sent < int64(len(c.log)); steps++ {
		if steps > 10*len(c.log) {
			t.Fatalf("the pass does not end: delivered %v", out)
		}
		m := c.log[sent].meta(sent + 1)
		if mode == following && w.Turns(m) {
			viewAt = max(viewAt, m.Sequence)
			w.View = view(viewAt)
		}
		switch w.Step(m) {
		case Restart:
			sent = 0
			continue
		case Show:
			out = append(out, m.Sequence)
			if mode == resumed {
				w.Cut(int64(len(c.log)))
				w = NewWalk(w.View, m.Sequence, w.ResetAt)
			}
		}
		sent = m.Sequence
	}
	return out, w.ResetAt
}

func seqs(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func cat(parts ...[]int64) []int64 {
	out := []int64{}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestWalk: every membership transition, walked as a caller with the view
// read at the head, as one that follows the view event by event, and as one
// that reads at the head and is cut after every event it shows (which must
// deliver what the uncut pass delivers).
func TestWalk(t *testing.T) {
	J := Joined
	// invitedThenJoined: me invited at 2, joins at 4.
	invitedThenJoined := []ev{msg(), inv(me), msg(), join(me).to(J), msg()}
	// leaveReinviteJoin: me joins at 3, leaves at 5, is invited again at 7
	// and joins again at 9.
	leaveReinviteJoin := []ev{msg(), inv(me), join(me).to(J), msg(), left(me).to(5), msg(), inv(me), msg(), join(me).to(J), msg()}
	// endedThenReopened: me joined at 3, the session ends at 5 and another
	// participant reopens it at 6, re-inviting me or not; rest follows.
	endedThenReopened := func(reinvited bool, rest ...ev) []ev {
		log := []ev{msg(), inv(me), join(me).to(J), msg(), ended()}
		if reinvited {
			log = append(log, reopened(me).to(5))
		} else {
			log = append(log, reopened().to(5))
		}
		return append(log, rest...)
	}
	tests := []struct {
		name string
		walkCase
		atHead, following []int64 // what each kind of caller delivers
		wantResetAt       int64
	}{
		{
			name:     "invited, never joined: only its own invitation, not another's",
			walkCase: walkCase{log: []ev{msg(), inv(me), msg(), inv(third), msg()}},
			atHead:   []int64{2}, following: []int64{2},
		},
		{
			name:     "invited: the session ends with it in the audience",
			walkCase: walkCase{log: []ev{msg(), inv(me), msg(), ended(third, me)}},
			atHead:   []int64{2, 4}, following: []int64{2, 4},
		},
		{
			name:     "invited: an ended outside its audience is not shown",
			walkCase: walkCase{log: []ev{msg(), inv(me), join(third), ended()}},
			atHead:   []int64{2}, following: []int64{2},
		},
		{
			// Read at the head, the view is already joined: what lies
			// between the cursor and the join also comes once before the
			// restart (de-duplication absorbs it).
			name:     "the join restarts at 1",
			walkCase: walkCase{log: invitedThenJoined, cursor: 2},
			atHead:   cat([]int64{3}, seqs(1, 5)), following: seqs(1, 5),
			wantResetAt: 4,
		},
		{
			// Followed from before the invitation: the invitation, then the
			// restart. Read at the head: joined from 0, the pass already
			// carries the transcript and only records the join.
			name:     "a pass from 0",
			walkCase: walkCase{log: invitedThenJoined},
			atHead:   seqs(1, 5), following: cat([]int64{2}, seqs(1, 5)),
			wantResetAt: 4,
		},
		{
			name:     "a join at or below ResetAt does not restart again (a restarted pass, resumed)",
			walkCase: walkCase{log: invitedThenJoined, cursor: 2, resetAt: 4, viewAt: 4},
			atHead:   seqs(3, 5), following: seqs(3, 5),
			wantResetAt: 4,
		},
		{
			name:     "a later join restarts although an earlier one was recorded",
			walkCase: walkCase{log: leaveReinviteJoin, cursor: 5, resetAt: 3},
			atHead:   cat(seqs(6, 8), seqs(1, 10)), following: cat([]int64{7}, seqs(1, 10)),
			wantResetAt: 9,
		},
		{
			name:     "joined, then left: up to its own session.left, nothing after",
			walkCase: walkCase{log: []ev{msg(), inv(me), join(me).to(J), msg(), left(me).to(5), msg(), msg()}, cursor: 3, resetAt: 3},
			atHead:   []int64{4, 5}, following: []int64{4, 5},
			wantResetAt: 3,
		},
		{
			name:     "left by a block: not even its own session.left",
			walkCase: walkCase{log: []ev{msg(), inv(me), join(me).to(J), msg(), left(me).to(4), msg()}, cursor: 3, resetAt: 3},
			atHead:   []int64{4}, following: []int64{4},
			wantResetAt: 3,
		},
		{
			name:     "left, invited again, not joined: only the new invitation",
			walkCase: walkCase{log: leaveReinviteJoin[:8], cursor: 5, resetAt: 3},
			atHead:   []int64{7}, following: []int64{7},
			wantResetAt: 3,
		},
		{
			// Followed with the view of a connection set up at 3, when the
			// agent was joined: the pass from 0 stops carrying the
			// transcript at the leave, and the second join restarts it.
			name:     "a pass from 0 that leaves and joins again restarts at the second join",
			walkCase: walkCase{log: leaveReinviteJoin, viewAt: 3},
			atHead:   seqs(1, 10), following: cat(seqs(1, 5), []int64{7}, seqs(1, 10)),
			wantResetAt: 9,
		},
		{
			name:     "ended and reopened, not re-invited: up to the end",
			walkCase: walkCase{log: endedThenReopened(false, msg()), cursor: 3, resetAt: 3},
			atHead:   []int64{4, 5}, following: []int64{4, 5},
			wantResetAt: 3,
		},
		{
			name:     "ended and reopened, re-invited: the reopen, the invitation, and the transcript on joining",
			walkCase: walkCase{log: endedThenReopened(true, inv(me), msg(), join(me).to(J), msg()), cursor: 5, resetAt: 3},
			atHead:   cat(seqs(6, 8), seqs(1, 10)), following: cat([]int64{6, 7}, seqs(1, 10)),
			wantResetAt: 9,
		},
		{
			name:     "reopened by the agent itself: joined, no restart",
			walkCase: walkCase{log: []ev{msg(), inv(me), join(me).to(J), msg(), ended(), reopened().to(J), msg()}, cursor: 5, resetAt: 3},
			atHead:   []int64{6, 7}, following: []int64{6, 7},
			wantResetAt: 3,
		},
		{
			name:     "other participants' invitations, joins and leaves change nothing",
			walkCase: walkCase{log: []ev{msg(), inv(third), join(third), left(third), msg()}, before: J, cursor: 2},
			atHead:   seqs(3, 5), following: seqs(3, 5),
		},
		{
			name:     "the creator, joined from the start, from 0",
			walkCase: walkCase{log: []ev{msg(), inv(third), join(third), msg()}, before: J},
			atHead:   seqs(1, 4), following: seqs(1, 4),
		},
	}
	for _, tt := range tests {
		for _, mode := range []walkMode{atHead, following, resumed} {
			want, name := tt.atHead, tt.name+"/at head"
			switch mode {
			case following:
				want, name = tt.following, tt.name+"/following"
			case resumed:
				name = tt.name + "/resumed after each event"
			}
			t.Run(name, func(t *testing.T) {
				got, resetAt := pass(t, tt.walkCase, mode)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("delivered %v, want %v", got, want)
				}
				// Cut moves ResetAt to the head in a pass from 0.
				if mode != resumed && resetAt != tt.wantResetAt {
					t.Errorf("ResetAt %d, want %d", resetAt, tt.wantResetAt)
				}
			})
		}
	}
}

// TestWalkTurns: the events that may change the agent's view are its own
// membership events and every session.reopened.
func TestWalkTurns(t *testing.T) {
	w := NewWalk(View{Handle: me}, 0, 0)
	for _, tt := range []struct {
		e    ev
		want bool
	}{
		{inv(me), true}, {join(me), true}, {left(me), true}, {reopened(), true}, {reopened(third), true},
		{inv(third), false}, {join(third), false}, {left(third), false}, {msg(), false}, {ended(me), false},
		{ev{typ: protocol.EventDisconnected, subj: me}, false}, {ev{typ: protocol.EventReconnected, subj: me}, false},
	} {
		if got := w.Turns(tt.e.meta(1)); got != tt.want {
			t.Errorf("Turns(%s of %s) = %v, want %v", tt.e.typ, tt.e.subj, got, tt.want)
		}
	}
}

// TestWalkDoesNotAllocate: Step runs per event per connection.
func TestWalkDoesNotAllocate(t *testing.T) {
	log := benchLog()
	w := NewWalk(View{Handle: me, VisibleThrough: Joined}, 0, 0)
	if n := testing.AllocsPerRun(100, func() {
		for i := range log {
			_ = w.Step(&log[i])
		}
	}); n != 0 {
		t.Fatalf("%v allocations per pass, want 0", n)
	}
}

// benchLog is a session of 1,000 events, mostly messages, with other
// participants' membership events and a reopen among them.
func benchLog() []Meta {
	log := make([]Meta, 1000)
	for i := range log {
		log[i] = Meta{Sequence: int64(i + 1), Type: protocol.EventMessage, Subject: other}
		switch i % 100 {
		case 10:
			log[i].Type, log[i].Subject = protocol.EventInvited, third
		case 20:
			log[i].Type, log[i].Subject = protocol.EventJoined, third
		case 30:
			log[i].Type, log[i].Subject = protocol.EventLeft, third
		case 40:
			log[i].Type, log[i].Audience = protocol.EventReopened, []string{third}
		}
	}
	return log
}

// BenchmarkWalk: one Step per event, for a joined agent and for an invitee
// (whose Step also looks at invitations and audiences).
func BenchmarkWalk(b *testing.B) {
	log := benchLog()
	for _, bc := range []struct {
		name string
		hz   int64
	}{{"joined", Joined}, {"invited", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			w := NewWalk(View{Handle: me, VisibleThrough: bc.hz}, 0, 0)
			shown := 0
			for i := 0; i < b.N; i++ {
				if w.Step(&log[i%len(log)]) == Show {
					shown++
				}
			}
			if shown < 0 {
				b.Fatal(shown)
			}
		})
	}
}
