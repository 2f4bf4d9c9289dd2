package store

import "errors"

// The store speaks in domain errors. A request the store refuses by one of
// its rules is an *Error whose Kind says which rule, and whose Message says
// it to a human; nothing here knows about HTTP. The edge
// (internal/app/errors.go, WireError) maps each Kind to the answer a client
// gets (status, code, message), in one place. Errors are wrapped with
// context on their way up (fmt.Errorf("...: %w")); errors.Is(err,
// ErrNotJoined) and errors.As(err, &*store.Error) see through the wrapping,
// and the edge answers with the Message, never with the wrapped text.

// Kind classifies a refusal of the store.
type Kind uint8

// The kinds of refusal.
const (
	// KindNotFound: missing, invisible, or refused by trust (all alike).
	KindNotFound Kind = iota + 1
	// KindSessionEnded: the session is ended (as the caller knows it).
	KindSessionEnded
	// KindSessionActive: reopen of a session that is not ended.
	KindSessionActive
	// KindNotJoined: the caller's participant status does not allow this.
	KindNotJoined
	// KindNotInvited: join without a pending invitation.
	KindNotInvited
	// KindIdempotencyKeyReused: an idempotency key used for another request.
	KindIdempotencyKeyReused
	// KindConflict: a handle that exists or existed.
	KindConflict
	// KindInvalidData: the database cannot store the request's data.
	KindInvalidData
	// KindTooLarge: the request's data exceeds a database limit.
	KindTooLarge
	// KindNotParticipant: an agent-channel frame names a recipient that is
	// not a current participant; Field names the offending member.
	KindNotParticipant
	// KindClosed: the store is closed (shutting down).
	KindClosed
	// KindAlreadyResolved: a binding moment that has its resolution already.
	KindAlreadyResolved
	// KindNotResolver: a participant who may not resolve this binding moment.
	KindNotResolver
	// KindInvalidResolution: a resolution its binding moment does not admit
	// (an option index out of range, a closed hatch); Field names it.
	KindInvalidResolution
	// KindSearchTooSlow: a search did not finish within its time bound.
	KindSearchTooSlow
	// KindUnavailable: the database cannot serve now (unreachable, a
	// connection it killed, a full or read-only disk, a lock held too
	// long); the same request may succeed later. See unavailable.go.
	KindUnavailable
	// KindNotRedactable: a redaction of an event whose type carries no
	// user content (redact.go).
	KindNotRedactable
)

// Error is a domain error of the store: a request refused by a rule, or the
// store being closed.
type Error struct {
	Kind    Kind
	Field   string // the request member at fault, where one is (KindNotParticipant)
	Message string // for humans; the edge answers with it verbatim
	// cause is the driver's error behind a KindUnavailable: in logs (Error)
	// and to errors.Is/As (Unwrap), never in an answer.
	cause error
}

func (e *Error) Error() string {
	if e.cause != nil {
		return e.Message + ": " + e.cause.Error()
	}
	return e.Message
}

// Unwrap returns the driver's error behind the domain error, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is makes every *Error match the sentinel of its Kind, so that
// errors.Is(err, ErrConflict) holds for any conflict, whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

func refusal(k Kind, msg string) *Error { return &Error{Kind: k, Message: msg} }

// Sentinels, one per kind. Those with a fixed message are returned as they
// are; the others (conflict, invalid data, too large, not a participant) are
// built with their own message and match their sentinel through Is.
var (
	ErrNotFound             = refusal(KindNotFound, "not found")
	ErrSessionEnded         = refusal(KindSessionEnded, "the session is ended")
	ErrSessionActive        = refusal(KindSessionActive, "the session is active; only an ended session can be reopened")
	ErrNotJoined            = refusal(KindNotJoined, "only a joined participant may do this")
	ErrNotInvited           = refusal(KindNotInvited, "there is no pending invitation; a participant who left returns only by a new invitation")
	ErrIdempotencyKeyReused = refusal(KindIdempotencyKeyReused, "this idempotency_key was used for a different request")
	ErrConflict             = refusal(KindConflict, "conflict")
	ErrInvalidData          = refusal(KindInvalidData, "the database cannot store this data")
	ErrTooLarge             = refusal(KindTooLarge, "the data exceeds a database limit")
	ErrNotParticipant       = refusal(KindNotParticipant, "not a participant of this session")
	ErrClosed               = refusal(KindClosed, "the store is closed")
	ErrAlreadyResolved      = refusal(KindAlreadyResolved, "this binding moment is already resolved: the first resolution wins")
	ErrNotResolver          = refusal(KindNotResolver, "you may not resolve this binding moment")
	ErrInvalidResolution    = refusal(KindInvalidResolution, "the binding moment does not admit this resolution")
	ErrUnavailable          = refusal(KindUnavailable, unavailableMessage)
	ErrNotRedactable        = refusal(KindNotRedactable, "only a session.message can be redacted: other events carry handles and session state, not content")
)

// AsError returns the store's domain error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
