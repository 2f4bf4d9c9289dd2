package server

import (
	"bufio"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// AgentWithToken is the answer to agent creation and token rotation.
type AgentWithToken = protocol.AgentWithToken

// pathHandle returns the :handle path parameter, which must be a handle.
func pathHandle(c echo.Context, name string) (string, error) {
	h, err := url.PathUnescape(c.Param(name))
	if err != nil || !protocol.ValidHandle(h) {
		return "", protocol.NotFound()
	}
	return h, nil
}

// agentJSON answers an operator action with an agent's record.
func agentJSON(c echo.Context, status int, v any, err error) error {
	if err != nil {
		return err
	}
	return c.JSON(status, v)
}

func (s *Server) adminCreateAgent(c echo.Context) error {
	var req protocol.CreateAgentRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	a, err := s.app.CreateAgent(c.Request().Context(), req)
	return agentJSON(c, http.StatusCreated, a, err)
}

func (s *Server) adminListAgents(c echo.Context) error {
	q, err := query(c)
	if err != nil {
		return err
	}
	agents, err := s.app.AdminAgents(c.Request().Context(), q.Get("owner"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"agents": agents})
}

func (s *Server) adminGetAgent(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	a, err := s.app.Agent(c.Request().Context(), h)
	return agentJSON(c, http.StatusOK, a, err)
}

func (s *Server) adminDeleteAgent(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	if err := s.app.DeleteAgent(c.Request().Context(), h); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, protocol.OK{OK: true})
}

// agentUpdate handles PUT/POST/DELETE on an agent's settings: the path's
// handle, a body decoded into a fresh Req, one application action.
func agentUpdate[Req any](s *Server, act func(c echo.Context, h string, req Req) (*protocol.Agent, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		h, err := pathHandle(c, "handle")
		if err != nil {
			return err
		}
		var req Req
		if err := s.decode(c, &req); err != nil {
			return err
		}
		a, err := act(c, h, req)
		return agentJSON(c, http.StatusOK, a, err)
	}
}

func (s *Server) adminSetPolicy(c echo.Context) error {
	return agentUpdate(s, func(c echo.Context, h string, req protocol.PolicyRequest) (*protocol.Agent, error) {
		return s.app.SetPolicy(c.Request().Context(), h, req)
	})(c)
}

func (s *Server) adminAllowlist(op app.AllowlistOp) echo.HandlerFunc {
	return agentUpdate(s, func(c echo.Context, h string, req protocol.AllowlistRequest) (*protocol.Agent, error) {
		return s.app.UpdateAllowlist(c.Request().Context(), h, op, req)
	})
}

// The allowlist's three operations (PUT, POST, DELETE .../allowlist).
func (s *Server) adminAllowlistReplace(c echo.Context) error {
	return s.adminAllowlist(app.AllowlistReplace)(c)
}
func (s *Server) adminAllowlistAdd(c echo.Context) error {
	return s.adminAllowlist(app.AllowlistAdd)(c)
}
func (s *Server) adminAllowlistRemove(c echo.Context) error {
	return s.adminAllowlist(app.AllowlistRemove)(c)
}

func (s *Server) adminSetRoles(c echo.Context) error {
	return agentUpdate(s, func(c echo.Context, h string, req protocol.RolesRequest) (*protocol.Agent, error) {
		return s.app.SetRoles(c.Request().Context(), h, req)
	})(c)
}

func (s *Server) adminBlock(c echo.Context) error {
	return agentUpdate(s, func(c echo.Context, h string, req protocol.BlockRequest) (*protocol.Agent, error) {
		return s.app.Block(c.Request().Context(), h, req)
	})(c)
}

func (s *Server) adminUnblock(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	blocked, err := pathHandle(c, "blocked")
	if err != nil {
		return err
	}
	a, err := s.app.Unblock(c.Request().Context(), h, blocked)
	return agentJSON(c, http.StatusOK, a, err)
}

