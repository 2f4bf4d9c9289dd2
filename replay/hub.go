// Package replay delivers committed session events to agents' WebSocket
// connections by replaying each session's log from the connection's
// confirmed position: a connection that reconnects after an outage replays
// what it missed, and live delivery is the same replay keeping up with the
// head.
//
// Publication carries whole commits, but connections do not receive pushed
// events: each connection pulls, per session, everything after what it last
// wrote, from a small in-memory ring of recent events or, when it is further
// behind, from the store. That one mechanism gives strict per-session order
// (racing publishers cannot reorder a pull), replay after an outage (a new
// connection is a writer that starts at its durable cursor) and the join
// replay (a join restarts the joiner's pull at sequence 1).
//
// Files: hub.go (publication, the ring, cursor flushing), lifecycle.go
// (attach, close, detach, presence), writer.go (announcements and the
// writer that pulls and writes), confirm.go (confirmed delivery). LOCKS.md
// lists every mutex and the order they are taken in.
package replay

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/store"
)

// Store is what the hub reads and writes; *store.Store implements it.
type Store interface {
	EventsAfter(ctx context.Context, sessionID string, after int64, limit int) ([]store.StoredEvent, error)
	View(ctx context.Context, sessionID, handle string) (visibility.View, error)
	Cursor(ctx context.Context, handle, sessionID string) (int64, error)
	PendingSessions(ctx context.Context, handle string) ([]store.Pending, error)
	SaveCursors(ctx context.Context, cursors []visibility.Cursor) error
}

// Config bounds the hub's memory and every connection's queue.
type Config struct {
	RingSize            int           // recent events kept in memory per session
	MaxLag              int64         // events a live connection may fall behind before it is cut off
	WriteTimeout        time.Duration // bound on one write to a connection
	CursorFlushInterval time.Duration // how often advanced cursors are persisted, in one batch
	ConfirmInterval     time.Duration // at most one confirmation ping per connection this often
	ReadBatch           int           // events per store read when catching up
	// OnLiveWrite, when set, is called with the time from an event's
	// created_at (stamped in the transaction that committed it) to its write
	// on a connection, for events written from memory, i.e. that arrived by
	// a live publish rather than a catch-up read. For latency metrics.
	OnLiveWrite func(time.Duration)
}

// DefaultConfig is the hub configuration aspd uses unless told otherwise.
func DefaultConfig() Config {
	return Config{RingSize: 256, MaxLag: 4096, WriteTimeout: 10 * time.Second, CursorFlushInterval: 250 * time.Millisecond,
		ConfirmInterval: time.Second, ReadBatch: 500}
}

// Presence is told when an agent's first connection opens and its last one
// closes; the server appends session.reconnected / session.disconnected.
type Presence interface {
	Online(ctx context.Context, handle string)
	Offline(ctx context.Context, handle string)
}

// Hub holds every live connection of this node.
type Hub struct {
	cfg      Config
	st       Store
	presence Presence
	log      *slog.Logger

	mu     sync.Mutex
	agents map[string]map[*Conn]struct{}
	// floors: per agent and session, the position of a connection that
	// dropped while the agent stayed online through others. The agent's
	// cursor stays at or below it until a connection opened later has
	// caught up past it, so the dropped host's reconnect misses nothing.
	floors  map[string]map[string]floor
	closing bool

	ringMu sync.Mutex
	rings  map[string]*ring
	tick   int64

	stats Stats

	presenceLocks sync.Map // handle -> *sync.Mutex: serialises first-open / last-close

	cursorLog failureLog // saving cursors: logged when it starts and stops failing

	done  chan struct{}
	wg    sync.WaitGroup // background goroutine
	conns sync.WaitGroup // attached connections, until detached
}

// New starts a hub. Call Close to stop it.
func New(cfg Config, st Store, presence Presence, log *slog.Logger) *Hub {
	h := &Hub{cfg: cfg, st: st, presence: presence, log: log,
		agents: map[string]map[*Conn]struct{}{}, floors: map[string]map[string]floor{}, rings: map[string]*ring{}, done: make(chan struct{})}
	h.wg.Add(1)
	go h.background()
	return h
}

