// Package visibility decides which events of a session an agent may see, and
// tracks how far each agent has been delivered (its durable cursors). Visible
// is the one definition of eligibility, for a single event (the events read
// API); Walk is the one pass over a session's log that delivery makes with
// it (WebSocket replay and live delivery, wait_for_events, Chorus webhooks),
// restarting at sequence 1 when the agent joins.
package visibility

import "github.com/aspd/aspd/protocol"

// Joined is the horizon of a participant who is currently joined: it may see
// every event of the session, past and future.
const Joined = int64(1<<63 - 1)

// View is what eligibility needs to know about one agent in one session: its
// status and its horizon, the highest sequence it may read.
//
// The horizon encodes whitepaper §6.4 and Appendix C.5:
//   - joining sets it to Joined: the whole transcript up to the join is
//     replayed onto the joiner, then everything live;
//   - leaving at sequence L (voluntarily or by grace expiry) sets it to L,
//     so the agent sees events up to and including its own session.left;
//   - a block-induced leave at L sets it to L-1: the blocked agent is never
//     told, so it does not see that session.left either;
//   - a reopen at R that does not re-invite a prior participant sets its
//     horizon to R-1; an invitee that never joined keeps horizon 0.
type View struct {
	Handle         string
	Status         string
	VisibleThrough int64
}

// Meta is the part of a stored event that eligibility looks at.
type Meta struct {
	Sequence int64
	Type     string
	Subject  string   // the agent the event is about (invitee, joiner, leaver, ...)
	Audience []string // agents who see this event although it is past their horizon
}

// Visible reports whether the agent of v may see the event m. Beyond its
// horizon an agent still sees its own invitations, and the events whose
// audience names it: session.ended for invitees who never joined, and
// session.reopened for prior participants who are re-invited.
func Visible(v View, m Meta) bool {
	if m.Sequence <= v.VisibleThrough {
		return true
	}
	if m.Type == protocol.EventInvited && m.Subject == v.Handle {
		return true
	}
	for _, h := range m.Audience {
		if h == v.Handle {
			return true
		}
	}
	return false
}

// Walk is one agent's pass over a session's log, in sequence order, from its
// cursor: the rule of whitepaper §6.4 and Appendix C.5 as delivery applies it
// (docs/delivery.md). For each event the caller asks Step, which answers
// Show (eligible: deliver it), Skip (pass over it; the cursor still moves) or
// Restart: the event is the agent's own session.joined, which grants the
// transcript before it, so the pass starts over at sequence 1 (the caller
// resets its position to 0 and reads again; the join itself comes again in
// the new pass and then shows).
//
// ResetAt remembers the latest own join the pass has met: a join at or below
// it never restarts again, so a pass that is resumed below it (a restarted
// pass cut short, or a cursor moved back by another connection's restart)
// does not loop. A pass that began at sequence 0 with the agent joined
// already carries the transcript and only records its joins (and, when the
// caller cuts it short, every join up to the head: Cut); it restarts once
// the agent's view stops being joined (it left, or a reopen cut it off) and
// a later join grants the transcript anew.
//
// The view is the caller's to keep current: when Turns reports an event that
// may change it (the agent's own invitation, join or leave, and any
// session.reopened), a caller that can read past the point its view is valid
// for replaces View before calling Step. A caller whose view is valid at the
// end of what it reads (wait_for_events, Chorus: the view read with the
// head) leaves it as is.
//
// A Walk is a small value and Step does not allocate: it runs per event per
// connection.
type Walk struct {
	View    View
	ResetAt int64 // the latest own session.joined met; joins at or below it do not restart
	whole   bool  // the pass began at 0 with the agent joined and it stayed joined
}

// NewWalk starts a pass for the agent of v from cursor (the last sequence
// already passed), remembering resetAt from an earlier pass of the same
// delivery stream (0 when none).
func NewWalk(v View, cursor, resetAt int64) Walk {
	return Walk{View: v, ResetAt: resetAt, whole: cursor == 0 && v.VisibleThrough == Joined}
}

// Cut tells the walk that its caller stops the pass early and will resume
// it later (with NewWalk, from where it stopped, and this ResetAt), its View
// holding through head. A pass that carries the transcript (it began at 0
// with the agent joined) then covers every own join up to head, met or not:
// ResetAt moves to head, so the resumed pass, which no longer begins at 0,
// does not restart at one of those joins and send the transcript again.
func (w *Walk) Cut(head int64) {
	if w.whole && head > w.ResetAt {
		w.ResetAt = head
	}
}

// Step is what a Walk makes of one event.
type Step uint8

const (
	Skip    Step = iota // not eligible: pass over it
	Show                // eligible: deliver it
	Restart             // the agent's own join: start the pass again at sequence 1
)

// Turns reports whether m may change the agent's view: its own
// session.invited, session.joined or session.left, or a session.reopened
// (which moves the horizon of every prior participant).
func (w *Walk) Turns(m *Meta) bool {
	switch m.Type {
	case protocol.EventInvited, protocol.EventJoined, protocol.EventLeft:
		return m.Subject == w.View.Handle
	case protocol.EventReopened:
		return true
	}
	return false
}

// Step decides the event m, the next one of the pass, with the current View.
func (w *Walk) Step(m *Meta) Step {
	// The common case first, inlined at the caller: a message within the
	// horizon.
	if m.Sequence <= w.View.VisibleThrough && m.Type == protocol.EventMessage {
		return Show
	}
	return w.step(m)
}

func (w *Walk) step(m *Meta) Step {
	if m.Type == protocol.EventMessage && len(m.Audience) == 0 {
		return Skip // beyond the horizon (Step showed it otherwise)
	}
	if w.Turns(m) {
		if w.View.VisibleThrough != Joined {
			w.whole = false
		}
		if m.Type == protocol.EventJoined && m.Subject == w.View.Handle && m.Sequence > w.ResetAt {
			w.ResetAt = m.Sequence
			if !w.whole {
				return Restart
			}
		}
	}
	if Visible(w.View, *m) {
		return Show
	}
	return Skip
}

// Cursor is an agent's delivery position in one session: the highest
// sequence written to its live connections.
type Cursor struct {
	Handle    string
	SessionID string
	Seq       int64
}
