package server

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
)

// adminSearch is GET /admin/v1/search, the operator's transcript search
// (docs/search.md). Every rule is app.Search's; the query parameters it
// takes are its rule in the route table (routes.go).
func (s *Server) adminSearch(c echo.Context) error {
	q, err := query(c)
	if err != nil {
		return err
	}
	res, err := s.app.Search(c.Request().Context(), app.SearchQuery{
		Q: q.Get("q"), Session: q.Get("session"), Sender: q.Get("sender"), Participant: q.Get("participant"),
		Type: q.Get("type"), Since: q.Get("since"), Until: q.Get("until"), Cursor: q.Get("cursor"), Limit: q.Get("limit"),
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}
