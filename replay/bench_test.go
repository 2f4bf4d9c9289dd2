package replay

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// BenchmarkDeliver: the hub's cost per delivered event, from Publish to the
// transport's write, with N live connections (one agent each) in one
// session. One op is one published event, delivered N times; allocs/event
// is the allocations per delivered event (docs/benchmarks.md, "Message
// path: syscalls and allocations"). The transport only counts, so this is
// the hub's share; the WebSocket write is measured by the chat benchmark.
func BenchmarkDeliver(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			st := newLogStore()
			handles, views := joinedAgents(n)
			body := []byte(`{"type":"session.message","session_id":"sess_1","sequence":1,"content":"hello"}`)
			h := hubWith(b, st, nil, func(c *Config) { c.MaxLag = 1 << 30; c.CursorFlushInterval = time.Hour })
			trs := make([]*tallyTransport, n)
			for i := range trs {
				trs[i] = &tallyTransport{}
				c := attachLive(b, h, handles[i], trs[i])
				b.Cleanup(func() { c.Close(CloseNormal, "bench"); c.Finish() })
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			// The log, for writers that fall behind the ring.
			st.events["sess_1"] = make([]store.StoredEvent, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				e := store.StoredEvent{SessionID: "sess_1", Sequence: int64(i + 1), Type: protocol.EventMessage, Body: body}
				st.mu.Lock()
				st.events["sess_1"] = append(st.events["sess_1"], e)
				st.mu.Unlock()
				h.Publish(&store.Commit{SessionID: "sess_1", Events: []store.StoredEvent{e}, Recipients: handles, Views: views})
			}
			for _, tr := range trs {
				for tr.n.Load() < int64(b.N) {
					time.Sleep(time.Millisecond)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*n), "allocs/event")
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// tallyTransport counts what it is given.
type tallyTransport struct{ n atomic.Int64 }

func (f *tallyTransport) Write(context.Context, []byte) error { f.n.Add(1); return nil }
func (f *tallyTransport) Flush(time.Time) error               { return nil }
func (f *tallyTransport) Ping(context.Context) error          { return nil }
func (f *tallyTransport) Close(int, string)                   {}
