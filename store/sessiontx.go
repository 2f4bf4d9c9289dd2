package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/aspd/aspd/internal/search"
	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
)

// StoredEvent is one event of the log: its wire bytes plus what eligibility
// and routing need, so nobody decodes the body to deliver it.
type StoredEvent struct {
	SessionID string
	Sequence  int64
	EventID   string
	Type      string
	Subject   string
	Audience  []string
	CreatedAt int64
	Body      []byte // the wire JSON, exactly as stored and served

	// index is the event's search index input when it was worked out
	// before the transaction (a message's, from its request); nil means
	// eventValues extracts it from Body.
	index *searchInput
}

// searchInput is an event's search text and, on PostgreSQL, its words
// and their pairs (search.PairLexemes, a tsvector literal).
type searchInput struct{ text, words, pairs string }

// newSearchInput is the search index input of an event whose text is text.
func newSearchInput(d dialect, text string) *searchInput {
	in := &searchInput{text: text}
	if d.searchWordsArg() {
		in.words, in.pairs = search.WordText(text)
	}
	return in
}

// Meta returns the eligibility view of the event.
func (e *StoredEvent) Meta() visibility.Meta {
	return visibility.Meta{Sequence: e.Sequence, Type: e.Type, Subject: e.Subject, Audience: e.Audience}
}

// Commit is what one committed transaction appended to one session, and who
// must hear of it: every participant that may see at least one of the events
// or whose eligibility changed. The caller hands it to the hub after commit.
//
// Views[i] is Recipients[i]'s eligibility view after the commit, that is as
// of the last event's sequence: the store has it at hand when it computes
// the recipients, so the hub never reads it back.
type Commit struct {
	SessionID  string
	Events     []StoredEvent
	Recipients []string
	Views      []visibility.View
}

type participant struct {
	handle         string
	status         string
	visibleThrough int64
	lastChangeSeq  int64
	disconnected   bool
	invitedAt      sql.NullInt64
	joinedAt       sql.NullInt64
	leftAt         sql.NullInt64
	isNew          bool
}

func (p *participant) view() visibility.View {
	return visibility.View{Handle: p.handle, Status: p.status, VisibleThrough: p.visibleThrough}
}

// sessionTx is one session's state inside a write transaction: the row is
// locked, participants are loaded, and appended events get consecutive
// sequences. save writes it all back in a few statements.
type sessionTx struct {
	ctx context.Context
	// tx is the transaction on every path but the message path's, whose
	// statements go through q alone (stmtqueue.go); q runs on tx otherwise.
	tx        *sql.Tx
	q         stmtQueue
	d         dialect
	now       int64
	isNew     bool
	id        string
	topic     string
	state     string
	createdBy string
	createdAt int64
	endedAt   sql.NullInt64
	lastSeq   int64
	// sendAndEnd marks a send-and-end session not reopened since: its
	// invitees may reopen it (§7.2).
	sendAndEnd bool
	parts      map[string]*participant
	order      []string // participant handles in insertion order
	// membersVersion is the session row's members_version as the message
	// path locked it (queueLockForMessages; other paths do not read it,
	// save moves it in SQL); sharedParts marks parts and order as a cached snapshot (members.go),
	// which participant copies before its first change.
	membersVersion int64
	sharedParts    bool
	dirty          map[string]bool
	events         []StoredEvent
}

func (s *Store) newSession(ctx context.Context, tx *sql.Tx, creator, topic string) *sessionTx {
	now := s.nowMs()
	return &sessionTx{ctx: ctx, tx: tx, q: &sqlQueue{tx: tx}, d: s.d, now: now, isNew: true, id: protocol.NewSessionID(), topic: topic,
		state: protocol.StateActive, createdBy: creator, createdAt: now,
		parts: map[string]*participant{}, dirty: map[string]bool{}}
}

// lockSession loads and locks one session and its participants. A session
// that does not exist is ErrNotFound.
func (s *Store) lockSession(ctx context.Context, tx *sql.Tx, id string) (*sessionTx, error) {
	q := &sqlQueue{tx: tx}
	ts := make(map[string]*sessionTx, 1)
	s.queueLockSessions(ctx, q, []string{id}, ts)
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	if t := ts[id]; t != nil {
		t.tx = tx
		return t, nil
	}
	return nil, ErrNotFound
}