// Publish hands a committed transaction's events to the ring and wakes the
// connections of every recipient. It never blocks on a connection.
func (h *Hub) Publish(c *store.Commit) {
	if c == nil || len(c.Events) == 0 {
		return
	}
	h.ringMu.Lock()
	r, ok := h.rings[c.SessionID]
	if !ok {
		r = newRing(h.cfg.RingSize)
		h.rings[c.SessionID] = r
	}
	r.insert(c.Events)
	r.used = h.tick
	h.ringMu.Unlock()
	h.stats.Published.Add(int64(len(c.Events)))

	head := c.Events[len(c.Events)-1].Sequence
	h.mu.Lock()
	for i, handle := range c.Recipients {
		var view *visibility.View
		if i < len(c.Views) {
			view = &c.Views[i]
		}
		for conn := range h.agents[handle] {
			conn.notify(c.SessionID, head, view)
		}
	}
	h.mu.Unlock()
}

// Rewritten replaces, in the session's ring, the events the store rewrote
// (a redaction): a connection that pulls them from memory from now on gets
// what the store now holds. Events already written to a connection stay
// written; those not in the ring are read from the store.
func (h *Hub) Rewritten(sessionID string, evs []store.StoredEvent) {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	if r, ok := h.rings[sessionID]; ok {
		for _, e := range evs {
			r.replace(e)
		}
	}
}

// Forget drops a session's ring (its events were purged, or rewritten on
// another node): later pulls read the store.
func (h *Hub) Forget(sessionID string) {
	h.ringMu.Lock()
	delete(h.rings, sessionID)
	h.ringMu.Unlock()
}

// HoldsRing reports whether the hub keeps a ring of the session's recent
// events (published to, neither forgotten nor evicted since). For tests.
func (h *Hub) HoldsRing(sessionID string) bool {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	_, ok := h.rings[sessionID]
	return ok
}

// fromRing returns up to limit events of a session after `after`, from memory.
func (h *Hub) fromRing(sessionID string, after, upto int64, limit int) ([]store.StoredEvent, bool) {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	r, ok := h.rings[sessionID]
	if !ok {
		return nil, true
	}
	r.used = h.tick
	return r.after(after, upto, limit)
}

func (h *Hub) presenceLock(handle string) *sync.Mutex {
	m, _ := h.presenceLocks.LoadOrStore(handle, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// Online reports whether handle has at least one live connection here.
func (h *Hub) Online(handle string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.agents[handle]) > 0
}

// Stats are the hub's running counters, for /metrics.
type Stats struct {
	Published     atomic.Int64 // events handed to the hub
	Delivered     atomic.Int64 // events written to connections
	Confirms      atomic.Int64 // pongs that confirmed what was written before their ping
	Acks          atomic.Int64 // explicit acknowledgements received
	StoreReads    atomic.Int64 // catch-up reads that missed the ring
	SlowConsumers atomic.Int64 // connections closed as too slow
	Connects      atomic.Int64 // connections attached
}

// Stats returns the hub's counters.
func (h *Hub) Stats() *Stats { return &h.stats }

// Agents returns the number of agents with at least one live connection.
func (h *Hub) Agents() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.agents)
}

// Connections returns the number of live connections.
func (h *Hub) Connections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, cs := range h.agents {
		n += len(cs)
	}
	return n
}

// Disconnect closes every connection of handle (token rotated or revoked,
// agent deleted) with the given close code and reason.
func (h *Hub) Disconnect(handle string, code int, reason string) {
	h.mu.Lock()
	var conns []*Conn
	for c := range h.agents[handle] {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.Close(code, reason)
	}
}

// Close closes every connection with 1001 (going away), flushes cursors and
// stops the hub. Presence is not changed: the next start-up's presence
// recovery gives every agent that was online a fresh grace window.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closing = true
	var conns []*Conn
	for _, cs := range h.agents {
		for c := range cs {
			conns = append(conns, c)
		}
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.Close(CloseGoingAway, "server shutting down")
	}
	// Wait (bounded) for every connection to detach and save its cursors.
	waited := make(chan struct{})
	go func() { h.conns.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		h.log.Warn("shutdown: some connections did not detach within 5s")
	}
	close(h.done)
	h.wg.Wait()
	h.flushCursors()
}

