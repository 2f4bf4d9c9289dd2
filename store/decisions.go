package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/aspd/aspd/protocol"
)

// Binding moments (docs/decisions.md). A message that carries a
// binding_moment envelope records a moment, keyed by the message's id; a
// message that carries a binding_resolution resolves one. Both are written in
// the transaction that appends the message, so a moment exists exactly when
// its message does, and a resolution is recorded exactly when its message is.
//
// Such messages take the one-message commit path (sendOne), not group
// commit: a refused resolution (already resolved, not the resolver) must
// roll back its own message only, and a batch that shares one transaction
// cannot drop one member's rows after the fact. They are rare beside chat
// messages, so the hot path keeps its batching.

// Moment is what a message's binding_moment part asks the store to record.
type Moment struct {
	Resolver    string // "" = any joined participant other than the emitter
	OptionCount int
	FreeText    bool
	Dialogue    bool
	Envelope    []byte // the envelope as sent, validated
	// Field is the resolver member's path, for a refusal that names it.
	Field string
}

// Resolution is what a message's binding_resolution part asks the store to
// record. OptionIdx is -1 unless Outcome is selected.
type Resolution struct {
	MomentID  string
	Outcome   string
	OptionIdx int
	Answer    string
	Objection string
	// Field is the binding_resolution member's path, so refusals name the
	// member at fault (".option_idx", ".outcome").
	Field string
}

// Binding is the binding part of a message: exactly one of its members is set.
type Binding struct {
	Moment     *Moment
	Resolution *Resolution
}

// MomentRecord is one recorded moment and, once resolved, its resolution.
type MomentRecord struct {
	MomentID    string
	SessionID   string
	Sequence    int64
	Emitter     string
	Resolver    string
	OptionCount int
	FreeText    bool
	Dialogue    bool
	Envelope    []byte
	CreatedAt   int64
	// Resolution, when Outcome != "".
	Outcome       string
	OptionIdx     sql.NullInt64
	Answer        string
	Objection     string
	ResolvedBy    string
	ResolutionID  string
	ResolutionSeq int64
	ResolvedAt    int64
}

// sendBinding appends a message carrying a binding part in its own
// transaction, with the moment's row or the resolution's update.
func (s *Store) sendBinding(ctx context.Context, req SendMessage) (protocol.SendMessageResponse, *Commit, error) {
	var r sendResult
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		q := &sqlQueue{tx: tx}
		results, err := s.appendMessages(ctx, q, []*SendMessage{&req})
		if err == nil {
			err = q.Flush(ctx)
		}
		if err != nil {
			return err
		}
		r = results[0]
		if r.err != nil {
			return r.err
		}
		if r.commit == nil {
			return nil // an idempotent retry: the binding was recorded the first time
		}
		now := s.nowMs()
		if m := req.Binding.Moment; m != nil {
			return recordMoment(ctx, tx, req, r.resp, m, now)
		}
		return recordResolution(ctx, tx, req, r.resp, req.Binding.Resolution, now)
	})
	if err != nil {
		return protocol.SendMessageResponse{}, nil, err
	}
	return r.resp, r.commit, nil
}

func recordMoment(ctx context.Context, tx *sql.Tx, req SendMessage, resp protocol.SendMessageResponse, m *Moment, now int64) error {
	var resolver sql.NullString
	if m.Resolver != "" {
		// The resolver must be able to resolve: a current participant.
		var status string
		err := tx.QueryRowContext(ctx, `SELECT status FROM participants WHERE session_id = $1 AND handle = $2`, req.SessionID, m.Resolver).Scan(&status)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: moment resolver: %w", err)
		}
		if status != protocol.StatusJoined && status != protocol.StatusInvited {
			return &Error{Kind: KindNotParticipant, Field: m.Field,
				Message: fmt.Sprintf("resolver %s is not a participant of this session", m.Resolver)}
		}
		resolver = sql.NullString{String: m.Resolver, Valid: true}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO binding_moments (moment_id, session_id, sequence, emitter, resolver, option_count, free_text, dialogue, envelope, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		resp.MessageID, req.SessionID, resp.Sequence, req.Sender, resolver, m.OptionCount, m.FreeText, m.Dialogue, string(m.Envelope), now); err != nil {
		return fmt.Errorf("store: record moment: %w", err)
	}
	return nil
}

