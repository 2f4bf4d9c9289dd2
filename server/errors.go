package server

import (
	"net/http"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
	"github.com/aspd/aspd/store"
)

// WireError maps a domain error of the store to the answer a client gets:
// status, code and message. It is the one place where the store's refusals
// become HTTP; the store itself knows nothing of HTTP. It returns nil for an
// error that is not a domain error (a failure, which the caller answers as
// 500 internal).
func WireError(err error) *protocol.Error {
	e := store.AsError(err)
	if e == nil {
		return nil
	}
	switch e.Kind {
	case store.KindNotFound:
		return protocol.NotFound()
	case store.KindSessionEnded:
		return protocol.Errorf(http.StatusConflict, protocol.CodeSessionEnded, "%s", e.Message)
	case store.KindSessionActive:
		return protocol.Errorf(http.StatusConflict, protocol.CodeSessionActive, "%s", e.Message)
	case store.KindNotJoined:
		return protocol.Errorf(http.StatusConflict, protocol.CodeNotJoined, "%s", e.Message)
	case store.KindNotInvited:
		return protocol.Errorf(http.StatusConflict, protocol.CodeNotInvited, "%s", e.Message)
	case store.KindIdempotencyKeyReused:
		return protocol.Errorf(http.StatusConflict, protocol.CodeIdempotencyKey, "%s", e.Message)
	case store.KindConflict:
		return protocol.Errorf(http.StatusConflict, protocol.CodeConflict, "%s", e.Message)
	case store.KindInvalidData:
		return protocol.Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "%s", e.Message)
	case store.KindTooLarge:
		return protocol.Errorf(http.StatusRequestEntityTooLarge, protocol.CodeContentTooLarge, "%s", e.Message)
	case store.KindNotParticipant:
		return &protocol.Error{Status: http.StatusBadRequest, Code: frame.CodeFieldInvalid, Field: e.Field, Message: e.Message}
	case store.KindClosed:
		return protocol.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "%s", e.Message)
	}
	return nil
}
