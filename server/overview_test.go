package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The overview ring over a registry whose counters the test sets: rates
// from two samples, the p99 of the deliveries in between, nulls where a
// value is unknown, and a ring that keeps the last overviewPoints samples
// oldest first.
func TestOverviewSamples(t *testing.T) {
	reg := prometheus.NewRegistry()
	published := prometheus.NewCounter(prometheus.CounterOpts{Name: "aspd_events_published_total"})
	conns := prometheus.NewGauge(prometheus.GaugeOpts{Name: "aspd_connections"})
	reqs := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aspd_http_request_duration_seconds", Buckets: LatencyBuckets}, []string{"method", "route", "status"})
	deliver := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "aspd_delivery_latency_seconds", Buckets: LatencyBuckets})
	reg.MustRegister(published, conns, reqs, deliver)
	o := newOverview(reg)
	at := time.Unix(1_700_000_000, 0)

	conns.Set(3)
	o.sample(at)
	s := o.series()
	if len(s.Time) != 1 || s.EventsPerSecond[0] != nil || s.DeliverP99Ms[0] != nil || s.ChorusBacklog[0] != nil || *s.Connections[0] != 3 {
		t.Fatalf("first sample: %+v", s)
	}

	// 5 s later: 50 events, 10 5xx answers (and 4xx, not counted), and 100
	// deliveries of which 98 under 10 ms and 2 at 2 s.
	published.Add(50)
	for range 10 {
		reqs.WithLabelValues("GET", "/x", "5xx").Observe(0.001)
	}
	reqs.WithLabelValues("GET", "/x", "4xx").Observe(0.001)
	for range 98 {
		deliver.Observe(0.004)
	}
	deliver.Observe(2)
	deliver.Observe(2)
	o.sample(at.Add(5 * time.Second))
	s = o.series()
	if got := *s.EventsPerSecond[1]; got != 10 {
		t.Fatalf("events/s %v, want 10", got)
	}
	if got := *s.HTTP5xxPerSec[1]; got != 2 {
		t.Fatalf("5xx/s %v, want 2", got)
	}
	// The 99th of 100 deliveries is one of the two at 2 s: bucket 2.5 s.
	if got := *s.DeliverP99Ms[1]; got != 2500 {
		t.Fatalf("p99 %v ms, want 2500", got)
	}

	// No delivery in the next interval: the p99 is unknown, not 0.
	o.sample(at.Add(10 * time.Second))
	if s = o.series(); s.DeliverP99Ms[2] != nil || *s.EventsPerSecond[2] != 0 {
		t.Fatalf("quiet interval: p99 %v, events/s %v", s.DeliverP99Ms[2], *s.EventsPerSecond[2])
	}

	// The ring keeps the last overviewPoints samples, oldest first.
	for i := 3; i < overviewPoints+10; i++ {
		o.sample(at.Add(time.Duration(i) * 5 * time.Second))
	}
	s = o.series()
	if len(s.Time) != overviewPoints || s.Time[0] != at.Unix()+10*5 || s.Time[overviewPoints-1] != at.Unix()+int64(overviewPoints+9)*5 {
		t.Fatalf("ring: %d points from %d to %d", len(s.Time), s.Time[0], s.Time[len(s.Time)-1])
	}
	for i := 1; i < len(s.Time); i++ {
		if s.Time[i] != s.Time[i-1]+5 {
			t.Fatalf("ring out of order at %d: %v", i, s.Time)
		}
	}
}
