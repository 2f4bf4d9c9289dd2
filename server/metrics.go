package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aspd/aspd/store"
)

// metrics is the HTTP adapter's part of what GET /metrics (operator token)
// exposes: request latency, the build, the application's delivery counters
// and live connections, the cluster node's counters, and the Go runtime and
// process collectors (go_goroutines, go_memstats_*,
// process_resident_memory_bytes, ...). They go into the registry the
// server is given, beside what the daemon registers there (the
// send-to-deliver histogram, the Chorus worker's metrics).
type metrics struct {
	requests *prometheus.HistogramVec
	handler  http.Handler
	// routes is the closed set of route patterns a request may be labelled
	// with; filled once the routes are registered (setRoutes).
	routes map[string]struct{}
}

// LatencyBuckets, in seconds: 0.5ms to 10s, of the request histogram and of
// the daemon's send-to-deliver histogram, so that the two compare.
var LatencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newMetrics(s *Server, reg *prometheus.Registry) *metrics {
	m := &metrics{}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "aspd_http_request_duration_seconds",
		Help:    "HTTP requests by method, route pattern and status class (2xx, 4xx, ...): time from the request's arrival to the end of its answer; WebSocket and SSE streams count when they end.",
		Buckets: LatencyBuckets,
	}, []string{"method", "route", "status"})
	bi := ReadBuild()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "aspd_build_info",
		Help:        "Always 1; the labels are the module version and the VCS revision aspd was built from.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	build.Set(1)
	reg.MustRegister(m.requests, build, deliveryCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(clusterCollector{s}) // cluster.go
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "aspd_retention_purged_sessions_total", Help: "Sessions deleted by the retention policy (--retention-closed-sessions) since start.",
	}, func() float64 { return float64(s.app.RetentionStats().Sessions.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "aspd_retention_purged_events_total", Help: "Events deleted by the retention policy since start.",
		}, func() float64 { return float64(s.app.RetentionStats().Events.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "aspd_events_redacted_total", Help: "Events redacted by an operator since start.",
		}, func() float64 { return float64(s.app.RetentionStats().Redacted.Load()) }))
	for _, result := range []string{"hit", "miss"} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "aspd_store_guessed_appends_total",
			Help:        "Lone messages appended in one database round trip on this node's copy of the session row (hit), and those that found the row changed by another node or path (miss: one round trip lost, then the locking path).",
			ConstLabels: prometheus.Labels{"result": result},
		}, func() float64 {
			hits, misses := s.app.Store().Guesses()
			if result == "hit" {
				return float64(hits)
			}
			return float64(misses)
		}))
	}
	for _, step := range store.SearchSteps {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "aspd_search_answers_total",
			Help:        "Operator searches answered by each step (docs/search.md): walk (the newest events), index (the index's hits, at most 5,000), windows (PostgreSQL's time windows), sessions_walk (the newest events of a participant's sessions), sessions (every event of a participant's sessions), all_hits (every index hit, sorted).",
			ConstLabels: prometheus.Labels{"step": step},
		}, func() float64 { return float64(s.app.Store().SearchAnswers(step)) }))
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// observeRequest records one finished request. Every label comes from a
// closed set, never from the request as sent: a client that could choose a
// label value (an invented method, a random path) would add a series for
// good with each request, a memory leak that needs no token. method and
// route are methodLabel's and routeLabel's, which the access log computed
// for its line (accesslog.go).
func (m *metrics) observeRequest(method, route string, status int, d time.Duration) {
	m.requests.WithLabelValues(method, route, statusClass(status)).Observe(d.Seconds())
}

// setRoutes records the registered route patterns: the only route labels.
func (m *metrics) setRoutes(routes []*echo.Route) {
	m.routes = make(map[string]struct{}, len(routes))
	for _, r := range routes {
		m.routes[r.Path] = struct{}{}
	}
}

// routeLabel is the route pattern when it is a registered one, else
// "unmatched" (echo names the nearest tree node for a 404 or 405).
func (m *metrics) routeLabel(route string) string {
	if _, ok := m.routes[route]; ok {
		return route
	}
	return "unmatched"
}

// methodLabel is the request method when it is one of HTTP's standard
// methods, else "other". The access log uses it too, so that an invented
// 2,000-character method is not written out either.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// statusClass is "1xx" to "5xx", or "other" for a status outside them.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// deliveryCollector reads the application's delivery counters once per
// scrape; the names and meanings are those aspd has always exposed.
type deliveryCollector struct{ s *Server }

var deliveryDescs = struct {
	connections, agentsOnline, connects, published, delivered, confirms, acks, storeReads, slow *prometheus.Desc
}{
	connections:  prometheus.NewDesc("aspd_connections", "Live WebSocket connections.", nil, nil),
	agentsOnline: prometheus.NewDesc("aspd_agents_online", "Agents with at least one live connection.", nil, nil),
	connects:     prometheus.NewDesc("aspd_connections_total", "WebSocket connections attached since start.", nil, nil),
	published:    prometheus.NewDesc("aspd_events_published_total", "Committed events handed to live delivery.", nil, nil),
	delivered:    prometheus.NewDesc("aspd_events_delivered_total", "Events written to WebSocket connections.", nil, nil),
	confirms:     prometheus.NewDesc("aspd_delivery_confirms_total", "Pongs that confirmed the events written before their ping.", nil, nil),
	acks:         prometheus.NewDesc("aspd_delivery_acks_total", "Explicit acknowledgements received from clients.", nil, nil),
	storeReads:   prometheus.NewDesc("aspd_catchup_store_reads_total", "Catch-up reads served by the database instead of memory.", nil, nil),
	slow:         prometheus.NewDesc("aspd_slow_consumers_total", "Connections closed as slow consumers.", nil, nil),
}

func (deliveryCollector) Describe(ch chan<- *prometheus.Desc) {
	d := deliveryDescs
	for _, x := range []*prometheus.Desc{d.connections, d.agentsOnline, d.connects, d.published, d.delivered, d.confirms, d.acks, d.storeReads, d.slow} {
		ch <- x
	}
}

func (c deliveryCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.app.DeliveryStats()
	d := deliveryDescs
	gauge := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v))
	}
	counter := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	gauge(d.connections, int64(st.Connections))
	gauge(d.agentsOnline, int64(st.AgentsOnline))
	counter(d.connects, st.Connects)
	counter(d.published, st.Handed)
	counter(d.delivered, st.Delivered)
	counter(d.confirms, st.Confirms)
	counter(d.acks, st.Acks)
	counter(d.storeReads, st.StoreReads)
	counter(d.slow, st.SlowConsumers)
}

// metricsHandler is GET /metrics (operator token): Prometheus exposition.
func (s *Server) metricsHandler(c echo.Context) error {
	s.metrics.handler.ServeHTTP(c.Response(), c.Request())
	return nil
}
