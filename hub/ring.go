package hub

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
	events []store.StoredEvent // sorted by sequence, possibly with gaps
	floor  int64
	max    int
	used   int64 // last use, in hub ticks, for idle eviction
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
	r.events = append(r.events[:i], append(append([]store.StoredEvent(nil), evs...), r.events[i:]...)...)
	if over := len(r.events) - r.max; over > 0 {
		r.floor = r.events[over].Sequence
		r.events = append(r.events[:0:0], r.events[over:]...)
	}
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
