package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// The access log: front (request.go) writes one line per request at INFO,
// when the request ends (for a WebSocket /connect or an SSE /stream, when
// the stream closes), and records it in the request-latency histogram:
//
//	level=INFO msg=request method=GET route=/sessions/:id status=200 duration_ms=1.204 agent=@alice.example request_id=5f0c...
//
// It logs the route pattern, never the raw path or query: a path may carry
// ids and a query may carry a token (GET /connect?token=...). The method and
// the route are the metric's closed label sets (metrics.go): "other" for a
// non-standard method, "unmatched" for a path that no route matched. The agent is
// the authenticated handle, absent when the request was not authenticated.
//
// A WebSocket handler returns once the connection is handed to its reader;
// it calls detachAccessLog so that the line is written when the connection
// ends.

// detachAccessLog is for a handler that hands its connection to a goroutine
// and returns (WS /connect): the access-log line is then written by the
// returned func, which the goroutine calls when the connection ends, with
// the connection's whole duration. Call it after the response status is set.
func (s *Server) detachAccessLog(c echo.Context) (end func()) {
	st := state(c)
	st.detached = true
	write := s.accessRecord(c, st)
	return func() { write(time.Since(st.start)) }
}

// accessRecord captures what the line says about the request now (c is
// reused once the handler returns) and returns the func that logs it.
func (s *Server) accessRecord(c echo.Context, st *reqState) func(time.Duration) {
	req := c.Request()
	method := methodLabel(req.Method)
	route := s.metrics.routeLabel(c.Path())
	status := c.Response().Status
	if !c.Response().Committed && status == http.StatusOK {
		// Nothing was written: the client went away before an answer.
		status = 499
	}
	agent, id := st.agent, st.id
	return func(d time.Duration) {
		s.metrics.observeRequest(method, route, status, d)
		attrs := make([]slog.Attr, 0, 6)
		attrs = append(attrs, slog.String("method", method), slog.String("route", route), slog.Int("status", status),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000))
		if agent != "" {
			attrs = append(attrs, slog.String("agent", agent))
		}
		attrs = append(attrs, slog.String("request_id", id))
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
	}
}
