package protocol

import "encoding/json"

// Event types (events.json).
const (
	EventInvited      = "session.invited"
	EventJoined       = "session.joined"
	EventDisconnected = "session.disconnected"
	EventReconnected  = "session.reconnected"
	EventLeft         = "session.left"
	EventMessage      = "session.message"
	EventEnded        = "session.ended"
	EventReopened     = "session.reopened"
)

// Participant statuses and session states (common.json).
const (
	StatusInvited = "invited"
	StatusJoined  = "joined"
	StatusLeft    = "left"

	StateActive = "active"
	StateEnded  = "ended"

	PolicyAllowlist = "allowlist"
	PolicyOpen      = "open"

	LeftReasonLeft         = "left"
	LeftReasonGraceExpired = "grace_expired"
)

// Event is the wire envelope of every session event:
// {type, session_id, event_id, sequence, created_at, payload}.
type Event struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	EventID   string          `json:"event_id"`
	Sequence  int64           `json:"sequence"`
	CreatedAt int64           `json:"created_at"`
	Payload   json.RawMessage `json:"payload"`
}

// RedactedEvent is an event as stored and served once an operator removed
// its content (docs/api.md, "Redacted events"): the ASP envelope plus
// aspd's "redacted" member, which events.json's envelope admits (it does
// not close its members) and which no other event carries.
type RedactedEvent struct {
	Event
	Redacted *Redaction `json:"redacted,omitempty"`
}

// Redaction says who removed an event's content, when and why. As in
// Matrix, the event keeps its place in the log (sequence, type, sender,
// created_at): sequences stay gap-free and cursors stay valid.
type Redaction struct {
	At     int64  `json:"at"`
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// RedactRequest is the body of POST /admin/v1/sessions/{id}/events/{sequence}/redact.
type RedactRequest struct {
	Reason string `json:"reason"`
}

// RedactedContent is what a redacted message's content becomes: a
// non-empty string, so that the tombstone still validates against
// common.json#/$defs/Content (which admits no empty content).
const RedactedContent = "[redacted]"

// MaxRedactReasonBytes bounds a redaction's reason (UTF-8 bytes).
const MaxRedactReasonBytes = 500

// InvitedPayload is the payload of session.invited.
type InvitedPayload struct {
	Invitee        string   `json:"invitee"`
	By             string   `json:"by"`
	Topic          string   `json:"topic,omitempty"`
	InitialMessage *Message `json:"initial_message,omitempty"`
}

// AgentPayload is the payload of session.joined, session.disconnected and
// session.reconnected.
type AgentPayload struct {
	Agent string `json:"agent"`
}

// LeftPayload is the payload of session.left.
type LeftPayload struct {
	Agent  string `json:"agent"`
	Reason string `json:"reason,omitempty"`
}

// EndedPayload is the payload of session.ended; EndedBy is absent when the
// session ended because every participant left.
type EndedPayload struct {
	EndedBy string `json:"ended_by,omitempty"`
}

// ReopenedPayload is the payload of session.reopened.
type ReopenedPayload struct {
	ReopenedBy string `json:"reopened_by"`
}

// Message is common.json#/$defs/Message, the payload of session.message.
type Message struct {
	ID             string          `json:"id"`
	SessionID      string          `json:"session_id"`
	Sender         string          `json:"sender"`
	Sequence       int64           `json:"sequence"`
	Content        json.RawMessage `json:"content"`
	CreatedAt      int64           `json:"created_at"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
}

// Participant is common.json#/$defs/Participant.
type Participant struct {
	Handle   string `json:"handle"`
	Status   string `json:"status"`
	JoinedAt int64  `json:"joined_at,omitempty"`
	LeftAt   int64  `json:"left_at,omitempty"`
}

// InitialMessage is the optional first message of POST /sessions and
// POST /sessions/{id}/reopen.
type InitialMessage struct {
	Content  json.RawMessage `json:"content"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// CreateSessionRequest is http.json#/$defs/PostSessionsRequest.
type CreateSessionRequest struct {
	Invite         []string        `json:"invite,omitempty"`
	Topic          string          `json:"topic,omitempty"`
	InitialMessage *InitialMessage `json:"initial_message,omitempty"`
	EndAfterSend   bool            `json:"end_after_send,omitempty"`
	IdempotencyKey *string         `json:"idempotency_key,omitempty"`
}

// CreateSessionResponse is http.json#/$defs/PostSessionsResponse.
type CreateSessionResponse struct {
	SessionID string `json:"session_id"`
	Sequence  *int64 `json:"sequence,omitempty"`
}

// InviteRequest is http.json#/$defs/PostSessionsInviteRequest.
type InviteRequest struct {
	Invite []string `json:"invite"`
}

// InviteResponse is http.json#/$defs/PostSessionsInviteResponse.
type InviteResponse struct {
	Invited []string `json:"invited"`
}

// SendMessageRequest is http.json#/$defs/PostSessionsMessagesRequest.
type SendMessageRequest struct {
	Content        json.RawMessage `json:"content"`
	IdempotencyKey *string         `json:"idempotency_key,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
}

// SendMessageResponse is http.json#/$defs/PostSessionsMessagesResponse.
type SendMessageResponse struct {
	MessageID string `json:"message_id"`
	Sequence  int64  `json:"sequence"`
}

// ReopenRequest is http.json#/$defs/PostSessionsReopenRequest.
type ReopenRequest struct {
	Invite         []string        `json:"invite,omitempty"`
	InitialMessage *InitialMessage `json:"initial_message,omitempty"`
}

// OK is the `{ok: true}` response of join, leave, end and reopen.
type OK struct {
	OK bool `json:"ok"`
}

// Session is http.json#/$defs/GetSessionResponse.
type Session struct {
	ID           string        `json:"id"`
	State        string        `json:"state"`
	Topic        string        `json:"topic,omitempty"`
	Participants []Participant `json:"participants"`
	CreatedAt    int64         `json:"created_at"`
	EndedAt      int64         `json:"ended_at,omitempty"`
}

// EventsPage is http.json#/$defs/GetSessionEventsResponse.
type EventsPage struct {
	Events     []json.RawMessage `json:"events"`
	NextCursor string            `json:"next_cursor,omitempty"`
}
