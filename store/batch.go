package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aspd/aspd/protocol"
)

// Group commit for messages, the hot path. Concurrent SendMessage calls
// queue up; each committer takes whatever has queued (at most maxBatch) and
// appends all of it in one transaction: one statement locks every session
// involved (in id order, so concurrent batches cannot deadlock), one loads
// their participants, one checks idempotency keys, one inserts every event,
// one advances every session's counter, one commit and one fsync. Nothing
// waits for a batch to fill: at low load a batch is one message and costs
// what a lone transaction costs; under load, batches grow by themselves.
//
// One member's failure is not the batch's: rule refusals (not joined, an
// ended session, a reused key) are per member anyway, and if a statement
// fails the shared transaction, each member is retried in a transaction of
// its own, so that only the member at fault gets the error.

const maxBatch = 128

type sendCall struct {
	ctx  context.Context
	req  SendMessage
	done chan sendResult
}

type sendResult struct {
	resp   protocol.SendMessageResponse
	commit *Commit
	err    error
}

type batcher struct {
	in       chan *sendCall
	stop     chan struct{}
	stopOnce sync.Once
}

// startBatcher starts n committers.
func (s *Store) startBatcher(n int) {
	b := &batcher{in: make(chan *sendCall, 4*maxBatch), stop: make(chan struct{})}
	s.batch = b
	for range n {
		s.bg.Add(1)
		go s.commitLoop(b)
	}
}

func (s *Store) commitLoop(b *batcher) {
	defer s.bg.Done()
	calls := make([]*sendCall, 0, maxBatch)
	for {
		select {
		case <-b.stop:
			return
		case c := <-b.in:
			calls = append(calls[:0], c)
		}
	drain:
		for len(calls) < maxBatch {
			select {
			case c := <-b.in:
				calls = append(calls, c)
			default:
				break drain
			}
		}
		s.commitBatch(calls)
	}
}

// sendBatched queues a message for the next batch and waits for its result.
func (s *Store) sendBatched(ctx context.Context, req SendMessage) (protocol.SendMessageResponse, *Commit, error) {
	c := &sendCall{ctx: ctx, req: req, done: make(chan sendResult, 1)}
	select {
	case s.batch.in <- c:
	case <-ctx.Done():
		return protocol.SendMessageResponse{}, nil, ctx.Err()
	}
	// Once queued, wait for the batch whatever happens to ctx: the batch
	// always answers, and a committed message's Commit must reach the
	// caller, who publishes it for the whole session (a Commit dropped here
	// would leave live delivery waiting for it).
	r := <-c.done
	return r.resp, r.commit, r.err
}

func (s *Store) commitBatch(calls []*sendCall) {
	results := make([]sendResult, len(calls))
	var live []int // calls whose client is still waiting
	for i, c := range calls {
		if c.ctx.Err() != nil {
			results[i].err = c.ctx.Err()
			continue
		}
		live = append(live, i)
	}
	if len(live) > 0 {
		var applyErr error
		err := s.inTx(context.Background(), func(tx *sql.Tx) error {
			applyErr = s.applyBatch(tx, calls, live, results)
			return applyErr
		})
		switch {
		case err == nil:
		case applyErr != nil && len(live) > 1 && !errors.Is(applyErr, context.DeadlineExceeded):
			// A statement failed, and with it the transaction that every
			// member shared, though the cause may be one member's row. One
			// request's failure must not fail the others: each member is
			// tried again alone, so only the one at fault gets the error.
			s.sendAlone(calls, live, results)
		default:
			// One member (its failure is its own), a transaction that timed
			// out, or a failed commit, whose outcome is unknown: retrying
			// could append a message twice.
			for _, i := range live {
				results[i] = sendResult{err: memberError(err)}
			}
		}
	}
	for i, c := range calls {
		c.done <- results[i]
	}
}

// sendAlone appends each live call's message in a transaction of its own,
// by the one-message path, after their shared transaction failed and
// rolled back. A call whose client has gone meanwhile is not written.
func (s *Store) sendAlone(calls []*sendCall, live []int, results []sendResult) {
	for _, i := range live {
		c := calls[i]
		if err := c.ctx.Err(); err != nil {
			results[i] = sendResult{err: err}
			continue
		}
		resp, commit, err := s.sendOne(context.WithoutCancel(c.ctx), c.req)
		results[i] = sendResult{resp: resp, commit: commit, err: memberError(err)}
	}
}

// memberError turns a database's refusal of one message's data into an
// answer to its sender where the refusal says what is wrong: PostgreSQL's
// data exceptions (SQLSTATE class 22: text it cannot store, a value out of
// range) are 400 invalid_request, its program limits (class 54) 413
// content_too_large. Anything else stays an internal error.
func memberError(err error) error {
	var pg *pgconn.PgError
	switch {
	case !errors.As(err, &pg):
		return err
	case strings.HasPrefix(pg.Code, "22"):
		return &Error{Kind: KindInvalidData, Message: fmt.Sprintf("the database cannot store this message's data (SQLSTATE %s)", pg.Code)}
	case strings.HasPrefix(pg.Code, "54"):
		return &Error{Kind: KindTooLarge, Message: fmt.Sprintf("the message exceeds a database limit (SQLSTATE %s)", pg.Code)}
	}
	return err
}

