package app

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Polled delivery (MCP's wait_for_events): an agent that cannot hold a
// WebSocket between turns asks for its events instead. It is the same
// delivery as a WebSocket replay, on the same durable cursors: the sessions
// with undelivered events (PendingSessions), read in order from the agent's
// cursor and filtered by visibility.Visible, with the same view and the same
// restart at 1 when the agent's own join is met. What one call returns is
// confirmed by the agent's next call, which first saves the positions the
// previous one reached (SaveCursors): at-least-once, like the WebSocket,
// where the next ping confirms what was written before it.
//
// A waiting call sleeps until the publish path wakes it (wakeWaiters, for a
// commit that has the agent among its recipients) or the fallback poll
// interval passes. The wake-up is only a hint: every pass reads the store,
// so an event that arrives without one (another node's commit, a wake lost
// between two passes) is found by the next poll at the latest.

// Bounds of one WaitForEvents call.
const (
	MaxWaitTimeout     = 60 * time.Second
	DefaultWaitTimeout = 30 * time.Second
	MaxWaitEvents      = 500
	DefaultWaitEvents  = 100
	// waitPollInterval is the fallback re-read of a waiting call when no
	// wake-up comes.
	waitPollInterval = time.Second
)

// WaitRequest asks for an agent's next events; nil fields take defaults.
type WaitRequest struct {
	TimeoutSeconds *int // 0..60, default 30; 0 = do not wait
	MaxEvents      *int // 1..500, default 100
}

// WaitResult is what one WaitForEvents call delivers: events in the shapes
// the WebSocket writes, ordered by session id and then sequence.
type WaitResult struct {
	Events []json.RawMessage
	More   bool // the call stopped at MaxEvents; more events are pending
}

// waits is the per-agent state of polled delivery, in memory: the positions
// the last call reached (confirmed by the next call) and, per session, the
// sequence of the own join that last restarted the pass (as a WebSocket
// connection keeps it), so a pass cut by MaxEvents is not restarted again.
// Losing it (a restart of aspd) means redelivery, never loss.
type waits struct {
	mu     sync.Mutex
	agents map[string]*agentWait

	// Wake-ups of waiting calls, by handle. waiting counts the calls that
	// sleep, so the publish path skips the lock when none does.
	waiting atomic.Int64
	wmu     sync.Mutex
	wakers  map[string]*waker
}

// waker is the wake-up channel of one handle's waiting calls: closed by a
// commit for the handle and replaced by the next sleep.
type waker struct {
	ch   chan struct{}
	refs int
}

// sleep registers a waiting call of h and returns the channel a commit for
// h closes, and the function that unregisters the call.
func (w *waits) sleep(h string) (<-chan struct{}, func()) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.wakers == nil {
		w.wakers = map[string]*waker{}
	}
	k := w.wakers[h]
	if k == nil {
		k = &waker{ch: make(chan struct{})}
		w.wakers[h] = k
	}
	k.refs++
	w.waiting.Add(1)
	return k.ch, func() {
		w.wmu.Lock()
		defer w.wmu.Unlock()
		w.waiting.Add(-1)
		if k.refs--; k.refs == 0 && w.wakers[h] == k {
			delete(w.wakers, h)
		}
	}
}

