package server

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
)

// HashToken returns the SHA-256 of a bearer token (see app.HashToken).
func HashToken(token string) []byte { return app.HashToken(token) }

// NewToken returns a fresh agent token: 256 random bits, URL-safe.
func NewToken() string { return app.NewToken() }

func bearer(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// agentAuth authenticates an agent by bearer token (or ?token= on
// /connect only) and keeps its handle and token in the request's state
// (gate).
func (s *Server) agentAuth(c echo.Context) error {
	tok, ok := agentToken(c)
	if !ok || tok == "" {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="aspd"`)
		return app.Unauthorized()
	}
	handle, err := s.app.Authenticate(c.Request().Context(), tok)
	if err != nil {
		// The challenge belongs to a 401 only: a store outage (503)
		// says nothing about the token.
		if pe := app.Answer(err); pe.Status == http.StatusUnauthorized {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="aspd"`)
		}
		return err
	}
	st := state(c)
	st.agent, st.token = handle, tok
	return nil
}

// agentToken is the token a request presents: its bearer token, or on
// /connect its ?token=. A /connect request that presents both must present
// one token twice (ok false otherwise): which of two agents it means would
// be a guess, and a proxy or client that adds one form while the caller set
// the other is confused, not to be served as either agent.
func agentToken(c echo.Context) (tok string, ok bool) {
	tok = bearer(c.Request())
	if c.Path() != "/connect" {
		return tok, true
	}
	// Every value: a repeated token= is refused later (strictQuery), but
	// not before authentication has picked one.
	for _, q := range c.QueryParams()["token"] {
		switch {
		case q == "":
		case tok == "":
			tok = q
		case subtle.ConstantTimeCompare([]byte(q), []byte(tok)) != 1:
			return "", false
		}
	}
	return tok, true
}

// agent is the authenticated agent's handle.
func agent(c echo.Context) string { return state(c).agent }

// token is the authenticated agent's bearer token, which long-lived streams
// hand to the application to be checked again once they are registered.
func token(c echo.Context) string { return state(c).token }
