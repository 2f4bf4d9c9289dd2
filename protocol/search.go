package protocol

import "encoding/json"

// SearchResults is the answer of the operator's transcript search, GET
// /admin/v1/search (docs/search.md): hits newest first, and the cursor of
// the next page when there may be one.
type SearchResults struct {
	Hits       []SearchHit `json:"hits"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// SearchHit is one event that matched a search.
type SearchHit struct {
	SessionID string          `json:"session_id"`
	Sequence  int64           `json:"sequence"`
	Type      string          `json:"type"`
	Sender    string          `json:"sender,omitempty"`
	CreatedAt string          `json:"created_at"` // RFC 3339, UTC, milliseconds
	Event     json.RawMessage `json:"event"`      // the event in its wire shape
	Snippet   []SnippetPart   `json:"snippet"`
}

// SnippetPart is one piece of a hit's snippet, plain text (never HTML);
// Match marks text the query matched.
type SnippetPart struct {
	Text  string `json:"text"`
	Match bool   `json:"match,omitempty"`
}
