package replay

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/aspd/aspd/protocol"
)

// Commits from two nodes: this node's publishers publish theirs; the other
// node's reach this hub as PublishRemote of events read back from the
// store (overlapping, repeated, or only a head for a catch-up). The
// connection still writes every sequence once, in order.
func TestRemoteAndLocalCommitsInterleave(t *testing.T) {
	for _, ring := range []int{256, 4} {
		t.Run(fmt.Sprintf("ring=%d", ring), func(t *testing.T) {
			st := newLogStore()
			st.setView("sess_1", joined("@a.b"))
			h := hubWith(t, st, nil, func(c *Config) { c.RingSize = ring; c.MaxLag = 1 << 20 })
			tr := newTestTransport()
			c := attachStart(t, h, "@a.b", tr)
			const each = 300
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // local commits
				defer wg.Done()
				for range each {
					commit := st.add("sess_1", protocol.EventMessage, "@x.y", true)
					runtime.Gosched()
					h.Publish(commit)
				}
			}()
			go func() { // another node's commits, woken up by notification
				defer wg.Done()
				for i := range each {
					commit := st.add("sess_1", protocol.EventMessage, "@x.y", true)
					head := commit.Events[0].Sequence
					runtime.Gosched()
					switch i % 3 {
					case 0: // the wake-up read: a few events up to the head, some already held
						evs, _ := st.EventsAfter(t.Context(), "sess_1", max(0, head-3), 3)
						h.PublishRemote("sess_1", evs, head, []string{"@a.b", "@not.here"})
					case 1: // a catch-up: the head only
						h.PublishRemote("sess_1", nil, head, []string{"@a.b"})
					default: // a repeated wake-up
						h.PublishRemote("sess_1", commit.Events, head, []string{"@a.b"})
						h.PublishRemote("sess_1", commit.Events, head, []string{"@a.b"})
					}
				}
			}()
			wg.Wait()
			waitFor(t, "every event to be written", func() bool { return tr.count() >= 2*each })
			if got, want := tr.seqs(), seqRange(1, 2*each); !slices.Equal(got, want) {
				t.Fatalf("written out of order or twice: %d events, first differences at %d", len(got), firstDiff(got, want))
			}
			c.Close(CloseNormal, "test")
			c.Finish()
		})
	}
}

// missingRuns keeps only what the ring lacks, as contiguous runs.
func TestMissingRuns(t *testing.T) {
	r := newRing(16)
	r.insert(evs(3, 4))
	r.insert(evs(7))
	var got [][]int64
	for _, run := range missingRuns(r, evs(2, 3, 4, 5, 6, 7, 8)) {
		got = append(got, seqs(run))
	}
	if want := [][]int64{{2}, {5, 6}, {8}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	for _, run := range missingRuns(r, evs(2, 3, 4, 5, 6, 7, 8)) {
		r.insert(run)
	}
	if out, fromStore := r.after(1, 8, 10); fromStore || !slices.Equal(seqs(out), seqRange(2, 8)) {
		t.Fatalf("ring after the remote insert: %v fromStore=%v", seqs(out), fromStore)
	}
}
