package server

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
)

// FrameSubmission is the body of POST /frames.
type FrameSubmission = protocol.FrameSubmission

// FrameResult answers POST /frames: how many streams the frame reached.
type FrameResult = protocol.FrameResult

// submitFrame is POST /frames: an ephemeral frame fanned out to live streams.
func (s *Server) submitFrame(c echo.Context) error {
	var req protocol.FrameSubmission
	if err := s.decode(c, &req); err != nil {
		return err
	}
	res, err := s.app.SubmitFrame(c.Request().Context(), agent(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// roster is GET /stream/roster: the caller's own live streams, never anyone else's.
func (s *Server) roster(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"streams": s.app.Roster(agent(c))})
}
