package protocol

import "encoding/json"

// The agent-channel frame fan-out: POST /frames.

// FrameSubmission is the body of POST /frames.
type FrameSubmission struct {
	Scope string          `json:"scope"`
	Frame json.RawMessage `json:"frame"`
}

// FrameResult answers a frame submission: how many streams the frame
// reached. Exact is false when the count is coarsened to 0 or 1 (at least
// one), which it is whenever the scope addresses another agent's streams.
type FrameResult struct {
	Subscriptions int  `json:"subscriptions"`
	Exact         bool `json:"exact"`
}

// StreamInfo is one entry of the roster (GET /stream/roster): one of the
// caller's own open frame streams.
type StreamInfo struct {
	Instrument string `json:"instrument"`
	Session    string `json:"session,omitempty"`
	Since      int64  `json:"since"`
}
