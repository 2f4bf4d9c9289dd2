package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// latencyBuckets, in seconds: 0.5ms to 10s, as the HTTP request histogram's
// (server/metrics.go); TestMetrics checks that the two agree.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// newDeliveryLatency is the send-to-deliver histogram, fed by the delivery
// hub's OnLiveWrite.
func newDeliveryLatency() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "aspd_delivery_latency_seconds",
		Help:    "Send-to-deliver: from an event's created_at (stamped in the transaction that commits it) to its write on a WebSocket connection, for events delivered live (not on catch-up). Millisecond resolution.",
		Buckets: latencyBuckets,
	})
}

// observeDelivery is the hub's OnLiveWrite: a clock step may make d
// negative, which is recorded as 0.
func observeDelivery(h prometheus.Histogram) func(time.Duration) {
	return func(d time.Duration) { h.Observe(max(d, 0).Seconds()) }
}
