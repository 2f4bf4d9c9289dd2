package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
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

// validateInitial validates an optional initial message and returns the
// recipients of the frames it carries.
func (s *Server) validateInitial(m *protocol.InitialMessage, sender string) ([]string, error) {
	if m == nil {
		return nil, nil
	}
	recipients, err := s.validateContent(m.Content, sender)
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Limits.ValidateMetadata(m.Metadata); err != nil {
		return nil, err
	}
	return recipients, nil
}

// validateContent validates message content, including the agent-channel
// frames its data parts carry, and returns the frames' recipients.
func (s *Server) validateContent(raw json.RawMessage, sender string) ([]string, error) {
	c, err := s.cfg.Limits.ValidateContent(raw)
	if err != nil {
		return nil, err
	}
	return s.sessionFrames(c, sender)
}

func (s *Server) createSession(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	me := agent(c)
	var req protocol.CreateSessionRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	invite, perr := s.cfg.Limits.ValidateInvitees(me, req.Invite)
	if perr != nil {
		return perr
	}
	if err := s.cfg.Limits.ValidateTopic(req.Topic); err != nil {
		return err
	}
	if req.EndAfterSend && req.InitialMessage == nil {
		return protocol.Invalid("end_after_send requires initial_message")
	}
	recipients, err := s.validateInitial(req.InitialMessage, me)
	if err != nil {
		return err
	}
	if err := protocol.ValidateIdempotencyKey(req.IdempotencyKey); err != nil {
		return err
	}
	key, hash := "", ""
	if req.IdempotencyKey != nil {
		key, hash = *req.IdempotencyKey, requestHash(req)
	}
	resp, commit, err := s.st.CreateSession(c.Request().Context(), store.CreateSession{
		Creator: me, Invite: invite, Topic: req.Topic, Initial: req.InitialMessage,
		EndAfterSend: req.EndAfterSend, IdempotencyKey: key, RequestHash: hash, FrameRecipients: recipients})
	if err != nil {
		return err
	}
	s.hub.Publish(commit)
	return c.JSON(http.StatusCreated, resp)
}

func (s *Server) join(c echo.Context) error {
	return s.simple(c, func(id string) (*store.Commit, error) { return s.st.Join(c.Request().Context(), id, agent(c)) })
}

func (s *Server) leave(c echo.Context) error {
	return s.simple(c, func(id string) (*store.Commit, error) { return s.st.Leave(c.Request().Context(), id, agent(c)) })
}

func (s *Server) end(c echo.Context) error {
	return s.simple(c, func(id string) (*store.Commit, error) { return s.st.End(c.Request().Context(), id, agent(c)) })
}

// simple handles the body-less actions that answer {ok: true}.
func (s *Server) simple(c echo.Context, act func(id string) (*store.Commit, error)) error {
	if _, err := query(c); err != nil {
		return err
	}
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	var body struct{}
	if err := s.decode(c, &body); err != nil {
		return err
	}
	commit, err := act(id)
	if err != nil {
		return err
	}
	s.hub.Publish(commit)
	return c.JSON(http.StatusOK, protocol.OK{OK: true})
}

func (s *Server) invite(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	me := agent(c)
	var req protocol.InviteRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	if len(req.Invite) == 0 {
		return protocol.Invalid("invite must list at least one handle")
	}
	invite, perr := s.cfg.Limits.ValidateInvitees(me, req.Invite)
	if perr != nil {
		return perr
	}
	invited, commit, err := s.st.Invite(c.Request().Context(), id, me, invite)
	if err != nil {
		return err
	}
	s.hub.Publish(commit)
	return c.JSON(http.StatusOK, protocol.InviteResponse{Invited: invited})
}

func (s *Server) sendMessage(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	var req protocol.SendMessageRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	recipients, err := s.validateContent(req.Content, agent(c))
	if err != nil {
		return err
	}
	if err := s.cfg.Limits.ValidateMetadata(req.Metadata); err != nil {
		return err
	}
	if err := protocol.ValidateIdempotencyKey(req.IdempotencyKey); err != nil {
		return err
	}
	key, hash := "", ""
	if req.IdempotencyKey != nil {
		key, hash = *req.IdempotencyKey, requestHash(req)
	}
	resp, commit, err := s.st.SendMessage(c.Request().Context(), store.SendMessage{SessionID: id, Sender: agent(c),
		Content: req.Content, Metadata: req.Metadata, IdempotencyKey: key, RequestHash: hash, FrameRecipients: recipients})
	if err != nil {
		return err
	}
	s.hub.Publish(commit)
	return c.JSON(http.StatusCreated, resp)
}

func (s *Server) reopen(c echo.Context) error {
	if _, err := query(c); err != nil {
		return err
	}
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	me := agent(c)
	var req protocol.ReopenRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	invite, perr := s.cfg.Limits.ValidateInvitees(me, req.Invite)
	if perr != nil {
		return perr
	}
	recipients, err := s.validateInitial(req.InitialMessage, me)
	if err != nil {
		return err
	}
	commit, err := s.st.Reopen(c.Request().Context(), id, me, invite, req.InitialMessage, recipients)
	if err != nil {
		return err
	}
	s.hub.Publish(commit)
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
	sess, err := s.st.GetSession(c.Request().Context(), id, agent(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sess)
}

// pageParams parses after_sequence (or its alias cursor, which is what
// next_cursor holds) and limit (1..1000, default 100) from the request's
// checked query parameters.
func pageParams(c echo.Context) (after int64, limit int, err error) {
	q, err := query(c)
	if err != nil {
		return 0, 0, err
	}
	if limit, err = limitParam(q); err != nil {
		return 0, 0, err
	}
	name := "after_sequence"
	if q.Has("cursor") {
		name = "cursor"
	}
	if v := q.Get(name); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			return 0, 0, protocol.Invalid("%s must be a non-negative integer", name)
		}
		after = n
	}
	return after, limit, nil
}

func eventsPage(evs []store.StoredEvent, more bool) protocol.EventsPage {
	page := protocol.EventsPage{Events: make([]json.RawMessage, len(evs))}
	for i := range evs {
		page.Events[i] = evs[i].Body
	}
	if more && len(evs) > 0 {
		page.NextCursor = strconv.FormatInt(evs[len(evs)-1].Sequence, 10)
	}
	return page
}

// listEvents is GET /sessions/{id}/events, filtered by eligibility.
func (s *Server) listEvents(c echo.Context) error {
	after, limit, err := pageParams(c)
	if err != nil {
		return err
	}
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	evs, more, err := s.st.VisibleEvents(c.Request().Context(), id, agent(c), after, limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, eventsPage(evs, more))
}

// SessionList is the body of GET /sessions and GET /admin/v1/sessions.
type SessionList[T any] struct {
	Sessions   []T    `json:"sessions"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// listSessions is GET /sessions: the caller's sessions, newest first.
func (s *Server) listSessions(c echo.Context) error {
	f, err := sessionFilter(c)
	if err != nil {
		return err
	}
	f.Participant = agent(c)
	rows, err := s.st.ListSessionsFor(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := SessionList[store.SessionSummary]{Sessions: rows}
	if len(rows) == f.Limit {
		out.NextCursor = rows[len(rows)-1].ID
	}
	return c.JSON(http.StatusOK, out)
}