// adminRotateToken issues a new token; the old one stops working at once,
// and connections opened with it are closed.
func (s *Server) adminRotateToken(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	a, err := s.app.RotateToken(c.Request().Context(), h)
	return agentJSON(c, http.StatusOK, a, err)
}

func (s *Server) adminRevokeToken(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	a, err := s.app.RevokeToken(c.Request().Context(), h)
	return agentJSON(c, http.StatusOK, a, err)
}

// sessionFilter parses the listing filters shared by GET /sessions and the
// operator's listing and export, from the request's checked query
// parameters (which of them a route takes is its rule in routes.go).
func sessionFilter(c echo.Context) (app.SessionFilter, error) {
	q, err := query(c)
	if err != nil {
		return app.SessionFilter{}, err
	}
	return app.SessionQuery{State: q.Get("state"), Status: q.Get("status"), Before: q.Get("before"), Cursor: q.Get("cursor"),
		Limit: q.Get("limit"), Since: q.Get("since"), Until: q.Get("until"), Participant: q.Get("participant")}.Filter()
}

func (s *Server) adminListSessions(c echo.Context) error {
	f, err := sessionFilter(c)
	if err != nil {
		return err
	}
	out, err := s.app.AdminSessions(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) adminGetSession(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	ss, err := s.app.AdminSession(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ss)
}

// adminSessionEvents is a session's complete, unfiltered event log.
func (s *Server) adminSessionEvents(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	p, err := pageParams(c)
	if err != nil {
		return err
	}
	page, err := s.app.AdminEvents(c.Request().Context(), id, p)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}

// adminExport streams events as JSON Lines: one session (?session=) or
// every session matching the listing filters (participant, state, since,
// until), each session's events in sequence order.
func (s *Server) adminExport(c echo.Context) error {
	f, err := sessionFilter(c)
	if err != nil {
		return err
	}
	q, err := query(c)
	if err != nil {
		return err
	}
	// session, when given, comes alone: no other filter (query.go).
	return s.writeExport(c, app.ExportRequest{Filter: f, Session: q.Get("session")}, "")
}

// writeExport streams req's events as JSON Lines; attachment, when not
// empty, is the file name the answer is offered to be saved as.
func (s *Server) writeExport(c echo.Context, req app.ExportRequest, attachment string) error {
	// The status line goes out before the first event, so success or failure
	// of the whole export is reported in an HTTP trailer: Aspd-Export-Status
	// is "complete" only when every event was written.
	w := c.Response()
	bw := bufio.NewWriterSize(w, 64<<10)
	begun := false
	begin := func() {
		begun = true
		w.Header().Set("Content-Type", "application/x-ndjson")
		if attachment != "" {
			w.Header().Set("Content-Disposition", `attachment; filename="`+attachment+`"`)
		}
		w.Header().Set("Trailer", "Aspd-Export-Status, Aspd-Export-Events")
		w.WriteHeader(http.StatusOK)
	}
	emit := func(body []byte) error {
		if _, err := bw.Write(body); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	}
	n, err := s.app.Export(c.Request().Context(), req, begin, emit)
	if !begun {
		return err
	}
	if err == nil {
		err = bw.Flush()
	}
	status := "complete"
	if err != nil {
		app.LogFailure(s.log, "export failed midway", err, "events_written", n)
		status = "error"
	}
	w.Header().Set("Aspd-Export-Status", status)
	w.Header().Set("Aspd-Export-Events", strconv.Itoa(n))
	return nil
}

// adminRedact removes an event's content (docs/api.md, "Redacted events")
// and answers the event as readers now see it.
func (s *Server) adminRedact(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	seq, err := strconv.ParseInt(c.Param("sequence"), 10, 64)
	if err != nil {
		return protocol.NotFound()
	}
	var req protocol.RedactRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	ev, err := s.app.Redact(c.Request().Context(), id, seq, operatorName(c), req)
	if err != nil {
		return err
	}
	return c.JSONBlob(http.StatusOK, ev)
}

// operatorName is the name of the operator token that authenticated the
// request ("bootstrap" for the admin token), recorded as a redaction's "by".
func operatorName(c echo.Context) string { return operator(c).Name }
