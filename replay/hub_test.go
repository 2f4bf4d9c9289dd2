package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// logStore is an in-memory Store with membership: every agent has a view
// per session, which the test sets as the real store would, and commits
// carry (or, to test the fallback, do not carry) the recipients' views.
type logStore struct {
	mu        sync.Mutex
	events    map[string][]store.StoredEvent
	views     map[string]visibility.View // handle/session
	cursors   map[string]int64           // handle/session
	saves     [][]visibility.Cursor      // every SaveCursors batch
	failSave  bool
	viewReads atomic.Int64
	// onCursor, when set, runs before every Cursor read, without s.mu; an
	// error it returns is the read's.
	onCursor func(h, sid string) error
}

func newLogStore() *logStore {
	return &logStore{events: map[string][]store.StoredEvent{}, views: map[string]visibility.View{}, cursors: map[string]int64{}}
}

func joined(h string) visibility.View {
	return visibility.View{Handle: h, Status: protocol.StatusJoined, VisibleThrough: visibility.Joined}
}

// setView sets h's view of a session, as a commit would.
func (s *logStore) setView(sid string, v visibility.View) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views[v.Handle+"/"+sid] = v
}

// add appends one event and returns its commit for every participant that
// may see it or is the event's subject, with their views if carry is set.
func (s *logStore) add(sid, typ, subject string, carry bool) *store.Commit {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := int64(len(s.events[sid]) + 1)
	body, _ := json.Marshal(map[string]any{"type": typ, "session_id": sid, "sequence": seq})
	e := store.StoredEvent{SessionID: sid, Sequence: seq, Type: typ, Subject: subject, Body: body}
	s.events[sid] = append(s.events[sid], e)
	c := &store.Commit{SessionID: sid, Events: []store.StoredEvent{e}}
	var handles []string
	for k, v := range s.views {
		if k == v.Handle+"/"+sid && (v.Handle == subject || visibility.Visible(v, e.Meta())) {
			handles = append(handles, v.Handle)
		}
	}
	sort.Strings(handles)
	c.Recipients = handles
	if carry {
		for _, h := range handles {
			c.Views = append(c.Views, s.views[h+"/"+sid])
		}
	}
	return c
}

func (s *logStore) EventsAfter(_ context.Context, sid string, after int64, limit int) ([]store.StoredEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.events[sid]
	if after >= int64(len(evs)) {
		return nil, nil
	}
	out := evs[after:]
	if len(out) > limit {
		out = out[:limit]
	}
	return append([]store.StoredEvent(nil), out...), nil
}

func (s *logStore) View(_ context.Context, sid, h string) (visibility.View, error) {
	s.viewReads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.views[h+"/"+sid]
	if !ok {
		return visibility.View{Handle: h}, store.ErrNotFound
	}
	return v, nil
}

func (s *logStore) Cursor(_ context.Context, h, sid string) (int64, error) {
	if s.onCursor != nil {
		if err := s.onCursor(h, sid); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursors[h+"/"+sid], nil
}

func (s *logStore) PendingSessions(_ context.Context, h string) ([]store.Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Pending
	for sid, evs := range s.events {
		v, ok := s.views[h+"/"+sid]
		if c := s.cursors[h+"/"+sid]; ok && int64(len(evs)) > c {
			out = append(out, store.Pending{SessionID: sid, Cursor: c, LastSeq: int64(len(evs)), View: v})
		}
	}
	return out, nil
}

func (s *logStore) SaveCursors(_ context.Context, cs []visibility.Cursor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSave {
		return errors.New("store down")
	}
	s.saves = append(s.saves, append([]visibility.Cursor(nil), cs...))
	for _, c := range cs {
		s.cursors[c.Handle+"/"+c.SessionID] = c.Seq
	}
	return nil
}

func (s *logStore) cursor(h, sid string) int64 {
	c, _ := s.Cursor(context.Background(), h, sid)
	return c
}

func (s *logStore) saveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.saves)
}

// testTransport records writes and its close; pings are answered at once.
// Like the WebSocket transport, it queues writes until Flush: an event
// counts as written only once flushed. With blockAfter > 0, every write
// after that many blocks until the connection is closed or the write's
// deadline passes.
type testTransport struct {
	mu         sync.Mutex
	queued     []int64
	written    []int64
	flushes    int // Flush calls that sent something
	blockAfter int
	closed     chan struct{}
	closeOnce  sync.Once
	closeCode  atomic.Int64
}

