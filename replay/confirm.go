package replay

import (
	"context"
	"errors"
	"time"
)

// Confirmed delivery. A connection's position in a session advances in two
// steps: the writer records what it wrote (position.written), and only a
// confirmation from the peer moves position.confirmed, which is what the
// agent's durable cursor follows. There are two kinds of confirmation:
//
//   - Pong (every client, nothing to implement): after writing a batch the
//     connection sends a WebSocket ping; peers read frames in order, so the
//     pong confirms everything written before the ping. Pings are per batch,
//     coalesced to at most one in flight and one per ConfirmInterval.
//   - Ack (opt-in): {"type":"ack","session_id":...,"sequence":N} confirms
//     the session up to N. Once a connection has sent any ack, pongs no
//     longer confirm for it: the client has said it wants to decide.

// requestConfirmLocked schedules a confirmation ping for what was written.
// Called with c.mu held, by the writer after each batch.
func (c *Conn) requestConfirmLocked() {
	if c.acking || c.done {
		return
	}
	if c.confirming {
		c.confirmAgain = true
		return
	}
	c.confirming = true
	c.scheduleConfirmLocked()
}

// scheduleConfirmLocked arms the confirmation timer: at once if the last
// ping is older than ConfirmInterval, else when it will be. Called with c.mu
// held and c.confirming set.
func (c *Conn) scheduleConfirmLocked() {
	wait := c.hub.cfg.ConfirmInterval - time.Since(c.lastPing)
	if wait < 0 {
		wait = 0
	}
	if c.confirmTimer == nil {
		c.confirmTimer = time.AfterFunc(wait, c.confirmRound)
	} else {
		c.confirmTimer.Reset(wait)
	}
}

// confirmRound is the timer's function: one ping covering everything
// written so far, then another round if more was written meanwhile.
func (c *Conn) confirmRound() {
	ctx, cancel := context.WithTimeout(c.ctx, c.hub.cfg.WriteTimeout)
	err := c.Ping(ctx)
	cancel()
	select {
	case <-c.closed:
		err = errClosed // nothing more to confirm on this connection
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.confirmAgain && !c.done && !c.acking && !errors.Is(err, errClosed) {
		// More was written meanwhile. After a failed ping (a slow peer) the
		// positions are pending again and this round covers them too; a peer
		// that stays stuck is closed by the write timeout or the lag limit.
		c.confirmAgain = false
		c.scheduleConfirmLocked()
		return
	}
	// Without new writes a failed ping leaves the positions pending until the
	// writer's next batch, or the keepalive, asks again.
	c.confirming, c.confirmAgain = false, false
}

// confirmSnap is what one ping covers in one session.
type confirmSnap struct {
	p       *position
	written int64
	gen     uint32
}

// Ping sends a ping after everything written so far and, when the pong
// arrives, confirms it (unless the peer has switched to acks). The
// keepalive uses it too, so every pong the server asks for confirms.
func (c *Conn) Ping(ctx context.Context) error {
	c.mu.Lock()
	c.lastPing = time.Now()
	var snap []confirmSnap
	if !c.acking {
		for _, p := range c.pos {
			if p.pending {
				snap = append(snap, confirmSnap{p: p, written: p.written, gen: p.gen})
				p.pending = false
			}
		}
	}
	c.mu.Unlock()
	err := c.tr.Ping(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		for _, s := range snap {
			s.p.pending = true
		}
		return err
	}
	c.hub.stats.Confirms.Add(1)
	if c.acking {
		return nil
	}
	for _, s := range snap {
		if s.gen == s.p.gen && s.written > s.p.confirmed {
			c.confirmLocked(s.p, s.written)
		}
	}
	return nil
}

// Ack applies a client acknowledgement: the peer has everything in the
// session up to and including seq. Acks for a session this connection has
// not delivered are ignored, as are acks below the join that restarted a
// session's pull (they may predate it).
func (c *Conn) Ack(sessionID string, seq int64) {
	c.hub.stats.Acks.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acking = true
	p, ok := c.pos[sessionID]
	if !ok || seq < p.ackFrom || seq <= p.acked {
		return
	}
	p.acked = seq
	c.applyAckLocked(p)
}

// applyAckLocked confirms what the highest ack covers. An ack never confirms
// more than was written (an ack that overtakes the writer's bookkeeping
// waits for it); an ack of the last visible event written also covers the
// invisible events written past it, as there was nothing to receive. Called
// with c.mu held.
func (c *Conn) applyAckLocked(p *position) {
	if p.acked == 0 {
		return
	}
	n := min(p.acked, p.written)
	if p.acked >= p.shown {
		n = p.written
	}
	if n > p.confirmed {
		c.confirmLocked(p, n)
	}
}

// confirmLocked moves a confirmed position forward. Called with c.mu held.
func (c *Conn) confirmLocked(p *position, to int64) {
	p.confirmed = to
	c.posDirty[p.session] = true
}
