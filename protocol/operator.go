package protocol

import "encoding/json"

// The operator's own resources: named operator tokens
// (/admin/v1/operator-tokens, /admin/v1/whoami) and the audit log
// (/admin/v1/audit). See docs/operators.md.

// The operator token scopes: read may query (and open the console), admin
// may do everything.
const (
	ScopeRead  = "read"
	ScopeAdmin = "admin"
)

// BootstrapTokenName is the name of the operator token given to aspd by
// --admin-token (ASPD_ADMIN_TOKEN), which has scope admin and is not stored.
const BootstrapTokenName = "bootstrap"

// CodeInsufficientScope answers a read token that asks for a change (403).
const CodeInsufficientScope = "insufficient_scope"

// OperatorToken is a named operator token's record. The token itself is
// never stored, only its hash.
type OperatorToken struct {
	Name       string `json:"name"`
	Scope      string `json:"scope"`
	CreatedAt  int64  `json:"created_at"`
	RotatedAt  int64  `json:"rotated_at,omitempty"`
	LastUsedAt int64  `json:"last_used_at,omitempty"`
}

// OperatorTokenWithSecret answers creation and rotation: the only time the
// token is shown.
type OperatorTokenWithSecret struct {
	Name      string `json:"name"`
	Scope     string `json:"scope"`
	CreatedAt int64  `json:"created_at"`
	Token     string `json:"token"`
}

// CreateOperatorTokenRequest is the body of POST /admin/v1/operator-tokens.
type CreateOperatorTokenRequest struct {
	Name  string `json:"name"`
	Scope string `json:"scope"`
}

// OperatorTokenList answers GET /admin/v1/operator-tokens.
type OperatorTokenList struct {
	Items []OperatorToken `json:"items"`
}

// Whoami answers GET /admin/v1/whoami: the calling operator token.
type Whoami struct {
	Name  string `json:"name"`
	Scope string `json:"scope"`
}

// AuditEntry is one row of the audit log: an operator change, recorded in
// the change's own transaction. Detail is a JSON object that never holds a
// secret.
type AuditEntry struct {
	ID        int64           `json:"id"`
	At        int64           `json:"at"` // Unix milliseconds
	Actor     string          `json:"actor"`
	Action    string          `json:"action"`
	Target    string          `json:"target"`
	RequestID string          `json:"request_id"`
	Detail    json.RawMessage `json:"detail"`
}

// AuditPage answers GET /admin/v1/audit, newest first. NextBefore, when
// set, is the before= of the next (older) page.
type AuditPage struct {
	Items      []AuditEntry `json:"items"`
	NextBefore int64        `json:"next_before,omitempty"`
}