func newTestTransport() *testTransport { return &testTransport{closed: make(chan struct{})} }

func (f *testTransport) Write(ctx context.Context, msg []byte) error {
	var e struct{ Sequence int64 }
	_ = json.Unmarshal(msg, &e)
	f.mu.Lock()
	block := f.blockAfter > 0 && len(f.written)+len(f.queued) >= f.blockAfter
	if !block {
		f.queued = append(f.queued, e.Sequence)
	}
	f.mu.Unlock()
	if block {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.closed:
			return errors.New("use of closed connection")
		}
	}
	return nil
}

func (f *testTransport) Ping(context.Context) error { return nil }

func (f *testTransport) Close(code int, _ string) {
	f.closeOnce.Do(func() {
		f.closeCode.Store(int64(code))
		close(f.closed)
	})
}

func (f *testTransport) seqs() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.written...)
}

func (f *testTransport) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.written)
}

func (f *testTransport) isClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

// recPresence records presence changes.
type recPresence struct {
	mu     sync.Mutex
	events []string
}

func (p *recPresence) Online(_ context.Context, h string) {
	p.mu.Lock()
	p.events = append(p.events, "online "+h)
	p.mu.Unlock()
}

func (p *recPresence) Offline(_ context.Context, h string) {
	p.mu.Lock()
	p.events = append(p.events, "offline "+h)
	p.mu.Unlock()
}

func (p *recPresence) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.events...)
}

func hubWith(t testing.TB, st Store, presence Presence, tune func(*Config)) *Hub {
	cfg := DefaultConfig()
	cfg.ConfirmInterval = time.Millisecond
	cfg.CursorFlushInterval = 10 * time.Millisecond
	if tune != nil {
		tune(&cfg)
	}
	h := New(cfg, st, presence, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(h.Close)
	return h
}

func attachStart(t testing.TB, h *Hub, handle string, tr Transport) *Conn {
	t.Helper()
	c, err := h.Attach(context.Background(), handle, tr)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	return c
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// TestOrderingAcrossRacingPublishers: commits sequenced in one order and
// published by racing goroutines in another reach a connection in sequence
// order, each once, whether the ring serves them or (a tiny ring) the store.
func TestOrderingAcrossRacingPublishers(t *testing.T) {
	for _, ring := range []int{256, 4} {
		t.Run(fmt.Sprintf("ring=%d", ring), func(t *testing.T) {
			st := newLogStore()
			st.setView("sess_1", joined("@a.b"))
			h := hubWith(t, st, nil, func(c *Config) { c.RingSize = ring; c.MaxLag = 1 << 20 })
			tr := newTestTransport()
			c := attachStart(t, h, "@a.b", tr)
			const publishers, each = 8, 150
			var wg sync.WaitGroup
			for range publishers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						commit := st.add("sess_1", protocol.EventMessage, "@x.y", true)
						runtime.Gosched() // let another publisher overtake this one
						h.Publish(commit)
					}
				}()
			}
			wg.Wait()
			waitFor(t, "every event to be written", func() bool { return tr.count() >= publishers*each })
			if got, want := tr.seqs(), seqRange(1, publishers*each); !slices.Equal(got, want) {
				t.Fatalf("written out of order or twice: %d events, first differences at %d", len(got), firstDiff(got, want))
			}
			if st.viewReads.Load() != 0 {
				t.Fatalf("%d view reads; commits carry the views", st.viewReads.Load())
			}
			c.Close(CloseNormal, "test")
			c.Finish()
		})
	}
}

func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSlowConsumer: a live connection that falls more than MaxLag events
// behind is closed 1008, and so is one whose write outlasts WriteTimeout.
func TestSlowConsumer(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*Config)
		more int
	}{
		{"lag", func(c *Config) { c.MaxLag = 5 }, 10},
		{"write timeout", func(c *Config) { c.WriteTimeout = 50 * time.Millisecond }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newLogStore()
			st.setView("sess_1", joined("@a.b"))
			st.add("sess_1", protocol.EventMessage, "@x.y", true)
			h := hubWith(t, st, nil, tc.tune)
			tr := newTestTransport()
			tr.blockAfter = 1 // the replay's one event is written, then the peer stops reading
			c := attachStart(t, h, "@a.b", tr)
			waitFor(t, "the replay", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.replayed })
			for range tc.more {
				h.Publish(st.add("sess_1", protocol.EventMessage, "@x.y", true))
			}
			waitFor(t, "the slow consumer to be closed", tr.isClosed)
			if code := tr.closeCode.Load(); code != ClosePolicy {
				t.Fatalf("closed with %d, want %d", code, ClosePolicy)
			}
			c.Finish()
			if n := h.Stats().SlowConsumers.Load(); n != 1 {
				t.Fatalf("%d slow consumers counted, want 1", n)
			}
			if h.Connections() != 0 {
				t.Fatalf("%d connections left after Finish", h.Connections())
			}
		})
	}
}

