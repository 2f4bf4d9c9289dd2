package protocol

import (
	"fmt"
	"net/http"
)

// Error codes: the stable, machine-readable part of every error body
// `{"error": {"code": "...", "message": "..."}}`. docs/errors.md lists them;
// clients branch on the code, never on the message.
const (
	CodeMalformedJSON   = "malformed_json"         // 400: body is not one JSON value
	CodeInvalidRequest  = "invalid_request"        // 400: well-formed JSON that breaks the schema or a rule
	CodeInvalidContent  = "invalid_content"        // 400: message content breaks common.json#/$defs/Content
	CodeBodyTooLarge    = "body_too_large"         // 413: request body over --max-body-bytes
	CodeRequestTimeout  = "request_timeout"        // 408: the body did not arrive within --http-read-timeout
	CodeContentTooLarge = "content_too_large"      // 413: content over --max-content-bytes or --max-parts
	CodeUnauthorized    = "unauthorized"           // 401: missing or unknown credentials
	CodeNotFound        = "not_found"              // 404: missing, invisible, or refused by trust: indistinguishable on purpose
	CodeSessionEnded    = "session_ended"          // 409: the session is ended
	CodeSessionActive   = "session_active"         // 409: reopen of a session that is not ended
	CodeNotJoined       = "not_joined"             // 409: the caller's participant status does not allow this action
	CodeNotInvited      = "not_invited"            // 409: join without a pending invitation
	CodeIdempotencyKey  = "idempotency_key_reused" // 409: same key, different request
	CodeConflict        = "conflict"               // 409: e.g. handle already exists
	CodeRateLimited     = "rate_limited"           // 429
	CodeInternal        = "internal"               // 500
	CodeUnavailable     = "unavailable"            // 503: shutting down, Chorus off, a search too slow
	// CodeStoreUnavailable: the database cannot serve now (down, restarting,
	// its disk full); answered with Retry-After, and the same request may
	// succeed later.
	CodeStoreUnavailable = "store_unavailable" // 503
	// CodeNotRedactable: the operator asked to redact an event whose type
	// carries no user content (docs/api.md, "Redacted events").
	CodeNotRedactable = "not_redactable" // 409
)

// Error is an API error: an HTTP status, a stable code, a message for humans
// and, for frame validation errors, the offending field as a JSON path.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// ErrorBody is the wire shape of every error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Errorf builds an *Error with a formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is a 400 invalid_request.
func Invalid(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeInvalidRequest, format, args...)
}

// NotFound is the one body used for every missing, invisible or refused
// resource, so that a trust denial cannot be told apart from a missing handle.
func NotFound() *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "not found"}
}
