package app

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
	"github.com/aspd/aspd/store"
)

// wireKinds gives each kind of the store's domain errors its status and code.
var wireKinds = map[store.Kind]struct {
	status int
	code   string
}{
	store.KindNotFound:             {http.StatusNotFound, protocol.CodeNotFound},
	store.KindSessionEnded:         {http.StatusConflict, protocol.CodeSessionEnded},
	store.KindSessionActive:        {http.StatusConflict, protocol.CodeSessionActive},
	store.KindNotJoined:            {http.StatusConflict, protocol.CodeNotJoined},
	store.KindNotInvited:           {http.StatusConflict, protocol.CodeNotInvited},
	store.KindIdempotencyKeyReused: {http.StatusConflict, protocol.CodeIdempotencyKey},
	store.KindConflict:             {http.StatusConflict, protocol.CodeConflict},
	store.KindInvalidData:          {http.StatusBadRequest, protocol.CodeInvalidRequest},
	store.KindTooLarge:             {http.StatusRequestEntityTooLarge, protocol.CodeContentTooLarge},
	store.KindNotParticipant:       {http.StatusBadRequest, frame.CodeFieldInvalid},
	store.KindClosed:               {http.StatusServiceUnavailable, protocol.CodeUnavailable},
	store.KindAlreadyResolved:      {http.StatusConflict, protocol.CodeAlreadyResolved},
	store.KindNotResolver:          {http.StatusForbidden, protocol.CodeNotResolver},
	store.KindInvalidResolution:    {http.StatusBadRequest, frame.CodeFieldInvalid},
	store.KindSearchTooSlow:        {http.StatusServiceUnavailable, protocol.CodeUnavailable},
	store.KindUnavailable:          {http.StatusServiceUnavailable, protocol.CodeStoreUnavailable},
	store.KindNotRedactable:        {http.StatusConflict, protocol.CodeNotRedactable},
}

// StoreRetryAfterSeconds is when a client refused for a store outage (503
// store_unavailable) is told to try again: REST's Retry-After, MCP's
// retry_after_seconds. Short, since most outages are short (a restart, a
// killed connection); clients back off further on their own.
const StoreRetryAfterSeconds = 2

// StoreUnavailable reports whether err is a store outage, which is
// answered 503 store_unavailable and logged once per outage by the store,
// not per request.
func StoreUnavailable(err error) bool { return store.IsUnavailable(err) }

// LogFailure logs a failed background operation: at ERROR, unless the
// store is in an outage, which the store logs once when it starts and once
// when it ends (the operation is retried on its next round anyway).
func LogFailure(log *slog.Logger, msg string, err error, args ...any) {
	if store.IsUnavailable(err) {
		log.Debug(msg, append(args, "err", err)...)
		return
	}
	log.Error(msg, append(args, "err", err)...)
}

func (a *App) logFailure(msg string, err error, args ...any) { LogFailure(a.log, msg, err, args...) }

// WireError maps a domain error of the store to the answer a client gets:
// status, code, message (the domain error's own, verbatim, whatever context
// wraps it) and, for a frame error, the offending field. It is the one place
// where the store's refusals become wire errors, for every adapter (HTTP,
// MCP); the store knows nothing of either. It returns nil for an error that
// is not a domain error: a failure, which adapters answer as 500 internal.
func WireError(err error) *protocol.Error {
	e := store.AsError(err)
	if e == nil {
		return nil
	}
	w, ok := wireKinds[e.Kind]
	if !ok {
		return nil
	}
	return &protocol.Error{Status: w.status, Code: w.code, Field: e.Field, Message: e.Message}
}

// Answer is the wire error for any error an App method returns: a protocol
// error as it is (a rate limit's included), a store domain error mapped by
// WireError, anything else 500 internal.
func Answer(err error) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	if pe = WireError(err); pe != nil {
		return pe
	}
	return protocol.Errorf(http.StatusInternalServerError, protocol.CodeInternal, "internal error")
}