// applyBatch appends every live call's message in tx, recording per-call
// results; an error return aborts the whole batch.
func (s *Store) applyBatch(tx *sql.Tx, calls []*sendCall, live []int, results []sendResult) error {
	ctx := context.Background()
	var ids []string
	seen := map[string]bool{}
	for _, i := range live {
		if id := calls[i].req.SessionID; !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	sessions, err := s.lockSessions(ctx, tx, ids)
	if err != nil {
		return err
	}
	keys, err := loadMessageKeys(ctx, tx, calls, live)
	if err != nil {
		return err
	}
	type keyRow struct {
		req  *SendMessage
		resp protocol.SendMessageResponse
	}
	var newKeys []keyRow
	appended := make([]bool, len(calls))
	for _, i := range live {
		req := &calls[i].req
		t, ok := sessions[req.SessionID]
		if !ok || t.parts[req.Sender] == nil {
			results[i].err = ErrNotFound
			continue
		}
		if req.IdempotencyKey != "" {
			k := msgKey{req.SessionID, req.Sender, req.IdempotencyKey}
			if prior, ok := keys[k]; ok {
				if prior.hash != req.RequestHash {
					results[i].err = ErrIdempotencyKeyReused
				} else {
					results[i].resp = prior.resp
				}
				continue
			}
		}
		switch {
		case t.state == protocol.StateEnded:
			results[i].err = ErrSessionEnded
			continue
		case t.status(req.Sender) != protocol.StatusJoined:
			results[i].err = ErrNotJoined
			continue
		}
		if err := t.checkFrameRecipients(req.FrameRecipients); err != nil {
			results[i].err = err
			continue
		}
		m := t.message(req.Sender, req.Content, req.Metadata, req.IdempotencyKey)
		if _, err := t.append(protocol.EventMessage, req.Sender, nil, m); err != nil {
			return err
		}
		results[i].resp = protocol.SendMessageResponse{MessageID: m.ID, Sequence: m.Sequence}
		appended[i] = true
		if req.IdempotencyKey != "" {
			keys[msgKey{req.SessionID, req.Sender, req.IdempotencyKey}] = priorKey{hash: req.RequestHash, resp: results[i].resp}
			newKeys = append(newKeys, keyRow{req: req, resp: results[i].resp})
		}
	}
	// Write everything: events, counters, keys.
	var events []StoredEvent
	var touched []*sessionTx
	for _, id := range ids {
		if t := sessions[id]; t != nil && len(t.events) > 0 {
			events = append(events, t.events...)
			touched = append(touched, t)
		}
	}
	if len(events) == 0 {
		return nil
	}
	if s.d.dataModifyingCTE && len(events) <= 100 {
		// PostgreSQL: the counters' UPDATE rides in the events' INSERT, one round trip.
		if err := appendAndAdvance(ctx, tx, events, touched); err != nil {
			return err
		}
	} else {
		if err := insertEvents(ctx, tx, events); err != nil {
			return err
		}
		if err := advanceSessions(ctx, tx, touched); err != nil {
			return err
		}
	}
	for start := 0; start < len(newKeys); start += 100 {
		batch := newKeys[start:min(start+100, len(newKeys))]
		var b strings.Builder
		b.WriteString(`INSERT INTO message_keys (session_id, sender, key, request_hash, message_id, sequence) VALUES `)
		args := make([]any, 0, len(batch)*6)
		for j, k := range batch {
			if j > 0 {
				b.WriteString(", ")
			}
			n := j * 6
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d)", n+1, n+2, n+3, n+4, n+5, n+6)
			args = append(args, k.req.SessionID, k.req.Sender, k.req.IdempotencyKey, k.req.RequestHash, k.resp.MessageID, k.resp.Sequence)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("store: message keys: %w", err)
		}
	}
	// Each session's Commit goes to one caller that appended to it, who
	// publishes it for all.
	published := map[string]bool{}
	for _, i := range live {
		id := calls[i].req.SessionID
		if t := sessions[id]; appended[i] && !published[id] {
			published[id] = true
			results[i].commit = t.commit()
		}
	}
	return nil
}

type msgKey struct{ session, sender, key string }

type priorKey struct {
	hash string
	resp protocol.SendMessageResponse
}

