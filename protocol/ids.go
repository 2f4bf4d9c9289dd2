package protocol

import (
	"strings"

	"github.com/oklog/ulid/v2"
)

// Identifier prefixes, as in common.json (SessionId, MessageId, EventId).
const (
	SessionPrefix = "sess_"
	MessagePrefix = "msg_"
	EventPrefix   = "evt_"
)

// ULIDs are Crockford base32 in upper case, which satisfies the schemas'
// `^sess_[0-9A-Z]+$` patterns and sorts by creation time.
// ulid.Make is safe for concurrent use and monotonic within a millisecond.

// NewSessionID returns a fresh session id.
func NewSessionID() string { return SessionPrefix + ulid.Make().String() }

// NewMessageID returns a fresh message id.
func NewMessageID() string { return MessagePrefix + ulid.Make().String() }

// NewEventID returns a fresh event id.
func NewEventID() string { return EventPrefix + ulid.Make().String() }

// ValidSessionID reports whether s has the SessionId shape. It is used to
// answer malformed path parameters with the same 404 as a missing session.
func ValidSessionID(s string) bool { return validID(s, SessionPrefix) }

func validID(s, prefix string) bool {
	if !strings.HasPrefix(s, prefix) || len(s) == len(prefix) || len(s) > len(prefix)+64 {
		return false
	}
	for _, c := range s[len(prefix):] {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
