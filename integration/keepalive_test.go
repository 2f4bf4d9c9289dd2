package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestKeepalive: a connection whose peer answers pings stays open across
// many ping intervals; a peer that stops answering is closed with 1008
// "ping timeout" (a client answers pings only while it reads).
func TestKeepalive(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t), "--ws-ping-interval", "200ms")
	a := s.provision("@k.alive", "open")
	b := s.provision("@k.mute", "open")
	live := a.connect()
	mute := dlDialRaw(t, s, b.token)

	time.Sleep(1500 * time.Millisecond) // 7 ping intervals
	sid := b.createSession(map[string]any{"invite": []string{"@k.alive"}})
	live.expect("session.invited")
	if !strings.Contains(sid, "sess_") {
		t.Fatal(sid)
	}
	// The mute peer was cut off: when it finally reads, it finds the close.
	_, err := mute.readAll(5 * time.Second)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "ping timeout" {
		if !strings.Contains(s.logs(), "ping timeout") {
			t.Fatalf("mute peer: %v, and no ping timeout in the server log", err)
		}
	}
}
