package store

// The portable network format moves a whole network (agents, trust settings,
// sessions, the event log, idempotency keys, delivery cursors and presence)
// between stores, whatever their dialect: `aspd export` writes it, `aspd
// import` reads it.
//
// It is JSON Lines. The first line is a header:
//
//	{"format":"aspd-network","version":1,"exported_at":<epoch ms>,"dialect":"sqlite"}
//
// then one line per record, {"kind": ..., <columns>}, grouped by kind in this
// order (parents before children): agent, allowlist, block, session,
// participant, event, message_key, session_key, cursor, presence,
// binding_moment, operator_token, audit; and last an
// end record {"kind":"end","counts":{<kind>: <records>, ...}} that lets an
// import tell a complete file from a truncated one.
//
// An event's body is the stored wire JSON carried as a JSON string, so its
// bytes round-trip exactly. Token hashes are written (base64) only when the
// export asks for them; without them the imported agents have no token and
// each needs `aspctl agent rotate-token`. Named operator tokens are
// written only with the hashes (a token is its hash: without it there is
// nothing to import; create new ones). Audit rows are written in the
// order of their ids, without the ids, which are the store's own: an
// import appends them in that order and gives them fresh ids.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Portable format identifiers.
const (
	PortableFormat  = "aspd-network"
	PortableVersion = 1
)

// Record kinds of the portable format, in file order.
const (
	KindAgent       = "agent"
	KindAllowlist   = "allowlist"
	KindBlock       = "block"
	KindSession     = "session"
	KindParticipant = "participant"
	KindEvent       = "event"
	KindMessageKey  = "message_key"
	KindSessionKey  = "session_key"
	KindCursor      = "cursor"
	KindPresence    = "presence"
	KindEnd         = "end"
)

// KindBindingMoment is a binding_moments row (docs/decisions.md).
const KindBindingMoment = "binding_moment"

// KindOperatorToken is a named operator token (with its hash: exported only
// with the hashes), KindAudit an audit log row (docs/operators.md).
const (
	KindOperatorToken = "operator_token"
	KindAudit         = "audit"
)

// portableKinds lists the data kinds in the order they must appear.
var portableKinds = []string{KindAgent, KindAllowlist, KindBlock, KindSession, KindParticipant, KindEvent,
	KindMessageKey, KindSessionKey, KindCursor, KindPresence, KindBindingMoment, KindOperatorToken, KindAudit}

// PortableCounts counts the records of each kind.
type PortableCounts map[string]int64

