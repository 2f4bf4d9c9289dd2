package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aspd/aspd/protocol"
)

var timeNow = time.Now

// NewAgent describes an agent to create.
type NewAgent struct {
	Handle        string
	InboundPolicy string
	Allowlist     []string
	Roles         []string // nil: none
	TokenHash     []byte
}

// CreateAgent creates an agent. A handle that exists, or existed and was
// deleted, is a conflict: handles are never reused, so a new owner can never
// read an old agent's transcripts.
func (s *Store) CreateAgent(ctx context.Context, a NewAgent) error {
	_, err := s.CreateAgentRecord(ctx, a)
	return err
}

// CreateAgentRecord creates an agent, with its allowlist and roles, in one
// transaction, and returns its record as that transaction wrote it: the
// caller hands out the agent's only copy of its token with it, so nothing
// may fail after the commit (a read afterwards could, and lose the token
// of an agent that exists).
func (s *Store) CreateAgentRecord(ctx context.Context, a NewAgent) (*protocol.Agent, error) {
	var rec *protocol.Agent
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO agents (handle, owner, inbound_policy, token_hash, roles, created_at)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (handle) DO NOTHING`,
			a.Handle, protocol.Owner(a.Handle), a.InboundPolicy, nullBytes(a.TokenHash), encodeRoles(a.Roles), s.nowMs())
		if err != nil {
			return fmt.Errorf("store: create agent: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var deleted bool
			err := tx.QueryRowContext(ctx, `SELECT deleted_at IS NOT NULL FROM agents WHERE handle = $1`, a.Handle).Scan(&deleted)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("store: create agent: %w", err)
			}
			if deleted {
				return &Error{Kind: KindConflict, Message: fmt.Sprintf("handle %s belonged to a deleted agent and cannot be reused: handles are never reused, so that no new owner can read the old agent's sessions; choose another handle", a.Handle)}
			}
			return &Error{Kind: KindConflict, Message: fmt.Sprintf("agent %s already exists", a.Handle)}
		}
		if err := replaceAllowlist(ctx, tx, a.Handle, a.Allowlist); err != nil {
			return err
		}
		m, err := loadAgents(ctx, tx, []string{a.Handle})
		if err != nil {
			return err
		}
		rec = m[a.Handle]
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// encodeRoles is the roles column's value: a sorted JSON array.
func encodeRoles(roles []string) string {
	roles = append([]string{}, roles...)
	sort.Strings(roles)
	b, _ := json.Marshal(roles)
	return string(b)
}

// UpsertSeedAgent provisions an agent from a seed file: it creates the agent
// or, if it exists, sets its token hash, policy and allowlist to the seed's.
// Running the same seed twice changes nothing.
func (s *Store) UpsertSeedAgent(ctx context.Context, a NewAgent) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO agents (handle, owner, inbound_policy, token_hash, created_at)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (handle) DO UPDATE SET inbound_policy = excluded.inbound_policy, token_hash = excluded.token_hash, deleted_at = NULL`,
			a.Handle, protocol.Owner(a.Handle), a.InboundPolicy, nullBytes(a.TokenHash), s.nowMs())
		if err != nil {
			return fmt.Errorf("store: seed agent %s: %w", a.Handle, err)
		}
		return replaceAllowlist(ctx, tx, a.Handle, a.Allowlist)
	})
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// GetAgent returns a live agent, or ErrNotFound.
func (s *Store) GetAgent(ctx context.Context, handle string) (*protocol.Agent, error) {
	agents, err := loadAgents(ctx, s.read, []string{handle})
	if err != nil {
		return nil, err
	}
	if a, ok := agents[handle]; ok {
		return a, nil
	}
	return nil, ErrNotFound
}

// ListAgentsByHandle returns the live agents among handles, with their
// trust settings; missing handles are absent from the map.
func (s *Store) ListAgentsByHandle(ctx context.Context, handles []string) (map[string]*protocol.Agent, error) {
	return loadAgents(ctx, s.read, dedupe(handles))
}

