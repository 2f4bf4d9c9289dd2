package server

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// sessionID returns the path's session id; a malformed one is the same 404
// as a missing session.
func sessionID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !protocol.ValidSessionID(id) {
		return "", protocol.NotFound()
	}
	return id, nil
}

func (s *Server) createSession(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	var req protocol.CreateSessionRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	resp, err := s.app.CreateSession(c.Request().Context(), agent(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, resp)
}

func (s *Server) join(c echo.Context) error  { return s.simple(c, s.app.Join) }
func (s *Server) leave(c echo.Context) error { return s.simple(c, s.app.Leave) }
func (s *Server) end(c echo.Context) error   { return s.simple(c, s.app.End) }

// simple handles the body-less actions that answer {ok: true}.
func (s *Server) simple(c echo.Context, act func(ctx context.Context, caller, id string) error) error {
	id, err := s.sessionRequest(c, &struct{}{})
	if err != nil {
		return err
	}
	if err := act(c.Request().Context(), agent(c), id); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, protocol.OK{OK: true})
}

// sessionRequest checks the query string and the path's session id, then
// decodes the body into req.
func (s *Server) sessionRequest(c echo.Context, req any) (string, error) {
	if _, err := query(c); err != nil {
		return "", err
	}
	id, err := sessionID(c)
	if err != nil {
		return "", err
	}
	if err := s.decode(c, req); err != nil {
		return "", err
	}
	return id, nil
}

func (s *Server) invite(c echo.Context) error {
	var req protocol.InviteRequest
	id, err := s.sessionRequest(c, &req)
	if err != nil {
		return err
	}
	resp, err := s.app.Invite(c.Request().Context(), agent(c), id, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

func (s *Server) sendMessage(c echo.Context) error {
	var req protocol.SendMessageRequest
	id, err := s.sessionRequest(c, &req)
	if err != nil {
		return err
	}
	resp, err := s.app.SendMessage(c.Request().Context(), agent(c), id, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, resp)
}

func (s *Server) reopen(c echo.Context) error {
	var req protocol.ReopenRequest
	id, err := s.sessionRequest(c, &req)
	if err != nil {
		return err
	}
	if err := s.app.Reopen(c.Request().Context(), agent(c), id, req); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, protocol.OK{OK: true})
}

func (s *Server) getSession(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	sess, err := s.app.Session(c.Request().Context(), agent(c), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sess)
}

// pageParams parses after_sequence (or its alias cursor, which is what
// next_cursor holds) and limit from the request's checked query parameters.
func pageParams(c echo.Context) (app.Page, error) {
	q, err := query(c)
	if err != nil {
		return app.Page{}, err
	}
	return app.PageQuery{AfterSequence: q.Get("after_sequence"), Cursor: q.Get("cursor"), Limit: q.Get("limit")}.Page()
}

// listEvents is GET /sessions/{id}/events, filtered by eligibility.
func (s *Server) listEvents(c echo.Context) error {
	p, err := pageParams(c)
	if err != nil {
		return err
	}
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	page, err := s.app.Events(c.Request().Context(), agent(c), id, p)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}

// listSessions is GET /sessions: the caller's sessions, newest first.
func (s *Server) listSessions(c echo.Context) error {
	f, err := sessionFilter(c)
	if err != nil {
		return err
	}
	out, err := s.app.Sessions(c.Request().Context(), agent(c), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}
