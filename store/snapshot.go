package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/aspd/aspd/protocol"
)

// A participant that is not joined may know a session only as it was when
// its view ended: at its horizon (up to its own session.left, or the end it
// saw as an invitee). Snapshots and listings for such a viewer are computed
// as of that point, so that nobody learns from GET /sessions/{id} or
// GET /sessions who was invited after they left, that a session they were
// removed from goes on, or how active it is.

// viewUpto is the last sequence a non-joined participant may know about.
func viewUpto(visibleThrough, lastChangeSeq int64) int64 {
	return max(visibleThrough, lastChangeSeq)
}

// queueStateAsOf queues the read of the session's state right after event
// upto (ended when the last session.ended or session.reopened up to it is
// an end) on q: state is set by q's Flush.
func queueStateAsOf(q stmtQueue, sessionID string, upto int64, state *string) {
	q.Query("session state", stateAsOfQuery, []any{sessionID, upto}, func(rows rowScanner) error {
		return scanStateAsOf(rows, state)
	})
}

const stateAsOfQuery = `SELECT type FROM events
		WHERE session_id = $1 AND sequence <= $2 AND type IN ('session.ended', 'session.reopened')
		ORDER BY sequence DESC LIMIT 1`

// scanStateAsOf reads stateAsOfQuery's row, if any, into state.
func scanStateAsOf(rows rowScanner, state *string) error {
	*state = protocol.StateActive
	if !rows.Next() {
		return nil
	}
	var typ string
	if err := rows.Scan(&typ); err != nil {
		return err
	}
	if typ != protocol.EventReopened {
		*state = protocol.StateEnded
	}
	return nil
}

// GetSession returns a session snapshot for a current or former
// participant: the live state for a joined participant, and the state as of
// its horizon for anyone else.
func (s *Store) GetSession(ctx context.Context, id, viewer string) (*protocol.Session, error) {
	var status, createdBy string
	var visibleThrough, lastChange, lastSeq int64
	err := s.read.QueryRowContext(ctx, `SELECT p.status, p.visible_through, p.last_change_seq, s.last_seq, s.created_by
		FROM participants p JOIN sessions s ON s.id = p.session_id WHERE p.session_id = $1 AND p.handle = $2`, id, viewer).
		Scan(&status, &visibleThrough, &lastChange, &lastSeq, &createdBy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get session: %w", err)
	}
	sessions, err := s.loadSessions(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, ErrNotFound
	}
	cur := sessions[0]
	upto := viewUpto(visibleThrough, lastChange)
	if status == protocol.StatusJoined || upto >= lastSeq {
		return cur, nil
	}
	snap, err := s.snapshotAt(ctx, cur, createdBy, upto)
	if err != nil {
		return nil, err
	}
	ownStatus(snap, viewer, status)
	return snap, nil
}

// ownStatus shows the viewer with its status now, as GET /sessions lists it
// and as its requests are answered. A viewer's status differs from the one at
// its horizon only when it changed without an event it may see: a block
// (§6.2: "the blocked agent's status becomes left") or a reopen that did not
// re-invite it. When that change happened is not shown.
func ownStatus(snap *protocol.Session, viewer, status string) {
	for i := range snap.Participants {
		p := &snap.Participants[i]
		if p.Handle == viewer {
			if p.Status != status {
				p.Status, p.LeftAt = status, 0
			}
			return
		}
	}
	snap.Participants = append(snap.Participants, protocol.Participant{Handle: viewer, Status: status})
}

// snapshotAt rebuilds a session's state and participants as they were
// after event upto, from the membership events of the log.
func (s *Store) snapshotAt(ctx context.Context, cur *protocol.Session, createdBy string, upto int64) (*protocol.Session, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT type, subject, created_at FROM events
		WHERE session_id = $1 AND sequence <= $2 AND type IN `+membershipTypes+`
		ORDER BY sequence`, cur.ID, upto)
	if err != nil {
		return nil, fmt.Errorf("store: snapshot: %w", err)
	}
	defer rows.Close()
	m := newMembership(cur, createdBy)
	for rows.Next() {
		var typ, subject string
		var at int64
		if err := rows.Scan(&typ, &subject, &at); err != nil {
			return nil, fmt.Errorf("store: snapshot: %w", err)
		}
		m.apply(typ, subject, at)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return m.session(), nil
}

// membershipTypes are the event types that change a session's state or
// participants: those a snapshot is rebuilt from.
const membershipTypes = `('session.invited', 'session.joined', 'session.left', 'session.ended', 'session.reopened')`

// membership folds a session's membership events, in sequence order, into
// its state and participants (snapshotAt, and the listing's, for many
// sessions at once).
type membership struct {
	out   *protocol.Session
	parts map[string]*protocol.Participant
	order []string
}

// newMembership starts from the session as created: active, its creator
// joined. cur gives its id, topic and creation time.
func newMembership(cur *protocol.Session, createdBy string) *membership {
	m := &membership{
		out:   &protocol.Session{ID: cur.ID, State: protocol.StateActive, Topic: cur.Topic, CreatedAt: cur.CreatedAt},
		parts: map[string]*protocol.Participant{},
	}
	creator := m.part(createdBy)
	creator.Status, creator.JoinedAt = protocol.StatusJoined, cur.CreatedAt
	return m
}

func (m *membership) part(h string) *protocol.Participant {
	p, ok := m.parts[h]
	if !ok {
		p = &protocol.Participant{Handle: h}
		m.parts[h] = p
		m.order = append(m.order, h)
	}
	return p
}

// apply folds in the next membership event.
func (m *membership) apply(typ, subject string, at int64) {
	switch typ {
	case protocol.EventInvited:
		m.part(subject).Status = protocol.StatusInvited
	case protocol.EventJoined:
		p := m.part(subject)
		p.Status, p.JoinedAt = protocol.StatusJoined, at
	case protocol.EventLeft:
		p := m.part(subject)
		p.Status, p.LeftAt = protocol.StatusLeft, at
	case protocol.EventEnded:
		m.out.State, m.out.EndedAt = protocol.StateEnded, at
		for _, p := range m.parts {
			if p.Status == protocol.StatusInvited {
				p.Status, p.LeftAt = protocol.StatusLeft, at
			}
		}
	case protocol.EventReopened:
		m.out.State, m.out.EndedAt = protocol.StateActive, 0
		for h, p := range m.parts {
			switch {
			case h == subject:
				p.Status, p.JoinedAt = protocol.StatusJoined, at
			case p.Status == protocol.StatusJoined:
				p.Status, p.LeftAt = protocol.StatusLeft, at
			}
		}
	}
}

// session is the snapshot after the events applied so far.
func (m *membership) session() *protocol.Session {
	m.out.Participants = make([]protocol.Participant, 0, len(m.order))
	for _, h := range m.order {
		m.out.Participants = append(m.out.Participants, *m.parts[h])
	}
	return m.out
}
