package store

import (
	"context"

	"github.com/aspd/aspd/protocol"
)

// The operator's changes to a session (the console's End and Remove). They
// are not a participant's acts: the operator is in no session, so they lock
// the session with lockedSession, without withSession's membership check,
// and the events they append name no agent as the actor.

// operatorSession runs fn on active session id, locked, in one transaction
// (inTx, so an audit entry in ctx is written with the change); an ended
// session is ErrSessionEnded.
func (s *Store) operatorSession(ctx context.Context, id string, fn func(t *sessionTx) error) (*Commit, error) {
	return s.lockedSession(ctx, id, func(t *sessionTx) error {
		if t.state != protocol.StateActive {
			return ErrSessionEnded
		}
		return fn(t)
	})
}

// OperatorEnd ends active session id on the operator's behalf. The
// session.ended has no ended_by (as a session that ends because everyone
// left): no agent ended it. An ended session is ErrSessionEnded.
func (s *Store) OperatorEnd(ctx context.Context, id string) (*Commit, error) {
	return s.operatorSession(ctx, id, func(t *sessionTx) error { return t.end("") })
}

// RemoveParticipant takes h, joined or invited, out of active session id:
// a session.left {agent: h, reason: left} as if h had left (the session
// ends when no joined participant remains). A handle that is not a current
// participant (never one, or already left) is ErrNotFound.
func (s *Store) RemoveParticipant(ctx context.Context, id, h string) (*Commit, error) {
	return s.operatorSession(ctx, id, func(t *sessionTx) error {
		if st := t.status(h); st != protocol.StatusJoined && st != protocol.StatusInvited {
			return ErrNotFound
		}
		return t.leave(h, protocol.LeftReasonLeft, false)
	})
}
