package replay

import (
	"sort"

	"github.com/aspd/aspd/store"
)

// ring holds a session's most recent events so that live delivery to many
// connections reads memory, not the database.
//
// Commits are sequenced under the session row lock but published by racing
// goroutines, so events may arrive out of order. The ring keeps them sorted
// and tracks floor: every sequence >= floor is either in the ring or not yet
// published (it will be, by its own committer); every sequence < floor is
// committed and must be read from the store.
type ring struct {
	events []store.StoredEvent // sorted by sequence, possibly with gaps; a window into backing
	floor  int64
	max    int
	used   int64 // last use, in hub ticks, for idle eviction

	// backing holds events with room to grow at the end: inserting at the
	// head (the common case) and dropping the oldest allocate nothing, and
	// the window is moved back to the start of backing only when it reaches
	// the end, at most once per max insertions.
	backing []store.StoredEvent
}

func newRing(max int) *ring { return &ring{max: max} }

// insert adds events (contiguous, from one commit).
func (r *ring) insert(evs []store.StoredEvent) {
	if len(evs) == 0 {
		return
	}
	first := evs[0].Sequence
	switch {
	case r.floor == 0:
		r.floor = first
	case first < r.floor:
		// An older commit published late. Keep it only if it closes the gap
		// below floor exactly; otherwise readers get it from the store.
		if evs[len(evs)-1].Sequence+1 != r.floor {
			return
		}
		r.floor = first
	}
	i := sort.Search(len(r.events), func(i int) bool { return r.events[i].Sequence >= first })
	if i < len(r.events) && r.events[i].Sequence == first {
		return // duplicate publication
	}
	n := len(r.events)
	if n+len(evs) > cap(r.events) {
		r.compact(n + len(evs))
	}
	r.events = r.events[:n+len(evs)]
	copy(r.events[i+len(evs):], r.events[i:n]) // usually nothing: i == n
	copy(r.events[i:], evs)
	if over := len(r.events) - r.max; over > 0 {
		r.floor = r.events[over].Sequence
		clear(r.events[:over]) // drop the references to their bodies
		r.events = r.events[over:]
	}
}

// compact moves the window to the start of backing, growing backing when
// it cannot hold need events plus as many again.
func (r *ring) compact(need int) {
	size := max(2*r.max, 2*need)
	if cap(r.backing) < need || len(r.backing) < need {
		b := make([]store.StoredEvent, size)
		copy(b, r.events)
		clear(r.backing)
		r.backing = b
	} else {
		m := copy(r.backing, r.events) // overlapping moves are fine: copy is memmove
		clear(r.backing[m:])
	}
	r.events = r.backing[:len(r.events)]
}

// after returns the contiguous run of events that starts at after+1, ends at
// most at upto and holds at most limit events. fromStore reports that
// after+1 is below the floor, so the caller must read the store instead.
// An empty result with fromStore false means after+1 is not published yet.
func (r *ring) after(after, upto int64, limit int) (out []store.StoredEvent, fromStore bool) {
	if r.floor == 0 || after+1 < r.floor {
		return nil, true
	}
	i := sort.Search(len(r.events), func(i int) bool { return r.events[i].Sequence > after })
	next := after + 1
	for ; i < len(r.events) && len(out) < limit; i++ {
		e := r.events[i]
		if e.Sequence != next || e.Sequence > upto {
			break
		}
		out = append(out, e)
		next++
	}
	return out, false
}

// replace swaps in e for the event of the same sequence, if the ring holds
// it (a redaction rewrote its body).
func (r *ring) replace(e store.StoredEvent) {
	i := sort.Search(len(r.events), func(i int) bool { return r.events[i].Sequence >= e.Sequence })
	if i < len(r.events) && r.events[i].Sequence == e.Sequence {
		r.events[i] = e
	}
}
