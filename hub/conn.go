package hub

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// WebSocket close codes aspd uses (docs/api.md, docs/delivery.md).
const (
	CloseNormal       = 1000
	CloseGoingAway    = 1001 // server shutting down
	ClosePolicy       = 1008 // slow consumer
	CloseInternal     = 1011 // server-side failure; reconnect
	CloseUnauthorized = 4001 // token rotated or revoked, agent deleted
)

// Transport is one live connection's outbound side.
type Transport interface {
	// Write sends one event; it must respect ctx's deadline.
	Write(ctx context.Context, msg []byte) error
	// Ping sends a ping after everything written so far and waits for the
	// peer's pong, within ctx. Peers answer pings in the order they read
	// frames, so a pong confirms every frame written before its ping.
	Ping(ctx context.Context) error
	// Close closes the connection with a WebSocket close code and reason.
	Close(code int, reason string)
}

// Conn is one live connection of an agent. Its writer goroutine (Run) is
// the only one that writes to the transport.
type Conn struct {
	hub    *Hub
	handle string
	tr     Transport
	opened time.Time

	mu       sync.Mutex
	dirty    map[string]announce  // session -> what was announced and not yet pulled
	pos      map[string]*position // session -> what was written and what the peer confirmed
	posDirty map[string]bool      // sessions whose confirmed position moved since the last cursor flush
	replayed bool                 // the initial replay is done; lag limits apply from then on
	acking   bool                 // the peer sent an ack: from now on only acks confirm (see Ack)

	// Confirmation pings (see requestConfirmLocked): at most one scheduled or
	// in flight per connection, at most one per ConfirmInterval.
	confirming   bool
	confirmAgain bool        // more was written while a ping was in flight
	confirmTimer *time.Timer // the scheduled ping, stopped by Finish
	lastPing     time.Time

	// The writer goroutine exists only while there is work: notify starts
	// one if none runs, and it exits when nothing announced remains. An idle
	// connection therefore holds no writer goroutine (only its reader).
	started   bool           // Start was called; writers may run
	running   bool           // a writer goroutine is active
	done      bool           // Finish was called; no writer may start
	writers   sync.WaitGroup // the active writer, for Finish
	ctx       context.Context
	start     time.Time
	closed    chan struct{}
	closeOnce sync.Once
	closeWhy  string // reason given by the Close that closed it (under mu)

	// Writer-owned state.
	sessions  map[string]*connSession
	delivered atomic.Int64 // events written; writers hand over, so atomic
}

// announce is what notify recorded for a session and no writer pulled yet:
// the head, and the agent's view as of viewAt, carried by the commit that
// announced it (viewAt 0: none carried). A view carried at viewAt reflects
// every membership change up to viewAt, so a writer meeting a membership
// event at or below viewAt takes it instead of reading the store.
type announce struct {
	head   int64
	view   replay.View
	viewAt int64
}

// viewAsOf returns the carried view if it is valid at seq (reflects every
// change up to seq).
func (a *announce) viewAsOf(seq int64) (replay.View, bool) {
	return a.view, a.viewAt > 0 && a.viewAt >= seq
}

type connSession struct {
	view    replay.View
	sent    int64
	resetAt int64 // sequence of the own session.joined that last restarted the pull
	// fromStart: this pull began at sequence 0 with the agent joined and it
	// has stayed joined, so every event from 1 on was written: a join
	// restart would only repeat them (an agent that joined while offline).
	fromStart bool
}

func newConnSession(v replay.View, cursor int64) *connSession {
	return &connSession{view: v, sent: cursor, fromStart: cursor == 0 && v.VisibleThrough == replay.Joined}
}

