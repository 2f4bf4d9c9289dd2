package server

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/console"
)

// The operator endpoints the web console needs beyond the operator API it
// shares with aspctl: a health sample and a session's live transcript. The
// console's own pages are served by internal/console.

// liveKeepalive is the interval of SSE comments on a quiet live transcript,
// so that proxies and the browser see a live connection.
const liveKeepalive = 15 * time.Second

// liveWriteTimeout bounds one write of a live transcript; a client that
// does not read within it is cut off.
const liveWriteTimeout = 10 * time.Second

// consoleHandler serves the web console's pages and assets (GET /console...).
func (s *Server) consoleHandler() echo.HandlerFunc {
	return echo.WrapHandler(console.Handler("/console"))
}

// adminHealth is GET /admin/v1/health.
func (s *Server) adminHealth(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.app.Health(c.Request().Context()))
}

// adminLiveEvents is GET /admin/v1/sessions/{id}/events/live: the session's
// complete log after after_sequence, then its new events as they commit, as
// Server-Sent Events (id = sequence, data = the event's JSON).
func (s *Server) adminLiveEvents(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	p, err := pageParams(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	w, err := s.app.WatchSession(ctx, id, p.After)
	if err != nil {
		return err
	}
	defer w.Close()

	write := startSSE(c, liveWriteTimeout)
	if err := write([]byte(": aspd live transcript\n\n")); err != nil {
		return nil
	}
	var buf bytes.Buffer
	for {
		evs, err := w.Next(ctx, liveKeepalive)
		switch {
		case errors.Is(err, app.ErrStopping):
			return nil
		case err != nil:
			if ctx.Err() == nil {
				app.LogFailure(s.log, "live transcript: reading events failed", err, "session", id, "request_id", requestID(c))
			}
			return nil
		case len(evs) == 0:
			if err := write([]byte(": keepalive\n\n")); err != nil {
				return nil
			}
			continue
		}
		// One write per batch: the whole read goes out in one flush.
		buf.Reset()
		for i := range evs {
			// Stored bodies are compact JSON; a newline would still only
			// split the data over several lines, which SSE joins back.
			body := bytes.ReplaceAll(evs[i].Body, []byte("\n"), []byte("\ndata: "))
			fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", evs[i].Sequence, body)
		}
		if err := write(buf.Bytes()); err != nil {
			return nil
		}
	}
}
