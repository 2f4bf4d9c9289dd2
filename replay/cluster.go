package replay

import (
	"context"
	"sort"

	"github.com/aspd/aspd/store"
)

// Commits made on other nodes (docs/cluster.md). To the hub a remote commit
// is only "events appeared in the store": PublishRemote puts whatever of
// them it was handed into the ring and announces the head to the local
// connections of the given handles, with no view, so each writer pulls
// from its own position exactly as after a local commit (the view is read
// from the store where the pull meets a membership event). Announcements
// are idempotent, so a remote wake-up that overlaps a local publication,
// or a catch-up that repeats one, delivers nothing twice.

// PublishRemote announces a session's head to the local connections of
// handles, after adding events (read from the store, contiguous or not,
// possibly already in the ring) to the ring. Lock order as Publish:
// Hub.ringMu alone, then Hub.mu, then Conn.mu.
func (h *Hub) PublishRemote(sessionID string, events []store.StoredEvent, head int64, handles []string) {
	if len(events) > 0 {
		h.ringMu.Lock()
		r, ok := h.rings[sessionID]
		if !ok {
			r = newRing(h.cfg.RingSize)
			h.rings[sessionID] = r
		}
		for _, run := range missingRuns(r, events) {
			r.insert(run)
		}
		r.used = h.tick
		h.ringMu.Unlock()
		h.stats.Published.Add(int64(len(events)))
		head = max(head, events[len(events)-1].Sequence)
	}
	h.mu.Lock()
	for _, handle := range handles {
		for conn := range h.agents[handle] {
			conn.notify(sessionID, head, nil)
		}
	}
	h.mu.Unlock()
}

// missingRuns splits the events the ring does not hold yet into contiguous
// runs, the unit ring.insert takes.
func missingRuns(r *ring, events []store.StoredEvent) [][]store.StoredEvent {
	var runs [][]store.StoredEvent
	var cur []store.StoredEvent
	for _, e := range events {
		i := sort.Search(len(r.events), func(i int) bool { return r.events[i].Sequence >= e.Sequence })
		if i < len(r.events) && r.events[i].Sequence == e.Sequence {
			continue // held already
		}
		if n := len(cur); n > 0 && cur[n-1].Sequence+1 != e.Sequence {
			runs = append(runs, cur)
			cur = nil
		}
		cur = append(cur, e)
	}
	if len(cur) > 0 {
		runs = append(runs, cur)
	}
	return runs
}

// Handles returns the agents with at least one live connection here.
func (h *Hub) Handles() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.agents))
	for handle := range h.agents {
		out = append(out, handle)
	}
	sort.Strings(out)
	return out
}

// RecheckPresence tells presence again that every agent with a live
// connection here is online (Presence.Online, which must be idempotent):
// the other nodes declared this one dead and recorded its agents offline.
// Each call is made under the agent's presence lock, as Attach makes it,
// so it cannot interleave with the agent's first open or last close.
func (h *Hub) RecheckPresence(ctx context.Context) {
	if h.presence == nil {
		return
	}
	for _, handle := range h.Handles() {
		lock := h.presenceLock(handle)
		lock.Lock()
		h.mu.Lock()
		online := len(h.agents[handle]) > 0 && !h.closing
		h.mu.Unlock()
		if online {
			h.presence.Online(ctx, handle)
		}
		lock.Unlock()
	}
}
