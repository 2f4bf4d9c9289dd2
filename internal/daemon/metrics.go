package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aspd/aspd/server"
)

// newDeliveryLatency is the send-to-deliver histogram, fed by the delivery
// hub's OnLiveWrite.
func newDeliveryLatency() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "aspd_delivery_latency_seconds",
		Help:    "Send-to-deliver: from an event's created_at (stamped in the transaction that commits it) to its write on a WebSocket connection, for events delivered live (not on catch-up). Millisecond resolution.",
		Buckets: server.LatencyBuckets, // as the HTTP request histogram's, so the two compare
	})
}

// observeDelivery is the hub's OnLiveWrite: a clock step may make d
// negative, which is recorded as 0.
func observeDelivery(h prometheus.Histogram) func(time.Duration) {
	return func(d time.Duration) { h.Observe(max(d, 0).Seconds()) }
}
