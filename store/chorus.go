package store

import (
	"cmp"
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Chorus webhooks: endpoints (sealed connection strings and signing
// secrets), the per-agent Chorus cursors, the delivery outbox, callback
// tokens and short-lived MCP tokens. The rules (what is eligible, when to
// retry, what a callback may do) live in internal/app and internal/chorus;
// these are their statements.

// ChorusEndpoint is an agent's registered webhook, still sealed.
type ChorusEndpoint struct {
	Handle        string
	URLSealed     []byte
	SecretSealed  []byte
	CreatedAt     int64
	Failing       bool
	FailingSince  int64 // 0: no failure since the last success
	LastSuccessAt int64
	LastError     string
}

// ChorusCandidate is one (agent, session) with events past its Chorus
// cursor and no delivery pending.
type ChorusCandidate struct {
	Pending
	ResetAt int64
}

// ChorusDelivery is one outbox row.
type ChorusDelivery struct {
	ID            string `json:"id"`
	Handle        string `json:"agent"`
	SessionID     string `json:"session_id"`
	Sequence      int64  `json:"sequence"`
	EventType     string `json:"event_type"`
	State         string `json:"state"`
	Attempts      int    `json:"attempts"`
	NextAttemptAt int64  `json:"next_attempt_at,omitempty"`
	LastAttemptAt int64  `json:"last_attempt_at,omitempty"`
	LastStatus    int    `json:"last_status,omitempty"`
	LastError     string `json:"last_error,omitempty"`
	AgentStatus   string `json:"agent_status,omitempty"`
	AgentError    string `json:"agent_error,omitempty"`
	CreatedAt     int64  `json:"created_at"`
	FinishedAt    int64  `json:"finished_at,omitempty"`
	// Lease identifies the claim that leased the row: only that claim's
	// attempt may record an outcome (a rotation re-queues the row, and a
	// new claim on the same node must not be overwritten by the old one).
	Lease string `json:"-"`
}

// The delivery states.
const (
	ChorusPending   = "pending"
	ChorusDelivered = "delivered"
	ChorusFailed    = "failed"
)

// ChorusCallback is what a callback token grants.
type ChorusCallback struct {
	Handle     string
	SessionID  string
	DeliveryID string
}

// SetChorusEndpoint registers or replaces h's endpoint. A replacement
// (rotation) clears the failing state and makes queued retries due at once,
// so they go to the new endpoint. A first registration starts h's Chorus
// cursors at the heads of its sessions: what happened before is not sent.
// It reports whether an endpoint existed before.
func (s *Store) SetChorusEndpoint(ctx context.Context, h string, urlSealed, secretSealed []byte) (bool, error) {
	var existed bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM agents WHERE handle = $1 AND deleted_at IS NULL`, h).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("store: chorus endpoint: %w", err)
		}
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM chorus_endpoints WHERE handle = $1`, h).Scan(&one)
		existed = err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: chorus endpoint: %w", err)
		}
		now := s.nowMs()
		if _, err := tx.ExecContext(ctx, `INSERT INTO chorus_endpoints (handle, url_sealed, secret_sealed, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (handle) DO UPDATE SET url_sealed = excluded.url_sealed, secret_sealed = excluded.secret_sealed,
				created_at = excluded.created_at, failing = FALSE, failing_since = NULL, last_error = ''`, h, urlSealed, secretSealed, now); err != nil {
			return fmt.Errorf("store: chorus endpoint: %w", err)
		}
		if existed {
			_, err := tx.ExecContext(ctx, `UPDATE chorus_deliveries SET next_attempt_at = $2, leased_until = NULL, leased_by = NULL
				WHERE handle = $1 AND state = 'pending'`, h, now)
			if err != nil {
				return fmt.Errorf("store: chorus endpoint: %w", err)
			}
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO chorus_cursors (handle, session_id, seq)
			SELECT p.handle, p.session_id, s.last_seq FROM participants p JOIN sessions s ON s.id = p.session_id WHERE p.handle = $1
			ON CONFLICT (handle, session_id) DO UPDATE SET seq = excluded.seq, reset_at = 0`, h)
		if err != nil {
			return fmt.Errorf("store: chorus cursors: %w", err)
		}
		return nil
	})
	return existed, err
}

// DeleteChorusEndpoint removes h's endpoint with its cursors, outbox rows
// and callbacks. It returns ErrNotFound when h had none.
func (s *Store) DeleteChorusEndpoint(ctx context.Context, h string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		existed, err := deleteChorusEndpoint(ctx, tx, h)
		if err == nil && !existed {
			return ErrNotFound
		}
		return err
	})
}

// deleteChorusEndpoint removes h's endpoint and everything of it in tx,
// and reports whether there was one.
func deleteChorusEndpoint(ctx context.Context, tx *sql.Tx, h string) (bool, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM chorus_endpoints WHERE handle = $1`, h)
	if err != nil {
		return false, fmt.Errorf("store: chorus endpoint: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	for _, q := range []string{`DELETE FROM chorus_cursors WHERE handle = $1`, `DELETE FROM chorus_deliveries WHERE handle = $1`,
		`DELETE FROM chorus_callbacks WHERE handle = $1`, `DELETE FROM chorus_mcp_tokens WHERE handle = $1`} {
		if _, err := tx.ExecContext(ctx, q, h); err != nil {
			return false, fmt.Errorf("store: chorus endpoint: %w", err)
		}
	}
	return true, nil
}

// ChorusEndpoint returns h's endpoint, or ErrNotFound.
func (s *Store) ChorusEndpoint(ctx context.Context, h string) (ChorusEndpoint, error) {
	e := ChorusEndpoint{Handle: h}
	var since, success sql.NullInt64
	err := s.read.QueryRowContext(ctx, `SELECT url_sealed, secret_sealed, created_at, failing, failing_since, last_success_at, last_error
		FROM chorus_endpoints WHERE handle = $1`, h).Scan(&e.URLSealed, &e.SecretSealed, &e.CreatedAt, &e.Failing, &since, &success, &e.LastError)
	if errors.Is(err, sql.ErrNoRows) {
		return e, ErrNotFound
	}
	if err != nil {
		return e, fmt.Errorf("store: chorus endpoint: %w", err)
	}
	e.FailingSince, e.LastSuccessAt = since.Int64, success.Int64
	return e, nil
}

// ChorusHandles lists the agents with a registered endpoint, failing or
// not.
func (s *Store) ChorusHandles(ctx context.Context) ([]string, error) {
	return queryStrings(ctx, s.read, `SELECT handle FROM chorus_endpoints ORDER BY handle`)
}

// ChorusHealthyHandles lists the agents whose endpoint is not failing.
func (s *Store) ChorusHealthyHandles(ctx context.Context) ([]string, error) {
	return queryStrings(ctx, s.read, `SELECT handle FROM chorus_endpoints WHERE failing = $1 ORDER BY handle`, false)
}

// ChorusCandidates lists up to limit (agent, session) pairs, over every
// registered endpoint, that have events past their Chorus cursor which the
// agent could see and no delivery pending: one read for the whole batch.
func (s *Store) ChorusCandidates(ctx context.Context, limit int) ([]ChorusCandidate, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT p.handle, p.session_id, p.status, p.visible_through, COALESCE(c.seq, 0), COALESCE(c.reset_at, 0), s.last_seq
		FROM chorus_endpoints e
		JOIN participants p ON p.handle = e.handle
		JOIN sessions s ON s.id = p.session_id
		LEFT JOIN chorus_cursors c ON c.handle = p.handle AND c.session_id = p.session_id
		WHERE s.last_seq > COALESCE(c.seq, 0)
		  AND (p.visible_through > COALESCE(c.seq, 0) OR p.last_change_seq > COALESCE(c.seq, 0))
		  AND NOT EXISTS (SELECT 1 FROM chorus_deliveries d WHERE d.handle = p.handle AND d.session_id = p.session_id AND d.state = 'pending')
		ORDER BY p.handle, p.session_id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: chorus candidates: %w", err)
	}
	defer rows.Close()
	var out []ChorusCandidate
	for rows.Next() {
		var c ChorusCandidate
		if err := rows.Scan(&c.View.Handle, &c.SessionID, &c.View.Status, &c.View.VisibleThrough, &c.Cursor, &c.ResetAt, &c.LastSeq); err != nil {
			return nil, fmt.Errorf("store: chorus candidates: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ChorusDeliveredSeqs returns the sequences of h's outbox rows (delivered
// or dead-lettered) in a session within (after, upto]: a pass restarted by
// a join skips them.
func (s *Store) ChorusDeliveredSeqs(ctx context.Context, h, sessionID string, after, upto int64) (map[int64]bool, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT sequence FROM chorus_deliveries WHERE handle = $1 AND session_id = $2 AND sequence > $3 AND sequence <= $4 AND state <> 'pending'`,
		h, sessionID, after, upto)
	if err != nil {
		return nil, fmt.Errorf("store: chorus delivered: %w", err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, fmt.Errorf("store: chorus delivered: %w", err)
		}
		out[seq] = true
	}
	return out, rows.Err()
}

// ChorusEnqueue is the outcome of examining one candidate.
type ChorusEnqueue struct {
	Handle    string
	SessionID string
	Cursor    int64 // the new Chorus cursor (events up to it need nothing)
	ResetAt   int64
	// Next, when set, is the event to deliver: a pending row is inserted.
	Next *ChorusDelivery
}

// ChorusEnqueueBatch saves the cursors and inserts the pending rows of a
// batch of examined candidates in one transaction.
func (s *Store) ChorusEnqueueBatch(ctx context.Context, batch []ChorusEnqueue) error {
	if len(batch) == 0 {
		return nil
	}
	// Two nodes enqueueing overlapping batches lock cursor rows in the same
	// order, so they wait for each other rather than deadlock.
	batch = slices.Clone(batch)
	slices.SortFunc(batch, func(a, b ChorusEnqueue) int {
		return cmp.Or(strings.Compare(a.Handle, b.Handle), strings.Compare(a.SessionID, b.SessionID))
	})
	return s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.nowMs()
		for _, e := range batch {
			if _, err := tx.ExecContext(ctx, `INSERT INTO chorus_cursors (handle, session_id, seq, reset_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT (handle, session_id) DO UPDATE SET seq = excluded.seq, reset_at = excluded.reset_at`,
				e.Handle, e.SessionID, e.Cursor, e.ResetAt); err != nil {
				return fmt.Errorf("store: chorus cursor: %w", err)
			}
			if d := e.Next; d != nil {
				res, err := tx.ExecContext(ctx, `INSERT INTO chorus_deliveries (id, handle, session_id, sequence, event_type, state, next_attempt_at, created_at)
					VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6) ON CONFLICT DO NOTHING`,
					d.ID, d.Handle, d.SessionID, d.Sequence, d.EventType, now)
				if err != nil {
					return fmt.Errorf("store: chorus enqueue: %w", err)
				}
				if n, _ := res.RowsAffected(); n == 0 {
					// The row exists already (another node, or a finished
					// delivery): step past it rather than examine it again.
					if _, err := tx.ExecContext(ctx, `UPDATE chorus_cursors SET seq = $3 WHERE handle = $1 AND session_id = $2 AND seq < $3`,
						e.Handle, e.SessionID, d.Sequence); err != nil {
						return fmt.Errorf("store: chorus cursor: %w", err)
					}
				}
			}
		}
		return nil
	})
}

// ChorusDue reports whether some pending delivery is due and unleased: a
// read, so that an idle outbox costs no write transaction per round.
func (s *Store) ChorusDue(ctx context.Context) (bool, error) {
	var one int
	err := s.read.QueryRowContext(ctx, `SELECT 1 FROM chorus_deliveries WHERE state = 'pending' AND next_attempt_at <= $1
		AND (leased_until IS NULL OR leased_until < $1) LIMIT 1`, s.nowMs()).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: chorus due: %w", err)
	}
	return true, nil
}

// ClaimChorusDeliveries leases up to limit due deliveries to lease (a
// claim's unique name) until leaseUntil. On PostgreSQL, FOR UPDATE SKIP LOCKED lets several nodes
// claim from the same table without taking the same row.
func (s *Store) ClaimChorusDeliveries(ctx context.Context, lease string, leaseUntil int64, limit int) ([]ChorusDelivery, error) {
	var out []ChorusDelivery
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		out = nil // a retried transaction starts over (inTx)
		now := s.nowMs()
		rows, err := tx.QueryContext(ctx, `UPDATE chorus_deliveries SET leased_until = $1, leased_by = $2
			WHERE id IN (SELECT id FROM chorus_deliveries WHERE state = 'pending' AND next_attempt_at <= $3
				AND (leased_until IS NULL OR leased_until < $3) ORDER BY next_attempt_at LIMIT $4`+s.d.skipLocked+`)
			RETURNING id, handle, session_id, sequence, event_type, attempts, created_at`, leaseUntil, lease, now, limit)
		if err != nil {
			return fmt.Errorf("store: chorus claim: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			d := ChorusDelivery{State: ChorusPending, Lease: lease}
			if err := rows.Scan(&d.ID, &d.Handle, &d.SessionID, &d.Sequence, &d.EventType, &d.Attempts, &d.CreatedAt); err != nil {
				return fmt.Errorf("store: chorus claim: %w", err)
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	return out, err
}

// ChorusOutcome is the result of one delivery attempt.
type ChorusOutcome struct {
	State       string // ChorusDelivered, ChorusFailed, or ChorusPending for a retry
	Status      int    // HTTP status, 0 when none
	Error       string // why it failed, for the delivery record
	NextAttempt int64  // for a retry
}

// ChorusAttempted records an attempt of delivery d under its lease. A
// delivery or a dead letter advances the Chorus cursor; a success clears the
// endpoint's failures. It returns the endpoint's failing_since after the
// attempt (0 after a success) and whether the endpoint was marked failing
// before it; ok is false when the lease was lost (rotation, another node),
// and nothing was written.
func (s *Store) ChorusAttempted(ctx context.Context, d ChorusDelivery, o ChorusOutcome) (failingSince int64, wasFailing, ok bool, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.nowMs()
		// Lock order: the endpoint row before the delivery rows, as in
		// SetChorusEndpoint and DeleteChorusEndpoint; the other order
		// deadlocks against a rotation on PostgreSQL.
		var since sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT failing, failing_since FROM chorus_endpoints WHERE handle = $1`+s.d.forUpdate, d.Handle).Scan(&wasFailing, &since)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // removed: its deliveries are gone too
		}
		if err != nil {
			return fmt.Errorf("store: chorus endpoint: %w", err)
		}
		var res sql.Result
		if o.State == ChorusPending {
			res, err = tx.ExecContext(ctx, `UPDATE chorus_deliveries SET attempts = attempts + 1, last_attempt_at = $3, last_status = $4, last_error = $5,
				next_attempt_at = $6, leased_until = NULL, leased_by = NULL WHERE id = $1 AND leased_by = $2 AND state = 'pending'`,
				d.ID, d.Lease, now, o.Status, o.Error, o.NextAttempt)
		} else {
			res, err = tx.ExecContext(ctx, `UPDATE chorus_deliveries SET attempts = attempts + 1, last_attempt_at = $3, last_status = $4, last_error = $5,
				state = $6, finished_at = $3, leased_until = NULL, leased_by = NULL WHERE id = $1 AND leased_by = $2 AND state = 'pending'`,
				d.ID, d.Lease, now, o.Status, o.Error, o.State)
		}
		if err != nil {
			return fmt.Errorf("store: chorus attempt: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		ok = true
		if o.State != ChorusPending {
			if _, err := tx.ExecContext(ctx, `INSERT INTO chorus_cursors (handle, session_id, seq) VALUES ($1, $2, $3)
				ON CONFLICT (handle, session_id) DO UPDATE SET seq = CASE WHEN excluded.seq > chorus_cursors.seq THEN excluded.seq ELSE chorus_cursors.seq END`,
				d.Handle, d.SessionID, d.Sequence); err != nil {
				return fmt.Errorf("store: chorus cursor: %w", err)
			}
		}
		if o.State == ChorusDelivered {
			_, err = tx.ExecContext(ctx, `UPDATE chorus_endpoints SET failing = FALSE, failing_since = NULL, last_success_at = $2, last_error = '' WHERE handle = $1`, d.Handle, now)
			failingSince = 0
		} else {
			failingSince = since.Int64
			if !since.Valid {
				failingSince = now
			}
			_, err = tx.ExecContext(ctx, `UPDATE chorus_endpoints SET failing_since = $2, last_error = $3 WHERE handle = $1`, d.Handle, failingSince, o.Error)
		}
		if err != nil {
			return fmt.Errorf("store: chorus endpoint: %w", err)
		}
		return nil
	})
	return failingSince, wasFailing, ok, err
}

// ReleaseChorusLease gives up d's lease (shutdown).
func (s *Store) ReleaseChorusLease(ctx context.Context, d ChorusDelivery) error {
	if _, err := s.write.ExecContext(ctx, `UPDATE chorus_deliveries SET leased_until = NULL, leased_by = NULL WHERE id = $1 AND leased_by = $2`, d.ID, d.Lease); err != nil {
		return fmt.Errorf("store: chorus lease: %w", err)
	}
	return nil
}

// MarkChorusFailing marks h's endpoint failing; it reports whether it
// changed (false when it already was, or when h has no endpoint).
func (s *Store) MarkChorusFailing(ctx context.Context, h string) (bool, error) {
	res, err := s.write.ExecContext(ctx, `UPDATE chorus_endpoints SET failing = $2 WHERE handle = $1 AND failing = $3`, h, true, false)
	if err != nil {
		return false, fmt.Errorf("store: chorus failing: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// ChorusDeliveries lists h's most recent outbox rows, newest first.
func (s *Store) ChorusDeliveries(ctx context.Context, h string, limit int) ([]ChorusDelivery, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT id, handle, session_id, sequence, event_type, state, attempts, next_attempt_at,
			COALESCE(last_attempt_at, 0), last_status, last_error, agent_status, agent_error, created_at, COALESCE(finished_at, 0)
		FROM chorus_deliveries WHERE handle = $1 ORDER BY created_at DESC, id DESC LIMIT $2`, h, limit)
	if err != nil {
		return nil, fmt.Errorf("store: chorus deliveries: %w", err)
	}
	defer rows.Close()
	out := []ChorusDelivery{}
	for rows.Next() {
		var d ChorusDelivery
		if err := rows.Scan(&d.ID, &d.Handle, &d.SessionID, &d.Sequence, &d.EventType, &d.State, &d.Attempts, &d.NextAttemptAt,
			&d.LastAttemptAt, &d.LastStatus, &d.LastError, &d.AgentStatus, &d.AgentError, &d.CreatedAt, &d.FinishedAt); err != nil {
			return nil, fmt.Errorf("store: chorus deliveries: %w", err)
		}
		if d.State != ChorusPending {
			d.NextAttemptAt = 0
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// RedeliverChorus makes h's delivery id pending again, due now, with a
// fresh attempt count; a pending one is only made due now (an attempt in
// flight keeps its lease). It returns ErrNotFound for an unknown id.
//
// It is an operator's change: a transaction (inTx), so that its audit row
// commits with it.
func (s *Store) RedeliverChorus(ctx context.Context, h, id string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE chorus_deliveries SET attempts = CASE WHEN state = 'pending' THEN attempts ELSE 0 END,
			state = 'pending', next_attempt_at = $3, finished_at = NULL WHERE handle = $1 AND id = $2`, h, id, s.nowMs())
		if err != nil {
			return fmt.Errorf("store: chorus redeliver: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// AddChorusCallback stores a callback token's hash.
func (s *Store) AddChorusCallback(ctx context.Context, hash []byte, cb ChorusCallback, expiresAt int64) error {
	_, err := s.write.ExecContext(ctx, `INSERT INTO chorus_callbacks (token_hash, handle, session_id, delivery_id, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		hash, cb.Handle, cb.SessionID, cb.DeliveryID, expiresAt)
	if err != nil {
		return fmt.Errorf("store: chorus callback: %w", err)
	}
	return nil
}

// ChorusCallbackByHash returns what an unexpired callback token grants, or
// ErrNotFound. The final comparison is constant-time.
func (s *Store) ChorusCallbackByHash(ctx context.Context, hash []byte) (ChorusCallback, error) {
	var cb ChorusCallback
	var stored []byte
	err := s.read.QueryRowContext(ctx, `SELECT token_hash, handle, session_id, delivery_id FROM chorus_callbacks WHERE token_hash = $1 AND expires_at > $2`,
		hash, s.nowMs()).Scan(&stored, &cb.Handle, &cb.SessionID, &cb.DeliveryID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && subtle.ConstantTimeCompare(stored, hash) != 1) {
		return cb, ErrNotFound
	}
	if err != nil {
		return cb, fmt.Errorf("store: chorus callback: %w", err)
	}
	return cb, nil
}

// SetChorusAgentSignal records an agent's status or error report on the
// delivery it answers (empty values leave the field as it is).
func (s *Store) SetChorusAgentSignal(ctx context.Context, deliveryID, status, errText string) error {
	_, err := s.write.ExecContext(ctx, `UPDATE chorus_deliveries SET
		agent_status = CASE WHEN $2 = '' THEN agent_status ELSE $2 END,
		agent_error = CASE WHEN $3 = '' THEN agent_error ELSE $3 END WHERE id = $1`, deliveryID, status, errText)
	if err != nil {
		return fmt.Errorf("store: chorus signal: %w", err)
	}
	return nil
}

// AddChorusMCPToken stores a short-lived MCP token's hash for h.
func (s *Store) AddChorusMCPToken(ctx context.Context, hash []byte, h string, expiresAt int64) error {
	if _, err := s.write.ExecContext(ctx, `INSERT INTO chorus_mcp_tokens (token_hash, handle, expires_at) VALUES ($1, $2, $3)`, hash, h, expiresAt); err != nil {
		return fmt.Errorf("store: chorus mcp token: %w", err)
	}
	return nil
}

// AuthenticateChorusMCP returns the live agent an unexpired MCP token
// belongs to, or ErrNotFound. The agent must still have a token of its own:
// revoking it revokes these too.
func (s *Store) AuthenticateChorusMCP(ctx context.Context, hash []byte) (string, error) {
	var handle string
	var stored []byte
	err := s.read.QueryRowContext(ctx, `SELECT m.token_hash, m.handle FROM chorus_mcp_tokens m JOIN agents a ON a.handle = m.handle
		WHERE m.token_hash = $1 AND m.expires_at > $2 AND a.deleted_at IS NULL AND a.token_hash IS NOT NULL`, hash, s.nowMs()).Scan(&stored, &handle)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && subtle.ConstantTimeCompare(stored, hash) != 1) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: chorus mcp token: %w", err)
	}
	return handle, nil
}

// DeleteChorusMCPTokens revokes h's MCP tokens.
func (s *Store) DeleteChorusMCPTokens(ctx context.Context, h string) error {
	if _, err := s.write.ExecContext(ctx, `DELETE FROM chorus_mcp_tokens WHERE handle = $1`, h); err != nil {
		return fmt.Errorf("store: chorus mcp tokens: %w", err)
	}
	return nil
}

// PruneChorus deletes expired callbacks and MCP tokens, and finished
// deliveries older than finishedBefore.
func (s *Store) PruneChorus(ctx context.Context, finishedBefore int64) error {
	now := s.nowMs()
	for _, q := range []struct {
		sql string
		arg int64
	}{{`DELETE FROM chorus_callbacks WHERE expires_at <= $1`, now}, {`DELETE FROM chorus_mcp_tokens WHERE expires_at <= $1`, now},
		{`DELETE FROM chorus_deliveries WHERE state <> 'pending' AND finished_at < $1`, finishedBefore}} {
		if _, err := s.write.ExecContext(ctx, q.sql, q.arg); err != nil {
			return fmt.Errorf("store: chorus prune: %w", err)
		}
	}
	return nil
}

// ChorusBacklog counts pending deliveries and returns the creation time of
// the oldest (0 when none).
func (s *Store) ChorusBacklog(ctx context.Context) (int64, int64, error) {
	var n int64
	var oldest sql.NullInt64
	if err := s.read.QueryRowContext(ctx, `SELECT COUNT(*), MIN(created_at) FROM chorus_deliveries WHERE state = 'pending'`).Scan(&n, &oldest); err != nil {
		return 0, 0, fmt.Errorf("store: chorus backlog: %w", err)
	}
	return n, oldest.Int64, nil
}
