package store

import (
	"context"
	"database/sql"

	"github.com/aspd/aspd/protocol"
)

// The operator's changes to a session (the console's End and Remove). They
// are not a participant's acts: the operator is in no session, so they lock
// the session directly instead of going through withSession's membership
// check, and the events they append name no agent as the actor.

// operatorSession runs fn on locked session id in one transaction (inTx, so
// an audit entry in ctx is written with the change) and returns the commit.
func (s *Store) operatorSession(ctx context.Context, id string, fn func(t *sessionTx) error) (*Commit, error) {
	var commit *Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t, err := s.lockSession(ctx, tx, id)
		if err != nil {
			return err
		}
		if t.state != protocol.StateActive {
			return ErrSessionEnded
		}
		if err := fn(t); err != nil {
			return err
		}
		if err := t.save(); err != nil {
			return err
		}
		commit = t.commit()
		return nil
	})
	return commit, err
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
