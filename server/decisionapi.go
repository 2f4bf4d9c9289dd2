package server

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
)

// Binding moments over REST (docs/decisions.md): the reads an MCP tool or
// a principal's surface needs beyond POST /sessions/{id}/messages, which
// both emits and resolves moments.

// pendingDecisions is GET /decisions/pending.
func (s *Server) pendingDecisions(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	list, err := s.app.PendingDecisions(c.Request().Context(), agent(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, list)
}

// getDecision is GET /decisions/{moment_id}.
func (s *Server) getDecision(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	d, err := s.app.Decision(c.Request().Context(), agent(c), c.Param("moment_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

// awaitDecision is GET /decisions/{moment_id}/await?timeout_seconds=N: the
// moment once resolved, or as it is when the timeout (0 to 60 s, default 30)
// passes.
func (s *Server) awaitDecision(c echo.Context) error {
	q, err := query(c)
	if err != nil {
		return err
	}
	var timeout *int
	if v := q.Get("timeout_seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return protocol.Invalid("timeout_seconds must be an integer")
		}
		timeout = &n
	}
	d, err := s.app.AwaitDecision(c.Request().Context(), agent(c), c.Param("moment_id"), timeout)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

// resolveDecision is POST /decisions/{moment_id}/resolve: a resolution
// message in the moment's session, sent on the caller's behalf.
func (s *Server) resolveDecision(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	var req protocol.ResolveRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	resp, err := s.app.ResolveDecision(c.Request().Context(), agent(c), c.Param("moment_id"), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, resp)
}
