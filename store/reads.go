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

// View returns h's eligibility view of a session, or ErrNotFound when h has
// never been a participant.
func (s *Store) View(ctx context.Context, sessionID, h string) (visibility.View, error) {
	v := visibility.View{Handle: h}
	err := s.read.QueryRowContext(ctx, `SELECT status, visible_through FROM participants WHERE session_id = $1 AND handle = $2`,
		sessionID, h).Scan(&v.Status, &v.VisibleThrough)
	if errors.Is(err, sql.ErrNoRows) {
		return v, ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("store: view: %w", err)
	}
	return v, nil
}

// loadSessions returns snapshots of the given sessions, in the given order.
func (s *Store) loadSessions(ctx context.Context, ids []string) ([]*protocol.Session, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	in, args := inList(ids, 1)
	rows, err := s.read.QueryContext(ctx, `SELECT id, state, topic, created_at, ended_at FROM sessions WHERE id IN (`+in+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: load sessions: %w", err)
	}
	byID := make(map[string]*protocol.Session, len(ids))
	for rows.Next() {
		var sess protocol.Session
		var ended sql.NullInt64
		if err := rows.Scan(&sess.ID, &sess.State, &sess.Topic, &sess.CreatedAt, &ended); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: load sessions: %w", err)
		}
		sess.EndedAt = ended.Int64
		sess.Participants = []protocol.Participant{}
		byID[sess.ID] = &sess
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: load sessions: %w", err)
	}
	parts, err := participantsOf(ctx, s.read, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*protocol.Session, 0, len(ids))
	for _, id := range ids {
		if sess, ok := byID[id]; ok {
			if p := parts[id]; p != nil {
				sess.Participants = p
			}
			out = append(out, sess)
		}
	}
	return out, nil
}

