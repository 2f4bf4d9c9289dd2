package server

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
)

// The request path. Every request goes through front, and every
// authenticated route through one gate built from its route table entry
// (routeMiddleware): two calls in place of the seven middlewares it took
// before (request id, access log, panic recovery, Retry-After, auth, query
// check, admission), which were about 17% of aspd's CPU on the chat
// benchmark. What each step does, and its order, is unchanged:
//
//	front: request id -> (access log -> (panic recovery -> (Retry-After -> gate)))
//	gate:  authentication -> strict query check -> admission -> handler
//
// What the steps learn about the request (its id, the agent, its token, the
// checked query) lives in one reqState, set once per request.

// reqState is one request's state, shared by front, the gate and the
// handler; c.Get(stateKey).
type reqState struct {
	start    time.Time
	id       string       // request id (X-Request-Id)
	detached bool         // a handler took the request over: see detachAccessLog
	agent    string       // the authenticated agent, "" when none
	token    string       // its bearer token
	operator app.Operator // the authenticated operator token, on operator routes
	query    url.Values
	queried  bool // query holds the checked query string
}

const stateKey = "aspd.request"

// state returns the request's state, creating it for a context that did
// not pass through front (a handler called directly in a test).
func state(c echo.Context) *reqState {
	if st, ok := c.Get(stateKey).(*reqState); ok {
		return st
	}
	st := &reqState{start: time.Now()}
	c.Set(stateKey, st)
	return st
}

// front is the middleware of every request, routed or not. It gives the
// request an id, returned in the X-Request-Id response header and logged
// with any failure: the client's own X-Request-Id when it is sane (1 to 64
// printable ASCII characters, no spaces), or a fresh random one. It answers
// the handler's error here (echo's error handler) rather than after the
// chain, so that the access log (accesslog.go) records the status sent; it
// turns a panic into a 500, and tells a client refused for its rate (429)
// when to retry.
func (s *Server) front(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		st := &reqState{start: time.Now()}
		st.id = c.Request().Header.Get(echo.HeaderXRequestID)
		if !saneRequestID(st.id) {
			st.id = newRequestID()
		}
		c.Set(stateKey, st)
		c.Response().Header().Set(echo.HeaderXRequestID, st.id)
		if err := s.guard(c, next); err != nil {
			c.Error(err)
		}
		if !st.detached {
			s.accessRecord(c, st)(time.Since(st.start))
		}
		return nil
	}
}

// guard runs next, recovering a panic, and sets Retry-After on a refusal
// for rate.
func (s *Server) guard(c echo.Context, next echo.HandlerFunc) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in handler", "method", methodLabel(c.Request().Method), "route", c.Path(), "request_id", requestID(c), "panic", r)
			err = errors.New("panic")
		}
	}()
	err = next(c)
	var re *app.RetryError
	if err != nil && errors.As(err, &re) && !c.Response().Committed {
		c.Response().Header().Set("Retry-After", strconv.Itoa(re.RetryAfterSeconds()))
	}
	return err
}

func requestID(c echo.Context) string { return state(c).id }

// gate is a route's checks, in the documented order: authentication (auth,
// which the route's class picks; nil for none), the query string against
// the route's rule, then the route's per-agent rate limit (agent routes
// only) before the path and the body are looked at. The application method
// the handler calls then does not take a second token.
func (s *Server) gate(rt *route, auth func(echo.Context) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if auth != nil {
				if err := auth(c); err != nil {
					return err
				}
			}
			if err := strictQuery(c, rt.query); err != nil {
				return err
			}
			if rt.admit != 0 {
				ctx, err := s.app.Admit(c.Request().Context(), agent(c), rt.admit)
				if err != nil {
					return err
				}
				c.SetRequest(c.Request().WithContext(ctx))
			}
			return next(c)
		}
	}
}

// strictQuery checks the query string against the route's rule (its entry
// in the route table, routes.go) before the handler runs, so that no handler
// can forget. Handlers still read their values with query.
func strictQuery(c echo.Context, rule queryRule) error {
	// A group's catch-all not-found routes ("/*", or "/" for the root
	// group) stay the 404 of an unknown route, query or not.
	if p := c.Path(); p == "/" || strings.HasSuffix(p, "*") {
		return nil
	}
	_, err := checkedQuery(c, rule)
	return err
}
