package server

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// Chorus webhooks (docs/chorus.md): the operator's registration routes and
// the callback endpoint agents POST to (routes in routes.go). The rules are internal/app's
// (chorus.go); delivery is internal/chorus's worker, which internal/daemon runs.

func (s *Server) adminSetChorus(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	var req protocol.ChorusRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	reg, err := s.app.SetChorus(c.Request().Context(), h, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, reg)
}

func (s *Server) adminGetChorus(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	info, err := s.app.Chorus(c.Request().Context(), h)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, info)
}

func (s *Server) adminDeleteChorus(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	if err := s.app.DeleteChorus(c.Request().Context(), h); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, protocol.OK{OK: true})
}

func (s *Server) adminChorusDeliveries(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	q, err := query(c)
	if err != nil {
		return err
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil {
			return protocol.Invalid("limit must be a number from 1 to %d", app.MaxChorusDeliveriesListed)
		}
	}
	ds, err := s.app.ChorusDeliveries(c.Request().Context(), h, limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"deliveries": ds})
}

func (s *Server) adminChorusRedeliver(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	id, err := url.PathUnescape(c.Param("id"))
	if err != nil {
		return protocol.NotFound()
	}
	if err := s.app.RedeliverChorus(c.Request().Context(), h, id); err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, protocol.OK{OK: true})
}

func (s *Server) chorusCallback(c echo.Context) error {
	var req protocol.ChorusCallbackRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	resp, err := s.app.ChorusCallback(c.Request().Context(), c.Param("token"), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}