// TestJoinRestartsAtOne: an invitee's connection writes its invitation;
// its join replays the transcript from 1, then live events follow. Where
// the commits carry the views, the hub reads none from the store; where
// they do not, it reads them, with the same result. A pull that runs behind
// a newer view (join and leave published at once) stops at the horizon,
// and a block-silent leave writes nothing.
func TestJoinRestartsAtOne(t *testing.T) {
	for _, carry := range []bool{true, false} {
		t.Run(fmt.Sprintf("carry=%v", carry), func(t *testing.T) {
			st := newLogStore()
			const sid, a, o = "sess_1", "@a.b", "@o.p"
			st.setView(sid, joined(o))
			st.add(sid, protocol.EventMessage, o, carry) // 1
			st.add(sid, protocol.EventMessage, o, carry) // 2
			st.setView(sid, visibility.View{Handle: a, Status: protocol.StatusInvited})
			st.add(sid, protocol.EventInvited, a, carry) // 3
			h := hubWith(t, st, nil, nil)
			tr := newTestTransport()
			c := attachStart(t, h, a, tr)
			waitFor(t, "the invitation", func() bool { return tr.count() == 1 })
			if got := tr.seqs(); !slices.Equal(got, []int64{3}) {
				t.Fatalf("invitee got %v, want its invitation [3]", got)
			}
			st.setView(sid, joined(a))
			h.Publish(st.add(sid, protocol.EventJoined, a, carry))  // 4
			h.Publish(st.add(sid, protocol.EventMessage, o, carry)) // 5
			want := []int64{3, 1, 2, 3, 4, 5}
			waitFor(t, "the join replay", func() bool { return tr.count() >= len(want) })
			if got := tr.seqs(); !slices.Equal(got, want) {
				t.Fatalf("after the join got %v, want %v", got, want)
			}
			if carry && st.viewReads.Load() != 0 {
				t.Fatalf("%d view reads although the commits carried the views", st.viewReads.Load())
			}
			if !carry && st.viewReads.Load() == 0 {
				t.Fatal("no view read although no commit carried a view")
			}

			// A leave at 6 (horizon 6) and two messages past it, published
			// newest first: the writer hears of the newest view before it
			// reaches the leave, and still stops at the horizon.
			st.setView(sid, visibility.View{Handle: a, Status: protocol.StatusLeft, VisibleThrough: 6})
			c6 := st.add(sid, protocol.EventLeft, a, carry) // 6
			c7 := st.add(sid, protocol.EventMessage, o, carry)
			c8 := st.add(sid, protocol.EventMessage, o, carry)
			for _, c := range []*store.Commit{c8, c7, c6} {
				h.Publish(c)
			}
			want = append(want, 6)
			waitFor(t, "the leave", func() bool { return tr.count() >= len(want) })
			time.Sleep(20 * time.Millisecond) // nothing past the horizon may follow
			if got := tr.seqs(); !slices.Equal(got, want) {
				t.Fatalf("after the leave got %v, want %v", got, want)
			}

			// Silent leave: a second agent, joined from the start, blocked at 9.
			b := "@b.c"
			st.setView(sid, joined(b))
			trb := newTestTransport()
			cb := attachStart(t, h, b, trb)
			waitFor(t, "b's replay", func() bool { return trb.count() == 8 })
			st.setView(sid, visibility.View{Handle: b, Status: protocol.StatusLeft, VisibleThrough: 8})
			h.Publish(st.add(sid, protocol.EventLeft, b, carry)) // 9, silent
			h.Publish(st.add(sid, protocol.EventMessage, o, carry))
			time.Sleep(30 * time.Millisecond)
			if got := trb.seqs(); !slices.Equal(got, seqRange(1, 8)) {
				t.Fatalf("blocked agent got %v, want 1..8 and not its own session.left", got)
			}
			for _, cc := range []*Conn{c, cb} {
				cc.Close(CloseNormal, "test")
				cc.Finish()
			}
		})
	}
}

