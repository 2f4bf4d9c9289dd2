package chorus

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aspd/aspd/protocol"
)

// metrics are the worker's Prometheus series; Collectors hands them to the
// server's registry. The outbox gauges and the agents' signals are read
// from the application at scrape time.
type metrics struct {
	w        *Worker
	attempts prometheus.Counter
	outcomes *prometheus.CounterVec
	latency  prometheus.Histogram
	signals  *prometheus.Desc
	backlog  *prometheus.Desc
	oldest   *prometheus.Desc
}

func newMetrics(w *Worker) *metrics {
	return &metrics{w: w,
		attempts: prometheus.NewCounter(prometheus.CounterOpts{Name: "aspd_chorus_deliveries_attempted_total",
			Help: "Chorus webhook delivery attempts (HTTP requests made)."}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aspd_chorus_delivery_outcomes_total",
			Help: "Chorus delivery attempts by outcome: delivered (2xx), retry (scheduled again), failed (dead-lettered: permanent 4xx, refused address, retries exhausted)."},
			[]string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "aspd_chorus_delivery_duration_seconds",
			Help:    "Time from sending a Chorus delivery to its response headers (or failure).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		signals: prometheus.NewDesc("aspd_chorus_agent_signals_total",
			"status and error callbacks received from webhook agents (not session events).", []string{"type"}, nil),
		backlog: prometheus.NewDesc("aspd_chorus_outbox_pending", "Chorus deliveries pending (due or waiting for a retry).", nil, nil),
		oldest:  prometheus.NewDesc("aspd_chorus_outbox_oldest_pending_seconds", "Age of the oldest pending Chorus delivery (0 when none).", nil, nil),
	}
}

func (m *metrics) outcome(state string) {
	switch state {
	case protocol.ChorusDelivered:
		m.outcomes.WithLabelValues("delivered").Inc()
	case protocol.ChorusPending:
		m.outcomes.WithLabelValues("retry").Inc()
	default:
		m.outcomes.WithLabelValues("failed").Inc()
	}
}

// Describe implements prometheus.Collector for the series read at scrape
// time.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.signals
	ch <- m.backlog
	ch <- m.oldest
}

// Collect reads the agents' signals and the outbox gauges from the
// application. A signal type not received yet has no series, as with a
// counter vector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	s := m.w.app.ChorusSignals()
	for _, c := range []struct {
		typ string
		n   uint64
	}{{"error", s.Error}, {"status", s.Status}} {
		if c.n > 0 {
			ch <- prometheus.MustNewConstMetric(m.signals, prometheus.CounterValue, float64(c.n), c.typ)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, oldest, err := m.w.app.ChorusBacklog(ctx)
	if err != nil {
		return
	}
	age := 0.0
	if oldest > 0 {
		age = max(time.Since(time.UnixMilli(oldest)).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(m.backlog, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(m.oldest, prometheus.GaugeValue, age)
}

// Collectors returns the worker's metrics for registration.
func (w *Worker) Collectors() []prometheus.Collector {
	return []prometheus.Collector{w.m.attempts, w.m.outcomes, w.m.latency, w.m}
}