// wake wakes the waiting calls of every handle in handles.
func (w *waits) wake(handles []string) {
	if w.waiting.Load() == 0 {
		return
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	for _, h := range handles {
		if k := w.wakers[h]; k != nil {
			close(k.ch)
			delete(w.wakers, h) // the next sleep makes a fresh channel
		}
	}
}

type agentWait struct {
	mu      sync.Mutex
	owed    []visibility.Cursor // reached by the last call; saved by the next
	resetAt map[string]int64
}

func (w *waits) agent(h string) *agentWait {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.agents == nil {
		w.agents = map[string]*agentWait{}
	}
	aw := w.agents[h]
	if aw == nil {
		aw = &agentWait{resetAt: map[string]int64{}}
		w.agents[h] = aw
	}
	return aw
}

// WaitForEvents confirms what caller's previous call returned, then returns
// caller's events past its delivery cursor across all its sessions, waiting
// until at least one is there or the timeout passes (an empty result).
func (a *App) WaitForEvents(ctx context.Context, caller string, req WaitRequest) (WaitResult, error) {
	timeout, limit := DefaultWaitTimeout, DefaultWaitEvents
	if t := req.TimeoutSeconds; t != nil {
		if *t < 0 || *t > int(MaxWaitTimeout/time.Second) {
			return WaitResult{}, protocol.Invalid("timeout_seconds must be from 0 to %d", int(MaxWaitTimeout/time.Second))
		}
		timeout = time.Duration(*t) * time.Second
	}
	if n := req.MaxEvents; n != nil {
		if *n < 1 || *n > MaxWaitEvents {
			return WaitResult{}, protocol.Invalid("max_events must be from 1 to %d", MaxWaitEvents)
		}
		limit = *n
	}
	aw := a.waits.agent(caller)
	deadline := time.Now().Add(timeout)
	for {
		// Register before reading, so a commit between the read and the
		// sleep still wakes this call.
		woken, done := a.waits.sleep(caller)
		res, err := a.pollOnce(ctx, caller, aw, limit)
		if err != nil || len(res.Events) > 0 {
			done()
			return res, err
		}
		wait := min(a.waitPoll, time.Until(deadline))
		if wait <= 0 {
			done()
			return WaitResult{Events: []json.RawMessage{}}, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			done()
			return WaitResult{}, ctx.Err()
		case <-a.stop:
			t.Stop()
			done()
			return WaitResult{Events: []json.RawMessage{}}, nil
		case <-woken:
		case <-t.C:
		}
		t.Stop()
		done()
	}
}

// pollOnce saves the positions owed by the previous call and collects the
// next events.
func (a *App) pollOnce(ctx context.Context, h string, aw *agentWait, limit int) (WaitResult, error) {
	aw.mu.Lock()
	defer aw.mu.Unlock()
	if len(aw.owed) > 0 {
		if err := a.st.SaveCursors(ctx, aw.owed); err != nil {
			return WaitResult{}, err
		}
		aw.owed = nil
	}
	pending, err := a.st.PendingSessions(ctx, h)
	if err != nil {
		return WaitResult{}, err
	}
	res := WaitResult{Events: []json.RawMessage{}}
	for _, p := range pending {
		if len(res.Events) >= limit {
			res.More = true
			break
		}
		reached, more, err := a.collect(ctx, p, aw, limit, &res)
		if err != nil {
			return WaitResult{}, err
		}
		res.More = res.More || more
		if reached != p.Cursor {
			aw.owed = append(aw.owed, visibility.Cursor{Handle: h, SessionID: p.SessionID, Seq: reached})
		}
	}
	return res, nil
}

// collect appends to res the events of one pending session that the agent
// may see, from its cursor up to the head PendingSessions read, with the
// walk a WebSocket replay makes (visibility.Walk), and returns the position
// reached.
func (a *App) collect(ctx context.Context, p store.Pending, aw *agentWait, limit int, res *WaitResult) (int64, bool, error) {
	// p.View is valid as of p.LastSeq, like a commit's carried view, and the
	// pass reads no further: the walk keeps it.
	resetAt := aw.resetAt[p.SessionID]
	walk := visibility.NewWalk(p.View, p.Cursor, resetAt)
	defer func() {
		// A later call that resumes below this join must not restart again.
		if walk.ResetAt != resetAt {
			aw.resetAt[p.SessionID] = walk.ResetAt
		}
	}()
	sent := p.Cursor
	for sent < p.LastSeq {
		batch, err := a.st.EventsAfter(ctx, p.SessionID, sent, 256)
		if err != nil {
			return 0, false, err
		}
		if len(batch) == 0 {
			break
		}
		restarted := false
		for i := range batch {
			e := &batch[i]
			if e.Sequence > p.LastSeq {
				break
			}
			if len(res.Events) >= limit {
				walk.Cut(p.LastSeq)
				return sent, true, nil
			}
			m := e.Meta()
			step := walk.Step(&m)
			if step == visibility.Restart {
				// A join replays the transcript up to the join: restart at 1.
				sent, restarted = 0, true
				break
			}
			if step == visibility.Show {
				res.Events = append(res.Events, e.Body)
			}
			sent = e.Sequence
		}
		if !restarted && batch[len(batch)-1].Sequence >= p.LastSeq {
			break
		}
	}
	return sent, false, nil
}