// queueLockSessions queues the one statement that locks and loads one or
// many sessions and their participants (every session has at least its
// creator as participant) into out; sessions that do not exist stay
// absent. Rows are locked in session id order, so concurrent transactions
// cannot deadlock.
func (s *Store) queueLockSessions(ctx context.Context, q stmtQueue, ids []string, out map[string]*sessionTx) {
	s.members.forgetRows(ids) // this path may change them: the message path's next guess would fail
	in, args := s.d.inStrings("s.id", ids, 1)
	q.Query("lock sessions", `SELECT s.id, s.topic, s.state, s.created_by, s.created_at, s.ended_at, s.last_seq, s.send_and_end,
			p.handle, p.status, p.visible_through, p.last_change_seq, p.disconnected, p.invited_at, p.joined_at, p.left_at
		FROM sessions s JOIN participants p ON p.session_id = s.id
		WHERE `+in+` ORDER BY s.id, COALESCE(p.invited_at, p.joined_at), p.handle`+s.d.forUpdateOfSessions, args, func(rows rowScanner) error {
		now := s.nowMs()
		for rows.Next() {
			var r sessionTx
			p := &participant{}
			if err := rows.Scan(&r.id, &r.topic, &r.state, &r.createdBy, &r.createdAt, &r.endedAt, &r.lastSeq, &r.sendAndEnd,
				&p.handle, &p.status, &p.visibleThrough, &p.lastChangeSeq, &p.disconnected, &p.invitedAt, &p.joinedAt, &p.leftAt); err != nil {
				return err
			}
			t := out[r.id]
			if t == nil {
				t = &sessionTx{ctx: ctx, q: q, d: s.d, now: now, id: r.id, topic: r.topic, state: r.state, createdBy: r.createdBy,
					createdAt: r.createdAt, endedAt: r.endedAt, lastSeq: r.lastSeq, sendAndEnd: r.sendAndEnd,
					parts: map[string]*participant{}, dirty: map[string]bool{}}
				out[r.id] = t
			}
			t.parts[p.handle] = p
			t.order = append(t.order, p.handle)
		}
		return nil
	})
}

// queueLockForMessages is queueLockSessions for the message path, which
// never changes a participant: it locks the session rows alone and takes
// their participants from the member cache (members.go). In the same
// round trip it reads the participants of the sessions the cache does not
// hold at all; resolveMembers, after the flush, reads those whose cached
// version turned out stale and caches what was read.
func (s *Store) queueLockForMessages(ctx context.Context, q stmtQueue, ids []string, out map[string]*sessionTx) {
	in, args := s.d.inStrings("id", ids, 1)
	q.Query("lock sessions", `SELECT id, topic, state, created_by, created_at, ended_at, last_seq, send_and_end, members_version
		FROM sessions WHERE `+in+` ORDER BY id`+s.d.forUpdate, args, func(rows rowScanner) error {
		now := s.nowMs()
		for rows.Next() {
			t := &sessionTx{ctx: ctx, q: q, d: s.d, now: now}
			if err := rows.Scan(&t.id, &t.topic, &t.state, &t.createdBy, &t.createdAt, &t.endedAt, &t.lastSeq, &t.sendAndEnd, &t.membersVersion); err != nil {
				return err
			}
			out[t.id] = t
		}
		return nil
	})
	var cold []string
	for _, id := range ids {
		if !s.members.has(id) {
			cold = append(cold, id)
		}
	}
	s.queueParticipants(q, cold, out)
}

// resolveMembers gives every session in out its participants: the cached
// ones of its locked version, else those read now; it caches what it read.
func (s *Store) resolveMembers(ctx context.Context, q stmtQueue, out map[string]*sessionTx) error {
	var stale []string
	for id, t := range out {
		if t.parts != nil {
			continue
		}
		if e := s.members.get(id, t.membersVersion); e != nil {
			t.parts, t.order, t.sharedParts = e.parts, e.order, true
			continue
		}
		stale = append(stale, id)
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		s.queueParticipants(q, stale, out)
		if err := q.Flush(ctx); err != nil {
			return err
		}
	}
	for id, t := range out {
		if t.sharedParts {
			continue
		}
		if t.parts == nil { // every session has its creator; never leave it nil
			t.parts = map[string]*participant{}
		}
		s.members.put(id, &members{version: t.membersVersion, parts: t.parts, order: t.order})
		t.sharedParts = true
	}
	return nil
}

