package protocol

// Session listings: GET /sessions and GET /admin/v1/sessions.

// SessionSummary is one row of GET /sessions: a session as the caller sees
// it, the caller's status in it and the session's last sequence. Its id,
// state, topic, participants, created_at and ended_at are those of
// GET /sessions/{id} (http.json#/$defs/GetSessionResponse) for the same
// caller: ASP clients read participants from list items as from snapshots.
type SessionSummary struct {
	ID           string        `json:"id"`
	State        string        `json:"state"`
	Topic        string        `json:"topic,omitempty"`
	Status       string        `json:"status"`
	Participants []Participant `json:"participants"`
	CreatedAt    int64         `json:"created_at"`
	EndedAt      int64         `json:"ended_at,omitempty"`
	LastSeq      int64         `json:"last_sequence"`
}

// SessionList is a page of sessions, newest first.
type SessionList[T any] struct {
	Sessions   []T    `json:"sessions"`
	NextCursor string `json:"next_cursor,omitempty"`
}
