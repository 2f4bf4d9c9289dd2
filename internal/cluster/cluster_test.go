package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/store"
)

// Payloads carry ids and sequence ranges only, and each stays under
// PostgreSQL's 8000-byte NOTIFY limit however many sessions a batch holds;
// decoding gives back every span.
func TestPayloadsSplitAndRoundTrip(t *testing.T) {
	spans := map[string]span{}
	for i := 0; i < 2000; i++ {
		spans[fmt.Sprintf("sess_01HW7AB12CDEFGHJKMNPQRS%04d", i)] = span{First: int64(i + 1), Last: int64(i*3 + 1000000)}
	}
	payloads := encodeEvents("n0123456789abcdef", spans)
	if len(payloads) < 2 {
		t.Fatalf("%d payloads for 2000 sessions: not split", len(payloads))
	}
	got := map[string]span{}
	for _, p := range payloads {
		if len(p) >= 8000 || len(p) > maxPayload {
			t.Fatalf("payload of %d bytes", len(p))
		}
		node, sp, err := decodeEvents(p)
		if err != nil {
			t.Fatal(err)
		}
		if node != "n0123456789abcdef" {
			t.Fatalf("node %q", node)
		}
		for sid, s := range sp {
			if _, dup := got[sid]; dup {
				t.Fatalf("session %s in two payloads", sid)
			}
			got[sid] = s
		}
	}
	if len(got) != len(spans) {
		t.Fatalf("decoded %d sessions of %d", len(got), len(spans))
	}
	for sid, s := range spans {
		if got[sid] != s {
			t.Fatalf("%s: %+v, want %+v", sid, got[sid], s)
		}
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	for _, p := range []string{"", "n1 sess_a:1", "n1 sess_a:x:2", "n1 sess_a:3:2", "n1 sess_a:0:2"} {
		if _, _, err := decodeEvents(p); err == nil {
			t.Errorf("decoded %q", p)
		}
	}
}

// Coalescing: a session's spans merge into one covering both.
func TestSpanMerge(t *testing.T) {
	var s span
	s = s.merge(span{5, 7})
	s = s.merge(span{3, 4})
	s = s.merge(span{8, 8})
	if s != (span{3, 8}) {
		t.Fatalf("merged %+v", s)
	}
}

// Committed coalesces commits per session before the notifier sends them.
func TestCommittedCoalesces(t *testing.T) {
	n := &Node{id: "n1", out: map[string]span{}, wakeOut: make(chan struct{}, 1)}
	n.peers.Store(1) // someone to announce to
	for seq := int64(1); seq <= 100; seq++ {
		n.Committed(commit("sess_a", seq, seq))
	}
	n.Committed(commit("sess_b", 4, 6))
	if len(n.out) != 2 || n.out["sess_a"] != (span{1, 100}) || n.out["sess_b"] != (span{4, 6}) {
		t.Fatalf("queued %+v", n.out)
	}
	p := encodeEvents(n.id, n.out)
	if len(p) != 1 || !strings.Contains(p[0], "sess_a:1:100") {
		t.Fatalf("payloads %q", p)
	}
}

// A node alone queues nothing and does not wake its notifier.
func TestCommittedAlone(t *testing.T) {
	n := &Node{id: "n1", out: map[string]span{}, wakeOut: make(chan struct{}, 1)}
	n.Committed(commit("sess_a", 1, 3))
	if len(n.out) != 0 || len(n.wakeOut) != 0 || n.stats.NotifySkipped.Load() != 1 {
		t.Fatalf("alone: queued %+v, wake-ups %d, skipped %d", n.out, len(n.wakeOut), n.stats.NotifySkipped.Load())
	}
}

func commit(sid string, first, last int64) *store.Commit {
	c := &store.Commit{SessionID: sid}
	for seq := first; seq <= last; seq++ {
		c.Events = append(c.Events, store.StoredEvent{SessionID: sid, Sequence: seq})
	}
	return c
}

func TestRedactURL(t *testing.T) {
	got := redactURL("nats://aspd:s3cret@a:4222, nats://tok3n@b:4222,nats://c:4222")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "tok3n") || !strings.Contains(got, "nats://c:4222") || strings.Count(got, "xxxxx") != 2 {
		t.Fatalf("redactURL = %q", got)
	}
}

// The listener's backoff doubles on quick losses up to its cap, and starts
// again from the first wait after a subscription that held.
func TestListenBackoff(t *testing.T) {
	var b listenBackoff
	var got []time.Duration
	for range 8 {
		got = append(got, b.after(time.Millisecond))
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits after quick losses: %v, want %v ms", got, want)
		}
	}
	if w := b.after(2 * listenMaxBackoff); w != listenFirstBackoff {
		t.Fatalf("after a subscription that held %v: wait %v, want %v", 2*listenMaxBackoff, w, listenFirstBackoff)
	}
	if w := b.after(time.Millisecond); w != 2*listenFirstBackoff {
		t.Fatalf("the next quick loss: wait %v, want %v", w, 2*listenFirstBackoff)
	}
}