// position is a connection's delivery state in one session, shared between
// its writer (which advances written) and whoever confirms (the pong of a
// confirmation ping, or the peer's ack), under Conn.mu.
//
// The agent's durable cursor follows confirmed, never written: a write that
// returned has only reached the kernel's send buffer, and a peer that stops
// reading or drops abruptly never received what sat there.
type position struct {
	session   string
	written   int64  // every event up to here was written to the transport, or was not visible
	shown     int64  // sequence of the last visible event written
	confirmed int64  // the peer confirmed everything up to here
	gen       uint32 // bumped when a join restarts the pull; older confirmations are void
	ackFrom   int64  // after a join restart: acks below the join do not count (they may predate it)
	acked     int64  // highest ack of this pass; applied as far as written allows
	pending   bool   // written moved past what the last confirmation ping covered
}

func newPosition(sessionID string, cursor int64) *position {
	return &position{session: sessionID, written: cursor, shown: cursor, confirmed: cursor}
}

// Attach registers a new connection of handle. If it is the agent's first,
// presence is told first, so the reconnect events are part of the replay.
func (h *Hub) Attach(ctx context.Context, handle string, tr Transport) (*Conn, error) {
	c := &Conn{hub: h, handle: handle, tr: tr, opened: time.Now(),
		dirty: map[string]announce{}, pos: map[string]*position{}, posDirty: map[string]bool{},
		ctx: ctx, closed: make(chan struct{}), sessions: map[string]*connSession{}}
	lock := h.presenceLock(handle)
	lock.Lock()
	defer lock.Unlock()
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return nil, errors.New("hub: shutting down")
	}
	first := len(h.agents[handle]) == 0
	if first {
		h.agents[handle] = map[*Conn]struct{}{}
	}
	h.agents[handle][c] = struct{}{}
	h.conns.Add(1)
	h.stats.Connects.Add(1)
	total := len(h.agents[handle])
	h.mu.Unlock()
	if first && h.presence != nil {
		h.presence.Online(ctx, handle)
	}
	h.log.Info("connected", "agent", handle, "connections", total, "first", first)
	return c, nil
}

func (h *Hub) detach(c *Conn, reason string) {
	defer h.conns.Done()
	lock := h.presenceLock(c.handle)
	lock.Lock()
	defer lock.Unlock()
	h.mu.Lock()
	conns := h.agents[c.handle]
	// Persist what this connection delivered before it stops counting.
	cursors := collectCursors(c.handle, conns, h.floors[c.handle])
	delete(conns, c)
	last := len(conns) == 0
	if last {
		// Offline: the cursors just saved are at or below every floor.
		delete(h.agents, c.handle)
		delete(h.floors, c.handle)
	} else {
		// The agent stays online: keep this connection's positions under
		// the agent's cursor until a later connection has caught up.
		fl := h.floors[c.handle]
		if fl == nil {
			fl = map[string]floor{}
			h.floors[c.handle] = fl
		}
		now := time.Now()
		c.mu.Lock()
		for sid, p := range c.pos {
			if f, ok := fl[sid]; !ok || p.confirmed < f.seq {
				fl[sid] = floor{seq: p.confirmed, at: now}
			}
		}
		c.mu.Unlock()
	}
	closing := h.closing
	h.mu.Unlock()
	h.saveCursors(cursors)
	if last && !closing && h.presence != nil {
		h.presence.Offline(context.Background(), c.handle)
	}
	h.log.Info("disconnected", "agent", c.handle, "reason", reason, "last", last,
		"delivered", c.delivered.Load(), "duration", time.Since(c.opened).Round(time.Millisecond))
}

// notify announces that a session has events up to head and, when the
// commit carries it (view non-nil), the agent's view as of head. Called
// with h.mu held.
func (c *Conn) notify(sessionID string, head int64, view *replay.View) {
	c.mu.Lock()
	c.announceLocked(sessionID, head, view)
	// Lag is measured against what was written, not confirmed: the server
	// holds nothing for unconfirmed events (they are re-read on reconnect),
	// while a writer this far behind means a peer that is not reading.
	var behind int64
	if p, known := c.pos[sessionID]; known {
		behind = head - p.written
	}
	lagging := c.replayed && behind > c.hub.cfg.MaxLag
	if !lagging {
		c.kickLocked()
	}
	c.mu.Unlock()
	if lagging {
		go c.cutSlow(sessionID, behind)
	}
}

