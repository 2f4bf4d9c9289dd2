package protocol

import "encoding/json"

// Binding moments (docs/decisions.md): a `data` content part whose data
// object has a binding_moment member carries a briefing-and-binding envelope
// (draft "Binding-Moment Envelope"); one whose data object has a
// binding_resolution member resolves one. The moment's id is the message id
// (Message.id, msg_...) of the session.message that carried the envelope.

// Members of a data part's data object that make it a binding part.
const (
	BindingMomentKey     = "binding_moment"
	BindingResolutionKey = "binding_resolution"
	BindingResolverKey   = "resolver"
)

// The three outcomes of a resolution (draft section 6.3), distinguishable on
// the wire: a vote, an amendment, a motion to refer the question back.
const (
	OutcomeSelected     = "selected"      // an option, by option_idx
	OutcomeAnswered     = "answered"      // the free_text hatch, with answer
	OutcomeReferredBack = "referred_back" // the dialogue hatch, with an optional objection
)

// Error codes of binding moments.
const (
	CodeAlreadyResolved = "already_resolved" // 409: the moment has its resolution; the first one wins
	CodeNotResolver     = "not_resolver"     // 403: a participant who may see the moment but may not resolve it
)

// BindingResolution is the value of a binding_resolution member.
type BindingResolution struct {
	Moment    string `json:"moment"`
	Outcome   string `json:"outcome"`
	OptionIdx *int   `json:"option_idx,omitempty"`
	Answer    string `json:"answer,omitempty"`
	Objection string `json:"objection,omitempty"`
}

// ResolveRequest is the body of POST /decisions/{moment_id}/resolve and the
// arguments of the resolve_decision tool, less the moment id.
type ResolveRequest struct {
	Outcome   string `json:"outcome"`
	OptionIdx *int   `json:"option_idx,omitempty"`
	Answer    string `json:"answer,omitempty"`
	Objection string `json:"objection,omitempty"`
}

// Decision is one binding moment as its participants see it.
type Decision struct {
	MomentID      string          `json:"moment_id"`
	SessionID     string          `json:"session_id"`
	Sequence      int64           `json:"sequence"`
	Emitter       string          `json:"emitter"`
	Resolver      string          `json:"resolver,omitempty"`
	CreatedAt     int64           `json:"created_at"`
	Status        string          `json:"status"` // open or resolved
	BindingMoment json.RawMessage `json:"binding_moment"`
	Resolution    *Resolution     `json:"resolution,omitempty"`
}

// Decision statuses.
const (
	DecisionOpen     = "open"
	DecisionResolved = "resolved"
)

// Resolution is a recorded resolution: what was decided, by whom, and the
// message that carried it.
type Resolution struct {
	Outcome      string `json:"outcome"`
	OptionIdx    *int   `json:"option_idx,omitempty"`
	Answer       string `json:"answer,omitempty"`
	Objection    string `json:"objection,omitempty"`
	ResolvedBy   string `json:"resolved_by"`
	ResolutionID string `json:"resolution_id"` // the message id of the resolution
	Sequence     int64  `json:"sequence"`
	ResolvedAt   int64  `json:"resolved_at"`
}

// DecisionList is GET /decisions/pending.
type DecisionList struct {
	Decisions []Decision `json:"decisions"`
}

// ValidMessageID reports whether s has the MessageId shape.
func ValidMessageID(s string) bool { return validID(s, MessagePrefix) }
