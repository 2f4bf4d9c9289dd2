package protocol

import "encoding/json"

// Chorus webhooks (docs/chorus.md): the operator's registration resource
// (/admin/v1/agents/{handle}/chorus) and the callback an agent POSTs to
// (/chorus/callback/{token}). The delivery body itself is internal/chorus's
// Payload.

// ChorusRequest is the body of PUT /admin/v1/agents/{handle}/chorus.
type ChorusRequest struct {
	ConnectionString string `json:"connection_string"`
}

// ChorusRegistration answers a registration: the signing secret, shown
// once. The connection string is never echoed.
type ChorusRegistration struct {
	Agent         string `json:"agent"`
	SigningSecret string `json:"signing_secret"`
	Rotated       bool   `json:"rotated"` // an endpoint was replaced
	CreatedAt     int64  `json:"created_at"`
}

// ChorusInfo is an endpoint's state, without its secrets.
type ChorusInfo struct {
	Agent         string `json:"agent"`
	CreatedAt     int64  `json:"created_at"`
	Failing       bool   `json:"failing"`
	FailingSince  int64  `json:"failing_since,omitempty"`
	LastSuccessAt int64  `json:"last_success_at,omitempty"`
	LastError     string `json:"last_error,omitempty"`
}

// ChorusDelivery is one delivery record, as GET
// /admin/v1/agents/{handle}/chorus/deliveries lists it.
type ChorusDelivery struct {
	ID            string `json:"id"` // the webhook-id
	Handle        string `json:"agent"`
	SessionID     string `json:"session_id"`
	Sequence      int64  `json:"sequence"`
	EventType     string `json:"event_type"`
	State         string `json:"state"` // ChorusPending, ChorusDelivered, ChorusFailed
	Attempts      int    `json:"attempts"`
	NextAttemptAt int64  `json:"next_attempt_at,omitempty"` // pending only
	LastAttemptAt int64  `json:"last_attempt_at,omitempty"`
	LastStatus    int    `json:"last_status,omitempty"`
	LastError     string `json:"last_error,omitempty"`
	AgentStatus   string `json:"agent_status,omitempty"` // the agent's last status callback
	AgentError    string `json:"agent_error,omitempty"`  // the agent's last error callback
	CreatedAt     int64  `json:"created_at"`
	FinishedAt    int64  `json:"finished_at,omitempty"`
}

// The states of a delivery.
const (
	ChorusPending   = "pending"   // due, or waiting for a retry
	ChorusDelivered = "delivered" // the endpoint answered 2xx
	ChorusFailed    = "failed"    // dead-lettered
)

// ChorusCallbackRequest is one callback POST (Chorus §3). Which fields are
// allowed depends on Type.
type ChorusCallbackRequest struct {
	Type    string          `json:"type"`
	Content json.RawMessage `json:"content,omitempty"` // message, tool_result
	ID      string          `json:"id,omitempty"`      // tool_call, tool_result; optional on message
	Name    string          `json:"name,omitempty"`    // tool_call
	Args    json.RawMessage `json:"args,omitempty"`    // tool_call
	Status  string          `json:"status,omitempty"`  // status
	Message string          `json:"message,omitempty"` // error
	Code    string          `json:"code,omitempty"`    // error
}

// ChorusCallbackResponse answers a callback: the session event it became,
// if any.
type ChorusCallbackResponse struct {
	OK        bool   `json:"ok"`
	MessageID string `json:"message_id,omitempty"`
	Sequence  int64  `json:"sequence,omitempty"`
}
