package app

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// The operator's live transcript (the web console's session page): a
// session's complete event log from a given sequence on, then its new events
// as they are committed.
//
// A watch polls the store on a bounded interval, and reads only when the
// hub's publish counter has moved since its last read (a cheap atomic load):
// every commit is published after it is visible in the store, so a read
// started after the counter moved sees it, and nothing is missed. An idle
// network costs no query at all, except the safety re-read every
// LiveRecheckInterval. Polling rather than a subscription keeps the watch
// out of the hub's locks and publish path: the operator's view is never on
// the agents' hot path, and a slow browser holds nothing but its own
// goroutine.
const (
	LivePollInterval    = 250 * time.Millisecond // how often a watch looks at the publish counter
	LiveRecheckInterval = 5 * time.Second        // store re-read even when nothing was published
	LiveBatch           = 100                    // most events one read returns: the per-watch queue bound
	MaxLiveWatches      = 64                     // concurrent watches per process; 429 beyond
)

// ErrStopping ends a watch when the application shuts down.
var ErrStopping = protocol.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "aspd is shutting down")

// watchCount counts open session watches (App.liveWatches).
type watchCount struct{ atomic.Int64 }

// SessionWatch follows one session's event log for the operator. It is not
// safe for concurrent use; Close releases its slot.
type SessionWatch struct {
	a       *App
	id      string
	after   int64     // the last sequence returned
	seenPub int64     // the publish counter at the last read
	readAt  time.Time // when the store was last read
	more    bool      // the last read was full: read again at once
	closed  atomic.Bool
}

// WatchSession starts following session id's complete log after sequence
// after (0 = from the start). The session must exist.
func (a *App) WatchSession(ctx context.Context, id string, after int64) (*SessionWatch, error) {
	if after < 0 {
		return nil, protocol.Invalid("after_sequence must be a non-negative integer")
	}
	if _, err := a.AdminSession(ctx, id); err != nil {
		return nil, err
	}
	if n := a.liveWatches.Add(1); n > MaxLiveWatches {
		a.liveWatches.Add(-1)
		return nil, rateLimited(time.Second, "too many live transcripts are open (the limit is %d per server)", MaxLiveWatches)
	}
	return &SessionWatch{a: a, id: id, after: after, more: true}, nil
}

// LiveWatches is the number of open session watches.
func (a *App) LiveWatches() int { return int(a.liveWatches.Load()) }

// After is the last sequence Next returned (or the starting point).
func (w *SessionWatch) After() int64 { return w.after }

// LogEvent is one event of a session's log: its sequence and its wire JSON,
// exactly as stored and served.
type LogEvent struct {
	Sequence int64
	Body     json.RawMessage
}

// Next returns the session's next events in sequence order, at most
// LiveBatch, waiting up to wait for at least one; none when wait passes.
// ErrStopping says the application is shutting down.
func (w *SessionWatch) Next(ctx context.Context, wait time.Duration) ([]LogEvent, error) {
	deadline := time.Now().Add(wait)
	for {
		pub := w.a.commitsSeen()
		if w.more || pub != w.seenPub || time.Since(w.readAt) >= LiveRecheckInterval {
			evs, err := w.a.st.EventsAfter(ctx, w.id, w.after, LiveBatch)
			if err != nil {
				return nil, err
			}
			w.seenPub, w.readAt, w.more = pub, time.Now(), len(evs) == LiveBatch
			if len(evs) > 0 {
				w.after = evs[len(evs)-1].Sequence
				return logEvents(evs), nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(LivePollInterval, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-w.a.stop:
			t.Stop()
			return nil, ErrStopping
		case <-t.C:
		}
	}
}

func logEvents(evs []store.StoredEvent) []LogEvent {
	out := make([]LogEvent, len(evs))
	for i := range evs {
		out[i] = LogEvent{Sequence: evs[i].Sequence, Body: evs[i].Body}
	}
	return out
}

// Close releases the watch's slot; calling it again does nothing.
func (w *SessionWatch) Close() {
	if w.closed.CompareAndSwap(false, true) {
		w.a.liveWatches.Add(-1)
	}
}
