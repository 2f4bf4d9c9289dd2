// Package visibility decides which events of a session an agent may see, and
// tracks how far each agent has been delivered (its durable cursors). The
// events read API, replay on connect and live delivery all call Visible, so
// there is exactly one definition of eligibility.
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

// Cursor is an agent's delivery position in one session: the highest
// sequence written to its live connections.
type Cursor struct {
	Handle    string
	SessionID string
	Seq       int64
}
