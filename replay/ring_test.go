package replay

import (
	"testing"

	"github.com/aspd/aspd/store"
)

func evs(seqs ...int64) []store.StoredEvent {
	out := make([]store.StoredEvent, len(seqs))
	for i, s := range seqs {
		out[i] = store.StoredEvent{Sequence: s}
	}
	return out
}

func seqs(evs []store.StoredEvent) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Sequence
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Racing publishers: commits 5-6 and 7 arrive as 7 first, then 5-6. A
// reader after 4 must get nothing until 5-6 arrive (7 alone would be a gap),
// then 5, 6, 7 in order.
func TestRingRestoresOrderAcrossRacingPublishers(t *testing.T) {
	r := newRing(16)
	r.insert(evs(7))
	if got, fromStore := r.after(6, 10, 10); fromStore || !equal(seqs(got), []int64{7}) {
		t.Fatalf("after 6: %v fromStore=%v", seqs(got), fromStore)
	}
	// 5-6 is below the floor (7) and closes the gap exactly: it is kept.
	r.insert(evs(5, 6))
	if got, fromStore := r.after(4, 10, 10); fromStore || !equal(seqs(got), []int64{5, 6, 7}) {
		t.Fatalf("after 4: %v fromStore=%v", seqs(got), fromStore)
	}
	// Below the floor: the reader must go to the store.
	if _, fromStore := r.after(2, 10, 10); !fromStore {
		t.Fatal("a sequence below the floor was not sent to the store")
	}
	// A hole above the floor means "not published yet", never "skip it".
	r.insert(evs(9))
	if got, fromStore := r.after(7, 10, 10); fromStore || len(got) != 0 {
		t.Fatalf("after 7 with 8 unpublished: %v fromStore=%v, want nothing yet", seqs(got), fromStore)
	}
	r.insert(evs(8))
	if got, _ := r.after(7, 10, 10); !equal(seqs(got), []int64{8, 9}) {
		t.Fatalf("after 7: %v", seqs(got))
	}
	// upto and limit bound the run.
	if got, _ := r.after(4, 6, 10); !equal(seqs(got), []int64{5, 6}) {
		t.Fatalf("upto 6: %v", seqs(got))
	}
	if got, _ := r.after(4, 10, 2); !equal(seqs(got), []int64{5, 6}) {
		t.Fatalf("limit 2: %v", seqs(got))
	}
	// A duplicate publication changes nothing.
	r.insert(evs(8))
	if got, _ := r.after(4, 10, 10); !equal(seqs(got), []int64{5, 6, 7, 8, 9}) {
		t.Fatalf("after a duplicate: %v", seqs(got))
	}
}

func TestRingEvictionRaisesFloor(t *testing.T) {
	r := newRing(3)
	r.insert(evs(1, 2, 3))
	r.insert(evs(4, 5))
	if _, fromStore := r.after(1, 5, 10); !fromStore {
		t.Fatal("evicted sequence 2 not sent to the store")
	}
	if got, fromStore := r.after(2, 5, 10); fromStore || !equal(seqs(got), []int64{3, 4, 5}) {
		t.Fatalf("after 2: %v fromStore=%v", seqs(got), fromStore)
	}
	// A late commit that does not close the gap below the floor is dropped
	// (its events are committed; readers get them from the store).
	r2 := newRing(8)
	r2.insert(evs(10))
	r2.insert(evs(7))
	if _, fromStore := r2.after(6, 10, 10); !fromStore {
		t.Fatal("late non-adjacent commit should leave 7 to the store")
	}
}

// TestRingInsertDoesNotAllocate: publishing to a full ring, in order, reuses
// its memory (the review found a reallocation per publish).
func TestRingInsertDoesNotAllocate(t *testing.T) {
	r := newRing(256)
	next := int64(1)
	one := make([]store.StoredEvent, 1)
	publish := func() {
		one[0] = store.StoredEvent{Sequence: next}
		r.insert(one)
		next++
	}
	for range 1000 {
		publish()
	}
	if allocs := testing.AllocsPerRun(1000, publish); allocs != 0 {
		t.Fatalf("%.2f allocations per publish, want 0", allocs)
	}
	got, fromStore := r.after(next-257, next, 1000)
	if fromStore || len(got) != 256 || got[0].Sequence != next-256 || got[255].Sequence != next-1 {
		t.Fatalf("ring holds %d events from %v (fromStore=%v), want the last 256", len(got), seqs(got[:1]), fromStore)
	}
}

func BenchmarkRingPublish(b *testing.B) {
	r := newRing(256)
	one := make([]store.StoredEvent, 1)
	b.ReportAllocs()
	for i := range b.N {
		one[0] = store.StoredEvent{Sequence: int64(i + 1)}
		r.insert(one)
	}
}

// A redaction replaces the ring's copy of an event; an event the ring does
// not hold is left to the store.
func TestRingReplace(t *testing.T) {
	r := newRing(4)
	r.insert(evs(1, 2, 3))
	r.replace(store.StoredEvent{Sequence: 2, Body: []byte("tombstone")})
	r.replace(store.StoredEvent{Sequence: 9, Body: []byte("absent")})
	got, fromStore := r.after(0, 10, 10)
	if fromStore || !equal(seqs(got), []int64{1, 2, 3}) {
		t.Fatalf("after: %v %v", seqs(got), fromStore)
	}
	if string(got[1].Body) != "tombstone" || got[0].Body != nil || got[2].Body != nil {
		t.Fatalf("bodies %q %q %q", got[0].Body, got[1].Body, got[2].Body)
	}
}