// queueParticipants queues the read of the participants of the sessions
// ids (locked by the same transaction) into their entries of out.
func (s *Store) queueParticipants(q stmtQueue, ids []string, out map[string]*sessionTx) {
	if len(ids) == 0 {
		return
	}
	in, args := s.d.inStrings("session_id", ids, 1)
	q.Query("load participants", `SELECT session_id, handle, status, visible_through, last_change_seq, disconnected, invited_at, joined_at, left_at
		FROM participants WHERE `+in+` ORDER BY session_id, COALESCE(invited_at, joined_at), handle`, args, func(rows rowScanner) error {
		var sid string
		for rows.Next() {
			p := &participant{}
			if err := rows.Scan(&sid, &p.handle, &p.status, &p.visibleThrough, &p.lastChangeSeq, &p.disconnected, &p.invitedAt, &p.joinedAt, &p.leftAt); err != nil {
				return err
			}
			t := out[sid]
			if t == nil {
				continue
			}
			if t.parts == nil {
				t.parts = map[string]*participant{}
			}
			t.parts[p.handle] = p
			t.order = append(t.order, p.handle)
		}
		return nil
	})
}

// participant returns h's participant row, creating an empty one if absent.
func (t *sessionTx) participant(h string) *participant {
	if t.sharedParts {
		parts := make(map[string]*participant, len(t.parts)+1)
		for k, p := range t.parts {
			c := *p
			parts[k] = &c
		}
		t.parts, t.order, t.sharedParts = parts, append([]string(nil), t.order...), false
	}
	if t.dirty == nil {
		t.dirty = map[string]bool{}
	}
	p, ok := t.parts[h]
	if !ok {
		p = &participant{handle: h, isNew: true}
		t.parts[h] = p
		t.order = append(t.order, h)
	}
	t.dirty[h] = true
	return p
}

func (t *sessionTx) status(h string) string {
	if p, ok := t.parts[h]; ok {
		return p.status
	}
	return ""
}

func (t *sessionTx) withStatus(status string) []string {
	var out []string
	for _, h := range t.order {
		if t.parts[h].status == status {
			out = append(out, h)
		}
	}
	return out
}

// nextSeq is the sequence the next appended event will get.
func (t *sessionTx) nextSeq() int64 { return t.lastSeq + 1 }

// append adds an event with the next sequence. The body is encoded once, here,
// in the wire shape of events.json.
func (t *sessionTx) append(typ, subject string, audience []string, payload any) (*StoredEvent, error) {
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("store: encode payload: %w", err)
	}
	return t.appendRaw(typ, subject, audience, p)
}

func (t *sessionTx) appendRaw(typ, subject string, audience []string, payload json.RawMessage) (*StoredEvent, error) {
	t.lastSeq++
	ev := protocol.Event{Type: typ, SessionID: t.id, EventID: protocol.NewEventID(), Sequence: t.lastSeq, CreatedAt: t.now, Payload: payload}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("store: encode event: %w", err)
	}
	t.events = append(t.events, StoredEvent{SessionID: t.id, Sequence: t.lastSeq, EventID: ev.EventID, Type: typ, Subject: subject,
		Audience: audience, CreatedAt: t.now, Body: body})
	return &t.events[len(t.events)-1], nil
}

// message builds a session.message payload with the next sequence.
func (t *sessionTx) message(sender string, content, metadata json.RawMessage, key string) protocol.Message {
	return protocol.Message{ID: protocol.NewMessageID(), SessionID: t.id, Sender: sender, Sequence: t.nextSeq(),
		Content: content, CreatedAt: t.now, IdempotencyKey: key, Metadata: metadata}
}