// ListAgents returns every live agent, sorted by handle, optionally of one owner.
func (s *Store) ListAgents(ctx context.Context, owner string) ([]*protocol.Agent, error) {
	q := `SELECT handle FROM agents WHERE deleted_at IS NULL`
	args := []any{}
	if owner != "" {
		q += ` AND owner = $1`
		args = append(args, owner)
	}
	handles, err := queryStrings(ctx, s.read, q+` ORDER BY handle`, args...)
	if err != nil {
		return nil, err
	}
	m, err := loadAgents(ctx, s.read, handles)
	if err != nil {
		return nil, err
	}
	out := make([]*protocol.Agent, 0, len(m))
	for _, h := range handles {
		if a, ok := m[h]; ok {
			out = append(out, a)
		}
	}
	return out, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// loadAgents loads live agents with their allowlists and blocks. Missing or
// deleted handles are simply absent from the result.
func loadAgents(ctx context.Context, q querier, handles []string) (map[string]*protocol.Agent, error) {
	out := make(map[string]*protocol.Agent, len(handles))
	if len(handles) == 0 {
		return out, nil
	}
	in, args := inList(handles, 1)
	rows, err := q.QueryContext(ctx, `SELECT handle, owner, inbound_policy, token_hash IS NOT NULL, roles, created_at
		FROM agents WHERE deleted_at IS NULL AND handle IN (`+in+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: load agents: %w", err)
	}
	for rows.Next() {
		a := &protocol.Agent{Allowlist: []string{}, Blocks: []string{}}
		var roles string
		if err := rows.Scan(&a.Handle, &a.Owner, &a.InboundPolicy, &a.HasToken, &roles, &a.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: load agents: %w", err)
		}
		if err := json.Unmarshal([]byte(roles), &a.Roles); err != nil || a.Roles == nil {
			a.Roles = []string{}
		}
		out[a.Handle] = a
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: load agents: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	pairs := func(query string, add func(a *protocol.Agent, v string)) error {
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("store: load trust settings: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var h, v string
			if err := rows.Scan(&h, &v); err != nil {
				return err
			}
			if a, ok := out[h]; ok {
				add(a, v)
			}
		}
		return rows.Err()
	}
	if err := pairs(`SELECT handle, entry FROM allowlist_entries WHERE handle IN (`+in+`) ORDER BY entry`,
		func(a *protocol.Agent, v string) { a.Allowlist = append(a.Allowlist, v) }); err != nil {
		return nil, err
	}
	if err := pairs(`SELECT blocker, blocked FROM blocks WHERE blocker IN (`+in+`) ORDER BY blocked`,
		func(a *protocol.Agent, v string) { a.Blocks = append(a.Blocks, v) }); err != nil {
		return nil, err
	}
	return out, nil
}

// inList returns "$n, $n+1, ..." for len(vals) values and the values as args.
func inList(vals []string, first int) (string, []any) {
	b := make([]byte, 0, len(vals)*4)
	args := make([]any, len(vals))
	for i, v := range vals {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "$%d", first+i)
		args[i] = v
	}
	return string(b), args
}

func queryStrings(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: query: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Authenticate returns the handle whose token hashes to hash. The lookup is
// by the hash's index; the final comparison is constant-time anyway, so the
// code path never compares secret bytes in variable time.
func (s *Store) Authenticate(ctx context.Context, hash []byte) (string, error) {
	var handle string
	var stored []byte
	err := s.read.QueryRowContext(ctx, `SELECT handle, token_hash FROM agents WHERE token_hash = $1 AND deleted_at IS NULL`, hash).Scan(&handle, &stored)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && subtle.ConstantTimeCompare(stored, hash) != 1) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: authenticate: %w", err)
	}
	return handle, nil
}

