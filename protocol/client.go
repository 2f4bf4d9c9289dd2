package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ClientMessageAck is the type of the one message a client may send on
// WS /connect (docs/delivery.md, "Confirmation").
const ClientMessageAck = "ack"

// Ack is a client's acknowledgement: it has received and processed every
// event of the session up to and including Sequence.
type Ack struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Sequence  int64  `json:"sequence"`
}

// DecodeClientMessage reads a text message a client sent on WS /connect. It
// returns nil, nil for a message that is not an ack (ignored, as before
// acks existed), and an error for an ack that is malformed.
func DecodeClientMessage(b []byte) (*Ack, error) {
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(b, &head) != nil || head.Type != ClientMessageAck {
		return nil, nil
	}
	var a Ack
	if perr := DecodeStrict(b, &a); perr != nil {
		return nil, errors.New(perr.Message)
	}
	switch {
	case !ValidSessionID(a.SessionID):
		return nil, fmt.Errorf("session_id must be a session id")
	case a.Sequence < 1:
		return nil, fmt.Errorf("sequence must be a positive integer")
	}
	return &a, nil
}