// String renders the counts in file order, e.g. "agent=3 allowlist=2 ...".
func (c PortableCounts) String() string {
	parts := make([]string, 0, len(portableKinds))
	for _, k := range portableKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// ExportOptions tunes an export.
type ExportOptions struct {
	// IncludeTokenHashes writes each agent's token hash (SHA-256 of its
	// bearer token), so existing tokens keep working after an import. The
	// file is then as sensitive as the database itself.
	IncludeTokenHashes bool
}

// ExportStats reports what an export wrote.
type ExportStats struct {
	Counts      PortableCounts
	TokenHashes int64 // agents whose token hash was written
}

// ImportStats reports what an import wrote.
type ImportStats struct {
	Counts PortableCounts
	// AgentsWithoutToken counts live (not deleted) agents that have no
	// token after the import; each needs a new one (aspctl agent rotate-token).
	AgentsWithoutToken int64
}

type portableHeader struct {
	Format     string `json:"format"`
	Version    int    `json:"version"`
	ExportedAt int64  `json:"exported_at"`
	Dialect    string `json:"dialect"`
}

type agentRecord struct {
	Kind          string   `json:"kind"`
	Handle        string   `json:"handle"`
	Owner         string   `json:"owner"`
	InboundPolicy string   `json:"inbound_policy"`
	Roles         []string `json:"roles"`
	CreatedAt     int64    `json:"created_at"`
	DeletedAt     *int64   `json:"deleted_at"`
	TokenHash     []byte   `json:"token_hash,omitempty"` // base64 (encoding/json's []byte encoding)
}

type allowlistRecord struct {
	Kind   string `json:"kind"`
	Handle string `json:"handle"`
	Entry  string `json:"entry"`
}

type blockRecord struct {
	Kind      string `json:"kind"`
	Blocker   string `json:"blocker"`
	Blocked   string `json:"blocked"`
	CreatedAt int64  `json:"created_at"`
}

type sessionRecord struct {
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Topic      string `json:"topic"`
	State      string `json:"state"`
	CreatedBy  string `json:"created_by"`
	CreatedAt  int64  `json:"created_at"`
	EndedAt    *int64 `json:"ended_at"`
	LastSeq    int64  `json:"last_seq"`
	SendAndEnd bool   `json:"send_and_end"`
}

type participantRecord struct {
	Kind           string `json:"kind"`
	SessionID      string `json:"session_id"`
	Handle         string `json:"handle"`
	Status         string `json:"status"`
	VisibleThrough int64  `json:"visible_through"`
	LastChangeSeq  int64  `json:"last_change_seq"`
	Disconnected   bool   `json:"disconnected"`
	InvitedAt      *int64 `json:"invited_at"`
	JoinedAt       *int64 `json:"joined_at"`
	LeftAt         *int64 `json:"left_at"`
}

type eventRecord struct {
	Kind      string   `json:"kind"`
	SessionID string   `json:"session_id"`
	Sequence  int64    `json:"sequence"`
	EventID   string   `json:"event_id"`
	Type      string   `json:"type"`
	Subject   string   `json:"subject"`
	Audience  []string `json:"audience"`
	CreatedAt int64    `json:"created_at"`
	Body      string   `json:"body"` // the wire JSON, verbatim
}

type messageKeyRecord struct {
	Kind        string `json:"kind"`
	SessionID   string `json:"session_id"`
	Sender      string `json:"sender"`
	Key         string `json:"key"`
	RequestHash string `json:"request_hash"`
	MessageID   string `json:"message_id"`
	Sequence    int64  `json:"sequence"`
}

type sessionKeyRecord struct {
	Kind        string `json:"kind"`
	Creator     string `json:"creator"`
	Key         string `json:"key"`
	RequestHash string `json:"request_hash"`
	SessionID   string `json:"session_id"`
	Sequence    *int64 `json:"sequence"`
}

type cursorRecord struct {
	Kind      string `json:"kind"`
	Handle    string `json:"handle"`
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
}

type presenceRecord struct {
	Kind         string `json:"kind"`
	Handle       string `json:"handle"`
	Online       bool   `json:"online"`
	OfflineSince *int64 `json:"offline_since"`
}

type bindingMomentRecord struct {
	Kind          string  `json:"kind"`
	MomentID      string  `json:"moment_id"`
	SessionID     string  `json:"session_id"`
	Sequence      int64   `json:"sequence"`
	Emitter       string  `json:"emitter"`
	Resolver      *string `json:"resolver"`
	OptionCount   int     `json:"option_count"`
	FreeText      bool    `json:"free_text"`
	Dialogue      bool    `json:"dialogue"`
	Envelope      string  `json:"envelope"` // the envelope JSON, verbatim
	CreatedAt     int64   `json:"created_at"`
	Outcome       *string `json:"outcome"`
	OptionIdx     *int64  `json:"option_idx"`
	Answer        *string `json:"answer"`
	Objection     *string `json:"objection"`
	ResolvedBy    *string `json:"resolved_by"`
	ResolutionID  *string `json:"resolution_id"`
	ResolutionSeq *int64  `json:"resolution_seq"`
	ResolvedAt    *int64  `json:"resolved_at"`
}

type operatorTokenRecord struct {
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Scope      string `json:"scope"`
	TokenHash  []byte `json:"token_hash"` // base64
	CreatedAt  int64  `json:"created_at"`
	RotatedAt  *int64 `json:"rotated_at"`
	LastUsedAt *int64 `json:"last_used_at"`
}

type auditRecord struct {
	Kind      string          `json:"kind"`
	At        int64           `json:"at"`
	Actor     string          `json:"actor"`
	Action    string          `json:"action"`
	Target    string          `json:"target"`
	RequestID string          `json:"request_id"`
	Detail    json.RawMessage `json:"detail"`
}

type endRecord struct {
	Kind   string           `json:"kind"`
	Counts map[string]int64 `json:"counts"`
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
