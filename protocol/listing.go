package protocol

// Session listings: GET /sessions and GET /admin/v1/sessions.

// SessionSummary is one row of GET /sessions: a session and the caller's status in it.
type SessionSummary struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Topic     string `json:"topic,omitempty"`
	Status    string `json:"status"`
	CreatedAt int64  `json:"created_at"`
	EndedAt   int64  `json:"ended_at,omitempty"`
	LastSeq   int64  `json:"last_sequence"`
}

// SessionList is a page of sessions, newest first.
type SessionList[T any] struct {
	Sessions   []T    `json:"sessions"`
	NextCursor string `json:"next_cursor,omitempty"`
}
