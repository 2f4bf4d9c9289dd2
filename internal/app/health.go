package app

import (
	"context"
	"time"

	"github.com/aspd/aspd/protocol"
)

// HealthPingTimeout bounds the store ping of one health sample.
const HealthPingTimeout = 2 * time.Second

// Health samples live delivery's counters (the ones /metrics exposes, read
// from the same hub) and checks the store as /readyz does (store.Ready). An unreachable store is reported
// in the answer, not as an error: the page shows it.
func (a *App) Health(ctx context.Context) protocol.OperatorHealth {
	d := a.DeliveryStats()
	h := protocol.OperatorHealth{
		SampledAt: time.Now().UnixMilli(), Connections: d.Connections, AgentsOnline: d.AgentsOnline,
		EventsCommitted: d.Handed, EventsDelivered: d.Delivered, SlowConsumers: d.SlowConsumers,
		LiveTranscripts: a.LiveWatches(),
		Store:           protocol.StoreHealth{Dialect: a.st.Dialect(), Status: "ok"},
	}
	pctx, cancel := context.WithTimeout(ctx, HealthPingTimeout)
	defer cancel()
	start := time.Now()
	if err := a.st.Ready(pctx); err != nil {
		// Not logged here: the store logs an outage when it starts and
		// when it ends. Ready is a ping while the store is healthy, and
		// a probe write while writes have been failing (a full disk).
		h.Store.Status = "unavailable"
	}
	h.Store.PingMillis = time.Since(start).Milliseconds()
	if a.ChorusEnabled() && h.Store.Status == "ok" {
		if n, oldest, err := a.st.ChorusBacklog(pctx); err == nil {
			h.Chorus = &protocol.ChorusHealth{Pending: n}
			if oldest > 0 {
				h.Chorus.OldestPendingMillis = max(0, h.SampledAt-oldest)
			}
		}
	}
	return h
}