// announceLocked records an announcement for the next pull. Called with
// c.mu held.
func (c *Conn) announceLocked(sessionID string, head int64, view *replay.View) {
	a := c.dirty[sessionID]
	a.head = max(a.head, head)
	if view != nil && head > a.viewAt {
		// Publishers race: keep the view of the newest commit.
		a.view, a.viewAt = *view, head
	}
	c.dirty[sessionID] = a
}

// kickLocked starts a writer goroutine unless one runs. Called with c.mu held.
func (c *Conn) kickLocked() {
	if !c.started || c.running || c.done {
		return
	}
	c.running = true
	c.writers.Add(1)
	go c.write0()
}

func (c *Conn) markPosDirty(sessionID string) {
	c.mu.Lock()
	c.posDirty[sessionID] = true
	c.mu.Unlock()
}

func (c *Conn) takeDirtyPositions(into map[string]bool) {
	c.mu.Lock()
	for sid := range c.posDirty {
		into[sid] = true
	}
	clear(c.posDirty)
	c.mu.Unlock()
}

// position returns the connection's confirmed position in a session.
func (c *Conn) position(sessionID string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pos[sessionID]
	if !ok {
		return 0, false
	}
	return p.confirmed, true
}

// Close closes the connection; safe to call more than once, from anywhere.
func (c *Conn) Close(code int, reason string) { c.close(code, reason) }

// close closes the connection and reports whether this call did.
func (c *Conn) close(code int, reason string) (first bool) {
	c.closeOnce.Do(func() {
		first = true
		c.mu.Lock()
		c.closeWhy = reason
		c.mu.Unlock()
		close(c.closed)
		c.tr.Close(code, reason)
	})
	return first
}

// cutSlow closes a connection that fell more than MaxLag events behind.
// It is logged here: the writer may stay blocked on the peer for up to the
// write timeout before the connection is detached.
func (c *Conn) cutSlow(sessionID string, behind int64) {
	if c.close(ClosePolicy, "slow consumer") {
		c.hub.stats.SlowConsumers.Add(1)
		c.hub.log.Warn("slow consumer: closing connection", "agent", c.handle, "session", sessionID,
			"behind", behind, "max_lag", c.hub.cfg.MaxLag)
	}
}

// closedBecause is the reason the connection was closed with.
func (c *Conn) closedBecause() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeWhy == "" {
		return "closed"
	}
	return c.closeWhy
}

// Start begins delivery: a writer first replays everything the agent
// missed (past its durable cursors), then live events follow as they are
// announced. Call it once, after Attach.
func (c *Conn) Start() {
	c.mu.Lock()
	c.started = true
	c.start = time.Now()
	c.running = true
	c.writers.Add(1)
	c.mu.Unlock()
	go c.replay()
}

// Finish waits for an active writer to stop and detaches the connection
// (cursors saved, presence updated). Call it once, after the connection is
// closed, from the goroutine that owns the connection's lifetime.
func (c *Conn) Finish() {
	c.mu.Lock()
	c.done = true
	if c.confirmTimer != nil {
		c.confirmTimer.Stop()
	}
	c.mu.Unlock()
	c.writers.Wait()
	c.hub.detach(c, c.closedBecause())
}

