package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Named operator tokens and the audit log (docs/operators.md). The
// bootstrap token (--admin-token) is checked by the HTTP adapter against
// its configured hash; every other operator token is a row of the store,
// looked up by its hash on every request (no cache: a rotation or
// revocation takes effect at once on every node, since every node reads the
// one database). Operator traffic is low, and the lookup is one indexed
// read.

// Operator is an authenticated operator token: its name (the audit log's
// actor) and scope.
type Operator struct {
	Name  string
	Scope string
}

// operatorTokenPrefix marks named operator tokens, so that a leaked one is
// recognisable (secret scanners) and never confused with an agent's.
const operatorTokenPrefix = "aspo_"

// operatorTouchEvery is how often a token's last_used_at is written: at
// most once per this interval per token and node, so that reads do not
// each cost a write.
const operatorTouchEvery = time.Minute

// operatorUse remembers when each token's last use was last written.
type operatorUse struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// Bootstrap is the bootstrap token's identity.
func Bootstrap() Operator {
	return Operator{Name: protocol.BootstrapTokenName, Scope: protocol.ScopeAdmin}
}

// AuthenticateOperator returns the named operator token that token is, or
// 401 unauthorized. A store outage is the store's error (503
// store_unavailable), never a 401: the token may well be valid.
func (a *App) AuthenticateOperator(ctx context.Context, token string) (Operator, error) {
	name, scope, err := a.st.AuthenticateOperator(ctx, HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		return Operator{}, Unauthorized()
	}
	if err != nil {
		return Operator{}, err
	}
	a.touchOperator(name)
	return Operator{Name: name, Scope: scope}, nil
}

// touchOperator records name's use, at most once per operatorTouchEvery.
// It is bookkeeping: a failure is logged, never answered.
func (a *App) touchOperator(name string) {
	now := time.Now()
	a.opUse.mu.Lock()
	if a.opUse.last == nil {
		a.opUse.last = map[string]time.Time{}
	}
	due := now.Sub(a.opUse.last[name]) >= operatorTouchEvery
	if due {
		a.opUse.last[name] = now
	}
	a.opUse.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.st.TouchOperatorToken(ctx, name, now.UnixMilli()); err != nil {
		a.logFailure("recording an operator token's last use failed", err, "token", name)
	}
}

// InsufficientScope answers a token whose scope does not allow the route.
func InsufficientScope(scope string) *protocol.Error {
	return protocol.Errorf(http.StatusForbidden, protocol.CodeInsufficientScope,
		"this operator token's scope (%s) does not allow this: changes need an admin token", scope)
}

// Allows reports whether op's scope covers what needs.
func (op Operator) Allows(need string) bool {
	return need != protocol.ScopeAdmin || op.Scope == protocol.ScopeAdmin
}

// validOperatorTokenName: 1-64 characters of a-z 0-9 _ . -, starting with
// a letter or digit; "bootstrap" is the configured token's.
func validOperatorTokenName(n string) error {
	ok := n != "" && len(n) <= 64 && n != protocol.BootstrapTokenName
	for i, ch := range n {
		alnum := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9'
		if !alnum && (i == 0 || ch != '_' && ch != '-' && ch != '.') {
			ok = false
		}
	}
	if !ok {
		return protocol.Invalid("name must be 1-64 characters of a-z 0-9 _ . - starting with a letter or digit, and not %q", protocol.BootstrapTokenName)
	}
	return nil
}

func newOperatorToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return operatorTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// CreateOperatorToken issues a named token; the answer is the only time it
// is shown.
func (a *App) CreateOperatorToken(ctx context.Context, req protocol.CreateOperatorTokenRequest) (protocol.OperatorTokenWithSecret, error) {
	var none protocol.OperatorTokenWithSecret
	if err := validOperatorTokenName(req.Name); err != nil {
		return none, err
	}
	if req.Scope != protocol.ScopeRead && req.Scope != protocol.ScopeAdmin {
		return none, protocol.Invalid("scope must be %q or %q", protocol.ScopeRead, protocol.ScopeAdmin)
	}
	auditTarget(ctx, req.Name, "scope", req.Scope)
	tok := newOperatorToken()
	t, err := a.st.CreateOperatorToken(ctx, req.Name, req.Scope, HashToken(tok))
	if err != nil {
		return none, err
	}
	a.log.Info("operator token created", "token", t.Name, "scope", t.Scope)
	return protocol.OperatorTokenWithSecret{Name: t.Name, Scope: t.Scope, CreatedAt: t.CreatedAt, Token: tok}, nil
}

