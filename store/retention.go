package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/aspd/aspd/protocol"
)

// Retention (docs/operators.md, "Redaction and retention"): an opt-in
// policy that deletes sessions ended longer ago than a cutoff. The
// whitepaper preserves an ended session's transcript indefinitely
// (Appendix C.2); retention is an operator's deliberate departure from
// that, off by default, and `aspd export` before it is the way to keep one.
//
// A session is purged in several transactions, each bounded, so that a
// session of a million events never holds the write lock (SQLite's one
// writer, PostgreSQL's session row) for long:
//
//  1. Under the session row's lock, and only if it is still ended before
//     the cutoff (a reopen in between wins): its participants go, with
//     every per-session row beside the log (cursors, idempotency keys,
//     Chorus cursors, deliveries and callbacks, binding moments). From
//     this commit on, no agent can see, send to or reopen the session:
//     every session action starts by locking it with its participants.
//  2. Its events go from the top down, at most batch per transaction,
//     last_seq following them down in the same transaction, so that at
//     every commit the log is 1..last_seq, gap-free: an export taken
//     midway is still a valid file.
//  3. With no event left, the session row goes.
//
// A purge interrupted anywhere (a crash, the store down) is finished by
// the next sweep: the session is still ended before the cutoff, and every
// step is idempotent.

// SessionsEndedBefore returns up to limit ids of sessions ended before
// cutoff (epoch ms), those ended longest ago first.
func (s *Store) SessionsEndedBefore(ctx context.Context, cutoff int64, limit int) ([]string, error) {
	ids, err := queryStrings(ctx, s.read, `SELECT id FROM sessions WHERE state = $1 AND ended_at < $2 ORDER BY ended_at, id LIMIT $3`,
		protocol.StateEnded, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("store: sessions ended before: %w", err)
	}
	return ids, nil
}

// PurgeSession deletes session id and everything of it, if it is ended
// before cutoff (epoch ms), deleting at most batch events per transaction.
// It returns the number of events deleted and whether the session is gone:
// false, with no error, when it was not ended before the cutoff (active,
// reopened, ended since) or does not exist. progress, when not nil, is
// called after each committed batch with the events it deleted.
func (s *Store) PurgeSession(ctx context.Context, id string, cutoff int64, batch int, progress func(events int64)) (int64, bool, error) {
	if batch < 1 {
		return 0, false, errors.New("store: purge: batch must be at least 1")
	}
	var ok bool
	if err := s.inTx(ctx, func(tx *sql.Tx) error {
		ok = false
		if _, err := s.lockEndedBefore(ctx, tx, id, cutoff); err != nil {
			return err
		}
		for _, q := range purgeSideTables {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("store: purge %s: %w", id, err)
			}
		}
		ok = true
		return nil
	}); errors.Is(err, ErrNotFound) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	var total int64
	for {
		// Transactions do not see ctx's cancellation (runTx); a purge
		// stops between two of them, to be finished by the next sweep.
		if err := ctx.Err(); err != nil {
			return total, false, err
		}
		var deleted int64
		done := false
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			deleted, done = 0, false
			last, err := s.lockEndedBefore(ctx, tx, id, cutoff)
			if err != nil {
				return err
			}
			if last == 0 {
				if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = $1`, id); err != nil {
					return fmt.Errorf("store: purge %s: session: %w", id, err)
				}
				s.members.forget(id)
				done = true
				return nil
			}
			low := max(last-int64(batch), 0)
			res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE session_id = $1 AND sequence > $2`, id, low)
			if err != nil {
				return fmt.Errorf("store: purge %s: events: %w", id, err)
			}
			if deleted, err = res.RowsAffected(); err != nil {
				return fmt.Errorf("store: purge %s: events: %w", id, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE sessions SET last_seq = $2 WHERE id = $1`, id, low); err != nil {
				return fmt.Errorf("store: purge %s: last_seq: %w", id, err)
			}
			return nil
		})
		if errors.Is(err, ErrNotFound) {
			return total, false, nil // cannot happen once step 1 committed, but never purge what is not due
		}
		if err != nil {
			return total, false, err
		}
		total += deleted
		if deleted > 0 && progress != nil {
			progress(deleted)
		}
		if done {
			return total, ok, nil
		}
	}
}

// purgeSideTables delete a session's rows beside its log and its row
// (step 1 above); $1 is the session id.
var purgeSideTables = []string{
	`DELETE FROM participants WHERE session_id = $1`,
	`DELETE FROM cursors WHERE session_id = $1`,
	`DELETE FROM message_keys WHERE session_id = $1`,
	`DELETE FROM session_keys WHERE session_id = $1`,
	`DELETE FROM chorus_cursors WHERE session_id = $1`,
	`DELETE FROM chorus_deliveries WHERE session_id = $1`,
	`DELETE FROM chorus_callbacks WHERE session_id = $1`,
	`DELETE FROM binding_moments WHERE session_id = $1`,
}

// lockEndedBefore locks session id's row and returns its last_seq, or
// ErrNotFound unless it exists and is ended before cutoff.
func (s *Store) lockEndedBefore(ctx context.Context, tx *sql.Tx, id string, cutoff int64) (int64, error) {
	var state string
	var ended sql.NullInt64
	var last int64
	err := tx.QueryRowContext(ctx, `SELECT state, ended_at, last_seq FROM sessions WHERE id = $1`+s.d.forUpdate, id).Scan(&state, &ended, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("store: purge %s: lock: %w", id, err)
	}
	if state != protocol.StateEnded || !ended.Valid || ended.Int64 >= cutoff {
		return 0, ErrNotFound
	}
	return last, nil
}