// replay is the first writer: it loads the sessions with undelivered
// events, then drains like any writer.
func (c *Conn) replay() {
	pending, err := c.hub.st.PendingSessions(c.ctx, c.handle)
	if err != nil {
		c.hub.log.Error("replay: listing pending sessions failed", "agent", c.handle, "err", err)
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		c.writers.Done()
		c.close(CloseInternal, "internal error")
		return
	}
	c.mu.Lock()
	for _, p := range pending {
		c.sessions[p.SessionID] = newConnSession(p.View, p.Cursor)
		c.pos[p.SessionID] = newPosition(p.SessionID, p.Cursor)
		// The view and head come from one read: the view is valid as of
		// LastSeq, like a commit's.
		c.announceLocked(p.SessionID, p.LastSeq, &p.View)
	}
	c.mu.Unlock()
	if c.drain(c.ctx) {
		c.mu.Lock()
		c.replayed = true
		c.mu.Unlock()
		c.hub.log.Info("replay done", "agent", c.handle, "sessions", len(pending), "events", c.delivered.Load(),
			"duration", time.Since(c.start).Round(time.Microsecond))
	}
	c.writers.Done()
}

// write0 is a live writer: it drains and exits.
func (c *Conn) write0() {
	defer c.writers.Done()
	c.drain(c.ctx)
}

// fail closes the connection after a failed pull and records why.
func (c *Conn) fail(err error) {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		c.hub.stats.SlowConsumers.Add(1)
		c.close(ClosePolicy, "slow consumer")
		// The true cause, whoever noticed the broken socket first.
		c.mu.Lock()
		c.closeWhy = "slow consumer (write timeout)"
		c.mu.Unlock()
	case errors.Is(err, errClosed):
	default:
		c.hub.log.Error("delivery failed", "agent", c.handle, "err", err)
		c.close(CloseInternal, "internal error")
	}
}

var errClosed = errors.New("hub: connection closed")

// drain pulls every announced session until nothing announced remains.
//
// It is the body of every writer goroutine: when it finds nothing left it
// clears running under the same lock notify uses, so an announcement is
// either seen by this writer or starts a new one, never lost. It reports
// whether it stopped for lack of work (true) or because of an error, in
// which case the connection has been closed.
func (c *Conn) drain(ctx context.Context) bool {
	for {
		c.mu.Lock()
		if len(c.dirty) == 0 || c.done {
			c.running = false
			c.mu.Unlock()
			return true
		}
		work := make([]string, 0, len(c.dirty))
		heads := make(map[string]announce, len(c.dirty))
		for sid, a := range c.dirty {
			work = append(work, sid)
			heads[sid] = a
		}
		clear(c.dirty)
		c.mu.Unlock()
		sort.Strings(work)
		for _, sid := range work {
			a := heads[sid]
			if err := c.pull(ctx, sid, &a); err != nil {
				c.fail(err)
				c.mu.Lock()
				c.running = false
				c.mu.Unlock()
				return false
			}
		}
	}
}

