package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/aspd/aspd/protocol"
)

// The audit log: one row per operator change, written by runTx inside the
// change's own transaction, so a change and its row commit or roll back
// together. The operator middleware (server) puts an AuditEntry in the
// request's context (app.WithAudit); every write the request makes goes
// through inTx, and the first transaction of the request that commits
// carries the row. A request that changes nothing (refused before the
// store, or whose transaction fails) writes none.

// AuditEntry is the audit row a request's change writes. The application
// may set Target and Detail once it knows them (a created agent's handle);
// Detail must never hold a secret.
type AuditEntry struct {
	Actor     string
	Action    string
	Target    string
	RequestID string
	Detail    map[string]any

	// written is set once a transaction carrying the row committed: one
	// request, one row, however many transactions it runs after that.
	written atomic.Bool
}

type auditKey struct{}

// WithAudit returns ctx carrying e: the next transaction run with it
// (inTx) that commits writes e's row.
func WithAudit(ctx context.Context, e *AuditEntry) context.Context {
	return context.WithValue(ctx, auditKey{}, e)
}

// AuditFrom is the audit entry ctx carries, or nil.
func AuditFrom(ctx context.Context) *AuditEntry {
	e, _ := ctx.Value(auditKey{}).(*AuditEntry)
	return e
}

// pendingAudit is the entry a transaction run with ctx must write, or nil.
func pendingAudit(ctx context.Context) *AuditEntry {
	if e := AuditFrom(ctx); e != nil && !e.written.Load() {
		return e
	}
	return nil
}

// writeAudit inserts e's row in tx.
func (s *Store) writeAudit(ctx context.Context, tx *sql.Tx, e *AuditEntry) error {
	detail := []byte("{}")
	if len(e.Detail) > 0 {
		var err error
		if detail, err = json.Marshal(e.Detail); err != nil {
			return fmt.Errorf("store: audit detail: %w", err)
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO audit_log (at, actor, action, target, request_id, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
		s.nowMs(), e.Actor, e.Action, e.Target, e.RequestID, string(detail))
	if err != nil {
		return fmt.Errorf("store: audit: %w", err)
	}
	return nil
}

// AuditFilter selects audit rows: older than Before (an id; 0: from the
// newest), of one actor, action or target when set, at most Limit.
type AuditFilter struct {
	Before int64
	Actor  string
	Action string
	Target string
	Limit  int
}

// ListAudit returns the audit rows matching f, newest first.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]protocol.AuditEntry, error) {
	q := `SELECT id, at, actor, action, target, request_id, detail FROM audit_log WHERE 1 = 1`
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		q += fmt.Sprintf(" AND %s $%d", cond, len(args))
	}
	if f.Before > 0 {
		add("id <", f.Before)
	}
	if f.Actor != "" {
		add("actor =", f.Actor)
	}
	if f.Action != "" {
		add("action =", f.Action)
	}
	if f.Target != "" {
		add("target =", f.Target)
	}
	q += " ORDER BY id DESC"
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	return queryAudit(ctx, s.read, q, args...)
}

func queryAudit(ctx context.Context, q querier, query string, args ...any) ([]protocol.AuditEntry, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list audit: %w", err)
	}
	defer rows.Close()
	out := []protocol.AuditEntry{}
	for rows.Next() {
		var e protocol.AuditEntry
		var detail string
		if err := rows.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.RequestID, &detail); err != nil {
			return nil, fmt.Errorf("store: list audit: %w", err)
		}
		e.Detail = json.RawMessage(detail)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list audit: %w", err)
	}
	return out, nil
}
