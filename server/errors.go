package server

import (
	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// WireError maps a domain error of the store to the answer a client gets
// (see app.WireError, shared with the MCP adapter). It returns nil for an
// error that is not a domain error: a failure, which the caller answers as
// 500 internal.
func WireError(err error) *protocol.Error { return app.WireError(err) }
