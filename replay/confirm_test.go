package replay

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// memStore is an in-memory Store: sessions of messages, everyone joined.
type memStore struct {
	mu      sync.Mutex
	events  map[string][]store.StoredEvent
	cursors map[string]int64 // handle/session -> seq
}

func newMemStore() *memStore {
	return &memStore{events: map[string][]store.StoredEvent{}, cursors: map[string]int64{}}
}

func (m *memStore) append(sid string, n int) *store.Commit {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &store.Commit{SessionID: sid, Recipients: []string{"@a.b"}}
	for range n {
		seq := int64(len(m.events[sid]) + 1)
		body, _ := json.Marshal(map[string]any{"type": protocol.EventMessage, "session_id": sid, "sequence": seq})
		e := store.StoredEvent{SessionID: sid, Sequence: seq, Type: protocol.EventMessage, Body: body}
		m.events[sid] = append(m.events[sid], e)
		c.Events = append(c.Events, e)
	}
	return c
}

func (m *memStore) EventsAfter(_ context.Context, sid string, after int64, limit int) ([]store.StoredEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	evs := m.events[sid]
	if after >= int64(len(evs)) {
		return nil, nil
	}
	out := evs[after:]
	if len(out) > limit {
		out = out[:limit]
	}
	return append([]store.StoredEvent(nil), out...), nil
}

func (m *memStore) View(_ context.Context, sid, h string) (visibility.View, error) {
	return visibility.View{Handle: h, Status: "joined", VisibleThrough: visibility.Joined}, nil
}

func (m *memStore) Cursor(_ context.Context, h, sid string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cursors[h+"/"+sid], nil
}

func (m *memStore) PendingSessions(_ context.Context, h string) ([]store.Pending, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Pending
	for sid, evs := range m.events {
		if c := m.cursors[h+"/"+sid]; int64(len(evs)) > c {
			out = append(out, store.Pending{SessionID: sid, Cursor: c, LastSeq: int64(len(evs)),
				View: visibility.View{Handle: h, Status: "joined", VisibleThrough: visibility.Joined}})
		}
	}
	return out, nil
}

func (m *memStore) SaveCursors(_ context.Context, cs []visibility.Cursor) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range cs {
		m.cursors[c.Handle+"/"+c.SessionID] = c.Seq
	}
	return nil
}

func (m *memStore) cursor(h, sid string) int64 {
	c, _ := m.Cursor(context.Background(), h, sid)
	return c
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
	st := newMemStore()
	st.append("sess_1", 5)
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
	h.Publish(st.append("sess_1", 3))
	waitFor(t, "live events to be written", func() bool { return tr.count() == 8 })
	tr.pong(t, nil)
	waitFor(t, "the cursor to follow the pong", func() bool { h.flushCursors(); return st.cursor("@a.b", "sess_1") == 8 })

	// Disconnecting saves the confirmed position, not the written one.
	h.Publish(st.append("sess_1", 2))
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
	st := newMemStore()
	st.append("sess_1", 10)
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