// autoPong answers every ping of tr with err until the test ends.
func autoPong(t *testing.T, tr *fakeTransport, err error) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case a := <-tr.pings:
				a <- err
			case <-stop:
				return
			}
		}
	}()
}

// TestFloorOfDroppedConnection: when one of an agent's connections drops
// with less confirmed than another, the agent's cursor stays at the dropped
// one's position, although the survivor confirms more, until a connection
// opened later has caught up past it.
func TestFloorOfDroppedConnection(t *testing.T) {
	st := newLogStore()
	messages(st, "sess_1", 10)
	h := testHub(t, st)
	tr1, tr2 := newFakeTransport(), newFakeTransport()
	c1 := attachStart(t, h, "@a.b", tr1)
	c2 := attachStart(t, h, "@a.b", tr2)
	autoPong(t, tr1, context.DeadlineExceeded) // c1's peer never confirms
	autoPong(t, tr2, nil)
	waitFor(t, "both replays", func() bool { return tr1.count() == 10 && tr2.count() == 10 })
	waitFor(t, "c2 to confirm", func() bool { p, _, _ := c2.position("sess_1"); return p == 10 })
	c1.Close(CloseGoingAway, "dropped")
	c1.Finish()

	h.Publish(messages(st, "sess_1", 2))
	waitFor(t, "c2 to confirm the live events", func() bool { p, _, _ := c2.position("sess_1"); return p == 12 })
	h.flushCursors()
	if got := st.cursor("@a.b", "sess_1"); got != 0 {
		t.Fatalf("cursor %d while the dropped connection's floor is 0", got)
	}

	// A reconnect replays from the floor and, once it has caught up,
	// releases it.
	tr3 := newFakeTransport()
	autoPong(t, tr3, nil)
	c3 := attachStart(t, h, "@a.b", tr3)
	waitFor(t, "the reconnect's replay", func() bool { return tr3.count() == 12 })
	waitFor(t, "the cursor to pass the floor", func() bool { h.flushCursors(); return st.cursor("@a.b", "sess_1") == 12 })
	h.mu.Lock()
	floors := len(h.floors["@a.b"])
	h.mu.Unlock()
	if floors != 0 {
		t.Fatalf("%d floors left after a later connection caught up", floors)
	}
	for _, c := range []*Conn{c2, c3} {
		c.Close(CloseNormal, "test")
		c.Finish()
	}
}

// TestCursorFlushBatching: cursors advanced in several sessions are saved
// in one sorted batch per flush; a flush with nothing new writes nothing;
// a failed save is retried by the next flush.
func TestCursorFlushBatching(t *testing.T) {
	st := newLogStore()
	for _, sid := range []string{"sess_3", "sess_1", "sess_2"} {
		st.setView(sid, joined("@a.b"))
		st.add(sid, protocol.EventMessage, "@x.y", true)
		st.add(sid, protocol.EventMessage, "@x.y", true)
	}
	h := hubWith(t, st, nil, func(c *Config) { c.CursorFlushInterval = time.Hour })
	tr := newTestTransport()
	c := attachStart(t, h, "@a.b", tr)
	confirmed := func(sid string, want int64) func() bool {
		return func() bool { p, _, _ := c.position(sid); return p == want }
	}
	for _, sid := range []string{"sess_1", "sess_2", "sess_3"} {
		waitFor(t, "confirmation of "+sid, confirmed(sid, 2))
	}
	h.flushCursors()
	if n := st.saveCount(); n != 1 {
		t.Fatalf("%d SaveCursors calls for one flush, want 1", n)
	}
	want := []visibility.Cursor{{Handle: "@a.b", SessionID: "sess_1", Seq: 2}, {Handle: "@a.b", SessionID: "sess_2", Seq: 2}, {Handle: "@a.b", SessionID: "sess_3", Seq: 2}}
	if got := st.saves[0]; !slices.Equal(got, want) {
		t.Fatalf("batch %v, want %v", got, want)
	}
	h.flushCursors()
	if n := st.saveCount(); n != 1 {
		t.Fatalf("a flush with nothing advanced saved (%d calls)", n)
	}

	st.mu.Lock()
	st.failSave = true
	st.mu.Unlock()
	h.Publish(st.add("sess_2", protocol.EventMessage, "@x.y", true))
	waitFor(t, "the live event's confirmation", confirmed("sess_2", 3))
	h.flushCursors() // fails
	st.mu.Lock()
	st.failSave = false
	st.mu.Unlock()
	h.flushCursors()
	if got := st.cursor("@a.b", "sess_2"); got != 3 {
		t.Fatalf("cursor %d after the failed save was retried, want 3", got)
	}
	if n := st.saveCount(); n != 2 {
		t.Fatalf("%d successful saves, want 2", n)
	}
	c.Close(CloseNormal, "test")
	c.Finish()
}