// participantsOf returns the current participants of the given sessions,
// each session's in the order of a snapshot, in one query.
func participantsOf(ctx context.Context, q querier, ids []string) (map[string][]protocol.Participant, error) {
	out := make(map[string][]protocol.Participant, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in, args := inList(ids, 1)
	rows, err := q.QueryContext(ctx, `SELECT session_id, handle, status, joined_at, left_at FROM participants
		WHERE session_id IN (`+in+`) ORDER BY COALESCE(invited_at, joined_at), handle`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: load participants: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var sid string
		var p protocol.Participant
		var joined, left sql.NullInt64
		if err := rows.Scan(&sid, &p.Handle, &p.Status, &joined, &left); err != nil {
			return nil, fmt.Errorf("store: load participants: %w", err)
		}
		p.JoinedAt, p.LeftAt = joined.Int64, left.Int64
		out[sid] = append(out[sid], p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: load participants: %w", err)
	}
	return out, nil
}

// AdminSession returns any session's snapshot, for the operator.
func (s *Store) AdminSession(ctx context.Context, id string) (*protocol.Session, error) {
	sessions, err := s.loadSessions(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, ErrNotFound
	}
	return sessions[0], nil
}

// EventsAfter returns up to limit events of a session with sequence > after,
// in order, unfiltered. Callers filter with visibility.Visible.
func (s *Store) EventsAfter(ctx context.Context, sessionID string, after int64, limit int) ([]StoredEvent, error) {
	return s.queryEvents(ctx, selectEventColumns+`
		WHERE session_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3`, sessionID, after, limit)
}

// selectEventColumns reads events as queryEventsOn scans them (and the
// export, portable_export.go): the caller adds its WHERE and ORDER BY.
const selectEventColumns = `SELECT session_id, sequence, event_id, type, subject, audience, created_at, body FROM events`

func (s *Store) queryEvents(ctx context.Context, query string, args ...any) ([]StoredEvent, error) {
	return queryEventsOn(ctx, s.read, query, args...)
}

// queryEventsOn is queryEvents on q: the read pool or a transaction.
func queryEventsOn(ctx context.Context, q querier, query string, args ...any) ([]StoredEvent, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: read events: %w", err)
	}
	defer rows.Close()
	var out []StoredEvent
	for rows.Next() {
		var e StoredEvent
		var audience, body string
		if err := rows.Scan(&e.SessionID, &e.Sequence, &e.EventID, &e.Type, &e.Subject, &audience, &e.CreatedAt, &body); err != nil {
			return nil, fmt.Errorf("store: read events: %w", err)
		}
		e.Audience = decodeAudience(audience)
		e.Body = []byte(body)
		out = append(out, e)
	}
	return out, rows.Err()
}

// VisibleEvents returns up to limit events after `after` that viewer may see,
// and whether more visible events may follow. The SQL narrows the scan to
// candidate rows; visibility.Visible makes the decision. A page is short only at
// the end of the log: should candidates turn out invisible, it reads on.
func (s *Store) VisibleEvents(ctx context.Context, sessionID, viewer string, after int64, limit int) ([]StoredEvent, bool, error) {
	v, err := s.View(ctx, sessionID, viewer)
	if err != nil {
		return nil, false, err
	}
	var out []StoredEvent
	for {
		want := limit + 1 - len(out)
		rows, err := s.candidates(ctx, sessionID, v, after, want)
		if err != nil {
			return nil, false, err
		}
		for _, e := range rows {
			if visibility.Visible(v, e.Meta()) {
				out = append(out, e)
			}
		}
		if len(out) > limit || len(rows) < want {
			break
		}
		after = rows[len(rows)-1].Sequence
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// candidates returns up to n events after `after` that may be visible to v:
// exactly those visibility.Visible admits, unless the SQL and Visible disagree.
func (s *Store) candidates(ctx context.Context, sessionID string, v visibility.View, after int64, n int) ([]StoredEvent, error) {
	return s.queryEvents(ctx, selectEventColumns+`
		WHERE session_id = $1 AND sequence > $2
		  AND (sequence <= $3 OR (type = 'session.invited' AND subject = $4) OR audience LIKE $5 ESCAPE '!')
		ORDER BY sequence LIMIT $6`,
		sessionID, after, v.VisibleThrough, v.Handle, "%,"+likeEscape(v.Handle)+",%", n)
}

// likeEscape escapes s for a LIKE pattern with ESCAPE '!', the same in
// PostgreSQL and SQLite: handles may contain "_", which LIKE would otherwise
// take for "any character" (and so match another agent's audience entry).
func likeEscape(s string) string {
	return strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(s)
}

// SessionFilter narrows session listings. Sessions are listed newest first;
// Before pages by session id (ids sort by creation time).
type SessionFilter struct {
	Participant string // only sessions this handle is or was part of
	Status      string // with Participant: only where its status is this
	State       string // active or ended
	Since       int64  // created_at >= Since (epoch ms), 0 = unbounded
	Until       int64  // created_at < Until (epoch ms), 0 = unbounded
	Before      string // only ids < Before
	Only        string // only this session id
	Limit       int
}

func (f SessionFilter) where() (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(args))))
	}
	if f.Participant != "" {
		if f.Status != "" {
			args = append(args, f.Participant, f.Status)
			conds = append(conds, fmt.Sprintf("s.id IN (SELECT session_id FROM participants WHERE handle = $%d AND status = $%d)", len(args)-1, len(args)))
		} else {
			add("s.id IN (SELECT session_id FROM participants WHERE handle = ?)", f.Participant)
		}
	}
	if f.State != "" {
		add("s.state = ?", f.State)
	}
	if f.Since > 0 {
		add("s.created_at >= ?", f.Since)
	}
	if f.Until > 0 {
		add("s.created_at < ?", f.Until)
	}
	if f.Before != "" {
		add("s.id < ?", f.Before)
	}
	if f.Only != "" {
		add("s.id = ?", f.Only)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// ListSessionsFor lists the sessions h is or was a participant of, each
// with the participants h may see: exactly what GetSession shows h. For a
// session h is not joined in, state, ended_at, last_sequence and
// participants are as of h's horizon (see snapshot.go), not the live ones.
//
// A page costs three queries whatever its length (the sessions, the live
// participants of those h sees live, the membership events of those h sees
// as of its horizon), read in one snapshot so that a row's status and
// participants agree.
func (s *Store) ListSessionsFor(ctx context.Context, f SessionFilter) ([]protocol.SessionSummary, error) {
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	return listSessionsFor(ctx, tx, f)
}

// viewUptoSQL is viewUpto of participant row p, in SQL.
const viewUptoSQL = `CASE WHEN p.visible_through > p.last_change_seq THEN p.visible_through ELSE p.last_change_seq END`

func listSessionsFor(ctx context.Context, q querier, f SessionFilter) ([]protocol.SessionSummary, error) {
	where, args := f.where()
	args = append(args, f.Participant, f.Limit)
	const lastStateEvent = `FROM events e WHERE e.session_id = s.id AND e.sequence <= ` + viewUptoSQL + `
			AND e.type IN ('session.ended', 'session.reopened') ORDER BY e.sequence DESC LIMIT 1`
	rows, err := q.QueryContext(ctx, fmt.Sprintf(`SELECT s.id, s.state, s.topic, p.status, s.created_at, s.ended_at, s.last_seq, s.created_by,
			CASE WHEN p.status = 'joined' THEN s.last_seq ELSE `+viewUptoSQL+` END,
			CASE WHEN p.status = 'joined' THEN NULL ELSE (SELECT e.type `+lastStateEvent+`) END,
			CASE WHEN p.status = 'joined' THEN NULL ELSE (SELECT e.created_at `+lastStateEvent+`) END
		FROM sessions s JOIN participants p ON p.session_id = s.id AND p.handle = $%d`+where+` ORDER BY s.id DESC LIMIT $%d`, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: %w", err)
	}
	defer rows.Close()
	out := []protocol.SessionSummary{}
	var live, past []string          // ids h sees live, and as of its horizon
	createdBy := map[string]string{} // of the sessions in past
	for rows.Next() {
		var r protocol.SessionSummary
		var ended, stateAt sql.NullInt64
		var viewSeq int64
		var creator string
		var stateType sql.NullString
		if err := rows.Scan(&r.ID, &r.State, &r.Topic, &r.Status, &r.CreatedAt, &ended, &r.LastSeq, &creator, &viewSeq, &stateType, &stateAt); err != nil {
			return nil, fmt.Errorf("store: list sessions: %w", err)
		}
		r.EndedAt = ended.Int64
		// As GetSession: the live view for a joined participant, or when
		// nothing happened after the horizon.
		if r.Status != protocol.StatusJoined && viewSeq < r.LastSeq {
			r.LastSeq = viewSeq
			r.State, r.EndedAt = protocol.StateActive, 0
			if stateType.String == protocol.EventEnded {
				r.State, r.EndedAt = protocol.StateEnded, stateAt.Int64
			}
			past = append(past, r.ID)
			createdBy[r.ID] = creator
		} else {
			live = append(live, r.ID)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list sessions: %w", err)
	}
	rows.Close()
	parts, err := participantsOf(ctx, q, live)
	if err != nil {
		return nil, err
	}
	pastParts, err := participantsAsOfHorizon(ctx, q, f.Participant, past, createdBy, out)
	if err != nil {
		return nil, err
	}
	for i := range out {
		r := &out[i]
		p, ok := parts[r.ID]
		if !ok {
			p = pastParts[r.ID]
		}
		if p == nil {
			p = []protocol.Participant{}
		}
		r.Participants = p
	}
	return out, nil
}

// participantsAsOfHorizon returns, for each of the sessions ids that viewer
// is not joined in, its participants as GetSession shows them to viewer:
// rebuilt from the membership events up to viewer's horizon, viewer's own
// entry with its status now. One query for all of them. rows gives each
// session's topic, creation time and viewer's status.
func participantsAsOfHorizon(ctx context.Context, q querier, viewer string, ids []string, createdBy map[string]string, rows []protocol.SessionSummary) (map[string][]protocol.Participant, error) {
	out := make(map[string][]protocol.Participant, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in, args := inList(ids, 2)
	evs, err := q.QueryContext(ctx, `SELECT e.session_id, e.type, e.subject, e.created_at FROM events e
		JOIN participants p ON p.session_id = e.session_id AND p.handle = $1
		WHERE e.session_id IN (`+in+`) AND e.sequence <= `+viewUptoSQL+` AND e.type IN `+membershipTypes+`
		ORDER BY e.session_id, e.sequence`, append([]any{viewer}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: participants: %w", err)
	}
	defer evs.Close()
	byID := make(map[string]*protocol.SessionSummary, len(ids))
	for i := range rows {
		byID[rows[i].ID] = &rows[i]
	}
	folds := make(map[string]*membership, len(ids))
	fold := func(sid string) *membership {
		m := folds[sid]
		if m == nil {
			r := byID[sid]
			m = newMembership(&protocol.Session{ID: sid, Topic: r.Topic, CreatedAt: r.CreatedAt}, createdBy[sid])
			folds[sid] = m
		}
		return m
	}
	for evs.Next() {
		var sid, typ, subject string
		var at int64
		if err := evs.Scan(&sid, &typ, &subject, &at); err != nil {
			return nil, fmt.Errorf("store: list sessions: participants: %w", err)
		}
		fold(sid).apply(typ, subject, at)
	}
	if err := evs.Err(); err != nil {
		return nil, fmt.Errorf("store: list sessions: participants: %w", err)
	}
	for _, sid := range ids {
		snap := fold(sid).session() // a session without membership events has its creator
		ownStatus(snap, viewer, byID[sid].Status)
		out[sid] = snap.Participants
	}
	return out, nil
}

// ListSessions lists sessions for the operator, with participants.
func (s *Store) ListSessions(ctx context.Context, f SessionFilter) ([]*protocol.Session, error) {
	where, args := f.where()
	args = append(args, f.Limit)
	ids, err := queryStrings(ctx, s.read, fmt.Sprintf(`SELECT s.id FROM sessions s`+where+` ORDER BY s.id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, err
	}
	return s.loadSessions(ctx, ids)
}

// ExportEvents calls fn for every event, unfiltered, of the sessions matching
// f (all of a session's events, in sequence order, sessions oldest first).
// It pages through the log so memory stays bounded.
func (s *Store) ExportEvents(ctx context.Context, f SessionFilter, fn func(e *StoredEvent) error) error {
	where, args := f.where()
	ids, err := queryStrings(ctx, s.read, `SELECT s.id FROM sessions s`+where+` ORDER BY s.id`, args...)
	if err != nil {
		return err
	}
	for _, id := range ids {
		after := int64(0)
		for {
			page, err := s.EventsAfter(ctx, id, after, 1000)
			if err != nil {
				return err
			}
			for i := range page {
				if err := fn(&page[i]); err != nil {
					return err
				}
			}
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].Sequence
		}
	}
	return nil
}
