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
	"github.com/aspd/aspd/trust"
)

// CreateSession is a validated POST /sessions request.
type CreateSession struct {
	Creator        string
	Invite         []string // valid, de-duplicated, without the creator
	Topic          string
	Initial        *protocol.InitialMessage // content already validated
	EndAfterSend   bool
	IdempotencyKey string // "" when absent
	RequestHash    string // identifies the request for idempotent retries
	// FrameRecipients are the recipient_handles of agent-channel frames in
	// the initial message; each must be a participant of the new session.
	FrameRecipients []string
}

// CreateSession creates a session with the creator joined and the invitees
// invited. Trust is all-or-nothing: if any invitee does not exist or refuses
// contact, nothing is written and the answer is ErrNotFound, so a caller never
// learns which invitee refused. A retry with the same idempotency key returns
// the original response and a nil Commit.
func (s *Store) CreateSession(ctx context.Context, req CreateSession) (protocol.CreateSessionResponse, *Commit, error) {
	var resp protocol.CreateSessionResponse
	var commit *Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		resp, commit = protocol.CreateSessionResponse{}, nil // a retried transaction starts over (inTx)
		if req.IdempotencyKey != "" {
			res, err := tx.ExecContext(ctx, `INSERT INTO session_keys (creator, key, request_hash, session_id) VALUES ($1, $2, $3, '') ON CONFLICT DO NOTHING`,
				req.Creator, req.IdempotencyKey, req.RequestHash)
			if err != nil {
				return fmt.Errorf("store: session key: %w", err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				var hash string
				var seq sql.NullInt64
				if err := tx.QueryRowContext(ctx, `SELECT request_hash, session_id, sequence FROM session_keys WHERE creator = $1 AND key = $2`,
					req.Creator, req.IdempotencyKey).Scan(&hash, &resp.SessionID, &seq); err != nil {
					return fmt.Errorf("store: session key: %w", err)
				}
				if hash != req.RequestHash {
					return ErrIdempotencyKeyReused
				}
				if seq.Valid {
					resp.Sequence = &seq.Int64
				}
				return nil
			}
		}
		if err := s.checkContact(ctx, tx, req.Creator, req.Invite, nil); err != nil {
			return err
		}
		t := s.newSession(ctx, tx, req.Creator, req.Topic)
		creator := t.participant(req.Creator)
		creator.status = protocol.StatusJoined
		creator.visibleThrough = visibility.Joined
		creator.joinedAt = sql.NullInt64{Int64: t.now, Valid: true}
		var initial *protocol.Message
		if req.Initial != nil {
			m := t.message(req.Creator, req.Initial.Content, req.Initial.Metadata, "")
			if _, err := t.append(protocol.EventMessage, req.Creator, nil, m); err != nil {
				return err
			}
			resp.Sequence = &m.Sequence
			if req.EndAfterSend {
				initial = &m
			}
		}
		for _, h := range req.Invite {
			if err := t.invite(h, req.Creator, initial); err != nil {
				return err
			}
		}
		if err := t.checkFrameRecipients(req.FrameRecipients); err != nil {
			return err
		}
		if req.EndAfterSend {
			t.sendAndEnd = true
			if err := t.end(req.Creator); err != nil {
				return err
			}
		}
		if err := t.save(); err != nil {
			return err
		}
		resp.SessionID = t.id
		if req.IdempotencyKey != "" {
			if _, err := tx.ExecContext(ctx, `UPDATE session_keys SET session_id = $3, sequence = $4 WHERE creator = $1 AND key = $2`,
				req.Creator, req.IdempotencyKey, t.id, resp.Sequence); err != nil {
				return fmt.Errorf("store: session key: %w", err)
			}
		}
		commit = t.commit()
		return nil
	})
	return resp, commit, err
}