// SetTokenHash replaces an agent's token hash (rotation); nil revokes.
func (s *Store) SetTokenHash(ctx context.Context, handle string, hash []byte) error {
	return s.updateAgent(ctx, handle, `UPDATE agents SET token_hash = $2 WHERE handle = $1 AND deleted_at IS NULL`, nullBytes(hash))
}

// RotateTokenHash sets an agent's new token hash and returns its record as
// that transaction wrote it: the caller hands out the only copy of the new
// token with it, so nothing may fail after the commit (a read afterwards
// could, and leave the agent with a token nobody has).
func (s *Store) RotateTokenHash(ctx context.Context, handle string, hash []byte) (*protocol.Agent, error) {
	var rec *protocol.Agent
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE agents SET token_hash = $2 WHERE handle = $1 AND deleted_at IS NULL`, handle, nullBytes(hash))
		if err != nil {
			return fmt.Errorf("store: rotate token: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		m, err := loadAgents(ctx, tx, []string{handle})
		if err != nil {
			return err
		}
		rec = m[handle]
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// SetPolicy sets an agent's inbound policy.
func (s *Store) SetPolicy(ctx context.Context, handle, policy string) error {
	return s.updateAgent(ctx, handle, `UPDATE agents SET inbound_policy = $2 WHERE handle = $1 AND deleted_at IS NULL`, policy)
}

// SetRoles sets the roles an operator assigned to an agent (org scopes).
func (s *Store) SetRoles(ctx context.Context, handle string, roles []string) error {
	return s.updateAgent(ctx, handle, `UPDATE agents SET roles = $2 WHERE handle = $1 AND deleted_at IS NULL`, encodeRoles(roles))
}

// updateAgent runs one UPDATE of an agent's row, in a transaction so that a
// connection lost on the way is retried (inTx): setting a value twice
// changes nothing.
func (s *Store) updateAgent(ctx context.Context, handle, query string, arg any) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, handle, arg)
		if err != nil {
			return fmt.Errorf("store: update agent: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// SetAllowlist replaces an agent's allowlist.
func (s *Store) SetAllowlist(ctx context.Context, handle string, entries []string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := mustExist(ctx, tx, handle); err != nil {
			return err
		}
		return replaceAllowlist(ctx, tx, handle, entries)
	})
}

// AddAllowlist adds entries to an agent's allowlist (present ones are kept).
func (s *Store) AddAllowlist(ctx context.Context, handle string, entries []string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := mustExist(ctx, tx, handle); err != nil {
			return err
		}
		return insertAllowlist(ctx, tx, handle, entries)
	})
}

// RemoveAllowlist removes entries from an agent's allowlist. Existing
// sessions are unaffected (§6.2): removal only refuses future contact.
func (s *Store) RemoveAllowlist(ctx context.Context, handle string, entries []string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := mustExist(ctx, tx, handle); err != nil {
			return err
		}
		for _, e := range entries {
			if _, err := tx.ExecContext(ctx, `DELETE FROM allowlist_entries WHERE handle = $1 AND entry = $2`, handle, e); err != nil {
				return fmt.Errorf("store: remove allowlist entry: %w", err)
			}
		}
		return nil
	})
}

func mustExist(ctx context.Context, q querier, handle string) error {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM agents WHERE handle = $1 AND deleted_at IS NULL`, handle).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

func replaceAllowlist(ctx context.Context, tx *sql.Tx, handle string, entries []string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM allowlist_entries WHERE handle = $1`, handle); err != nil {
		return fmt.Errorf("store: replace allowlist: %w", err)
	}
	return insertAllowlist(ctx, tx, handle, entries)
}

func insertAllowlist(ctx context.Context, tx *sql.Tx, handle string, entries []string) error {
	for _, e := range entries {
		if _, err := tx.ExecContext(ctx, `INSERT INTO allowlist_entries (handle, entry) VALUES ($1, $2) ON CONFLICT DO NOTHING`, handle, e); err != nil {
			return fmt.Errorf("store: add allowlist entry: %w", err)
		}
	}
	return nil
}