func loadMessageKeys(ctx context.Context, tx *sql.Tx, calls []*sendCall, live []int) (map[msgKey]priorKey, error) {
	out := map[msgKey]priorKey{}
	var sids, ks []string
	for _, i := range live {
		if r := calls[i].req; r.IdempotencyKey != "" {
			sids = append(sids, r.SessionID)
			ks = append(ks, r.IdempotencyKey)
		}
	}
	if len(ks) == 0 {
		return out, nil
	}
	inS, args := inList(dedupe(sids), 1)
	inK, argsK := inList(dedupe(ks), len(args)+1)
	rows, err := tx.QueryContext(ctx, `SELECT session_id, sender, key, request_hash, message_id, sequence FROM message_keys
		WHERE session_id IN (`+inS+`) AND key IN (`+inK+`)`, append(args, argsK...)...)
	if err != nil {
		return nil, fmt.Errorf("store: message keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k msgKey
		var p priorKey
		if err := rows.Scan(&k.session, &k.sender, &k.key, &p.hash, &p.resp.MessageID, &p.resp.Sequence); err != nil {
			return nil, err
		}
		out[k] = p
	}
	return out, rows.Err()
}

// lockSessions locks and loads several sessions and their participants in
// one statement (every session has at least its creator as participant).
// Rows are locked in session id order, so concurrent batches cannot deadlock.
func (s *Store) lockSessions(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*sessionTx, error) {
	out := make(map[string]*sessionTx, len(ids))
	in, args := inList(ids, 1)
	rows, err := tx.QueryContext(ctx, `SELECT s.id, s.topic, s.state, s.created_by, s.created_at, s.ended_at, s.last_seq,
			p.handle, p.status, p.visible_through, p.last_change_seq, p.disconnected, p.invited_at, p.joined_at, p.left_at
		FROM sessions s JOIN participants p ON p.session_id = s.id
		WHERE s.id IN (`+in+`) ORDER BY s.id, COALESCE(p.invited_at, p.joined_at), p.handle`+s.d.forUpdateOfSessions, args...)
	if err != nil {
		return nil, fmt.Errorf("store: lock sessions: %w", err)
	}
	defer rows.Close()
	now := s.nowMs()
	for rows.Next() {
		var r sessionTx
		p := &participant{}
		if err := rows.Scan(&r.id, &r.topic, &r.state, &r.createdBy, &r.createdAt, &r.endedAt, &r.lastSeq,
			&p.handle, &p.status, &p.visibleThrough, &p.lastChangeSeq, &p.disconnected, &p.invitedAt, &p.joinedAt, &p.leftAt); err != nil {
			return nil, fmt.Errorf("store: lock sessions: %w", err)
		}
		t := out[r.id]
		if t == nil {
			t = &sessionTx{ctx: ctx, tx: tx, now: now, id: r.id, topic: r.topic, state: r.state, createdBy: r.createdBy,
				createdAt: r.createdAt, endedAt: r.endedAt, lastSeq: r.lastSeq, parts: map[string]*participant{}, dirty: map[string]bool{}}
			out[r.id] = t
		}
		t.parts[p.handle] = p
		t.order = append(t.order, p.handle)
	}
	return out, rows.Err()
}

// appendAndAdvance inserts events and advances their sessions' counters in
// one statement, with a data-modifying CTE (PostgreSQL only).
func appendAndAdvance(ctx context.Context, tx *sql.Tx, events []StoredEvent, ts []*sessionTx) error {
	var b strings.Builder
	args := make([]any, 0, 2*len(ts)+8*len(events))
	b.WriteString(`WITH v(id, seq) AS (VALUES `)
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "($%d, CAST($%d AS BIGINT))", len(args)+1, len(args)+2)
		args = append(args, t.id, t.lastSeq)
	}
	b.WriteString(`), u AS (UPDATE sessions SET last_seq = v.seq FROM v WHERE sessions.id = v.id)
		INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body) VALUES `)
	for i, e := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)", n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8)
		args = append(args, e.SessionID, e.Sequence, e.EventID, e.Type, e.Subject, encodeAudience(e.Audience), e.CreatedAt, string(e.Body))
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("store: append events: %w", err)
	}
	return nil
}

// advanceSessions writes the new last_seq of several sessions in one statement.
func advanceSessions(ctx context.Context, tx *sql.Tx, ts []*sessionTx) error {
	var b strings.Builder
	b.WriteString(`WITH v(id, seq) AS (VALUES `)
	args := make([]any, 0, 2*len(ts))
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "($%d, CAST($%d AS BIGINT))", 2*i+1, 2*i+2)
		args = append(args, t.id, t.lastSeq)
	}
	b.WriteString(`) UPDATE sessions SET last_seq = (SELECT seq FROM v WHERE v.id = sessions.id) WHERE id IN (SELECT id FROM v)`)
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("store: advance sessions: %w", err)
	}
	return nil
}

// stopBatcher stops the committers and fails whatever is still queued.
func (s *Store) stopBatcher() {
	if s.batch == nil {
		return
	}
	s.batch.stopOnce.Do(func() { close(s.batch.stop) })
	s.bg.Wait()
	for {
		select {
		case c := <-s.batch.in:
			c.done <- sendResult{err: errors.New("store: closed")}
		default:
			return
		}
	}
}

// EnableGroupCommit routes SendMessage through n group-commit committers
// (n < 1 picks a default: 1 on SQLite, which has one writer; 2 on PostgreSQL).
// Call it once, before use.
func (s *Store) EnableGroupCommit(n int) {
	if n < 1 {
		// Measured on 2 cores (docs/benchmarks.md): two committers keep the
		// tail latency lowest at the same throughput; SQLite has one writer.
		n = 2
		if s.d.name == "sqlite" {
			n = 1
		}
	}
	s.startBatcher(n)
}
