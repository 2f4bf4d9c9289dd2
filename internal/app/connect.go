package app

import (
	"context"

	"github.com/aspd/aspd/replay"
)

// Connect attaches a live event connection of caller, authenticated by
// token, to the hub. The token is checked again once the connection is
// registered: a rotation or revocation that raced the handshake closes it
// (4001) rather than leaving it open. The caller starts the connection
// (Conn.Start) once its transport is ready.
func (a *App) Connect(ctx context.Context, caller, token string, tr replay.Transport) (*replay.Conn, error) {
	conn, err := a.hub.Attach(ctx, caller, tr)
	if err != nil {
		return nil, err
	}
	if !a.stillValid(caller, token) {
		conn.Close(replay.CloseUnauthorized, "token revoked")
	}
	return conn, nil
}