// OperatorTokens lists the named tokens (never their secrets).
func (a *App) OperatorTokens(ctx context.Context) (protocol.OperatorTokenList, error) {
	items, err := a.st.ListOperatorTokens(ctx)
	return protocol.OperatorTokenList{Items: items}, err
}

// RotateOperatorToken gives a named token a new secret; the old one stops
// working at once.
func (a *App) RotateOperatorToken(ctx context.Context, name string) (protocol.OperatorTokenWithSecret, error) {
	var none protocol.OperatorTokenWithSecret
	if validOperatorTokenName(name) != nil {
		return none, protocol.NotFound()
	}
	tok := newOperatorToken()
	t, err := a.st.RotateOperatorToken(ctx, name, HashToken(tok))
	if err != nil {
		return none, err
	}
	a.log.Info("operator token rotated", "token", name)
	return protocol.OperatorTokenWithSecret{Name: t.Name, Scope: t.Scope, CreatedAt: t.CreatedAt, Token: tok}, nil
}

// RevokeOperatorToken deletes a named token; it stops working at once.
func (a *App) RevokeOperatorToken(ctx context.Context, name string) error {
	if validOperatorTokenName(name) != nil {
		return protocol.NotFound()
	}
	if err := a.st.DeleteOperatorToken(ctx, name); err != nil {
		return err
	}
	a.log.Info("operator token revoked", "token", name)
	return nil
}

// AuditRequest is what an adapter passes to open an operator change's
// audit entry (the route's action, the caller, the path's target).
type AuditRequest struct {
	Actor, Action, Target, RequestID string
	Detail                           map[string]any // from the path; never a secret
}

// WithAudit returns ctx carrying the audit entry of an operator change:
// the store writes it in the change's own transaction.
func WithAudit(ctx context.Context, r AuditRequest) context.Context {
	return store.WithAudit(ctx, &store.AuditEntry{Actor: r.Actor, Action: r.Action, Target: r.Target, RequestID: r.RequestID, Detail: r.Detail})
}

// auditTarget sets the audit entry's target (when the path does not name
// it, as on creation) and adds detail pairs (key, value, ...), if ctx
// carries an entry. Never pass a secret.
func auditTarget(ctx context.Context, target string, kv ...any) {
	e := store.AuditFrom(ctx)
	if e == nil {
		return
	}
	if target != "" {
		e.Target = target
	}
	auditDetail(ctx, kv...)
}

// auditDetail adds detail pairs (key, value, ...) to ctx's audit entry.
func auditDetail(ctx context.Context, kv ...any) {
	e := store.AuditFrom(ctx)
	if e == nil || len(kv) == 0 {
		return
	}
	if e.Detail == nil {
		e.Detail = map[string]any{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		e.Detail[kv[i].(string)] = kv[i+1]
	}
}

// MaxAuditPage bounds one page of the audit log; DefaultAuditPage is a
// page's size when limit is not given.
const (
	MaxAuditPage     = 500
	DefaultAuditPage = 50
)

// AuditQuery is GET /admin/v1/audit's query, as strings from the wire.
type AuditQuery struct {
	Limit, Before, Actor, Action, Target string
}

// Audit pages the audit log, newest first.
func (a *App) Audit(ctx context.Context, q AuditQuery) (protocol.AuditPage, error) {
	f := store.AuditFilter{Limit: DefaultAuditPage, Actor: q.Actor, Action: q.Action, Target: q.Target}
	if q.Limit != "" {
		n, err := strconv.Atoi(q.Limit)
		if err != nil || n < 1 || n > MaxAuditPage {
			return protocol.AuditPage{}, protocol.Invalid("limit must be a number from 1 to %d", MaxAuditPage)
		}
		f.Limit = n
	}
	if q.Before != "" {
		n, err := strconv.ParseInt(q.Before, 10, 64)
		if err != nil || n < 1 {
			return protocol.AuditPage{}, protocol.Invalid("before must be an audit entry id (a positive number), as next_before gives")
		}
		f.Before = n
	}
	items, err := a.st.ListAudit(ctx, f)
	if err != nil {
		return protocol.AuditPage{}, err
	}
	page := protocol.AuditPage{Items: items}
	if len(items) == f.Limit {
		page.NextBefore = items[len(items)-1].ID
	}
	return page, nil
}
