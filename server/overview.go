package server

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The console's overview (GET /admin/v1/overview): what the process is, the
// cluster's nodes, and the last 15 minutes of a few measures as series.
// The series are sampled server-side, so a page opened now has the last 15
// minutes at once; the samples are read from the same registry /metrics
// exposes (Gather), so the overview and a Prometheus scrape never disagree
// about what a counter means. The daemon calls SampleOverview every
// OverviewInterval (internal/daemon).

const (
	// OverviewInterval is the time between two overview samples.
	OverviewInterval = 5 * time.Second
	// overviewPoints is how many samples the ring keeps: 15 minutes.
	overviewPoints = 180
)

// Overview is the answer of GET /admin/v1/overview.
type Overview struct {
	Version       string         `json:"version"`
	Revision      string         `json:"revision,omitempty"`
	UptimeSeconds int64          `json:"uptime_seconds"`
	Store         string         `json:"store"` // the SQL dialect: "sqlite" or "postgres"
	Nodes         []OverviewNode `json:"nodes"`
	Series        OverviewSeries `json:"series"`
}

// OverviewNode is one aspd node. On the embedded store (one node, no
// cluster) it is this process, with id "local".
type OverviewNode struct {
	ID             string `json:"id"`
	Addr           string `json:"addr,omitempty"`
	Self           bool   `json:"self"`
	StartedAt      int64  `json:"started_at"`       // epoch milliseconds
	HeartbeatAgeMs int64  `json:"heartbeat_age_ms"` // 0 for the local node of a single-node aspd
	Connections    int    `json:"connections"`      // agents with a live connection on the node
}

// OverviewSeries is the sampled ring, oldest first, as columns of equal
// length (the shape a chart takes). A value is null when it is unknown at
// that point: a rate before the second sample, a p99 over an interval with
// no delivery, a Chorus backlog with Chorus off.
type OverviewSeries struct {
	IntervalSeconds int        `json:"interval_seconds"`
	Time            []int64    `json:"t"`                   // epoch seconds of each sample
	EventsPerSecond []*float64 `json:"events_per_second"`   // committed events handed to live delivery
	Connections     []*float64 `json:"connections"`         // live WebSocket connections
	DeliverP99Ms    []*float64 `json:"deliver_p99_ms"`      // send-to-deliver p99 over the interval (bucket upper bound)
	ChorusBacklog   []*float64 `json:"chorus_backlog"`      // Chorus deliveries pending
	HTTP5xxPerSec   []*float64 `json:"http_5xx_per_second"` // answers with a 5xx status
}

// overviewPoint is one sample: the gauges as read, the counters' rates
// over the interval since the previous sample.
type overviewPoint struct {
	at                              int64
	events, conns, p99, chorus, e5x *float64
}

// counters are the cumulative values a rate or a p99 is the difference of.
type counters struct {
	at        time.Time
	published float64
	errors5xx float64
	delivered uint64   // the send-to-deliver histogram's sample count
	buckets   []uint64 // its cumulative bucket counts (+Inf is not among them)
	bounds    []float64
}

// overview is the ring and what the next sample is the difference from.
type overview struct {
	started time.Time
	gather  prometheus.Gatherer

	mu     sync.Mutex
	points []overviewPoint // ring, oldest at next once full
	next   int
	prev   *counters
}

func newOverview(g prometheus.Gatherer) *overview {
	return &overview{started: time.Now(), gather: g, points: make([]overviewPoint, 0, overviewPoints)}
}

// SampleOverview takes one overview sample (the daemon's ticker calls it).
func (s *Server) SampleOverview() { s.overview.sample(time.Now()) }