// TestDisconnect: Disconnect closes every connection of one agent with the
// given code, and no other agent's; presence hears of the agent's first
// connection and its last, once each.
func TestDisconnect(t *testing.T) {
	st := newLogStore()
	pr := &recPresence{}
	h := hubWith(t, st, pr, nil)
	tr1, tr2, tr3 := newTestTransport(), newTestTransport(), newTestTransport()
	c1 := attachStart(t, h, "@a.b", tr1)
	c2 := attachStart(t, h, "@a.b", tr2)
	c3 := attachStart(t, h, "@c.d", tr3)
	if h.Connections() != 3 || h.Agents() != 2 || !h.Online("@a.b") {
		t.Fatalf("connections %d, agents %d", h.Connections(), h.Agents())
	}
	h.Disconnect("@a.b", CloseUnauthorized, "token revoked")
	for i, tr := range []*testTransport{tr1, tr2} {
		if !tr.isClosed() || tr.closeCode.Load() != CloseUnauthorized {
			t.Fatalf("connection %d of the agent: closed %v with %d", i+1, tr.isClosed(), tr.closeCode.Load())
		}
	}
	if tr3.isClosed() {
		t.Fatal("another agent's connection was closed")
	}
	c1.Finish()
	c2.Finish()
	if h.Online("@a.b") || h.Connections() != 1 {
		t.Fatalf("after Disconnect: online %v, %d connections", h.Online("@a.b"), h.Connections())
	}
	want := []string{"online @a.b", "online @c.d", "offline @a.b"}
	if got := pr.list(); !slices.Equal(got, want) {
		t.Fatalf("presence %v, want %v", got, want)
	}
	if c1.closedBecause() != "token revoked" {
		t.Fatalf("close reason %q", c1.closedBecause())
	}
	c3.Close(CloseNormal, "test")
	c3.Finish()
}

// countTransport counts writes; pings are answered at once.
type countTransport struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (f *countTransport) Write(context.Context, []byte) error {
	if f.n.Add(1) == f.want {
		close(f.done)
	}
	return nil
}
func (f *countTransport) Flush(time.Time) error      { return nil }
func (f *countTransport) Ping(context.Context) error { return nil }
func (f *countTransport) Close(int, string)          {}

// joinedAgents returns n handles and their joined views.
func joinedAgents(n int) ([]string, []visibility.View) {
	handles := make([]string, n)
	views := make([]visibility.View, n)
	for i := range handles {
		handles[i] = fmt.Sprintf("@a%03d.b", i)
		views[i] = joined(handles[i])
	}
	return handles, views
}

// attachLive attaches a connection that starts live, at the head: no replay
// to wait for.
func attachLive(b *testing.B, h *Hub, handle string, tr Transport) *Conn {
	c, err := h.Attach(context.Background(), handle, tr)
	if err != nil {
		b.Fatal(err)
	}
	c.mu.Lock()
	c.started, c.replayed = true, true
	c.mu.Unlock()
	return c
}

