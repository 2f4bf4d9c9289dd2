// Package server exposes aspd over HTTP: the ASP agent API (REST and
// WebSocket /connect), the operator API under /admin/v1, and health checks.
// Handlers decode and validate with package protocol, persist with package
// store, and publish committed events to package hub, in that order.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/hub"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
	"github.com/aspd/aspd/streams"
)

// Config is the server's configuration; cmd/aspd fills it from flags.
type Config struct {
	Limits         protocol.Limits
	MaxBodyBytes   int64         // request body limit
	AdminTokenHash []byte        // SHA-256 of the operator token
	GraceWindow    time.Duration // how long a disconnected agent stays joined
	PingInterval   time.Duration // WebSocket keepalive
	WSReadLimit    int64         // largest client-to-server WebSocket message
	Hub            hub.Config
	Frames         FramesConfig
	// Per-agent request rates (token buckets); a rate of 0 disables the limit.
	ContactRate  float64 // POST /sessions, /invite, /reopen: contact attempts
	ContactBurst int
	MessageRate  float64 // POST /sessions/{id}/messages
	MessageBurst int
}

// Server is aspd's HTTP surface.
type Server struct {
	cfg  Config
	st   *store.Store
	hub  *hub.Hub
	log  *slog.Logger
	echo *echo.Echo
	auth *authCache

	streams  *streams.Registry
	limiter  *rateLimiter // frame submissions
	contacts *rateLimiter // nil = unlimited
	messages *rateLimiter // nil = unlimited

	stop chan struct{}
	wg   sync.WaitGroup
}

// New builds a server on st. Call Start to run background work and Close to stop.
func New(cfg Config, st *store.Store, log *slog.Logger) *Server {
	s := &Server{cfg: cfg, st: st, log: log, auth: newAuthCache(), stop: make(chan struct{}),
		streams: streams.New(cfg.Frames.Retention), limiter: newRateLimiter(cfg.Frames.RatePerSecond, cfg.Frames.Burst)}
	if cfg.ContactRate > 0 {
		s.contacts = newRateLimiter(cfg.ContactRate, max(cfg.ContactBurst, 1))
	}
	if cfg.MessageRate > 0 {
		s.messages = newRateLimiter(cfg.MessageRate, max(cfg.MessageBurst, 1))
	}
	s.hub = hub.New(cfg.Hub, st, presence{s}, log)
	s.echo = s.routes()
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Hub returns the delivery hub.
func (s *Server) Hub() *hub.Hub { return s.hub }

// Start recovers presence left by a previous process and starts the grace
// window sweeper.
func (s *Server) Start(ctx context.Context) error {
	commits, err := s.st.RecoverPresence(ctx)
	if err != nil {
		return err
	}
	if len(commits) > 0 {
		s.log.Info("presence recovered after restart: agents online before the restart have a fresh grace window", "sessions", len(commits))
	}
	s.hub.PublishAll(commits)
	s.wg.Add(2)
	go s.sweepGrace()
	go s.expireFrames()
	return nil
}

// expireFrames drops retained frames past their age even on handles that
// nothing touches any more, so retention memory follows --frame-retain-age.
func (s *Server) expireFrames() {
	defer s.wg.Done()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.streams.ExpireAll()
		}
	}
}

// Close stops background work and closes every live connection.
func (s *Server) Close() {
	close(s.stop)
	s.wg.Wait()
	s.hub.Close()
}

// sweepGrace promotes disconnects older than the grace window to
// session.left {reason: grace_expired}.
func (s *Server) sweepGrace() {
	defer s.wg.Done()
	every := min(max(s.cfg.GraceWindow/4, 50*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			commits, err := s.st.ExpireGrace(ctx, time.Now().Add(-s.cfg.GraceWindow).UnixMilli())
			cancel()
			if err != nil {
				s.log.Error("grace window sweep failed", "err", err)
			}
			if len(commits) > 0 {
				s.log.Info("grace window expired", "sessions", len(commits))
			}
			s.hub.PublishAll(commits)
		}
	}
}

