package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/framefeed"
)

// streamWriteTimeout bounds one write of a frame stream; a client that
// reads slower is cut off.
const streamWriteTimeout = 10 * time.Second

// openStream is GET /stream: the caller's per-handle stream of frames as
// Server-Sent Events.
func (s *Server) openStream(c echo.Context) error {
	lastID := c.Request().Header.Get("Last-Event-ID")
	st, err := s.app.OpenStream(c.Request().Context(), agent(c), token(c), app.StreamRequest{
		Instrument: c.QueryParam("instrument"), Session: c.QueryParam("session"),
		Filter: c.QueryParam("filter"), LastEventID: lastID})
	if err != nil {
		return err
	}
	defer st.Close()

	write := startSSE(c, streamWriteTimeout)
	if err := write([]byte(": aspd frame stream\n\n")); err != nil {
		return nil
	}
	if st.Gap && lastID != "" {
		msg, _ := json.Marshal(map[string]string{"code": "resume-gap", "last_event_id": lastID,
			"message": "frames after this id are no longer retained; continuing from the oldest retained frame"})
		if err := write([]byte("event: stream-gap\ndata: " + string(msg) + "\n\n")); err != nil {
			return nil
		}
	}
	var buf bytes.Buffer
	send := func(d framefeed.Delivery) error {
		buf.Reset()
		fmt.Fprintf(&buf, "id: %s\nevent: %s\ndata: %s\n\n", d.ID, d.Kind, d.Data)
		return write(buf.Bytes())
	}
	for _, d := range st.Replay {
		if err := send(d); err != nil {
			return nil
		}
	}
	keep := time.NewTicker(s.cfg.StreamKeepalive)
	defer keep.Stop()
	ctx := c.Request().Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-st.Sub.Dropped():
			return nil
		case <-s.app.Stopping():
			return nil
		case <-keep.C:
			if err := write([]byte(": keepalive\n\n")); err != nil {
				return nil
			}
		case d := <-st.Sub.C:
			if err := send(d); err != nil {
				return nil
			}
		}
	}
}

// startSSE answers 200 with a Server-Sent Events stream and returns the
// function that writes one chunk of it: bounded by timeout, and flushed at
// once (no proxy buffering either: X-Accel-Buffering).
func startSSE(c echo.Context, timeout time.Duration) func([]byte) error {
	w := c.Response()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
}
