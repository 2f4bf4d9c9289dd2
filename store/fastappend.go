package store

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/aspd/aspd/internal/search"
	"github.com/aspd/aspd/protocol"
)

// One round trip for a lone message. The message path's transaction takes
// two: one to lock the session row (and learn its last sequence and
// members_version), one to append and commit. When a group-commit batch is
// one message without an idempotency key, and the store has the session's
// row and members from its own last write (members.go), appendCached
// applies the message rule to them and sends BEGIN, one conditional
// append and COMMIT together. The append's UPDATE of the session row
// requires the row to be as guessed (the previous sequence, the same
// members_version, the same state), and inserts the event only if it is.
// PostgreSQL re-checks an UPDATE's condition on the newest row version
// once a concurrent writer's lock is released, so a guess that another
// transaction made wrong, on this node or another, matches no row:
// nothing is written and the message takes the locking path. The guess
// decides only acceptance; a message the rule would refuse (or that needs
// a read, such as a sender that has left) takes the locking path, which
// answers from the locked row.

// appendCached tries the one-round-trip append of req. ok is false when it
// did not apply (nothing was written): the caller runs appendMessages.
func (s *Store) appendCached(ctx context.Context, req *SendMessage) (sendResult, bool) {
	if req.IdempotencyKey != "" || s.members == nil {
		return sendResult{}, false
	}
	now := s.nowMs()
	t := s.members.rowTx(req.SessionID, now)
	if !cachedAccepts(t, req) {
		return sendResult{}, false
	}
	var hit, rerun bool
	var resp protocol.SendMessageResponse
	err := s.inQueuedTx(ctx, func(q stmtQueue) error {
		if rerun { // inQueuedTx runs this again on another connection: start afresh
			if t = s.members.rowTx(req.SessionID, now); !cachedAccepts(t, req) {
				return errNoGuess
			}
		}
		rerun = true
		t.ctx, t.q, t.d = ctx, q, s.d
		m := t.message(req.Sender, req.Content, req.Metadata, "")
		ev, err := t.append(protocol.EventMessage, req.Sender, nil, m)
		if err != nil {
			return err
		}
		ev.index = req.index
		resp = protocol.SendMessageResponse{MessageID: m.ID, Sequence: m.Sequence}
		hit = false
		// Left queued: it goes with the COMMIT, in the same round trip on
		// PostgreSQL, and sets hit as it is answered.
		queueOneEventIf(q, s.d, ev, t, &hit)
		return nil
	})
	switch {
	case errors.Is(err, errNoGuess):
		return sendResult{}, false
	case err != nil:
		return sendResult{err: err}, true
	case !hit:
		s.members.rowMissed(req.SessionID, now)
		s.guesses.misses.Add(1)
		return sendResult{}, false
	}
	s.guesses.hits.Add(1)
	s.members.putRow(t, true)
	return sendResult{resp: resp, commit: t.commit()}, true
}

// errNoGuess: the cached row went away between the check and the
// transaction.
var errNoGuess = errors.New("store: no cached session row")

// cachedAccepts reports whether the message rule accepts req on t without
// a read: an active session whose sender is joined and whose frame
// recipients are current participants.
func cachedAccepts(t *sessionTx, req *SendMessage) bool {
	if t == nil || t.state != protocol.StateActive || t.status(req.Sender) != protocol.StatusJoined {
		return false
	}
	for _, h := range req.FrameRecipients {
		if st := t.status(h); st != protocol.StatusJoined && st != protocol.StatusInvited {
			return false
		}
	}
	return true
}

// queueOneEventIf is queueOneEvent on a guessed row: the event is inserted,
// and the session's last_seq moved to it, only if the row still has the
// previous sequence, t's members_version and t's state; *hit reports it.
func queueOneEventIf(q stmtQueue, d dialect, e *StoredEvent, t *sessionTx, hit *bool) {
	in := e.index
	if in == nil {
		in = newSearchInput(d, search.ExtractEvent(e.Type, e.Body))
	}
	args := make([]any, 0, 13)
	args = append(args, e.SessionID, e.Sequence, e.EventID, e.Type, e.Subject, encodeAudience(e.Audience), e.CreatedAt, string(e.Body), in.text)
	scan := func(rows rowScanner) error {
		for rows.Next() {
			*hit = true
		}
		return nil
	}
	if !d.arrayParams {
		q.Exec("advance session if unchanged", advanceSessionIf, []any{e.SessionID, e.Sequence, t.membersVersion, t.state})
		q.Query("insert event if advanced", insertOneEventIfAdvanced, args, scan)
		return
	}
	q.Query("append event if unchanged", appendOneEventIf, append(args, in.words, in.pairs, t.membersVersion, t.state), scan)
}

// advanceSessionIf moves a session's last_seq to $2 if it is $2 - 1 and the
// row has members_version $3 and state $4.
const advanceSessionIf = `UPDATE sessions SET last_seq = $2 WHERE id = $1 AND last_seq = $2 - 1 AND members_version = $3 AND state = $4`

// insertOneEventIfAdvanced is insertOneEvent run only when the statement
// before it (advanceSessionIf) changed a row.
var insertOneEventIfAdvanced = func() string {
	cols, vals := sqliteDialect.eventSearchColumns("$9", "", "")
	return `INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body` + cols + `)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8` + vals + ` WHERE changes() = 1
		RETURNING sequence`
}()

// appendOneEventIf is appendOneEvent ($1 to $11) on a guessed row: the
// UPDATE requires last_seq $2 - 1, members_version $12 and state $13, and
// the INSERT takes its one row from the UPDATE's.
var appendOneEventIf = func() string {
	cols, vals := postgresDialect.eventSearchColumns("$9::text", "$10::text", "$11::text")
	return `WITH u AS (UPDATE sessions SET last_seq = $2::bigint
			WHERE id = $1::text AND last_seq = $2::bigint - 1 AND members_version = $12::bigint AND state = $13::text RETURNING id)
		INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body` + cols + `)
		SELECT u.id, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::text` + vals + ` FROM u
		RETURNING sequence`
}()

// guessStats counts appendCached's guesses that held (one round trip) and
// those that did not (a round trip lost, then the locking path).
type guessStats struct{ hits, misses atomic.Int64 }

// Guesses reports how many lone messages were appended in one round trip
// on a cached session row (hits) and how many found the row changed
// (misses), since the store opened: aspd_store_guessed_appends_total.
func (s *Store) Guesses() (hits, misses int64) { return s.guesses.hits.Load(), s.guesses.misses.Load() }

// WrittenElsewhere tells the store that another node committed to these
// sessions (the cluster's wake-up, received before their events are read):
// their cached rows are dropped, so that this node's next message to each
// takes the locking path instead of a guess that would fail.
func (s *Store) WrittenElsewhere(sessionIDs ...string) { s.members.forgetRows(sessionIDs) }
