package replay

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/store"
)

// The writer: announcements (notify) mark sessions dirty and start a writer
// goroutine when none runs; the writer drains the dirty sessions, pulling
// each from the ring or the store and writing what the agent may see. It is
// the only code that writes events to the transport.

// notify announces that a session has events up to head and, when the
// commit carries it (view non-nil), the agent's view as of head. Called
// with h.mu held.
func (c *Conn) notify(sessionID string, head int64, view *visibility.View) {
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
func (c *Conn) announceLocked(sessionID string, head int64, view *visibility.View) {
	if _, known := c.pos[sessionID]; !known {
		if c.placing == nil {
			c.placing = map[string]struct{}{}
		}
		c.placing[sessionID] = struct{}{}
	}
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

// replay is the first writer: it loads the sessions with undelivered
// events, then drains like any writer.
func (c *Conn) replay() {
	pending, err := c.hub.st.PendingSessions(c.ctx, c.handle)
	if err != nil {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		c.writers.Done()
		c.closeFailed("replay: listing pending sessions failed", err)
		return
	}
	c.mu.Lock()
	for _, p := range pending {
		c.sessions[p.SessionID] = newConnSession(p.View, p.Cursor)
		c.pos[p.SessionID] = newPosition(p.SessionID, p.Cursor)
		c.placedLocked(p.SessionID)
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
		c.closeFailed("delivery failed", err)
	}
}

// closeFailed closes the connection after the store failed it: 1013 try
// again later when the store cannot serve now (an outage, which the store
// logs once, not once per connection), else 1011 and an ERROR line.
func (c *Conn) closeFailed(msg string, err error) {
	if store.IsUnavailable(err) {
		c.hub.log.Debug(msg, "agent", c.handle, "err", err)
		c.close(CloseTryAgainLater, "try again later")
		return
	}
	c.hub.log.Error(msg, "agent", c.handle, "err", err)
	c.close(CloseInternal, "internal error")
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
// session.reopened). The writer re-takes the view at each one it meets, so
// the view it filters with is never older than the point it has reached in
// the log: the view the announcing commit carried when that commit is at
// or past the event (viewAt >= sequence), else the store's. A pull that
// runs behind, an older batch from the ring or the store, therefore takes
// the carried view; one that reads past the announced head (store batches
// are not cut at the head) and meets a newer membership event reads the
// store, as no commit it has heard of carries that view yet.
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
			fromStore = true
			if batch, err = c.hub.st.EventsAfter(ctx, sessionID, cs.sent, c.hub.cfg.ReadBatch); err != nil {
				return err
			}
		}
		if len(batch) == 0 {
			return nil // nothing past sent: head was already delivered
		}
		restarted := false
		var shown int64
	events:
		for i := range batch {
			e := &batch[i]
			m := e.Meta()
			if cs.walk.Turns(&m) {
				if v, ok := a.viewAsOf(e.Sequence); ok {
					cs.walk.View = v
				} else if cs.walk.View, err = c.hub.st.View(ctx, sessionID, c.handle); err != nil {
					break events
				}
			}
			switch cs.walk.Step(&m) {
			case visibility.Restart:
				// A join replays the transcript up to the join: restart at 1.
				cs.sent = 0
				restarted = true
				break events
			case visibility.Show:
				if err = c.write(ctx, e.Body); err != nil {
					break events
				}
				if !fromStore && c.hub.cfg.OnLiveWrite != nil {
					c.liveAt = append(c.liveAt, e.CreatedAt)
				}
				shown = e.Sequence
			}
			cs.sent = e.Sequence
		}
		// The batch leaves in one write to the socket (or a few, past
		// flushBytes), before its bookkeeping; after a failed store read
		// too, as what was written is owed to the peer either way.
		if ferr := c.flush(); err == nil {
			err = ferr
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
			p.confirmed, p.shown, p.ackFrom, p.acked = 0, 0, cs.walk.ResetAt, 0
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
			c.mu.Lock()
			c.placedLocked(sessionID) // not a participant: nothing to place
			c.mu.Unlock()
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
	c.placedLocked(sessionID)
	c.mu.Unlock()
	return cs, nil
}

// flushBytes is how much the writer queues before it flushes within a
// batch: a catch-up batch (ReadBatch events) does not sit whole in memory.
const flushBytes = 64 << 10

// write writes one event to the transport, which may queue it until flush.
// The batch's first write arms the write timeout: one timer per connection,
// armed once per batch rather than per event, and no context per write
// (they were ~15% of aspd's CPU in the chat benchmark). ctx is c.ctx, which
// the timer cancels.
func (c *Conn) write(ctx context.Context, body []byte) error {
	if c.deadline.IsZero() {
		c.deadline = time.Now().Add(c.hub.cfg.WriteTimeout)
		c.writeTimer.Reset(c.hub.cfg.WriteTimeout)
	}
	err := c.tr.Write(ctx, body)
	if err == nil {
		c.delivered.Add(1)
		c.hub.stats.Delivered.Add(1)
		if c.queued += len(body); c.queued >= flushBytes {
			return c.flush()
		}
		return nil
	}
	// End the batch (the transport may be holding frames other goroutines
	// wrote, such as the close frame of the failure); the connection is
	// failing, so its outcome does not matter.
	_ = c.tr.Flush(c.deadline)
	c.deadline, c.queued, c.liveAt = time.Time{}, 0, c.liveAt[:0]
	return c.writeErr(ctx, err, c.writeTimer.Stop())
}

// flush sends the batch written since the last flush, within the deadline
// its first write set, and disarms the write timeout.
func (c *Conn) flush() error {
	if c.deadline.IsZero() {
		return nil
	}
	err := c.tr.Flush(c.deadline)
	stopped := c.writeTimer.Stop()
	c.deadline, c.queued = time.Time{}, 0
	if err == nil && stopped {
		if f := c.hub.cfg.OnLiveWrite; f != nil {
			now := time.Now()
			for _, at := range c.liveAt {
				f(now.Sub(time.UnixMilli(at)))
			}
		}
	}
	c.liveAt = c.liveAt[:0]
	return c.writeErr(c.ctx, err, stopped)
}

// writeErr classifies the outcome of a write or flush: stopped reports
// whether the write timer was stopped before it fired.
func (c *Conn) writeErr(ctx context.Context, err error, stopped bool) error {
	if !stopped {
		// The timeout fired, and ctx is cancelled: a slow consumer even if
		// the write got through at the last moment, or if the reader
		// noticed the torn-down socket and closed the connection first.
		return context.DeadlineExceeded
	}
	if err == nil {
		return nil
	}
	select {
	case <-c.closed:
		return errClosed
	default:
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
