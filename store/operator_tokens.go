package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"

	"github.com/aspd/aspd/protocol"
)

// Named operator tokens: each row is a token's name, scope and the SHA-256
// of its secret (hashed at rest like agent tokens, agents.go). The
// bootstrap token is aspd's configuration, not a row.

// CreateOperatorToken stores a new named token. A name in use is a
// conflict.
func (s *Store) CreateOperatorToken(ctx context.Context, name, scope string, hash []byte) (*protocol.OperatorToken, error) {
	t := &protocol.OperatorToken{Name: name, Scope: scope}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t.CreatedAt = s.nowMs()
		res, err := tx.ExecContext(ctx, `INSERT INTO operator_tokens (name, scope, token_hash, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (name) DO NOTHING`, name, scope, hash, t.CreatedAt)
		if err != nil {
			return fmt.Errorf("store: create operator token: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return &Error{Kind: KindConflict, Message: fmt.Sprintf("operator token %s already exists", name)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// RotateOperatorToken replaces a named token's hash: the old secret stops
// working when this commits. It returns the token's record.
func (s *Store) RotateOperatorToken(ctx context.Context, name string, hash []byte) (*protocol.OperatorToken, error) {
	var t protocol.OperatorToken
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.nowMs()
		res, err := tx.ExecContext(ctx, `UPDATE operator_tokens SET token_hash = $2, rotated_at = $3 WHERE name = $1`, name, hash, now)
		if err != nil {
			return fmt.Errorf("store: rotate operator token: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		got, err := scanOperatorTokens(ctx, tx, `WHERE name = $1`, name)
		if err != nil {
			return err
		}
		t = got[0]
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteOperatorToken revokes a named token: it stops working when this
// commits. Its name may be used again; the audit log keeps the history.
func (s *Store) DeleteOperatorToken(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM operator_tokens WHERE name = $1`, name)
		if err != nil {
			return fmt.Errorf("store: revoke operator token: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// ListOperatorTokens returns every named token, sorted by name.
func (s *Store) ListOperatorTokens(ctx context.Context) ([]protocol.OperatorToken, error) {
	return scanOperatorTokens(ctx, s.read, `ORDER BY name`)
}

func scanOperatorTokens(ctx context.Context, q querier, where string, args ...any) ([]protocol.OperatorToken, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, scope, created_at, rotated_at, last_used_at FROM operator_tokens `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("store: operator tokens: %w", err)
	}
	defer rows.Close()
	out := []protocol.OperatorToken{}
	for rows.Next() {
		var t protocol.OperatorToken
		var rotated, used sql.NullInt64
		if err := rows.Scan(&t.Name, &t.Scope, &t.CreatedAt, &rotated, &used); err != nil {
			return nil, fmt.Errorf("store: operator tokens: %w", err)
		}
		t.RotatedAt, t.LastUsedAt = rotated.Int64, used.Int64
		out = append(out, t)
	}
	return out, rows.Err()
}

// AuthenticateOperator returns the name and scope of the named token whose
// secret hashes to hash, or ErrNotFound. The lookup is by the hash's
// index; the final comparison is constant-time anyway.
func (s *Store) AuthenticateOperator(ctx context.Context, hash []byte) (name, scope string, err error) {
	var stored []byte
	err = s.read.QueryRowContext(ctx, `SELECT name, scope, token_hash FROM operator_tokens WHERE token_hash = $1`, hash).Scan(&name, &scope, &stored)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && subtle.ConstantTimeCompare(stored, hash) != 1) {
		return "", "", ErrNotFound
	}
	if err != nil {
		return "", "", fmt.Errorf("store: authenticate operator: %w", err)
	}
	return name, scope, nil
}

// TouchOperatorToken records that name was used at ms. It is bookkeeping,
// not a change: no transaction, no audit row.
func (s *Store) TouchOperatorToken(ctx context.Context, name string, ms int64) error {
	if _, err := s.write.ExecContext(ctx, `UPDATE operator_tokens SET last_used_at = $2 WHERE name = $1`, name, ms); err != nil {
		return fmt.Errorf("store: operator token last use: %w", err)
	}
	return nil
}
