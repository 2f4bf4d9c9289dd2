package integration

import (
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestDroppedConnectionOfOnlineAgentLosesNothing: an agent with two live
// connections (two hosts) loses one; the other keeps receiving and its
// position advances the agent's cursor. When the dropped host reconnects it
// still receives everything it missed, because a dropped connection's
// position is kept as a floor under the agent's cursor until a later
// connection has caught up past it.
func TestDroppedConnectionOfOnlineAgentLosesNothing(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t), "--cursor-flush-interval", "20ms")
	a := s.provision("@mc.a", "open")
	b := s.provision("@mc.b", "open")
	sid := a.createSession(map[string]any{"invite": []string{"@mc.b"}})
	b.join(sid)
	host1 := b.connect()
	host2 := b.connect()
	first := a.send(sid, "both hosts get this")
	for _, h := range []*stream{host1, host2} {
		for e := h.next(); e.Sequence != first; e = h.next() {
		}
	}
	host1.close()
	var last int64
	for i := 0; i < 5; i++ {
		last = a.send(sid, "only host2 is there")
	}
	for e := host2.next(); e.Sequence != last; e = host2.next() {
	}
	time.Sleep(200 * time.Millisecond) // several cursor flushes with host2 ahead
	again := b.connect()
	got := map[int64]bool{}
	for e := again.next(); ; e = again.next() {
		got[e.Sequence] = true
		if e.Sequence == last {
			break
		}
	}
	for seq := first + 1; seq <= last; seq++ {
		if !got[seq] {
			t.Fatalf("the reconnecting host never got sequence %d (got %v)", seq, got)
		}
	}
}
