// Package server is aspd's HTTP adapter: the ASP agent API (REST,
// WebSocket /connect, the frame endpoints), the operator API under
// /admin/v1, metrics and health checks. It routes, authenticates the bearer
// token, checks query strings, reads and strictly decodes bodies, calls one
// method of the application layer (internal/app) and writes its answer as
// JSON, Server-Sent Events or WebSocket messages. What a request may do, and
// publishing what it commits, is the application's business, not this
// package's. It is HTTP only: New is given the built application and the
// metrics registry, and internal/daemon builds, starts and stops the
// components; no store type crosses into this package.
//
// Every route is an entry of the route table in routes.go: method, path,
// authentication, query parameters, rate-limited action, request and
// response types, handler. routes() registers the table and nothing else.
package server

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// Config is the HTTP adapter's own configuration; cmd/aspd fills it from
// flags. What the application decides with (limits, rates, delivery,
// cluster) is app.Config, given to the application, not to the server.
type Config struct {
	MaxBodyBytes    int64         // request body limit
	AdminTokenHash  []byte        // SHA-256 of the bootstrap operator token (named ones are in the store)
	PingInterval    time.Duration // WebSocket keepalive
	WSReadLimit     int64         // largest client-to-server WebSocket message
	StreamKeepalive time.Duration // interval of SSE keepalive comments on GET /stream
}

// Server is aspd's HTTP surface over the application layer.
type Server struct {
	cfg  Config
	app  *app.App
	log  *slog.Logger
	echo *echo.Echo

	metrics  *metrics  // /metrics (metrics.go); the access log feeds it
	overview *overview // GET /admin/v1/overview's ring (overview.go), sampled from reg
}

// New builds the HTTP adapter over a, which the caller builds, starts and
// closes (internal/daemon). GET /metrics exposes reg, to which New adds the
// server's own metrics (metrics.go); the caller registers those of the
// other components.
func New(cfg Config, a *app.App, reg *prometheus.Registry, log *slog.Logger) *Server {
	s := &Server{cfg: cfg, app: a, log: log}
	s.metrics = newMetrics(s, reg)
	s.overview = newOverview(reg)
	s.echo = s.routes()
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.echo }

// routes registers every route of the route table (routes.go) with its own
// middleware. No group carries middleware: echo would register a catch-all
// behind it, and an unknown path or a wrong method would then be answered
// by authentication (401) instead of 404 not_found or 405
// method_not_allowed.
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.errorHandler
	// One middleware for every request (request.go), and one more per
	// route for its authentication, query check and admission
	// (routeMiddleware): the whole chain is two calls deep.
	e.Use(s.front)

	mounted := map[string]echo.HandlerFunc{}
	for i := range routeTable {
		rt := &routeTable[i]
		e.Add(rt.method, rt.path, s.routeHandler(rt, mounted), s.routeMiddleware(rt)...)
	}
	s.metrics.setRoutes(e.Routes())
	return e
}

// errorHandler writes every error as {"error": {"code", "message"}}. A 5xx
// is logged at ERROR with the request id that the X-Request-Id response
// header gave the client. A request whose client went away (its context
// cancelled) is not a failure of aspd: it is logged at DEBUG and answered
// with nothing, since nobody is there to read it.
func (s *Server) errorHandler(err error, c echo.Context) {
	req := c.Request()
	if errors.Is(req.Context().Err(), context.Canceled) && !isAnswer(err) {
		s.log.Debug("request abandoned by the client", "method", methodLabel(req.Method), "route", c.Path(), "request_id", requestID(c), "err", err)
		return
	}
	if c.Response().Committed {
		return
	}
	var pe *protocol.Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &pe):
	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			pe = protocol.NotFound()
		case http.StatusMethodNotAllowed:
			pe = protocol.Errorf(he.Code, "method_not_allowed", "method not allowed")
		case http.StatusRequestEntityTooLarge:
			pe = s.bodyTooLarge()
		default:
			pe = protocol.Errorf(he.Code, "http_error", "%v", he.Message)
		}
	default:
		if pe = app.WireError(err); pe == nil {
			pe = protocol.Errorf(http.StatusInternalServerError, protocol.CodeInternal, "internal error")
		}
	}
	if pe.Status == 0 {
		pe.Status = http.StatusBadRequest
	}
	switch {
	case pe.Code == protocol.CodeStoreUnavailable:
		// A store outage, not a bug: the store logs it once when it starts
		// and once when it ends, not once per request. The client is told
		// when to try again.
		s.log.Debug("request refused: store unavailable", "method", methodLabel(req.Method), "route", c.Path(), "request_id", requestID(c), "err", err)
		if c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", strconv.Itoa(app.StoreRetryAfterSeconds))
		}
	case pe.Status >= 500 && pe.Status != http.StatusNotImplemented:
		// 501 answers a request for a feature aspd does not offer; it is not a failure.
		s.log.Error("request failed", "method", methodLabel(req.Method), "route", c.Path(), "request_id", requestID(c), "status", pe.Status, "err", err)
	}
	if pe.Status == http.StatusTooManyRequests && c.Response().Header().Get("Retry-After") == "" {
		c.Response().Header().Set("Retry-After", "1")
	}
	_ = c.JSON(pe.Status, protocol.ErrorBody{Error: pe})
}

// isAnswer reports whether err is a deliberate answer (a protocol or HTTP
// error, or a store's domain error) rather than a failure, which a
// cancelled request may cause.
func isAnswer(err error) bool {
	var pe *protocol.Error
	var he *echo.HTTPError
	return errors.As(err, &pe) || errors.As(err, &he) || app.WireError(err) != nil
}

func saneRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// newRequestID returns 32 hex digits. Ids correlate log lines with
// answers; they need to be unique, not unguessable.
func newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

func (s *Server) bodyTooLarge() *protocol.Error {
	return protocol.Errorf(http.StatusRequestEntityTooLarge, protocol.CodeBodyTooLarge, "request body exceeds %d bytes", s.cfg.MaxBodyBytes)
}

// readBody reads the request body within MaxBodyBytes.
func (s *Server) readBody(c echo.Context) ([]byte, error) {
	r := http.MaxBytesReader(c.Response(), c.Request().Body, s.cfg.MaxBodyBytes)
	b, err := io.ReadAll(r)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, s.bodyTooLarge()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.Response().Header().Set("Connection", "close")
		return nil, protocol.Errorf(http.StatusRequestTimeout, protocol.CodeRequestTimeout, "the request body did not arrive within the read timeout")
	}
	if err != nil {
		return nil, protocol.Errorf(http.StatusBadRequest, protocol.CodeMalformedJSON, "reading body: %v", err)
	}
	return b, nil
}

// decode reads and strictly decodes the body into v.
func (s *Server) decode(c echo.Context, v any) error {
	b, err := s.readBody(c)
	if err != nil {
		return err
	}
	if perr := protocol.DecodeStrict(b, v); perr != nil {
		return perr
	}
	return nil
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz reports ready when the store can serve (app.Ready): the database
// answers and, after writes failed, a probe write commits. Not ready is 503
// store_unavailable with Retry-After, logged by the store once per outage,
// not per poll.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.app.Ready(ctx); err != nil {
		return protocol.Errorf(http.StatusServiceUnavailable, protocol.CodeStoreUnavailable, "the store cannot serve requests right now")
	}
	ready := map[string]any{"status": "ready", "store": s.app.StoreDialect(), "connections": s.app.DeliveryStats().Connections}
	if n := s.app.Node(); n != nil {
		ready["node"] = n.ID() // cluster.go
	}
	return c.JSON(http.StatusOK, ready)
}
