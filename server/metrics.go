package server

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// metrics is GET /metrics (operator token): Prometheus text exposition of
// the hub's counters, live connections and process memory.
func (s *Server) metrics(c echo.Context) error {
	st := s.app.DeliveryStats()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var b strings.Builder
	metric := func(name, typ, help string, v int64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", name, help, name, typ, name, v)
	}
	metric("aspd_connections", "gauge", "Live WebSocket connections.", int64(st.Connections))
	metric("aspd_agents_online", "gauge", "Agents with at least one live connection.", int64(st.AgentsOnline))
	metric("aspd_connections_total", "counter", "WebSocket connections attached since start.", st.Connects)
	metric("aspd_events_published_total", "counter", "Committed events handed to live delivery.", st.Handed)
	metric("aspd_events_delivered_total", "counter", "Events written to WebSocket connections.", st.Delivered)
	metric("aspd_delivery_confirms_total", "counter", "Pongs that confirmed the events written before their ping.", st.Confirms)
	metric("aspd_delivery_acks_total", "counter", "Explicit acknowledgements received from clients.", st.Acks)
	metric("aspd_catchup_store_reads_total", "counter", "Catch-up reads served by the database instead of memory.", st.StoreReads)
	metric("aspd_slow_consumers_total", "counter", "Connections closed as slow consumers.", st.SlowConsumers)
	metric("go_goroutines", "gauge", "Goroutines.", int64(runtime.NumGoroutine()))
	metric("go_memstats_heap_inuse_bytes", "gauge", "Heap bytes in use.", int64(ms.HeapInuse))
	metric("go_memstats_sys_bytes", "gauge", "Bytes obtained from the OS.", int64(ms.Sys))
	if rss, ok := residentBytes(); ok {
		metric("process_resident_memory_bytes", "gauge", "Resident set size.", rss)
	}
	return c.Blob(http.StatusOK, "text/plain; version=0.0.4", []byte(b.String()))
}

// residentBytes reads the resident set size from /proc (Linux only).
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}