// end moves the session to ended. Invitees who never joined become left (and
// see the session.ended through its audience); joined participants keep their
// status, which is what lets them reopen the session later.
func (t *sessionTx) end(by string) error {
	invited := t.withStatus(protocol.StatusInvited)
	seq := t.nextSeq()
	for _, h := range invited {
		p := t.participant(h)
		p.status = protocol.StatusLeft
		p.lastChangeSeq = seq
		p.leftAt = sql.NullInt64{Int64: t.now, Valid: true}
	}
	t.state = protocol.StateEnded
	t.endedAt = sql.NullInt64{Int64: t.now, Valid: true}
	_, err := t.append(protocol.EventEnded, "", invited, protocol.EndedPayload{EndedBy: by})
	return err
}

// leave moves a joined or invited participant to left. A silent leave (block)
// hides the session.left from the leaver itself. When no joined participant
// remains, the session ends.
func (t *sessionTx) leave(h, reason string, silent bool) error {
	p := t.participant(h)
	seq := t.nextSeq()
	p.status = protocol.StatusLeft
	if !silent {
		// A silent leave shows the agent nothing new, so it must not make
		// the session pending for it (PendingSessions).
		p.lastChangeSeq = seq
	}
	p.leftAt = sql.NullInt64{Int64: t.now, Valid: true}
	p.disconnected = false
	if p.visibleThrough == visibility.Joined {
		p.visibleThrough = seq
		if silent {
			p.visibleThrough = seq - 1
		}
	}
	if _, err := t.append(protocol.EventLeft, h, nil, protocol.LeftPayload{Agent: h, Reason: reason}); err != nil {
		return err
	}
	if t.state == protocol.StateActive && len(t.withStatus(protocol.StatusJoined)) == 0 {
		return t.end("")
	}
	return nil
}

// invite adds an invitation for h (new, or a left participant re-invited).
func (t *sessionTx) invite(h, by string, initial *protocol.Message) error {
	p := t.participant(h)
	seq := t.nextSeq()
	p.status = protocol.StatusInvited
	p.lastChangeSeq = seq
	p.invitedAt = sql.NullInt64{Int64: t.now, Valid: true}
	_, err := t.append(protocol.EventInvited, h, nil, protocol.InvitedPayload{Invitee: h, By: by, Topic: t.topic, InitialMessage: initial})
	return err
}

// knownState is the session's state as h may know it. A joined or invited
// participant knows the live state. One that left knows the session only up
// to its horizon (see snapshot.go); to it the session stays in the state it
// had then, so that the answers to its requests do not tell it whether the
// session went on, ended or was reopened since.
func (t *sessionTx) knownState(h string) (string, error) {
	p, ok := t.parts[h]
	if !ok || p.status != protocol.StatusLeft {
		return t.state, nil
	}
	upto := viewUpto(p.visibleThrough, p.lastChangeSeq)
	if upto >= t.lastSeq {
		return t.state, nil
	}
	var state string
	queueStateAsOf(t.q, t.id, upto, &state)
	if err := t.q.Flush(t.ctx); err != nil {
		return "", err
	}
	return state, nil
}

// mustBeJoined is the state check of invite, send, leave and end:
// session_ended if the session is ended as h knows it, else not_joined
// unless h is joined.
func (t *sessionTx) mustBeJoined(h string) error {
	state, err := t.knownState(h)
	if err != nil {
		return err
	}
	if state == protocol.StateEnded {
		return ErrSessionEnded
	}
	if t.status(h) != protocol.StatusJoined {
		return ErrNotJoined
	}
	return nil
}

// mayReopen reports whether h may reopen the ended session: an agent joined
// when it ended (Appendix C.3), or an invitee of a send-and-end session not
// reopened since, which replies by reopening (§7.2).
func (t *sessionTx) mayReopen(h string) bool {
	p, ok := t.parts[h]
	switch {
	case !ok:
		return false
	case p.status == protocol.StatusJoined:
		return true
	default:
		return t.sendAndEnd && p.status == protocol.StatusLeft && !p.joinedAt.Valid
	}
}