// BenchmarkFanOut: one session, N connections (one agent each), M events
// published one commit at a time; reports delivered events per second.
func BenchmarkFanOut(b *testing.B) {
	const m = 1000
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			st := newLogStore()
			handles, views := joinedAgents(n)
			body := []byte(`{"type":"session.message","session_id":"sess_1","sequence":1}`)
			h := hubWith(b, st, nil, func(c *Config) { c.RingSize = 4096; c.MaxLag = 1 << 30; c.CursorFlushInterval = time.Hour })
			seq := int64(0)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				st.mu.Lock() // connections start live, at the head
				for _, hd := range handles {
					st.cursors[hd+"/sess_1"] = seq
				}
				st.mu.Unlock()
				trs := make([]*countTransport, n)
				conns := make([]*Conn, n)
				for i := range trs {
					trs[i] = &countTransport{want: m, done: make(chan struct{})}
					conns[i] = attachLive(b, h, handles[i], trs[i])
				}
				b.StartTimer()
				for range m {
					seq++
					e := store.StoredEvent{SessionID: "sess_1", Sequence: seq, Type: protocol.EventMessage, Body: body}
					h.Publish(&store.Commit{SessionID: "sess_1", Events: []store.StoredEvent{e}, Recipients: handles, Views: views})
				}
				for _, tr := range trs {
					<-tr.done
				}
				b.StopTimer()
				for _, c := range conns {
					c.Close(CloseNormal, "bench")
					c.Finish()
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(int64(b.N)*m*int64(n))/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// TestPullPastTheCarriedView: a writer that reads past the announced head
// from the store (here after a join restart) meets a membership event newer
// than the view the commit carried; it must take the store's view there,
// not the carried one, or it would show the agent what followed its leave.
func TestPullPastTheCarriedView(t *testing.T) {
	st := newLogStore()
	const sid, a, o = "sess_1", "@a.b", "@o.p"
	st.setView(sid, joined(o))
	st.add(sid, protocol.EventMessage, o, true) // 1
	st.add(sid, protocol.EventMessage, o, true) // 2
	st.setView(sid, visibility.View{Handle: a, Status: protocol.StatusInvited})
	st.add(sid, protocol.EventInvited, a, true) // 3
	h := hubWith(t, st, nil, func(c *Config) { c.RingSize = 1 })
	tr := newTestTransport()
	c := attachStart(t, h, a, tr)
	waitFor(t, "the invitation", func() bool { return tr.count() == 1 })

	st.setView(sid, joined(a))
	c4 := st.add(sid, protocol.EventJoined, a, true) // 4: carries a's view, joined
	st.setView(sid, visibility.View{Handle: a, Status: protocol.StatusLeft, VisibleThrough: 5})
	c5 := st.add(sid, protocol.EventLeft, a, true)    // 5: committed, not yet published
	c6 := st.add(sid, protocol.EventMessage, o, true) // 6: past a's horizon
	h.Publish(c4)
	want := []int64{3, 1, 2, 3, 4, 5}
	waitFor(t, "the join replay", func() bool { return tr.count() >= len(want) })
	h.Publish(c5)
	h.Publish(c6)
	time.Sleep(30 * time.Millisecond)
	if got := tr.seqs(); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v (nothing past the leave at 5)", got, want)
	}
	if n := st.viewReads.Load(); n != 1 {
		t.Fatalf("%d view reads, want 1 (the leave, past the carried view)", n)
	}
	c.Close(CloseNormal, "test")
	c.Finish()
}

func (f *testTransport) Flush(time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queued) > 0 {
		f.written = append(f.written, f.queued...)
		f.queued = f.queued[:0]
		f.flushes++
	}
	return nil
}

func (f *testTransport) flushCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushes
}

// TestBatchLeavesInOneFlush: events that are ready together leave together:
// a replay of 300 events is one batch and one flush (one write to the
// socket for the WebSocket transport, see server's TestWSBatchOneWrite),
// not 300. Past flushBytes a batch is flushed in parts, so a catch-up does
// not sit whole in memory.
func TestBatchLeavesInOneFlush(t *testing.T) {
	for _, tc := range []struct {
		name        string
		events, pad int
	}{
		{"small", 300, 0},
		{"past flushBytes", 300, 1 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newLogStore()
			st.setView("sess_1", joined("@a.b"))
			for range tc.events {
				st.add("sess_1", protocol.EventMessage, "@x.y", true)
				if tc.pad > 0 { // pad the body just logged
					e := &st.events["sess_1"][len(st.events["sess_1"])-1]
					e.Body = append(e.Body[:len(e.Body)-1], `,"pad":"`+strings.Repeat("x", tc.pad)+`"}`...)
				}
			}
			total := 0
			for _, e := range st.events["sess_1"] {
				total += len(e.Body)
			}
			h := hubWith(t, st, nil, nil)
			tr := newTestTransport()
			c := attachStart(t, h, "@a.b", tr)
			waitFor(t, "the replay", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.replayed })
			if got, want := tr.seqs(), seqRange(1, int64(tc.events)); !slices.Equal(got, want) {
				t.Fatalf("wrote %d events, want %d in order", len(got), len(want))
			}
			// One flush per flushBytes, and one for the rest.
			if n, want := tr.flushCount(), total/flushBytes; n != want && n != want+1 {
				t.Fatalf("%d flushes for %d events of %d bytes, want %d or %d", n, tc.events, total, want, want+1)
			}
			c.Close(CloseNormal, "test")
			c.Finish()
		})
	}
}