// checkContact applies trust.CanInvite, the one invitation rule of create,
// invite and reopen: every invitee must exist and be reachable by the
// inviter, and no block may stand between an invitee and another invitee or
// a member (a current participant the invitees will share the session with).
// Any failure is ErrNotFound for the whole request.
func (s *Store) checkContact(ctx context.Context, tx *sql.Tx, inviter string, invitees, members []string) error {
	if len(invitees) == 0 {
		return nil
	}
	agents, err := loadAgents(ctx, tx, dedupe(append(append([]string{inviter}, invitees...), members...)))
	if err != nil {
		return err
	}
	from, ok := agents[inviter]
	if !ok {
		return ErrNotFound
	}
	// Blocks are one-directional rows; each agent's own list is loaded, so
	// trust.Blocked sees both directions.
	to := make([]trust.Agent, 0, len(invitees))
	for _, h := range invitees {
		a, ok := agents[h]
		if !ok {
			return ErrNotFound
		}
		to = append(to, a.Trust())
	}
	var with []trust.Agent
	for _, h := range members {
		if a, ok := agents[h]; ok { // a deleted member has left every session
			with = append(with, a.Trust())
		}
	}
	if !trust.CanInvite(from.Trust(), to, with) {
		return ErrNotFound
	}
	return nil
}

// current returns the session's invited and joined participants.
func (t *sessionTx) current() []string {
	var out []string
	for _, h := range t.order {
		if st := t.parts[h].status; st == protocol.StatusJoined || st == protocol.StatusInvited {
			out = append(out, h)
		}
	}
	return out
}