// pull writes, in order, every event of a session after what this
// connection last wrote, up to the announced head, that the agent may see.
//
// The agent's view changes only at its own membership events (and at
// session.reopened). The writer re-takes the view when it meets one, so
// that the view it filters with is never older than the point it has
// reached in the log: the view the announcing commit carried when that is
// valid there (viewAt at or past the event), else the store's. A pull that
// runs behind (an older batch from the store or the ring) meets the events
// in order, whatever the commit's view.
func (c *Conn) pull(ctx context.Context, sessionID string, a *announce) error {
	head := a.head
	cs, err := c.session(ctx, sessionID, a)
	if err != nil || cs == nil {
		return err
	}
	for cs.sent < head {
		select {
		case <-c.closed:
			return errClosed
		default:
		}
		batch, fromStore := c.hub.fromRing(sessionID, cs.sent, head, c.hub.cfg.ReadBatch)
		// Everything up to an announced head is committed (a session's
		// appends are serialised by its row lock), so when the ring cannot
		// serve the next event yet, the store can: never wait on a publisher.
		if fromStore || len(batch) == 0 {
			c.hub.stats.StoreReads.Add(1)
			if batch, err = c.hub.st.EventsAfter(ctx, sessionID, cs.sent, c.hub.cfg.ReadBatch); err != nil {
				return err
			}
		}
		if len(batch) == 0 {
			return nil // nothing past sent: head was already delivered
		}
		restarted := false
		var shown int64
		for i := range batch {
			e := &batch[i]
			if isMembership(e) && (e.Subject == c.handle || e.Type == protocol.EventReopened) {
				if v, ok := a.viewAsOf(e.Sequence); ok {
					cs.view = v
				} else if cs.view, err = c.hub.st.View(ctx, sessionID, c.handle); err != nil {
					break
				}
				if cs.view.VisibleThrough != replay.Joined {
					cs.fromStart = false
				}
				if e.Type == protocol.EventJoined && e.Subject == c.handle && e.Sequence > cs.resetAt && !cs.fromStart {
					// A join replays the transcript up to the join: restart at 1.
					cs.resetAt = e.Sequence
					cs.sent = 0
					restarted = true
					break
				}
			}
			if replay.Visible(cs.view, e.Meta()) {
				if err = c.write(ctx, e.Body); err != nil {
					break
				}
				shown = e.Sequence
			}
			cs.sent = e.Sequence
		}
		// Record what was written even when the batch stopped early; it
		// counts for the cursor only once the peer confirms it.
		c.mu.Lock()
		p := c.pos[sessionID]
		if restarted {
			// The join restarts the pull at 1: the transcript before the join
			// is owed again, so the confirmed position drops to 0 and only
			// confirmations of this new pass may raise it.
			p.gen++
			p.confirmed, p.shown, p.ackFrom, p.acked = 0, 0, cs.resetAt, 0
			c.posDirty[sessionID] = true
		}
		p.written = cs.sent
		if shown > 0 && !restarted {
			p.shown = shown
		}
		if c.acking {
			// An ack can overtake the bookkeeping of the batch it acks.
			c.applyAckLocked(p)
		} else if p.written > p.confirmed {
			p.pending = true
			c.requestConfirmLocked()
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if restarted {
			continue
		}
	}
	return nil
}

func isMembership(e *store.StoredEvent) bool {
	switch e.Type {
	case protocol.EventInvited, protocol.EventJoined, protocol.EventLeft, protocol.EventReopened:
		return true
	}
	return false
}

// session returns the writer's state for a session, set up the first time
// with the view the announcement carried (or, when none, the store's) and
// the agent's durable cursor. nil means the agent is not a participant (a
// stale announcement).
func (c *Conn) session(ctx context.Context, sessionID string, a *announce) (*connSession, error) {
	if cs, ok := c.sessions[sessionID]; ok {
		return cs, nil
	}
	v, ok := a.viewAsOf(a.head)
	if !ok {
		var err error
		v, err = c.hub.st.View(ctx, sessionID, c.handle)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	cur, err := c.hub.st.Cursor(ctx, c.handle, sessionID)
	if err != nil {
		return nil, err
	}
	cs := newConnSession(v, cur)
	c.sessions[sessionID] = cs
	c.mu.Lock()
	if _, ok := c.pos[sessionID]; !ok {
		c.pos[sessionID] = newPosition(sessionID, cur)
	}
	c.mu.Unlock()
	return cs, nil
}

func (c *Conn) write(ctx context.Context, body []byte) error {
	wctx, cancel := context.WithTimeout(ctx, c.hub.cfg.WriteTimeout)
	defer cancel()
	if err := c.tr.Write(wctx, body); err != nil {
		// A write that ran out of time is a slow consumer even when the
		// connection is closed by now: the timeout tears the socket down,
		// and the reader may notice that and close the connection first.
		if errors.Is(wctx.Err(), context.DeadlineExceeded) {
			return context.DeadlineExceeded
		}
		select {
		case <-c.closed:
			return errClosed
		default:
		}
		if wctx.Err() != nil {
			return context.DeadlineExceeded
		}
		return err
	}
	c.delivered.Add(1)
	c.hub.stats.Delivered.Add(1)
	return nil
}
