package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aspd/aspd/internal/chorus"
	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// The Chorus outbox: App's side of the one door the delivery worker goes
// through (chorus.App, declared by internal/chorus). Each method is one
// step of the worker's round or of one attempt: queue, claim, prepare,
// record. The worker never reaches the store; the application never calls
// the worker (a rotation closes the channel an attempt watches, and the
// worker's metrics read the signal counts).

var _ chorus.App = (*App)(nil)

// ChorusWake is signalled after commits that may make deliveries due.
func (a *App) ChorusWake() <-chan struct{} { return a.chorus.wake }

// ReloadChorusHandles reads the endpoint set from the store (the worker
// calls it every poll, for registrations made through other nodes).
func (a *App) ReloadChorusHandles(ctx context.Context) {
	if err := a.reloadChorusHandles(ctx); err != nil {
		a.logFailure("chorus: reading the registered agents failed", err)
	}
}

// QueueChorus examines up to limit (agent, session) pairs with events past
// their Chorus cursor and no delivery pending, and queues each one's next
// eligible event: one read for the candidates, one write transaction for
// the outcome.
func (a *App) QueueChorus(ctx context.Context, limit int) {
	if err := a.queueChorus(ctx, limit); err != nil {
		a.logFailure("chorus: enqueue failed", err)
	}
}

func (a *App) queueChorus(ctx context.Context, limit int) error {
	cands, err := a.st.ChorusCandidates(ctx, limit)
	if err != nil || len(cands) == 0 {
		return err
	}
	out := make([]store.ChorusEnqueue, 0, len(cands))
	for _, c := range cands {
		e, err := a.nextChorusEvent(ctx, c)
		if err != nil {
			return err
		}
		out = append(out, e)
	}
	return a.st.ChorusEnqueueBatch(ctx, out)
}

// nextChorusEvent finds candidate c's next event to deliver: the walk of
// WebSocket delivery (visibility.Walk: the agent's view, the pass
// restarted at 1 by the agent's own join so that the transcript reaches a
// joiner), minus the events the agent caused itself (chorus.SelfCaused)
// and those a restarted pass has delivered already.
func (a *App) nextChorusEvent(ctx context.Context, c store.ChorusCandidate) (store.ChorusEnqueue, error) {
	h := c.View.Handle
	res := store.ChorusEnqueue{Handle: h, SessionID: c.SessionID, Cursor: c.Cursor, ResetAt: c.ResetAt}
	walk := visibility.NewWalk(c.View, c.Cursor, c.ResetAt)
	var seen map[int64]bool // rows that exist, in a pass restarted by a join
	for res.Cursor < c.LastSeq {
		if res.Cursor < walk.ResetAt && seen == nil {
			var err error
			if seen, err = a.st.ChorusDeliveredSeqs(ctx, h, c.SessionID, 0, walk.ResetAt); err != nil {
				return res, err
			}
		}
		batch, err := a.st.EventsAfter(ctx, c.SessionID, res.Cursor, 64)
		if err != nil {
			return res, err
		}
		if len(batch) == 0 {
			break
		}
		restarted := false
		for i := range batch {
			e := &batch[i]
			if e.Sequence > c.LastSeq {
				return res, nil
			}
			m := e.Meta()
			step := walk.Step(&m)
			res.ResetAt = walk.ResetAt // stored with the cursor: a later pass resumed below it does not restart
			if step == visibility.Restart {
				// The join makes the transcript visible: start again at 1.
				res.Cursor, restarted = 0, true
				break
			}
			if step == visibility.Show && !seen[e.Sequence] && !chorus.SelfCaused(e.Body, h) {
				res.Next = &store.ChorusDelivery{ID: chorus.DeliveryID(h, c.SessionID, e.Sequence), Handle: h, SessionID: c.SessionID,
					Sequence: e.Sequence, EventType: e.Type}
				return res, nil
			}
			res.Cursor = e.Sequence
		}
		if restarted {
			seen = nil
			continue
		}
		if batch[len(batch)-1].Sequence >= c.LastSeq {
			break
		}
	}
	return res, nil
}

// ClaimChorus leases up to limit due deliveries to lease until until. An
// idle outbox costs a read, not a write transaction.
func (a *App) ClaimChorus(ctx context.Context, lease string, until time.Time, limit int) []chorus.Delivery {
	ds, err := a.claimChorus(ctx, lease, until, limit)
	if err != nil {
		a.logFailure("chorus: claiming deliveries failed", err)
	}
	return ds
}

func (a *App) claimChorus(ctx context.Context, lease string, until time.Time, limit int) ([]chorus.Delivery, error) {
	if due, err := a.st.ChorusDue(ctx); err != nil || !due {
		return nil, err
	}
	rows, err := a.st.ClaimChorusDeliveries(ctx, lease, until.UnixMilli(), limit)
	if err != nil {
		return nil, err
	}
	out := make([]chorus.Delivery, len(rows))
	for i, d := range rows {
		out[i] = chorus.Delivery{ID: d.ID, Handle: d.Handle, SessionID: d.SessionID, Sequence: d.Sequence, Attempts: d.Attempts, Lease: d.Lease}
	}
	return out, nil
}