// presence appends session.reconnected/disconnected when an agent's first
// connection opens or its last one closes.
type presence struct{ s *Server }

func (p presence) Online(ctx context.Context, h string) {
	commits, err := p.s.st.MarkOnline(ctx, h)
	if err != nil {
		p.s.log.Error("presence: mark online failed", "agent", h, "err", err)
	}
	p.s.hub.PublishAll(commits)
}

func (p presence) Offline(ctx context.Context, h string) {
	commits, err := p.s.st.MarkOffline(ctx, h)
	if err != nil {
		p.s.log.Error("presence: mark offline failed", "agent", h, "err", err)
	}
	p.s.hub.PublishAll(commits)
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.requestID, s.recoverer)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)

	a := e.Group("", s.agentAuth, s.strictQuery)
	a.POST("/sessions", s.createSession, s.limit(func() *rateLimiter { return s.contacts }, "contact attempts"))
	a.GET("/sessions", s.listSessions)
	a.GET("/sessions/:id", s.getSession)
	a.GET("/sessions/:id/events", s.listEvents)
	a.POST("/sessions/:id/join", s.join)
	a.POST("/sessions/:id/invite", s.invite, s.limit(func() *rateLimiter { return s.contacts }, "contact attempts"))
	a.POST("/sessions/:id/messages", s.sendMessage, s.limit(func() *rateLimiter { return s.messages }, "messages"))
	a.POST("/sessions/:id/leave", s.leave)
	a.POST("/sessions/:id/end", s.end)
	a.POST("/sessions/:id/reopen", s.reopen, s.limit(func() *rateLimiter { return s.contacts }, "contact attempts"))
	a.GET("/connect", s.connect)
	a.POST("/frames", s.submitFrame)
	a.GET("/stream", s.openStream)
	a.GET("/stream/roster", s.roster)

	s.adminRoutes(e.Group("/admin/v1", s.adminAuth))
	e.GET("/metrics", s.metrics, s.adminAuth, s.strictQuery)
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
		s.log.Debug("request abandoned by the client", "method", req.Method, "route", c.Path(), "request_id", requestID(c), "err", err)
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
		if pe = WireError(err); pe == nil {
			pe = protocol.Errorf(http.StatusInternalServerError, protocol.CodeInternal, "internal error")
		}
	}
	if pe.Status == 0 {
		pe.Status = http.StatusBadRequest
	}
	// 501 answers a request for a feature aspd does not offer; it is not a failure.
	if pe.Status >= 500 && pe.Status != http.StatusNotImplemented {
		s.log.Error("request failed", "method", req.Method, "route", c.Path(), "request_id", requestID(c), "status", pe.Status, "err", err)
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
	return errors.As(err, &pe) || errors.As(err, &he) || WireError(err) != nil
}

// requestID gives every request an id, returned in the X-Request-Id
// response header and logged with any failure: the client's own
// X-Request-Id when it is sane (1 to 64 printable ASCII characters, no
// spaces), or a fresh random one.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !saneRequestID(id) {
			id = newRequestID()
		}
		c.Set("requestID", id)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
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

func requestID(c echo.Context) string {
	id, _ := c.Get("requestID").(string)
	return id
}

// limit applies a per-agent rate limit (429 rate_limited with Retry-After)
// when one is configured.
func (s *Server) limit(l func() *rateLimiter, what string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			lim := l()
			if lim == nil {
				return next(c)
			}
			if wait, ok := lim.allow(agent(c)); !ok {
				c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
				return protocol.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, "rate limit for %s is %g per second", what, lim.rate)
			}
			return next(c)
		}
	}
}

func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("panic in handler", "method", c.Request().Method, "route", c.Path(), "request_id", requestID(c), "panic", r)
				err = errors.New("panic")
			}
		}()
		return next(c)
	}
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