// TestSiblingCannotSkipANewSession: an agent with two connections is
// invited to a new session. One connection's writer is slow to read the
// agent's cursor there; meanwhile the other writes the event, its peer
// confirms it, and cursors are flushed. The slow connection must still
// deliver the event: a sibling's confirmation may not move the agent's
// cursor past what a connection that was already announced the session has
// not placed yet (it would read the moved cursor and skip the event). Once
// it has, the cursor moves.
func TestSiblingCannotSkipANewSession(t *testing.T) {
	st := newLogStore()
	h := hubWith(t, st, nil, nil)
	t1, t2 := newTestTransport(), newTestTransport()
	c1, c2 := attachReplayed(t, h, "@b", t1), attachReplayed(t, h, "@b", t2)

	// The first writer to read the cursor waits until a flush saved the
	// sibling's confirmation, or 300 ms (the hold keeps the flush back).
	var first atomic.Bool
	st.onCursor = func(_, _ string) error {
		if first.CompareAndSwap(false, true) {
			deadline := time.Now().Add(300 * time.Millisecond)
			for time.Now().Before(deadline) && st.cursor("@b", "s") == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	}
	inviteB(st, h)
	for i, tr := range []*testTransport{t1, t2} {
		waitFor(t, fmt.Sprintf("connection %d has the invitation", i+1), func() bool { return tr.count() == 1 })
	}
	waitFor(t, "the cursor to follow both connections", func() bool { return st.cursor("@b", "s") == 1 })
	for _, c := range []*Conn{c1, c2} {
		c.Close(CloseNormal, "done")
		c.Finish()
	}
}

// TestSiblingHoldEndsWithTheConnection: a connection that fails before it
// has placed a new session (its cursor read fails) stops holding the
// agent's cursor there when it is detached: the sibling's confirmation is
// flushed.
func TestSiblingHoldEndsWithTheConnection(t *testing.T) {
	st := newLogStore()
	h := hubWith(t, st, nil, nil)
	t1, t2 := newTestTransport(), newTestTransport()
	c1, c2 := attachReplayed(t, h, "@b", t1), attachReplayed(t, h, "@b", t2)

	// The first cursor read waits for the other connection's confirmation,
	// then fails; the second succeeds.
	var first atomic.Bool
	var failed atomic.Pointer[Conn]
	st.onCursor = func(_, _ string) error {
		if !first.CompareAndSwap(false, true) {
			return nil
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, c := range []*Conn{c1, c2} {
				if p, ok, _ := c.position("s"); ok && p == 1 {
					failed.Store(map[*Conn]*Conn{c1: c2, c2: c1}[c])
					return errors.New("store down")
				}
			}
			time.Sleep(time.Millisecond)
		}
		return errors.New("the other connection never confirmed")
	}
	inviteB(st, h)
	waitFor(t, "one connection to fail", func() bool { return failed.Load() != nil })
	c := failed.Load()
	waitFor(t, "it to close", func() bool {
		select {
		case <-c.closed:
			return true
		default:
			return false
		}
	})
	time.Sleep(50 * time.Millisecond) // several flushes: the cursor is held
	if got := st.cursor("@b", "s"); got != 0 {
		t.Fatalf("cursor = %d while a connection was still placing the session, want 0", got)
	}
	c.Finish()
	waitFor(t, "the sibling's confirmation to be flushed", func() bool { return st.cursor("@b", "s") == 1 })
	other := map[*Conn]*Conn{c1: c2, c2: c1}[c]
	other.Close(CloseNormal, "done")
	other.Finish()
}

// attachReplayed attaches and starts a connection and waits for its
// initial replay.
func attachReplayed(t *testing.T, h *Hub, handle string, tr Transport) *Conn {
	t.Helper()
	c := attachStart(t, h, handle, tr)
	waitFor(t, "the replay", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.replayed })
	return c
}

// inviteB commits and publishes @b's invitation to a new session "s".
func inviteB(st *logStore, h *Hub) {
	st.setView("s", visibility.View{Handle: "@b", Status: protocol.StatusInvited, VisibleThrough: visibility.Joined})
	h.Publish(st.add("s", "session.invited", "@b", true))
}