func dedupe(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := in[:0:0]
	for _, h := range in {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

// withSession runs fn on a locked session whose participants include caller.
// A session the caller has never been part of does not exist for it.
func (s *Store) withSession(ctx context.Context, id, caller string, fn func(t *sessionTx) error) (*Commit, error) {
	return s.lockedSession(ctx, id, func(t *sessionTx) error {
		if _, ok := t.parts[caller]; !ok {
			return ErrNotFound
		}
		return fn(t)
	})
}

// lockedSession runs fn on locked session id in one transaction, saves what
// fn changed and returns the commit.
func (s *Store) lockedSession(ctx context.Context, id string, fn func(t *sessionTx) error) (*Commit, error) {
	var commit *Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t, err := s.lockSession(ctx, tx, id)
		if err != nil {
			return err
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

// Join moves an invited caller to joined. Joining again is a no-op; a left
// participant needs a fresh invitation.
func (s *Store) Join(ctx context.Context, id, caller string) (*Commit, error) {
	return s.withSession(ctx, id, caller, func(t *sessionTx) error {
		switch t.status(caller) {
		case protocol.StatusJoined:
			if t.state == protocol.StateEnded {
				return ErrSessionEnded
			}
			return nil
		case protocol.StatusLeft:
			state, err := t.knownState(caller)
			if err != nil {
				return err
			}
			if state == protocol.StateEnded {
				return ErrSessionEnded
			}
			return ErrNotInvited
		}
		if t.state == protocol.StateEnded {
			return ErrSessionEnded
		}
		p := t.participant(caller)
		p.status = protocol.StatusJoined
		p.visibleThrough = visibility.Joined
		p.lastChangeSeq = t.nextSeq()
		p.joinedAt = sql.NullInt64{Int64: t.now, Valid: true}
		_, err := t.append(protocol.EventJoined, caller, nil, protocol.AgentPayload{Agent: caller})
		return err
	})
}

// Invite invites handles into an active session on behalf of a joined
// caller. It returns the handles that received a new session.invited (those
// already invited or joined are skipped). Trust is all-or-nothing.
func (s *Store) Invite(ctx context.Context, id, caller string, invite []string) ([]string, *Commit, error) {
	invited := []string{}
	commit, err := s.withSession(ctx, id, caller, func(t *sessionTx) error {
		if err := t.mustBeJoined(caller); err != nil {
			return err
		}
		if err := s.checkContact(ctx, t.tx, caller, invite, t.current()); err != nil {
			return err
		}
		for _, h := range invite {
			if st := t.status(h); st == protocol.StatusJoined || st == protocol.StatusInvited {
				continue
			}
			if err := t.invite(h, caller, nil); err != nil {
				return err
			}
			invited = append(invited, h)
		}
		return nil
	})
	return invited, commit, err
}

// SendMessage is a validated POST /sessions/{id}/messages request.
type SendMessage struct {
	SessionID      string
	Sender         string
	Content        json.RawMessage
	Metadata       json.RawMessage
	IdempotencyKey string
	RequestHash    string
	// FrameRecipients are the recipient_handles of the agent-channel frames
	// the content carries; each must be a participant of the session.
	FrameRecipients []string
	// Binding is the message's binding part, if any (store/decisions.go).
	Binding *Binding

	index *searchInput // worked out by SendMessage, before the transaction
}

// SendMessage appends a session.message from a joined sender. The
// idempotency key is checked under the session row lock, before any state
// check, so a retry of a message that succeeded returns the original
// response even if the session has ended since. Both commit modes (group
// commit or one transaction per message) apply the one message rule,
// appendMessages.
func (s *Store) SendMessage(ctx context.Context, req SendMessage) (protocol.SendMessageResponse, *Commit, error) {
	// On the caller's goroutine, so that the committer's transaction does
	// not spend its time decoding content.
	req.index = newSearchInput(s.d, search.ExtractContent(req.Content))
	if req.Binding != nil {
		return s.sendBinding(ctx, req)
	}
	if s.batch != nil {
		return s.sendBatched(ctx, req)
	}
	return s.sendOne(ctx, req)
}

// sendOne appends one message in its own transaction.
func (s *Store) sendOne(ctx context.Context, req SendMessage) (protocol.SendMessageResponse, *Commit, error) {
	if r, ok := s.appendCached(ctx, &req); ok {
		return r.resp, r.commit, r.err
	}
	var r sendResult
	err := s.inQueuedTx(ctx, func(q stmtQueue) error {
		results, err := s.appendMessages(ctx, q, []*SendMessage{&req})
		if err != nil {
			return err
		}
		r = results[0]
		return r.err
	})
	if err != nil {
		return protocol.SendMessageResponse{}, nil, err
	}
	return r.resp, r.commit, nil
}

// appendMessages applies the message rule to every request in q's
// transaction, one message or a whole group-commit batch alike, in two
// flushes of q (stmtqueue.go), three when a session's cached participants
// are stale: one statement locks every session involved (in id order),
// whose participants come from the member cache (members.go) or are read
// beside it, and one loads the idempotency keys in play; each message is
// appended (appendMessage); then the insert of every event with the
// advance of every session (queueEvents: one statement on PostgreSQL) and
// the statement that records the new keys are queued, left for the
// caller's commit to send. A
// request refused by a rule gets its own error in its result; any other
// error fails the transaction, and is returned (or comes with the commit).
// Each session's Commit goes to the first request that appended to it,
// whose caller publishes it for all.
func (s *Store) appendMessages(ctx context.Context, q stmtQueue, reqs []*SendMessage) ([]sendResult, error) {
	results := make([]sendResult, len(reqs))
	var ids []string
	seen := map[string]bool{}
	for _, r := range reqs {
		if !seen[r.SessionID] {
			seen[r.SessionID] = true
			ids = append(ids, r.SessionID)
		}
	}
	sort.Strings(ids)
	sessions := make(map[string]*sessionTx, len(ids))
	s.queueLockForMessages(ctx, q, ids, sessions)
	keys := map[msgKey]priorKey{}
	queueMessageKeys(q, s.d, reqs, keys)
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	if err := s.resolveMembers(ctx, q, sessions); err != nil {
		return nil, err
	}
	var newKeys []int // requests whose key is recorded
	appended := make([]bool, len(reqs))
	for i, req := range reqs {
		t := sessions[req.SessionID]
		if t == nil {
			results[i].err = ErrNotFound
			continue
		}
		resp, ok, err := t.appendMessage(req, keys)
		if AsError(err) != nil {
			results[i].err = err
			continue
		}
		if err != nil {
			return nil, err
		}
		results[i].resp, appended[i] = resp, ok
		if ok && req.IdempotencyKey != "" {
			newKeys = append(newKeys, i)
		}
	}
	var events []StoredEvent
	var touched []*sessionTx
	for _, id := range ids {
		if t := sessions[id]; t != nil && len(t.events) > 0 {
			events = append(events, t.events...)
			touched = append(touched, t)
		}
	}
	queueEvents(q, s.d, events, touched)
	for _, t := range touched {
		// The next lone message's guess (fastappend.go); were this
		// transaction not to commit, that guess would fail, and cost a
		// round trip.
		s.members.putRow(t, false)
	}
	queueMessageKeysInsert(q, s.d, reqs, results, newKeys)
	published := map[string]bool{}
	for i, req := range reqs {
		if id := req.SessionID; appended[i] && !published[id] {
			published[id] = true
			results[i].commit = sessions[id].commit()
		}
	}
	return results, nil
}

// appendMessage is the message rule: it appends req's message to the locked
// session t or refuses it. The sender must be a participant (else
// ErrNotFound); a known idempotency key answers with the original response
// (or ErrIdempotencyKeyReused) before any state check; then the sender must
// be joined (mustBeJoined), and every frame recipient a current
// participant. keys holds the keys already used, and gets the new one.
// appended is false when nothing was appended (a retry).
func (t *sessionTx) appendMessage(req *SendMessage, keys map[msgKey]priorKey) (resp protocol.SendMessageResponse, appended bool, err error) {
	if _, ok := t.parts[req.Sender]; !ok {
		return resp, false, ErrNotFound
	}
	k := msgKey{req.SessionID, req.Sender, req.IdempotencyKey}
	if req.IdempotencyKey != "" {
		if prior, ok := keys[k]; ok {
			if prior.hash != req.RequestHash {
				return resp, false, ErrIdempotencyKeyReused
			}
			return prior.resp, false, nil
		}
	}
	if err := t.mustBeJoined(req.Sender); err != nil {
		return resp, false, err
	}
	if err := t.checkFrameRecipients(req.FrameRecipients); err != nil {
		return resp, false, err
	}
	m := t.message(req.Sender, req.Content, req.Metadata, req.IdempotencyKey)
	ev, err := t.append(protocol.EventMessage, req.Sender, nil, m)
	if err != nil {
		return resp, false, err
	}
	ev.index = req.index
	resp = protocol.SendMessageResponse{MessageID: m.ID, Sequence: m.Sequence}
	if req.IdempotencyKey != "" {
		keys[k] = priorKey{hash: req.RequestHash, resp: resp}
	}
	return resp, true, nil
}

type msgKey struct{ session, sender, key string }

type priorKey struct {
	hash string
	resp protocol.SendMessageResponse
}

// queueMessageKeys queues the one statement that loads the message keys
// reqs use into out.
func queueMessageKeys(q stmtQueue, d dialect, reqs []*SendMessage, out map[msgKey]priorKey) {
	var sids, ks []string
	for _, r := range reqs {
		if r.IdempotencyKey != "" {
			sids = append(sids, r.SessionID)
			ks = append(ks, r.IdempotencyKey)
		}
	}
	if len(ks) == 0 {
		return
	}
	inS, args := d.inStrings("session_id", dedupe(sids), 1)
	inK, argsK := d.inStrings("key", dedupe(ks), len(args)+1)
	q.Query("message keys", `SELECT session_id, sender, key, request_hash, message_id, sequence FROM message_keys
		WHERE `+inS+` AND `+inK, append(args, argsK...), func(rows rowScanner) error {
		for rows.Next() {
			var k msgKey
			var p priorKey
			if err := rows.Scan(&k.session, &k.sender, &k.key, &p.hash, &p.resp.MessageID, &p.resp.Sequence); err != nil {
				return err
			}
			out[k] = p
		}
		return nil
	})
}

// queueMessageKeysInsert queues the recording of the keys of the requests
// in which (indexes of reqs): one statement of array parameters on
// PostgreSQL, multi-row INSERTs of at most 100 rows on SQLite.
func queueMessageKeysInsert(q stmtQueue, d dialect, reqs []*SendMessage, results []sendResult, which []int) {
	if len(which) == 0 {
		return
	}
	if d.arrayParams { // one statement text for any number of keys: it stays prepared
		n := len(which)
		strs, seq := columns[string](5, n), make([]int64, n)
		sid, sender, key, hash, mid := strs[0], strs[1], strs[2], strs[3], strs[4]
		for j, i := range which {
			r := reqs[i]
			sid[j], sender[j], key[j], hash[j], mid[j], seq[j] = r.SessionID, r.Sender, r.IdempotencyKey, r.RequestHash, results[i].resp.MessageID, results[i].resp.Sequence
		}
		q.Exec("message keys", `INSERT INTO message_keys (session_id, sender, key, request_hash, message_id, sequence)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])`, []any{sid, sender, key, hash, mid, seq})
		return
	}
	for start := 0; start < len(which); start += 100 {
		batch := which[start:min(start+100, len(which))]
		var b strings.Builder
		b.WriteString(`INSERT INTO message_keys (session_id, sender, key, request_hash, message_id, sequence) VALUES `)
		args := make([]any, 0, len(batch)*6)
		for j, i := range batch {
			if j > 0 {
				b.WriteString(", ")
			}
			n := j * 6
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d)", n+1, n+2, n+3, n+4, n+5, n+6)
			r := reqs[i]
			args = append(args, r.SessionID, r.Sender, r.IdempotencyKey, r.RequestHash, results[i].resp.MessageID, results[i].resp.Sequence)
		}
		q.Exec("message keys", b.String(), args)
	}
}

// Leave moves a joined caller to left; the session ends when no joined
// participant remains.
func (s *Store) Leave(ctx context.Context, id, caller string) (*Commit, error) {
	return s.withSession(ctx, id, caller, func(t *sessionTx) error {
		if err := t.mustBeJoined(caller); err != nil {
			return err
		}
		return t.leave(caller, protocol.LeftReasonLeft, false)
	})
}

// End ends an active session on behalf of a joined caller.
func (s *Store) End(ctx context.Context, id, caller string) (*Commit, error) {
	return s.withSession(ctx, id, caller, func(t *sessionTx) error {
		if err := t.mustBeJoined(caller); err != nil {
			return err
		}
		return t.end(caller)
	})
}

// Reopen returns an ended session to active. Only an agent that was joined
// when the session ended may reopen. Participants are re-invited fresh: the
// re-invited prior participants see session.reopened and a new
// session.invited; prior participants not re-invited become left and see
// nothing after the end. Re-invitations pass trust like any invitation.
func (s *Store) Reopen(ctx context.Context, id, caller string, invite []string, initial *protocol.InitialMessage, frameRecipients []string) (*Commit, error) {
	return s.withSession(ctx, id, caller, func(t *sessionTx) error {
		// A caller that left and may not reopen is refused alike whether
		// the session is still ended or was reopened since.
		if !t.mayReopen(caller) && (t.status(caller) == protocol.StatusLeft || t.state == protocol.StateEnded) {
			return ErrNotJoined
		}
		if t.state == protocol.StateActive {
			return ErrSessionActive
		}
		// The reopened session's participants are the caller and the
		// invitees: everyone else becomes left.
		if err := s.checkContact(ctx, t.tx, caller, invite, nil); err != nil {
			return err
		}
		reinvited := map[string]bool{}
		for _, h := range invite {
			reinvited[h] = true
		}
		seq := t.nextSeq()
		var audience []string
		for _, h := range append([]string(nil), t.order...) {
			if h == caller {
				continue
			}
			if reinvited[h] {
				audience = append(audience, h)
			}
			p := t.parts[h]
			if p.status == protocol.StatusJoined {
				p = t.participant(h)
				p.status = protocol.StatusLeft
				p.visibleThrough = seq - 1
				// lastChangeSeq stays: nothing past the end is shown to
				// it, unless the invitation below sets it.
				p.leftAt = sql.NullInt64{Int64: t.now, Valid: true}
			}
		}
		if p := t.parts[caller]; p.status != protocol.StatusJoined {
			// A send-and-end invitee replying: it becomes the joined reopener.
			p = t.participant(caller)
			p.status = protocol.StatusJoined
			p.visibleThrough = visibility.Joined
			p.lastChangeSeq = seq
			p.joinedAt = sql.NullInt64{Int64: t.now, Valid: true}
			p.leftAt = sql.NullInt64{}
		}
		t.state = protocol.StateActive
		t.endedAt = sql.NullInt64{}
		t.sendAndEnd = false
		if _, err := t.append(protocol.EventReopened, caller, audience, protocol.ReopenedPayload{ReopenedBy: caller}); err != nil {
			return err
		}
		for _, h := range invite {
			if err := t.invite(h, caller, nil); err != nil {
				return err
			}
		}
		if err := t.checkFrameRecipients(frameRecipients); err != nil {
			return err
		}
		if initial != nil {
			m := t.message(caller, initial.Content, initial.Metadata, "")
			if _, err := t.append(protocol.EventMessage, caller, nil, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// sessionIDsOf returns the active sessions in which h is joined or invited,
// sorted, so that multi-session transactions lock rows in one order.
func sessionIDsOf(ctx context.Context, q querier, h string, with string) ([]string, error) {
	query := `SELECT p.session_id FROM participants p JOIN sessions s ON s.id = p.session_id
		WHERE p.handle = $1 AND p.status IN ('joined', 'invited') AND s.state = 'active'`
	args := []any{h}
	if with != "" {
		query += ` AND EXISTS (SELECT 1 FROM participants o WHERE o.session_id = p.session_id AND o.handle = $2 AND o.status IN ('joined', 'invited'))`
		args = append(args, with)
	}
	ids, err := queryStrings(ctx, q, query+` ORDER BY p.session_id`, args...)
	sort.Strings(ids)
	return ids, err
}

// forceLeave makes h leave every active session it shares with other (every
// active session when other is ""), in one transaction. silent hides the
// session.left from h itself (block).
func (s *Store) forceLeave(ctx context.Context, tx *sql.Tx, h, other string, silent bool) ([]*Commit, error) {
	ids, err := sessionIDsOf(ctx, tx, h, other)
	if err != nil {
		return nil, err
	}
	var commits []*Commit
	for _, id := range ids {
		t, err := s.lockSession(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		if st := t.status(h); t.state != protocol.StateActive || (st != protocol.StatusJoined && st != protocol.StatusInvited) {
			continue
		}
		if err := t.leave(h, protocol.LeftReasonLeft, silent); err != nil {
			return nil, err
		}
		// §6.2: a session whose only participants were the blocker and the
		// blocked agent ends naturally (no ended_by), as if all had left.
		if other != "" && t.state == protocol.StateActive && onlyCurrent(t, other) {
			if err := t.end(""); err != nil {
				return nil, err
			}
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

// onlyCurrent reports whether h is the session's only invited or joined participant.
func onlyCurrent(t *sessionTx, h string) bool {
	for _, p := range t.parts {
		if (p.status == protocol.StatusJoined || p.status == protocol.StatusInvited) && p.handle != h {
			return false
		}
	}
	return true
}

// Block records that blocker blocks blocked and force-leaves blocked from
// every active session both are in (§6.2). The blocked agent is never told:
// its horizon stops before its own session.left.
func (s *Store) Block(ctx context.Context, blocker, blocked string) ([]*Commit, error) {
	var commits []*Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := mustExist(ctx, tx, blocker); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO blocks (blocker, blocked, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			blocker, blocked, s.nowMs()); err != nil {
			return fmt.Errorf("store: block: %w", err)
		}
		var err error
		commits, err = s.forceLeave(ctx, tx, blocked, blocker, true)
		return err
	})
	return commits, err
}

// Unblock removes a block. Sessions left because of it stay left.
func (s *Store) Unblock(ctx context.Context, blocker, blocked string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := mustExist(ctx, tx, blocker); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM blocks WHERE blocker = $1 AND blocked = $2`, blocker, blocked)
		return err
	})
}

// DeleteAgent deletes an agent: its token stops working, it leaves every
// active session, its Chorus endpoint (if any) is removed, and its handle
// is retired (never reused). Transcripts stay.
func (s *Store) DeleteAgent(ctx context.Context, h string) ([]*Commit, error) {
	var commits []*Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE agents SET deleted_at = $2, token_hash = NULL WHERE handle = $1 AND deleted_at IS NULL`, h, s.nowMs())
		if err != nil {
			return fmt.Errorf("store: delete agent: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		if commits, err = s.forceLeave(ctx, tx, h, "", false); err != nil {
			return err
		}
		// Its Chorus endpoint goes with it, in the same transaction: a
		// deleted agent must not keep one because a second write failed.
		_, err = deleteChorusEndpoint(ctx, tx, h)
		return err
	})
	return commits, err
}
