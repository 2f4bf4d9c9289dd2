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
// shares with aspctl: a health sample, the overview (overview.go), a
// session's live transcript, its download, and the operator's actions on a
// session (end it, remove a participant). The
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

// adminEndSession is POST /admin/v1/sessions/{id}/end: the operator ends an
// active session (409 session_ended if it already is).
func (s *Server) adminEndSession(c echo.Context) error {
	id, err := s.sessionRequest(c, &struct{}{})
	if err != nil {
		return err
	}
	sess, err := s.app.OperatorEnd(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sess)
}

// adminRemoveParticipant is DELETE /admin/v1/sessions/{id}/participants/{handle}:
// the operator takes a joined or invited agent out of an active session.
func (s *Server) adminRemoveParticipant(c echo.Context) error {
	id, err := s.sessionRequest(c, &struct{}{})
	if err != nil {
		return err
	}
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	sess, err := s.app.RemoveParticipant(c.Request().Context(), id, h)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sess)
}

// adminTranscript is GET /admin/v1/sessions/{id}/transcript: the session's
// complete log as JSON Lines, offered as a file download (the console's
// Download transcript); the same lines as GET /admin/v1/export?session=.
func (s *Server) adminTranscript(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	if _, err := query(c); err != nil {
		return err
	}
	// A session id is sess_ and [0-9A-Z] only (protocol.ValidSessionID), safe
	// in a quoted file name.
	return s.writeExport(c, app.ExportRequest{Session: id}, id+".jsonl")
}