// checkFrameRecipients requires every agent-channel frame recipient to be a
// current (invited or joined) participant.
func (t *sessionTx) checkFrameRecipients(handles []string) error {
	for _, h := range handles {
		if st := t.status(h); st != protocol.StatusJoined && st != protocol.StatusInvited {
			return &Error{Kind: KindNotParticipant, Field: "recipient_handle",
				Message: fmt.Sprintf("recipient_handle %s is not a participant of this session", h)}
		}
	}
	return nil
}

// save writes the session row, the dirty participants and the new events.
func (t *sessionTx) save() error {
	ctx, tx := t.ctx, t.tx
	var advance []*sessionTx
	if t.isNew {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, topic, state, created_by, created_at, ended_at, last_seq, send_and_end) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			t.id, t.topic, t.state, t.createdBy, t.createdAt, t.endedAt, t.lastSeq, t.sendAndEnd); err != nil {
			return fmt.Errorf("store: insert session: %w", err)
		}
	} else if len(t.events) > 0 {
		advance = []*sessionTx{t}
	}
	for h := range t.dirty {
		p := t.parts[h]
		if _, err := tx.ExecContext(ctx, `INSERT INTO participants (session_id, handle, status, visible_through, last_change_seq, disconnected, invited_at, joined_at, left_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (session_id, handle) DO UPDATE SET status = excluded.status, visible_through = excluded.visible_through,
				last_change_seq = excluded.last_change_seq, disconnected = excluded.disconnected,
				invited_at = excluded.invited_at, joined_at = excluded.joined_at, left_at = excluded.left_at`,
			t.id, h, p.status, p.visibleThrough, p.lastChangeSeq, p.disconnected, p.invitedAt, p.joinedAt, p.leftAt); err != nil {
			return fmt.Errorf("store: save participant: %w", err)
		}
	}
	if len(t.dirty) > 0 && !t.isNew {
		// The member cache's version (members.go): every change of a
		// participant row moves it, in the same transaction.
		if _, err := tx.ExecContext(ctx, `UPDATE sessions SET members_version = members_version + 1 WHERE id = $1`, t.id); err != nil {
			return fmt.Errorf("store: members version: %w", err)
		}
	}
	queueEvents(t.q, t.d, t.events, advance)
	return t.q.Flush(ctx)
}

// eventsPerStatement bounds the rows of one multi-row INSERT of events.
const eventsPerStatement = 100

// queueEvents queues the one insert of the event log: it appends events
// and writes the state and counter (last_seq) of the existing sessions in
// advance, whose events they are. On PostgreSQL, one statement of array
// parameters (queueEventArrays). Otherwise the events go in multi-row
// INSERTs of at most eventsPerStatement rows, and the sessions in one
// UPDATE.
func queueEvents(q stmtQueue, d dialect, events []StoredEvent, advance []*sessionTx) {
	if len(events) == 0 {
		return
	}
	if len(events) == 1 && len(advance) == 1 && advance[0].id == events[0].SessionID {
		queueOneEvent(q, d, &events[0], advance[0])
		return
	}
	if d.arrayParams {
		queueEventArrays(q, d, events, advance)
		return
	}
	for start := 0; start < len(events); start += eventsPerStatement {
		var b strings.Builder
		args := eventValues(&b, d, nil, events[start:min(start+eventsPerStatement, len(events))])
		q.Exec("insert events", b.String(), args)
	}
	if len(advance) == 0 {
		return
	}
	var b strings.Builder
	args := sessionValues(&b, advance)
	b.WriteString(` ` + updateSessionsFromV)
	q.Exec("advance sessions", b.String(), args)
}