// PrepareChorus gathers what one attempt of d sends: the unsealed
// endpoint, the event, its session as the recipient sees it, a fresh
// callback URL and the MCP credentials.
func (a *App) PrepareChorus(ctx context.Context, d chorus.Delivery) (chorus.Attempt, error) {
	// Taken before the endpoint is read: a rotation from now on aborts the
	// attempt.
	at := chorus.Attempt{Revoked: a.chorusRevoked(d.Handle)}
	var err error
	if at.Target, err = a.chorusTarget(ctx, d.Handle); errors.Is(err, store.ErrNotFound) {
		return at, chorus.ErrNoEndpoint
	} else if err != nil {
		return at, fmt.Errorf("cannot read the endpoint: %w", err)
	}
	evs, err := a.st.EventsAfter(ctx, d.SessionID, d.Sequence-1, 1)
	if err != nil {
		return at, err
	}
	if len(evs) == 0 || evs[0].Sequence != d.Sequence {
		return at, chorus.ErrGone
	}
	at.Event = evs[0].Body
	if s, err := a.st.GetSession(ctx, d.SessionID, d.Handle); err == nil {
		at.Session = s // without it, the channel has no name and no context
	}
	if at.Callback, err = a.issueChorusCallback(ctx, d.Handle, d.SessionID, d.ID); err != nil {
		return at, err
	}
	if at.MCPURL, at.MCPToken, err = a.chorusMCP(ctx, d.Handle); err != nil {
		return at, err
	}
	return at, nil
}

// RecordChorus records the outcome o of an attempt of d under its lease.
// A success clears the endpoint's failures, and brings a failing
// endpoint's agent back online; an endpoint failing for failingAfter
// without a success is marked failing, and its agent goes offline. Nothing
// happens when the lease was lost (a rotation, another node).
func (a *App) RecordChorus(ctx context.Context, d chorus.Delivery, o chorus.Outcome, failingAfter time.Duration) {
	failingSince, wasFailing, ok, err := a.st.ChorusAttempted(ctx, storeDelivery(d),
		store.ChorusOutcome{State: o.State, Status: o.Status, Error: o.Error, NextAttempt: o.NextAttempt})
	if err != nil {
		a.logFailure("chorus: recording an attempt failed", err, "agent", d.Handle, "delivery", d.ID)
		return
	}
	if !ok {
		return
	}
	if o.State == protocol.ChorusDelivered {
		if wasFailing {
			a.chorusRecovered(ctx, d.Handle)
		}
		return
	}
	a.log.Warn("chorus delivery failed", "agent", d.Handle, "delivery", d.ID, "session", d.SessionID, "sequence", d.Sequence,
		"attempt", d.Attempts+1, "status", o.Status, "error", o.Error, "state", o.State)
	if !wasFailing && failingSince > 0 && time.Since(time.UnixMilli(failingSince)) >= failingAfter {
		a.chorusFailing(ctx, d.Handle)
	}
}

// ReleaseChorus gives up d's lease (an attempt cut short by shutdown), so
// the next start or another node retries it at once.
func (a *App) ReleaseChorus(ctx context.Context, d chorus.Delivery) {
	if err := a.st.ReleaseChorusLease(ctx, storeDelivery(d)); err != nil {
		a.logFailure("chorus: releasing a lease failed", err, "delivery", d.ID)
	}
}

// storeDelivery is the part of an outbox row that recording an attempt
// and releasing a lease read.
func storeDelivery(d chorus.Delivery) store.ChorusDelivery {
	return store.ChorusDelivery{ID: d.ID, Handle: d.Handle, SessionID: d.SessionID, Sequence: d.Sequence, Lease: d.Lease}
}

// PruneChorus deletes expired callbacks and MCP tokens, and the records of
// deliveries finished before finishedBefore.
func (a *App) PruneChorus(ctx context.Context, finishedBefore time.Time) {
	if err := a.st.PruneChorus(ctx, finishedBefore.UnixMilli()); err != nil {
		a.logFailure("chorus: prune failed", err)
	}
}

// ChorusBacklog counts pending deliveries and returns the creation time of
// the oldest (epoch milliseconds, 0 when none).
func (a *App) ChorusBacklog(ctx context.Context) (pending, oldest int64, err error) {
	return a.st.ChorusBacklog(ctx)
}

// ChorusSignals counts the status and error callbacks received.
func (a *App) ChorusSignals() chorus.Signals {
	return chorus.Signals{Status: a.chorus.statusSignals.Load(), Error: a.chorus.errorSignals.Load()}
}
