package app

import (
	"context"
	"errors"

	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// Connect attaches a live event connection of caller, authenticated by
// token, to the hub. The token is checked again once the connection is
// registered: a rotation or revocation that raced the handshake closes it
// (4001) rather than leaving it open. If the store cannot answer that check
// (an outage), the token may well be valid: the connection is closed with
// 1013 try again later, never 4001, which tells a client not to reconnect.
// The caller starts the connection (Conn.Start) once its transport is
// ready.
func (a *App) Connect(ctx context.Context, caller, token string, tr replay.Transport) (*replay.Conn, error) {
	conn, err := a.hub.Attach(ctx, caller, tr)
	if err != nil {
		return nil, err
	}
	switch err := a.stillValid(caller, token); {
	case err == nil:
	case errors.Is(err, errRevoked):
		conn.Close(replay.CloseUnauthorized, "token revoked")
	case store.IsUnavailable(err):
		conn.Close(replay.CloseTryAgainLater, "try again later")
	default:
		a.log.Error("connect: re-checking the token failed", "agent", caller, "err", err)
		conn.Close(replay.CloseInternal, "internal error")
	}
	return conn, nil
}