// queueEventArrays is queueEvents for a dialect of array parameters
// (PostgreSQL): one statement, whose text does not depend on the number of
// events or sessions, so that it stays prepared. The sessions' UPDATE
// rides in the events' INSERT as a data-modifying CTE.
func queueEventArrays(q stmtQueue, d dialect, events []StoredEvent, advance []*sessionTx) {
	n := len(events)
	strs, ints := columns[string](9, n), columns[int64](2, n) // two allocations, not eleven
	sid, eid, typ, subj, aud, body, text, words, pairs := strs[0], strs[1], strs[2], strs[3], strs[4], strs[5], strs[6], strs[7], strs[8]
	seq, at := ints[0], ints[1]
	for i, e := range events {
		in := e.index
		if in == nil {
			in = newSearchInput(d, search.ExtractEvent(e.Type, e.Body))
		}
		sid[i], seq[i], eid[i], typ[i], subj[i], aud[i], at[i], body[i], text[i], words[i], pairs[i] =
			e.SessionID, e.Sequence, e.EventID, e.Type, e.Subject, encodeAudience(e.Audience), e.CreatedAt, string(e.Body), in.text, in.words, in.pairs
	}
	args := []any{textArray(sid), int8Array(seq), textArray(eid), textArray(typ), textArray(subj), textArray(aud), int8Array(at), textArray(body), textArray(text), textArray(words), textArray(pairs)}
	if len(advance) == 0 {
		q.Exec("insert events", insertEventArrays, args)
		return
	}
	m := len(advance)
	id, state, ended, last, sae := make([]string, m), make([]string, m), make([]*int64, m), make([]int64, m), make([]bool, m)
	for i, t := range advance {
		id[i], state[i], last[i], sae[i] = t.id, t.state, t.lastSeq, t.sendAndEnd
		if t.endedAt.Valid {
			ended[i] = &t.endedAt.Int64
		}
	}
	q.Exec("append events", appendEventArrays, append(args, textArray(id), textArray(state), ended, int8Array(last), sae))
}

// queueOneEvent is queueEvents for the message path's commonest case, one
// event appended to one existing session: statements of fixed text with
// scalar arguments, so a lone message builds no statement text and encodes
// no arrays (the arrays alone cost a lone message about 40 allocations on
// PostgreSQL). On PostgreSQL the session's UPDATE rides in the INSERT, as
// in appendEventArrays.
func queueOneEvent(q stmtQueue, d dialect, e *StoredEvent, t *sessionTx) {
	in := e.index
	if in == nil {
		in = newSearchInput(d, search.ExtractEvent(e.Type, e.Body))
	}
	args := make([]any, 0, 15)
	args = append(args, e.SessionID, e.Sequence, e.EventID, e.Type, e.Subject, encodeAudience(e.Audience), e.CreatedAt, string(e.Body), in.text)
	if !d.arrayParams {
		q.Exec("insert events", insertOneEvent, args)
		q.Exec("advance sessions", updateOneSession, []any{t.id, t.state, t.endedAt, t.lastSeq, t.sendAndEnd})
		return
	}
	var ended *int64
	if t.endedAt.Valid {
		ended = &t.endedAt.Int64
	}
	q.Exec("append events", appendOneEvent, append(args, in.words, in.pairs, t.state, ended, t.lastSeq, t.sendAndEnd))
}

// insertOneEvent inserts one event ($1 to $9, the search text last) on a
// dialect that indexes the search text itself (SQLite's FTS5 triggers).
var insertOneEvent = func() string {
	cols, vals := sqliteDialect.eventSearchColumns("$9", "", "")
	return `INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body` + cols + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8` + vals + `)`
}()

// updateOneSession writes one session's state and counter.
const updateOneSession = `UPDATE sessions SET state = $2, ended_at = $3, last_seq = $4, send_and_end = $5 WHERE id = $1`

// appendOneEvent inserts one event ($1 to $11, as insertOneEvent plus the
// words and their pairs) and writes its session ($1, and $12 to $15) in
// one statement.
var appendOneEvent = func() string {
	cols, vals := postgresDialect.eventSearchColumns("$9", "$10", "$11")
	return `WITH u AS (UPDATE sessions SET state = $12::text, ended_at = $13::bigint, last_seq = $14::bigint, send_and_end = $15::boolean
			WHERE id = $1)
		INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body` + cols + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8` + vals + `)`
}()

// columns returns k slices of length n on one backing array: the array
// parameters of one statement.
func columns[T any](k, n int) [][]T {
	all := make([]T, k*n)
	out := make([][]T, k)
	for i := range out {
		out[i] = all[i*n : (i+1)*n : (i+1)*n]
	}
	return out
}

