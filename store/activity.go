package store

import (
	"context"
	"database/sql"
	"fmt"
)

// SessionActivity is what the console's session list shows beside a
// session: how many messages its log holds and when its last event was
// committed.
type SessionActivity struct {
	MessageCount   int64
	LastSequence   int64
	LastActivityAt int64 // epoch ms; 0 for a log without events
}

// SessionsActivity returns the activity of each of ids (a listing page).
// It reads existing columns and indexes only: the last event is one primary
// key lookup (session_id, sequence = sessions.last_seq), and the message
// count walks the session's own log by its primary key prefix, so a page
// costs its sessions' sizes, never the number of sessions in the store.
func (s *Store) SessionsActivity(ctx context.Context, ids []string) (map[string]SessionActivity, error) {
	out := make(map[string]SessionActivity, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in, args := inList(ids, 1)
	rows, err := s.read.QueryContext(ctx, `SELECT s.id, s.last_seq,
			(SELECT e.created_at FROM events e WHERE e.session_id = s.id AND e.sequence = s.last_seq),
			(SELECT COUNT(*) FROM events e WHERE e.session_id = s.id AND e.type = 'session.message')
		FROM sessions s WHERE s.id IN (`+in+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: sessions activity: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a SessionActivity
		var at sql.NullInt64
		if err := rows.Scan(&id, &a.LastSequence, &at, &a.MessageCount); err != nil {
			return nil, fmt.Errorf("store: sessions activity: %w", err)
		}
		a.LastActivityAt = at.Int64
		out[id] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: sessions activity: %w", err)
	}
	return out, nil
}

// Presence is an agent's network presence as the presence table keeps it.
type Presence struct {
	Online       bool
	OfflineSince int64 // epoch ms; 0 when online or never seen
}

// AgentsPresence returns the presence rows of handles (the console's agent
// list); an agent that never connected has none.
func (s *Store) AgentsPresence(ctx context.Context, handles []string) (map[string]Presence, error) {
	out := make(map[string]Presence, len(handles))
	if len(handles) == 0 {
		return out, nil
	}
	in, args := inList(handles, 1)
	rows, err := s.read.QueryContext(ctx, `SELECT handle, online, offline_since FROM presence WHERE handle IN (`+in+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: agents presence: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var h string
		var p Presence
		var since sql.NullInt64
		if err := rows.Scan(&h, &p.Online, &since); err != nil {
			return nil, fmt.Errorf("store: agents presence: %w", err)
		}
		p.OfflineSince = since.Int64
		out[h] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: agents presence: %w", err)
	}
	return out, nil
}