func (h *Hub) background() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.CursorFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
			h.flushCursors()
			h.evictRings()
		}
	}
}

// evictRings drops rings of sessions idle for a while (about 2 minutes).
func (h *Hub) evictRings() {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	h.tick++
	idle := int64(2*time.Minute/h.cfg.CursorFlushInterval) + 1
	for id, r := range h.rings {
		if h.tick-r.used > idle {
			delete(h.rings, id)
		}
	}
}

// flushCursors persists, in one batch, every cursor that advanced since the
// last flush. An agent's cursor in a session is the lowest position among
// its live connections that carry that session, so no connection of the
// agent is ever ahead of the durable cursor's promise.
func (h *Hub) flushCursors() {
	h.mu.Lock()
	var out []visibility.Cursor
	for handle, conns := range h.agents {
		out = append(out, collectCursors(handle, conns, h.floors[handle])...)
	}
	h.mu.Unlock()
	h.saveCursors(out)
}

func (h *Hub) saveCursors(cs []visibility.Cursor) {
	if len(cs) == 0 {
		return
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Handle != cs[j].Handle {
			return cs[i].Handle < cs[j].Handle
		}
		return cs[i].SessionID < cs[j].SessionID
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := h.st.SaveCursors(ctx, cs)
	h.cursorLog.record(h.log, err, len(cs))
	if err != nil {
		// Put them back so the next flush retries them.
		h.mu.Lock()
		for _, c := range cs {
			for conn := range h.agents[c.Handle] {
				conn.markPosDirty(c.SessionID)
			}
		}
		h.mu.Unlock()
	}
}

// floor is a dropped connection's position in one session.
type floor struct {
	seq int64
	at  time.Time
}

// collectCursors computes the agent's advanced cursors: per session, the
// lowest position among its live connections and its floors. A floor is
// dropped once a connection opened after it has reached it. A session that
// one of the connections is still placing (Conn.placing) is left out: its
// cursor waits for that connection. Called with h.mu held.
func collectCursors(handle string, conns map[*Conn]struct{}, floors map[string]floor) []visibility.Cursor {
	dirty := map[string]bool{}
	for c := range conns {
		c.takeDirtyPositions(dirty)
	}
	out := make([]visibility.Cursor, 0, len(dirty))
sessions:
	for sid := range dirty {
		low := int64(-1)
		for c := range conns {
			p, ok, placing := c.position(sid)
			if placing {
				// Held until that connection has set up its position
				// there; it marks the session for the next flush then.
				continue sessions
			}
			if ok && (low < 0 || p < low) {
				low = p
			}
		}
		if f, ok := floors[sid]; ok {
			for c := range conns {
				if p, ok, _ := c.position(sid); ok && c.opened.After(f.at) && p >= f.seq {
					delete(floors, sid) // a later connection caught up
					break
				}
			}
			if f, ok := floors[sid]; ok && (low < 0 || f.seq < low) {
				low = f.seq
			}
		}
		if low >= 0 {
			out = append(out, visibility.Cursor{Handle: handle, SessionID: sid, Seq: low})
		}
	}
	return out
}

// failureLog logs a periodic operation that fails on every round (saving
// cursors, every flush, while the store is down) once when it starts
// failing and once when it works again, with the count of failed rounds
// and how long it lasted: not once per round.
type failureLog struct {
	mu     sync.Mutex
	since  time.Time // zero while it works
	failed int
}

func (f *failureLog) record(log *slog.Logger, err error, count int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err != nil && f.since.IsZero():
		f.since, f.failed = time.Now(), 1
		level := slog.LevelError // a bug, unless the store is in an outage (which it logs itself)
		if store.IsUnavailable(err) {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "saving cursors failed; they are kept and retried at every flush, logged again when it works", "count", count, "err", err)
	case err != nil:
		f.failed++
	case !f.since.IsZero():
		log.Info("saving cursors works again", "failed_flushes", f.failed, "duration", time.Since(f.since).Round(time.Millisecond))
		f.since, f.failed = time.Time{}, 0
	}
}

// ConnectionsOf returns the number of handle's live connections here.
func (h *Hub) ConnectionsOf(handle string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.agents[handle])
}
