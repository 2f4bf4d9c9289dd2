package replay

import (
	"context"
	"errors"
	"time"
)

// Connection lifecycle: Attach registers a connection (and tells presence
// of an agent's first), Start begins delivery, Close closes from anywhere,
// Finish waits for the writer and detaches (cursors saved, floors kept for
// the agent's other connections, presence told of its last). See LOCKS.md
// for the order the locks are taken in.

// Attach registers a new connection of handle. If it is the agent's first,
// presence is told first, so the reconnect events are part of the replay.
func (h *Hub) Attach(ctx context.Context, handle string, tr Transport) (*Conn, error) {
	c := &Conn{hub: h, handle: handle, tr: tr, opened: time.Now(),
		dirty: map[string]announce{}, pos: map[string]*position{}, posDirty: map[string]bool{},
		closed: make(chan struct{}), sessions: map[string]*connSession{}}
	c.ctx, c.cancel = context.WithCancel(ctx)
	// The write timeout is one timer per connection, armed around each
	// write (see write): no timer or context per event. Firing cancels the
	// connection's context, which aborts the blocked write.
	c.writeTimer = time.AfterFunc(time.Hour, c.cancel)
	c.writeTimer.Stop()
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
		held := make([]string, 0, len(c.placing))
		for sid := range c.placing {
			held = append(held, sid)
		}
		c.mu.Unlock()
		// The sessions this connection held back (collectCursors) are no
		// longer held: flush them with the next round.
		for other := range conns {
			for _, sid := range held {
				other.markPosDirty(sid)
			}
			break
		}
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
	c.writeTimer.Stop()
	c.cancel()
	c.hub.detach(c, c.closedBecause())
}