// sample reads the registry once and appends a point.
func (o *overview) sample(now time.Time) {
	mfs, err := o.gather.Gather()
	if err != nil && len(mfs) == 0 {
		return // nothing readable: no point rather than a point of zeros
	}
	cur := &counters{at: now}
	p := overviewPoint{at: now.Unix()}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "aspd_events_published_total":
			cur.published = sumValues(mf)
		case "aspd_connections":
			p.conns = ptr(sumValues(mf))
		case "aspd_chorus_outbox_pending":
			p.chorus = ptr(sumValues(mf))
		case "aspd_http_request_duration_seconds":
			for _, m := range mf.GetMetric() {
				if label(m, "status") == "5xx" {
					cur.errors5xx += float64(m.GetHistogram().GetSampleCount())
				}
			}
		case "aspd_delivery_latency_seconds":
			if ms := mf.GetMetric(); len(ms) == 1 {
				cur.delivered = ms[0].GetHistogram().GetSampleCount()
				for _, b := range ms[0].GetHistogram().GetBucket() {
					cur.buckets = append(cur.buckets, b.GetCumulativeCount())
					cur.bounds = append(cur.bounds, b.GetUpperBound())
				}
			}
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if prev := o.prev; prev != nil {
		if dt := cur.at.Sub(prev.at).Seconds(); dt > 0 {
			p.events = ptr(round1(max(cur.published-prev.published, 0) / dt))
			p.e5x = ptr(round1(max(cur.errors5xx-prev.errors5xx, 0) / dt))
		}
		p.p99 = p99(prev, cur)
	}
	o.prev = cur
	if len(o.points) < overviewPoints {
		o.points = append(o.points, p)
		return
	}
	o.points[o.next] = p
	o.next = (o.next + 1) % overviewPoints
}

// series copies the ring out, oldest first.
func (o *overview) series() OverviewSeries {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.points)
	out := OverviewSeries{IntervalSeconds: int(OverviewInterval / time.Second), Time: make([]int64, 0, n),
		EventsPerSecond: make([]*float64, 0, n), Connections: make([]*float64, 0, n), DeliverP99Ms: make([]*float64, 0, n),
		ChorusBacklog: make([]*float64, 0, n), HTTP5xxPerSec: make([]*float64, 0, n)}
	for i := range n {
		p := o.points[(o.next+i)%n]
		out.Time = append(out.Time, p.at)
		out.EventsPerSecond = append(out.EventsPerSecond, p.events)
		out.Connections = append(out.Connections, p.conns)
		out.DeliverP99Ms = append(out.DeliverP99Ms, p.p99)
		out.ChorusBacklog = append(out.ChorusBacklog, p.chorus)
		out.HTTP5xxPerSec = append(out.HTTP5xxPerSec, p.e5x)
	}
	return out
}

// p99 is the send-to-deliver 99th percentile of the deliveries between two
// samples, in milliseconds: the upper bound of the bucket it falls in (a
// histogram knows no better). nil when nothing was delivered in between, and
// the largest finite bound when it falls past the last one.
func p99(prev, cur *counters) *float64 {
	if len(cur.buckets) == 0 || len(prev.buckets) != len(cur.buckets) {
		return nil
	}
	total := float64(cur.delivered) - float64(prev.delivered)
	if total <= 0 {
		return nil
	}
	rank := math.Ceil(0.99 * total)
	for i := range cur.buckets {
		if float64(cur.buckets[i])-float64(prev.buckets[i]) >= rank {
			return ptr(cur.bounds[i] * 1000)
		}
	}
	return ptr(cur.bounds[len(cur.bounds)-1] * 1000)
}

func sumValues(mf *dto.MetricFamily) float64 {
	var v float64
	for _, m := range mf.GetMetric() {
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		}
	}
	return v
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func ptr(v float64) *float64 { return &v }

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// overviewNodes lists the cluster's nodes, or this process alone when
// there is no cluster (the embedded store).
func (s *Server) overviewNodes(ctx context.Context) ([]OverviewNode, error) {
	now := time.Now().UnixMilli()
	if s.app.Node() == nil {
		return []OverviewNode{{ID: "local", Self: true, StartedAt: s.overview.started.UnixMilli(),
			Connections: s.app.DeliveryStats().AgentsOnline}}, nil
	}
	nodes, err := s.app.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	self := s.app.Node().ID()
	out := make([]OverviewNode, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, OverviewNode{ID: n.ID, Addr: n.Addr, Self: n.ID == self, StartedAt: n.StartedAt,
			HeartbeatAgeMs: max(0, now-n.HeartbeatAt), Connections: n.Connections})
	}
	return out, nil
}

// adminOverview is GET /admin/v1/overview.
func (s *Server) adminOverview(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	nodes, err := s.overviewNodes(c.Request().Context())
	if err != nil {
		return err
	}
	bi := ReadBuild()
	return c.JSON(http.StatusOK, Overview{
		Version: bi.Version, Revision: bi.Revision,
		UptimeSeconds: int64(time.Since(s.overview.started) / time.Second),
		Store:         s.app.StoreDialect(),
		Nodes:         nodes,
		Series:        s.overview.series(),
	})
}
