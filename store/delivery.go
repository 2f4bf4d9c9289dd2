package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
)

// Pending is one session with events an agent has not been delivered yet.
type Pending struct {
	SessionID string
	View      visibility.View
	Cursor    int64 // highest sequence delivered
	LastSeq   int64 // the session's head
}

// PendingSessions lists the sessions where h may have undelivered events:
// the head is past h's cursor and h could see something past it (its horizon
// is past the cursor, or its status changed after it).
func (s *Store) PendingSessions(ctx context.Context, h string) ([]Pending, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT p.session_id, p.status, p.visible_through, COALESCE(c.seq, 0), s.last_seq
		FROM participants p
		JOIN sessions s ON s.id = p.session_id
		LEFT JOIN cursors c ON c.handle = p.handle AND c.session_id = p.session_id
		WHERE p.handle = $1 AND s.last_seq > COALESCE(c.seq, 0)
		  AND (p.visible_through > COALESCE(c.seq, 0) OR p.last_change_seq > COALESCE(c.seq, 0))
		ORDER BY p.session_id`, h)
	if err != nil {
		return nil, fmt.Errorf("store: pending sessions: %w", err)
	}
	defer rows.Close()
	var out []Pending
	for rows.Next() {
		p := Pending{View: visibility.View{Handle: h}}
		if err := rows.Scan(&p.SessionID, &p.View.Status, &p.View.VisibleThrough, &p.Cursor, &p.LastSeq); err != nil {
			return nil, fmt.Errorf("store: pending sessions: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Cursor returns h's delivery cursor in a session (0 when none).
func (s *Store) Cursor(ctx context.Context, h, sessionID string) (int64, error) {
	var seq int64
	err := s.read.QueryRowContext(ctx, `SELECT seq FROM cursors WHERE handle = $1 AND session_id = $2`, h, sessionID).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: cursor: %w", err)
	}
	return seq, nil
}

// SaveCursors writes a batch of cursors: on PostgreSQL in one statement of
// array parameters, whose one text stays prepared whatever the batch's
// size (a text per size would be prepared again and again); on SQLite in
// one statement per 200 rows.
func (s *Store) SaveCursors(ctx context.Context, cursors []visibility.Cursor) error {
	if len(cursors) == 0 {
		return nil
	}
	if s.d.arrayParams {
		handles, sids, seqs := make([]string, len(cursors)), make([]string, len(cursors)), make([]int64, len(cursors))
		for i, c := range cursors {
			handles[i], sids[i], seqs[i] = c.Handle, c.SessionID, c.Seq
		}
		if _, err := s.write.ExecContext(ctx, `INSERT INTO cursors (handle, session_id, seq)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
			ON CONFLICT (handle, session_id) DO UPDATE SET seq = excluded.seq`, handles, sids, seqs); err != nil {
			return fmt.Errorf("store: save cursors: %w", err)
		}
		return nil
	}
	for start := 0; start < len(cursors); start += 200 {
		batch := cursors[start:min(start+200, len(cursors))]
		var b strings.Builder
		b.WriteString(`INSERT INTO cursors (handle, session_id, seq) VALUES `)
		args := make([]any, 0, len(batch)*3)
		for i, c := range batch {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "($%d, $%d, $%d)", i*3+1, i*3+2, i*3+3)
			args = append(args, c.Handle, c.SessionID, c.Seq)
		}
		b.WriteString(` ON CONFLICT (handle, session_id) DO UPDATE SET seq = excluded.seq`)
		if _, err := s.write.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("store: save cursors: %w", err)
		}
	}
	return nil
}

// joinedSessions returns the active sessions h is joined in, sorted; with
// onlyDisconnected, only those where it is marked disconnected.
func joinedSessions(ctx context.Context, q querier, h string, onlyDisconnected bool) ([]string, error) {
	query := `SELECT p.session_id FROM participants p JOIN sessions s ON s.id = p.session_id
		WHERE p.handle = $1 AND p.status = 'joined' AND s.state = 'active'`
	if onlyDisconnected {
		query += ` AND p.disconnected = $2`
		return queryStrings(ctx, q, query+` ORDER BY p.session_id`, h, true)
	}
	return queryStrings(ctx, q, query+` ORDER BY p.session_id`, h)
}

// eachSession locks each session in ids (in order) within tx, runs fn, and
// saves; it collects the commits.
func (s *Store) eachSession(ctx context.Context, tx *sql.Tx, ids []string, fn func(t *sessionTx) error) ([]*Commit, error) {
	var commits []*Commit
	for _, id := range ids {
		t, err := s.lockSession(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		if err := fn(t); err != nil {
			return nil, err
		}
		if err := t.save(); err != nil {
			return nil, err
		}
		if c := t.commit(); c != nil {
			commits = append(commits, c)
		}
	}
	return commits, nil
}

// MarkOnline records that h has its first live connection. In every session
// where h was marked disconnected (inside the grace window) it appends
// session.reconnected.
func (s *Store) MarkOnline(ctx context.Context, h string) ([]*Commit, error) {
	var commits []*Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		commits, err = s.markOnlineTx(ctx, tx, h)
		return err
	})
	return commits, err
}

// markOnlineTx is MarkOnline inside tx.
func (s *Store) markOnlineTx(ctx context.Context, tx *sql.Tx, h string) ([]*Commit, error) {
	if _, err := tx.ExecContext(ctx, `INSERT INTO presence (handle, online, offline_since) VALUES ($1, $2, NULL)
		ON CONFLICT (handle) DO UPDATE SET online = excluded.online, offline_since = NULL`, h, true); err != nil {
		return nil, fmt.Errorf("store: presence: %w", err)
	}
	ids, err := joinedSessions(ctx, tx, h, true)
	if err != nil {
		return nil, err
	}
	return s.eachSession(ctx, tx, ids, func(t *sessionTx) error {
		if p := t.parts[h]; p == nil || p.status != protocol.StatusJoined || !p.disconnected || t.state != protocol.StateActive {
			return nil
		}
		t.participant(h).disconnected = false
		_, err := t.append(protocol.EventReconnected, h, nil, protocol.AgentPayload{Agent: h})
		return err
	})
}

// MarkOffline records that h's last live connection dropped: it appends
// session.disconnected to every active session h is joined in and starts
// the grace window.
func (s *Store) MarkOffline(ctx context.Context, h string) ([]*Commit, error) {
	var commits []*Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		commits, err = s.markOfflineTx(ctx, tx, h)
		return err
	})
	return commits, err
}

// markOfflineTx is MarkOffline inside tx.
func (s *Store) markOfflineTx(ctx context.Context, tx *sql.Tx, h string) ([]*Commit, error) {
	if _, err := tx.ExecContext(ctx, `INSERT INTO presence (handle, online, offline_since) VALUES ($1, $2, $3)
		ON CONFLICT (handle) DO UPDATE SET online = excluded.online, offline_since = excluded.offline_since`, h, false, s.nowMs()); err != nil {
		return nil, fmt.Errorf("store: presence: %w", err)
	}
	ids, err := joinedSessions(ctx, tx, h, false)
	if err != nil {
		return nil, err
	}
	return s.eachSession(ctx, tx, ids, func(t *sessionTx) error {
		if p := t.parts[h]; p == nil || p.status != protocol.StatusJoined || p.disconnected || t.state != protocol.StateActive {
			return nil
		}
		t.participant(h).disconnected = true
		_, err := t.append(protocol.EventDisconnected, h, nil, protocol.AgentPayload{Agent: h})
		return err
	})
}

// ExpireGrace promotes every disconnect older than the grace window to a
// session.left with reason grace_expired. offlineBefore is now minus the
// grace window, in epoch milliseconds.
func (s *Store) ExpireGrace(ctx context.Context, offlineBefore int64) ([]*Commit, error) {
	handles, err := queryStrings(ctx, s.read, `SELECT handle FROM presence WHERE offline_since IS NOT NULL AND offline_since <= $2 AND online = $1 ORDER BY handle`, false, offlineBefore)
	if err != nil {
		return nil, err
	}
	var all []*Commit
	for _, h := range handles {
		var commits []*Commit
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			// Re-check inside the transaction: the agent may have come back.
			res, err := tx.ExecContext(ctx, `UPDATE presence SET offline_since = NULL WHERE handle = $1 AND online = $2 AND offline_since IS NOT NULL AND offline_since <= $3`,
				h, false, offlineBefore)
			if err != nil {
				return fmt.Errorf("store: presence: %w", err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return nil
			}
			ids, err := joinedSessions(ctx, tx, h, true)
			if err != nil {
				return err
			}
			commits, err = s.eachSession(ctx, tx, ids, func(t *sessionTx) error {
				if p := t.parts[h]; p == nil || p.status != protocol.StatusJoined || !p.disconnected || t.state != protocol.StateActive {
					return nil
				}
				return t.leave(h, protocol.LeftReasonGraceExpired, false)
			})
			return err
		})
		if err != nil {
			return all, err
		}
		all = append(all, commits...)
	}
	return all, nil
}

// RecoverPresence runs at start-up. Agents that were online when the
// previous process stopped lost their connections at that moment: they are
// marked offline now, with a full grace window from now to come back, so a
// restart neither strands them as disconnected nor evicts them all at once.
// Agents already offline keep their original grace deadline.
func (s *Store) RecoverPresence(ctx context.Context) ([]*Commit, error) {
	// Agents online through a healthy Chorus endpoint did not lose it.
	handles, err := queryStrings(ctx, s.read, `SELECT handle FROM presence WHERE online = $1
		AND handle NOT IN (SELECT handle FROM chorus_endpoints WHERE failing = $2) ORDER BY handle`, true, false)
	if err != nil {
		return nil, err
	}
	var all []*Commit
	for _, h := range handles {
		commits, err := s.MarkOffline(ctx, h)
		if err != nil {
			return all, err
		}
		all = append(all, commits...)
	}
	return all, nil
}
