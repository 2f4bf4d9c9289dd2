package app

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
)

// fakeTransport records what a connection is sent.
type fakeTransport struct {
	mu     sync.Mutex
	msgs   []string
	closed int
}

func (f *fakeTransport) Write(_ context.Context, msg []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, string(msg))
	return nil
}

func (f *fakeTransport) Flush(time.Time) error      { return nil }
func (f *fakeTransport) Ping(context.Context) error { return nil }

func (f *fakeTransport) Close(code int, _ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = code
}

func (f *fakeTransport) state() (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n"), f.closed
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConnectAndPresence: a connection receives what is published; closing
// an agent's last connection appends session.disconnected through the
// presence callbacks (which publish it); a stale token closes the
// connection with 4001 at once.
func TestConnectAndPresence(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		aliceTok := mkAgent(t, a, "@acme.alice")
		bobTok := mkAgent(t, a, "@acme.bob")
		r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.bob"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Join(ctx, "@acme.bob", r.SessionID); err != nil {
			t.Fatal(err)
		}

		tr := &fakeTransport{}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		conn, err := a.Connect(cctx, "@acme.alice", aliceTok, tr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Start()
		if _, err := a.SendMessage(ctx, "@acme.bob", r.SessionID, protocol.SendMessageRequest{Content: content("live")}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the live message", func() bool { m, _ := tr.state(); return strings.Contains(m, "live") })

		// Bob connects and goes away: alice hears of it.
		btr := &fakeTransport{}
		bconn, err := a.Connect(cctx, "@acme.bob", bobTok, btr)
		if err != nil {
			t.Fatal(err)
		}
		bconn.Start()
		bconn.Close(1000, "bye")
		bconn.Finish()
		eventually(t, "session.disconnected", func() bool { m, _ := tr.state(); return strings.Contains(m, "session.disconnected") })

		// A token that is no longer the agent's: closed with 4001.
		stale := &fakeTransport{}
		sconn, err := a.Connect(cctx, "@acme.bob", "asp_stale", stale)
		if err != nil {
			t.Fatal(err)
		}
		if _, code := stale.state(); code != replay.CloseUnauthorized {
			t.Fatalf("stale token: close code %d, want %d", code, replay.CloseUnauthorized)
		}
		sconn.Finish()
		conn.Close(1000, "done")
		conn.Finish()
	})
}

// TestGraceSweep: an agent that stays away longer than the grace window
// leaves its sessions (grace_expired), published by the sweeper.
func TestGraceSweep(t *testing.T) {
	forEach(t, func(c *Config) { c.GraceWindow = 100 * time.Millisecond }, func(t *testing.T, a *App) {
		mkAgent(t, a, "@acme.alice")
		bobTok := mkAgent(t, a, "@acme.bob")
		r, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.bob"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Join(ctx, "@acme.bob", r.SessionID); err != nil {
			t.Fatal(err)
		}
		tr := &fakeTransport{}
		conn, err := a.Connect(ctx, "@acme.bob", bobTok, tr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Start()
		conn.Close(1000, "bye")
		conn.Finish()
		eventually(t, "grace_expired", func() bool {
			page, err := a.Events(ctx, "@acme.alice", r.SessionID, Page{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Events {
				if strings.Contains(string(e), "grace_expired") {
					return true
				}
			}
			return false
		})
		if a.Stopping() == nil || a.hub == nil || a.Store() == nil {
			t.Fatal("accessors")
		}
	})
}