// readyz reports ready when the database answers.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.st.Ping(ctx); err != nil {
		return protocol.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "database unreachable")
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "store": s.st.Dialect(), "connections": s.hub.Connections()})
}

// HashToken returns the SHA-256 of a bearer token. Tokens are >= 256-bit
// random strings, so a fast hash is what protects them at rest; a slow KDF
// would only slow every request.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func bearer(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

func unauthorized() *protocol.Error {
	return protocol.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "missing or invalid bearer token")
}

// adminAuth checks the operator token in constant time.
func (s *Server) adminAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		tok := bearer(c.Request())
		if tok == "" || len(s.cfg.AdminTokenHash) == 0 || subtle.ConstantTimeCompare(HashToken(tok), s.cfg.AdminTokenHash) != 1 {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="aspd-admin"`)
			return unauthorized()
		}
		return next(c)
	}
}

// agentAuth authenticates an agent by bearer token (or ?token= on
// /connect only) and stores its handle in the context.
func (s *Server) agentAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		tok := bearer(c.Request())
		if tok == "" && c.Path() == "/connect" {
			tok = c.QueryParam("token")
		}
		if tok == "" {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="aspd"`)
			return unauthorized()
		}
		handle, err := s.authenticate(c.Request().Context(), tok)
		if err != nil {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="aspd"`)
			return err
		}
		c.Set("agent", handle)
		c.Set("tokenHash", HashToken(tok))
		return next(c)
	}
}

func (s *Server) authenticate(ctx context.Context, tok string) (string, error) {
	hash := HashToken(tok)
	if h, ok := s.auth.get(hash); ok {
		return h, nil
	}
	gen := s.auth.generation() // before the read: see putIf
	h, err := s.st.Authenticate(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return "", unauthorized()
	}
	if err != nil {
		return "", err
	}
	s.auth.putIf(hash, h, gen)
	return h, nil
}

// stillValid re-checks, against the store and not the cache, that the
// request's token still belongs to its agent. Long-lived streams call it
// after registering: a rotation, revocation or deletion that committed
// between authentication and registration is caught here, and any later one
// finds the stream registered and closes it.
func (s *Server) stillValid(c echo.Context) bool {
	hash, _ := c.Get("tokenHash").([]byte)
	h, err := s.st.Authenticate(context.Background(), hash)
	return err == nil && h == agent(c)
}

func agent(c echo.Context) string { return c.Get("agent").(string) }

// authCache maps token hashes to handles so authenticated requests cost no
// database round trip. Rotation, revocation and deletion evict the handle's
// entries at once (this node; a cluster would add a short TTL).
type authCache struct {
	mu       sync.RWMutex
	byHash   map[[32]byte]string
	byHandle map[string][][32]byte
	gen      uint64 // bumped by every eviction
}

func newAuthCache() *authCache {
	return &authCache{byHash: map[[32]byte]string{}, byHandle: map[string][][32]byte{}}
}

func (a *authCache) get(hash []byte) (string, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	h, ok := a.byHash[[32]byte(hash)]
	return h, ok
}

// generation identifies the cache's eviction history.
func (a *authCache) generation() uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.gen
}

// putIf caches hash -> handle unless an eviction happened since gen was
// read: a lookup that raced a rotation must not put the old token back.
func (a *authCache) putIf(hash []byte, handle string, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen {
		return
	}
	if len(a.byHash) > 100_000 {
		clear(a.byHash)
		clear(a.byHandle)
	}
	k := [32]byte(hash)
	a.byHash[k] = handle
	a.byHandle[handle] = append(a.byHandle[handle], k)
}

func (a *authCache) evict(handle string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	for _, k := range a.byHandle[handle] {
		delete(a.byHash, k)
	}
	delete(a.byHandle, handle)
}

// requestHash identifies a request for idempotent retries: the same key with
// a different request is refused rather than silently answered.
func requestHash(v any) string {
	b, _ := json.Marshal(v)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}