// insertEventArrays inserts events given as arrays $1 to $11, one per
// column, the search columns' input last (see eventSearchColumns).
var insertEventArrays = func() string {
	cols, vals := postgresDialect.eventSearchColumns("e.st", "e.w", "e.p")
	return `INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body` + cols + `)
		SELECT e.s, e.q, e.i, e.t, e.sub, e.a, e.c, e.b` + vals + `
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[])
			AS e(s, q, i, t, sub, a, c, b, st, w, p)`
}()

// appendEventArrays is insertEventArrays that also writes the sessions
// given as arrays $12 to $16 (see sessionValues).
var appendEventArrays = `WITH v AS (SELECT * FROM unnest($12::text[], $13::text[], $14::bigint[], $15::bigint[], $16::boolean[])
		AS v(id, state, ended_at, seq, send_and_end)),
	u AS (` + updateSessionsFromV + `)
	` + insertEventArrays

// updateSessionsFromV writes the sessions listed in v (see sessionValues).
const updateSessionsFromV = `UPDATE sessions SET state = v.state, ended_at = v.ended_at, last_seq = v.seq, send_and_end = v.send_and_end
	FROM v WHERE sessions.id = v.id`

// sessionValues writes "WITH v(...) AS (VALUES ...)", one row per session,
// and returns its arguments.
func sessionValues(b *strings.Builder, ts []*sessionTx) []any {
	args := make([]any, 0, 5*len(ts))
	b.WriteString(`WITH v(id, state, ended_at, seq, send_and_end) AS (VALUES `)
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(b, "($%d, CAST($%d AS TEXT), CAST($%d AS BIGINT), CAST($%d AS BIGINT), CAST($%d AS BOOLEAN))", n+1, n+2, n+3, n+4, n+5)
		args = append(args, t.id, t.state, t.endedAt, t.lastSeq, t.sendAndEnd)
	}
	b.WriteString(`)`)
	return args
}

// eventValues writes the multi-row INSERT of events, numbering its
// placeholders after args, and returns args with the events' values.
//
// Each row also carries the event's search index input (docs/search.md):
// its text, extracted here by the one rule (search.ExtractEvent), and on
// PostgreSQL its words; so indexing costs no statement of its own.
func eventValues(b *strings.Builder, d dialect, args []any, events []StoredEvent) []any {
	cols, _ := d.eventSearchColumns("", "", "")
	b.WriteString(`INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body` + cols + `) VALUES `)
	for i, e := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		n := len(args)
		in := e.index
		if in == nil {
			in = newSearchInput(d, search.ExtractEvent(e.Type, e.Body))
		}
		_, vals := d.eventSearchColumns(fmt.Sprintf("$%d", n+9), fmt.Sprintf("$%d", n+10), fmt.Sprintf("$%d", n+11))
		fmt.Fprintf(b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d%s)", n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, vals)
		args = append(args, e.SessionID, e.Sequence, e.EventID, e.Type, e.Subject, encodeAudience(e.Audience), e.CreatedAt, string(e.Body), in.text)
		if d.searchWordsArg() {
			args = append(args, in.words, in.pairs)
		}
	}
	return args
}

// Audiences are stored as ",@a.b,@c.d," so a LIKE '%,@a.b,%' prefilter works
// on both dialects (with the handle's "_" escaped: see likeEscape); handles
// cannot contain commas.
func encodeAudience(a []string) string {
	if len(a) == 0 {
		return ""
	}
	return "," + strings.Join(a, ",") + ","
}

func decodeAudience(s string) []string {
	s = strings.Trim(s, ",")
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// commit builds the Commit for the hub: the events, who must hear of them
// and what each of them may see after this commit.
func (t *sessionTx) commit() *Commit {
	if len(t.events) == 0 {
		return nil
	}
	c := &Commit{SessionID: t.id, Events: t.events}
	for _, h := range t.order {
		p := t.parts[h]
		if t.dirty[h] {
			c.Recipients = append(c.Recipients, h)
			continue
		}
		v := p.view()
		for i := range t.events {
			if visibility.Visible(v, t.events[i].Meta()) {
				c.Recipients = append(c.Recipients, h)
				break
			}
		}
	}
	sort.Strings(c.Recipients)
	c.Views = make([]visibility.View, len(c.Recipients))
	for i, h := range c.Recipients {
		c.Views[i] = t.parts[h].view()
	}
	return c
}
