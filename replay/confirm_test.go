package replay

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// messages appends n messages to sid in st (logStore, hub_test.go) and
// returns them as one commit, for an agent @a.b joined there.
func messages(st *logStore, sid string, n int) *store.Commit {
	st.setView(sid, joined("@a.b"))
	var all *store.Commit
	for range n {
		c := st.add(sid, protocol.EventMessage, "", true)
		if all == nil {
			all = c
		} else {
			all.Events = append(all.Events, c.Events...)
		}
	}
	return all
}

// fakeTransport records writes; pings wait until the test answers them.
type fakeTransport struct {
	mu      sync.Mutex
	written []int64 // sequences written
	pings   chan chan error
}

func newFakeTransport() *fakeTransport { return &fakeTransport{pings: make(chan chan error, 16)} }

func (f *fakeTransport) Write(_ context.Context, msg []byte) error {
	var e struct{ Sequence int64 }
	_ = json.Unmarshal(msg, &e)
	f.mu.Lock()
	f.written = append(f.written, e.Sequence)
	f.mu.Unlock()
	return nil
}

func (f *fakeTransport) Ping(ctx context.Context) error {
	answer := make(chan error, 1)
	f.pings <- answer
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeTransport) Close(int, string) {}

func (f *fakeTransport) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.written)
}

// pong answers the next ping (within 5 s) with err.
func (f *fakeTransport) pong(t *testing.T, err error) {
	t.Helper()
	select {
	case a := <-f.pings:
		a <- err
	case <-time.After(5 * time.Second):
		t.Fatal("no confirmation ping within 5s")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func testHub(t *testing.T, st Store) *Hub {
	cfg := DefaultConfig()
	cfg.ConfirmInterval = time.Millisecond
	cfg.CursorFlushInterval = 10 * time.Millisecond
	h := New(cfg, st, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(h.Close)
	return h
}

// TestWrittenIsNotConfirmed: the cursor stays where it was while events are
// only written, moves to what a pong confirms, and a failed ping confirms
// nothing.
func TestWrittenIsNotConfirmed(t *testing.T) {
	st := newLogStore()
	messages(st, "sess_1", 5)
	h := testHub(t, st)
	tr := newFakeTransport()
	c, err := h.Attach(context.Background(), "@a.b", tr)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	waitFor(t, "the replay to be written", func() bool { return tr.count() == 5 })
	tr.pong(t, context.DeadlineExceeded) // the peer does not answer
	h.flushCursors()
	if got := st.cursor("@a.b", "sess_1"); got != 0 {
		t.Fatalf("cursor %d after writes that no pong confirmed, want 0", got)
	}
	h.Publish(messages(st, "sess_1", 3))
	waitFor(t, "live events to be written", func() bool { return tr.count() == 8 })
	tr.pong(t, nil)
	waitFor(t, "the cursor to follow the pong", func() bool { h.flushCursors(); return st.cursor("@a.b", "sess_1") == 8 })

	// Disconnecting saves the confirmed position, not the written one.
	h.Publish(messages(st, "sess_1", 2))
	waitFor(t, "more events to be written", func() bool { return tr.count() == 10 })
	c.Close(CloseGoingAway, "test")
	go func() { // the pending ping fails once the connection is gone
		select {
		case a := <-tr.pings:
			a <- errClosed
		case <-time.After(5 * time.Second):
		}
	}()
	c.Finish()
	if got := st.cursor("@a.b", "sess_1"); got != 8 {
		t.Fatalf("cursor %d after closing with 2 unconfirmed events, want 8", got)
	}
}

// TestAckMode: once a connection acks, pongs no longer confirm; an ack
// beyond what was written waits for the writer; acks are cumulative.
func TestAckMode(t *testing.T) {
	st := newLogStore()
	messages(st, "sess_1", 10)
	h := testHub(t, st)
	tr := newFakeTransport()
	c, err := h.Attach(context.Background(), "@a.b", tr)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	waitFor(t, "the replay to be written", func() bool { return tr.count() == 10 })
	c.Ack("sess_1", 4)
	tr.pong(t, nil) // answered, but the connection acks now
	h.flushCursors()
	if got := st.cursor("@a.b", "sess_1"); got != 4 {
		t.Fatalf("cursor %d after an ack of 4 and a pong, want 4", got)
	}
	c.Ack("sess_1", 3) // lower: no effect
	c.Ack("sess_1", 99)
	h.flushCursors()
	if got := st.cursor("@a.b", "sess_1"); got != 10 {
		t.Fatalf("cursor %d after an ack past the head, want 10 (what was written)", got)
	}
	c.Ack("sess_unknown", 5) // ignored
	c.Close(CloseNormal, "test")
	c.Finish()
}

// TestAckFromIgnoresStaleAcks: after a join restart, acks below the join
// do not count, and confirmations of the previous pass are void.
func TestAckFromIgnoresStaleAcks(t *testing.T) {
	p := newPosition("sess_1", 0)
	c := &Conn{hub: &Hub{}, pos: map[string]*position{"sess_1": p}, posDirty: map[string]bool{}}
	p.written, p.shown = 9, 9
	// A join at 10 restarts the pull (as pull does).
	p.gen++
	p.confirmed, p.shown, p.ackFrom, p.acked = 0, 0, 10, 0
	p.written = 4
	c.Ack("sess_1", 7) // from before the restart
	if p.confirmed != 0 {
		t.Fatalf("an ack below the restarting join confirmed %d", p.confirmed)
	}
	p.written, p.shown = 12, 12
	c.Ack("sess_1", 11)
	if p.confirmed != 11 {
		t.Fatalf("confirmed %d after an ack of 11 in the new pass, want 11", p.confirmed)
	}
}

func (f *fakeTransport) Flush(time.Time) error { return nil }