// recordResolution applies the resolution rules against the moment and
// writes the resolution onto its row. The sender is already known to be a
// joined participant of the session (the message rule). The UPDATE requires
// the moment to be open, so of two racing resolutions exactly one wins (on
// PostgreSQL the session row lock of the message rule already serialises
// them; the condition holds on its own as well); the loser's whole
// transaction, its message included, rolls back.
func recordResolution(ctx context.Context, tx *sql.Tx, req SendMessage, resp protocol.SendMessageResponse, res *Resolution, now int64) error {
	m, err := loadMoment(ctx, tx, res.MomentID)
	if errors.Is(err, ErrNotFound) || err == nil && m.SessionID != req.SessionID {
		return &Error{Kind: KindNotFound, Field: res.Field + ".moment", Message: "no binding moment " + res.MomentID + " in this session"}
	}
	if err != nil {
		return err
	}
	if m.Outcome != "" {
		return ErrAlreadyResolved
	}
	switch {
	case m.Resolver != "" && req.Sender != m.Resolver:
		return &Error{Kind: KindNotResolver, Message: "only " + m.Resolver + " may resolve this binding moment"}
	case m.Resolver == "" && req.Sender == m.Emitter:
		return &Error{Kind: KindNotResolver, Message: "the agent that emitted a binding moment cannot resolve it"}
	}
	optionIdx := sql.NullInt64{}
	switch res.Outcome {
	case protocol.OutcomeSelected:
		if res.OptionIdx < 0 || res.OptionIdx >= m.OptionCount {
			return &Error{Kind: KindInvalidResolution, Field: res.Field + ".option_idx",
				Message: fmt.Sprintf("option_idx must index one of the moment's %d options (0 to %d)", m.OptionCount, m.OptionCount-1)}
		}
		optionIdx = sql.NullInt64{Int64: int64(res.OptionIdx), Valid: true}
	case protocol.OutcomeAnswered:
		if !m.FreeText {
			return &Error{Kind: KindInvalidResolution, Field: res.Field + ".outcome",
				Message: "this binding moment's free_text hatch is closed: answered is not available"}
		}
	case protocol.OutcomeReferredBack:
		if !m.Dialogue {
			return &Error{Kind: KindInvalidResolution, Field: res.Field + ".outcome",
				Message: "this binding moment's dialogue hatch is closed: referred_back is not available"}
		}
	}
	r, err := tx.ExecContext(ctx, `UPDATE binding_moments SET outcome = $2, option_idx = $3, answer = $4, objection = $5, resolved_by = $6,
		resolution_id = $7, resolution_seq = $8, resolved_at = $9 WHERE moment_id = $1 AND outcome IS NULL`,
		m.MomentID, res.Outcome, optionIdx, nullable(res.Answer), nullable(res.Objection), req.Sender, resp.MessageID, resp.Sequence, now)
	if err != nil {
		return fmt.Errorf("store: resolve moment: %w", err)
	}
	if n, err := r.RowsAffected(); err != nil {
		return fmt.Errorf("store: resolve moment: %w", err)
	} else if n == 0 {
		return ErrAlreadyResolved
	}
	return nil
}

func nullable(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

const momentColumns = `m.moment_id, m.session_id, m.sequence, m.emitter, m.resolver, m.option_count, m.free_text, m.dialogue, m.envelope, m.created_at,
	m.outcome, m.option_idx, m.answer, m.objection, m.resolved_by, m.resolution_id, m.resolution_seq, m.resolved_at`

func scanMoment(sc interface{ Scan(...any) error }) (*MomentRecord, error) {
	var m MomentRecord
	var resolver, outcome, answer, objection, resolvedBy, resolutionID sql.NullString
	var resSeq, resAt sql.NullInt64
	var envelope string
	if err := sc.Scan(&m.MomentID, &m.SessionID, &m.Sequence, &m.Emitter, &resolver, &m.OptionCount, &m.FreeText, &m.Dialogue, &envelope, &m.CreatedAt,
		&outcome, &m.OptionIdx, &answer, &objection, &resolvedBy, &resolutionID, &resSeq, &resAt); err != nil {
		return nil, err
	}
	m.Envelope = []byte(envelope)
	m.Resolver, m.Outcome, m.Answer, m.Objection = resolver.String, outcome.String, answer.String, objection.String
	m.ResolvedBy, m.ResolutionID, m.ResolutionSeq, m.ResolvedAt = resolvedBy.String, resolutionID.String, resSeq.Int64, resAt.Int64
	return &m, nil
}

func loadMoment(ctx context.Context, q querier, id string) (*MomentRecord, error) {
	m, err := scanMoment(q.QueryRowContext(ctx, `SELECT `+momentColumns+` FROM binding_moments m WHERE m.moment_id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: load moment: %w", err)
	}
	return m, nil
}

// GetMoment reads one moment by id (ErrNotFound when there is none). Who may
// see it is the caller's question (App.Decision).
func (s *Store) GetMoment(ctx context.Context, id string) (*MomentRecord, error) {
	return loadMoment(ctx, s.read, id)
}

// PendingMoments lists, oldest first, at most limit open moments that h may
// resolve: in active sessions where h is joined, naming h as resolver or
// naming none and emitted by someone else.
func (s *Store) PendingMoments(ctx context.Context, h string, limit int) ([]*MomentRecord, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+momentColumns+` FROM binding_moments m
		JOIN participants p ON p.session_id = m.session_id AND p.handle = $1 AND p.status = 'joined'
		JOIN sessions s ON s.id = m.session_id AND s.state = 'active'
		WHERE m.outcome IS NULL AND (m.resolver = $1 OR m.resolver IS NULL AND m.emitter <> $1)
		ORDER BY m.created_at, m.moment_id LIMIT $2`, h, limit)
	if err != nil {
		return nil, fmt.Errorf("store: pending moments: %w", err)
	}
	defer rows.Close()
	var out []*MomentRecord
	for rows.Next() {
		m, err := scanMoment(rows)
		if err != nil {
			return nil, fmt.Errorf("store: pending moments: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// nullStr and nullStrArg carry an optional text column through the portable
// format (see nullInt and nullIntArg).
func nullStr(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}

func nullStrArg(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}
