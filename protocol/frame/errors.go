package frame

import (
	"fmt"
	"strconv"
)

// Error codes of the draft's section 10. They are wire constants: a client
// matches on them, so they are never reworded.
//
// The draft names no generic "malformed" code, so input that is not a single,
// unambiguous JSON object (bad syntax, invalid UTF-8, a duplicate member, an
// unpaired surrogate escape, trailing data) is reported as field-invalid,
// with the path of the offending member when there is one and "" otherwise.
const (
	CodeEnvelopeVersionUnsupported = "envelope-version-unsupported"
	CodeKindUnknown                = "kind-unknown"
	CodePayloadKindMismatch        = "payload-kind-mismatch"
	CodeFieldMissing               = "field-missing"
	CodeFieldInvalid               = "field-invalid"
	CodeFieldUnknown               = "field-unknown"
	// The codes below are raised by the server (authentication, scope
	// authorisation, stream open), except the two filter codes, which
	// ParseFilter returns.
	CodeSenderIdentityMismatch = "sender-identity-mismatch"
	CodeScopeUnauthorised      = "scope-unauthorised"
	CodeScopeUnimplemented     = "scope-unimplemented"
	CodeFilterAxisUnknown      = "filter-axis-unknown"
	CodeFilterValueInvalid     = "filter-value-invalid"
)

// Error is a validation failure in the shape section 10 puts on the wire: a
// stable code, the offending field as a JSON path ("payload.options",
// "payload.question.options[2].label", "frame_id"; "" when the failure is not
// about one field), and a human-readable message.
//
// Functions of this package return *Error, not error. Assigning a nil *Error
// to an error variable yields a non-nil error; compare the *Error with nil.
type Error struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "frame: " + e.Code + ": " + e.Message
	}
	return "frame: " + e.Code + " at " + e.Field + ": " + e.Message
}

func newError(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func invalid(field, format string, args ...any) *Error {
	return newError(CodeFieldInvalid, field, format, args...)
}

// maxEcho bounds how much of a sender-supplied string an error repeats, so a
// hostile frame cannot make the error larger than it needs to be.
const maxEcho = 64

// quote renders s for a message or path, truncated to maxEcho bytes.
func quote(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// join appends member name to a JSON path. Names that are not plain
// identifiers use bracket notation, so "a.b" cannot be mistaken for a nested
// path.
func join(path, name string) string {
	if !isIdent(name) {
		return path + "[" + quote(name) + "]"
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func isIdent(s string) bool {
	if s == "" || len(s) > maxEcho {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
