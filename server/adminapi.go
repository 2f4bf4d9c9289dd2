package server

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/hub"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

func (s *Server) adminRoutes(g *echo.Group) {
	// Every operator route checks its query string first (query.go).
	route := func(method, path string, h echo.HandlerFunc) { g.Add(method, path, h, s.strictQuery) }
	route(http.MethodPost, "/agents", s.adminCreateAgent)
	route(http.MethodGet, "/agents", s.adminListAgents)
	route(http.MethodGet, "/agents/:handle", s.adminGetAgent)
	route(http.MethodDelete, "/agents/:handle", s.adminDeleteAgent)
	route(http.MethodPut, "/agents/:handle/policy", s.adminSetPolicy)
	route(http.MethodPut, "/agents/:handle/allowlist", s.adminAllowlist("replace"))
	route(http.MethodPost, "/agents/:handle/allowlist", s.adminAllowlist("add"))
	route(http.MethodDelete, "/agents/:handle/allowlist", s.adminAllowlist("remove"))
	route(http.MethodPut, "/agents/:handle/roles", s.adminSetRoles)
	route(http.MethodPost, "/agents/:handle/blocks", s.adminBlock)
	route(http.MethodDelete, "/agents/:handle/blocks/:blocked", s.adminUnblock)
	route(http.MethodPost, "/agents/:handle/token", s.adminRotateToken)
	route(http.MethodDelete, "/agents/:handle/token", s.adminRevokeToken)
	route(http.MethodGet, "/sessions", s.adminListSessions)
	route(http.MethodGet, "/sessions/:id", s.adminGetSession)
	route(http.MethodGet, "/sessions/:id/events", s.adminSessionEvents)
	route(http.MethodGet, "/export", s.adminExport)
}

// NewToken returns a fresh agent token: 256 random bits, URL-safe.
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "asp_" + base64.RawURLEncoding.EncodeToString(b)
}

// pathHandle returns the :handle path parameter, which must be a handle.
func pathHandle(c echo.Context, name string) (string, error) {
	h, err := url.PathUnescape(c.Param(name))
	if err != nil || !protocol.ValidHandle(h) {
		return "", protocol.NotFound()
	}
	return h, nil
}

func validPolicy(p string) error {
	if p != protocol.PolicyOpen && p != protocol.PolicyAllowlist {
		return protocol.Invalid("inbound_policy must be \"allowlist\" or \"open\"")
	}
	return nil
}

func validEntries(entries []string) error {
	for i, e := range entries {
		if !protocol.ValidAllowlistEntry(e) {
			return protocol.Invalid("allowlist[%d] %q is not a handle or an owner glob (@owner.*)", i, e)
		}
	}
	return nil
}

// AgentWithToken is the answer to agent creation and token rotation: the
// only time a token is ever shown.
type AgentWithToken struct {
	*store.Agent
	Token string `json:"token"`
}

func (s *Server) adminCreateAgent(c echo.Context) error {
	var req struct {
		Handle        string   `json:"handle"`
		InboundPolicy string   `json:"inbound_policy"`
		Allowlist     []string `json:"allowlist"`
		Roles         []string `json:"roles"`
	}
	if err := s.decode(c, &req); err != nil {
		return err
	}
	if !protocol.ValidHandle(req.Handle) {
		return protocol.Invalid("handle %q is not a handle (@owner.agent, lower-case a-z 0-9 _ -, at most %d bytes)", req.Handle, protocol.MaxHandleLen)
	}
	if req.InboundPolicy == "" {
		req.InboundPolicy = protocol.PolicyAllowlist // §6.2: closed by default
	}
	if err := validPolicy(req.InboundPolicy); err != nil {
		return err
	}
	if err := validEntries(req.Allowlist); err != nil {
		return err
	}
	for i, r := range req.Roles {
		if !validRole(r) {
			return protocol.Invalid("roles[%d] %q must be 1-64 characters of a-z 0-9 _ -", i, r)
		}
	}
	ctx := c.Request().Context()
	tok := NewToken()
	if err := s.st.CreateAgent(ctx, store.NewAgent{Handle: req.Handle, InboundPolicy: req.InboundPolicy, Allowlist: req.Allowlist, TokenHash: HashToken(tok)}); err != nil {
		return err
	}
	if len(req.Roles) > 0 {
		if err := s.st.SetRoles(ctx, req.Handle, req.Roles); err != nil {
			return err
		}
	}
	a, err := s.st.GetAgent(ctx, req.Handle)
	if err != nil {
		return err
	}
	s.log.Info("agent created", "agent", req.Handle, "policy", req.InboundPolicy)
	return c.JSON(http.StatusCreated, AgentWithToken{Agent: a, Token: tok})
}

func (s *Server) adminListAgents(c echo.Context) error {
	q, err := query(c)
	if err != nil {
		return err
	}
	owner := q.Get("owner")
	if owner != "" && !protocol.ValidHandle("@"+owner+".x") {
		return protocol.Invalid("owner must be an owner name without \"@\" (a-z 0-9 _ -), as in acme for @acme.support")
	}
	agents, err := s.st.ListAgents(c.Request().Context(), owner)
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
	a, err := s.st.GetAgent(c.Request().Context(), h)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a)
}

// respondAgent answers an update with the agent's current record.
func (s *Server) respondAgent(c echo.Context, h string) error {
	a, err := s.st.GetAgent(c.Request().Context(), h)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a)
}

func (s *Server) adminDeleteAgent(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	commits, err := s.st.DeleteAgent(c.Request().Context(), h)
	if err != nil {
		return err
	}
	s.auth.evict(h)
	s.hub.Disconnect(h, hub.CloseUnauthorized, "agent deleted")
	s.streams.Disconnect(h)
	s.hub.PublishAll(commits)
	s.log.Info("agent deleted", "agent", h, "sessions_left", len(commits))
	return c.JSON(http.StatusOK, protocol.OK{OK: true})
}

func (s *Server) adminSetPolicy(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	var req struct {
		InboundPolicy string `json:"inbound_policy"`
	}
	if err := s.decode(c, &req); err != nil {
		return err
	}
	if err := validPolicy(req.InboundPolicy); err != nil {
		return err
	}
	if err := s.st.SetPolicy(c.Request().Context(), h, req.InboundPolicy); err != nil {
		return err
	}
	return s.respondAgent(c, h)
}

func (s *Server) adminAllowlist(op string) echo.HandlerFunc {
	return func(c echo.Context) error {
		h, err := pathHandle(c, "handle")
		if err != nil {
			return err
		}
		var req struct {
			Entries []string `json:"entries"`
		}
		if err := s.decode(c, &req); err != nil {
			return err
		}
		if req.Entries == nil {
			return protocol.Invalid("entries is required (an array of handles and @owner.* globs)")
		}
		if err := validEntries(req.Entries); err != nil {
			return err
		}
		ctx := c.Request().Context()
		switch op {
		case "replace":
			err = s.st.SetAllowlist(ctx, h, req.Entries)
		case "add":
			err = s.st.AddAllowlist(ctx, h, req.Entries)
		default:
			err = s.st.RemoveAllowlist(ctx, h, req.Entries)
		}
		if err != nil {
			return err
		}
		return s.respondAgent(c, h)
	}
}

func (s *Server) adminSetRoles(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	var req struct {
		Roles []string `json:"roles"`
	}
	if err := s.decode(c, &req); err != nil {
		return err
	}
	for i, r := range req.Roles {
		if !validRole(r) {
			return protocol.Invalid("roles[%d] %q must be 1-64 characters of a-z 0-9 _ -", i, r)
		}
	}
	if req.Roles == nil {
		req.Roles = []string{}
	}
	if err := s.st.SetRoles(c.Request().Context(), h, req.Roles); err != nil {
		return err
	}
	return s.respondAgent(c, h)
}

func validRole(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for _, ch := range r {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			return false
		}
	}
	return true
}

func (s *Server) adminBlock(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	var req struct {
		Handle string `json:"handle"`
	}
	if err := s.decode(c, &req); err != nil {
		return err
	}
	if !protocol.ValidHandle(req.Handle) || req.Handle == h {
		return protocol.Invalid("handle must be another agent's handle")
	}
	commits, err := s.st.Block(c.Request().Context(), h, req.Handle)
	if err != nil {
		return err
	}
	s.hub.PublishAll(commits)
	s.log.Info("agent blocked", "blocker", h, "blocked", req.Handle, "sessions_left", len(commits))
	return s.respondAgent(c, h)
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
	if err := s.st.Unblock(c.Request().Context(), h, blocked); err != nil {
		return err
	}
	return s.respondAgent(c, h)
}

// adminRotateToken issues a new token; the old one stops working at once,
// and connections opened with it are closed.
func (s *Server) adminRotateToken(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	tok := NewToken()
	if err := s.st.SetTokenHash(c.Request().Context(), h, HashToken(tok)); err != nil {
		return err
	}
	s.auth.evict(h)
	s.hub.Disconnect(h, hub.CloseUnauthorized, "token rotated")
	s.streams.Disconnect(h)
	a, err := s.st.GetAgent(c.Request().Context(), h)
	if err != nil {
		return err
	}
	s.log.Info("token rotated", "agent", h)
	return c.JSON(http.StatusOK, AgentWithToken{Agent: a, Token: tok})
}

func (s *Server) adminRevokeToken(c echo.Context) error {
	h, err := pathHandle(c, "handle")
	if err != nil {
		return err
	}
	if err := s.st.SetTokenHash(c.Request().Context(), h, nil); err != nil {
		return err
	}
	s.auth.evict(h)
	s.hub.Disconnect(h, hub.CloseUnauthorized, "token revoked")
	s.streams.Disconnect(h)
	s.log.Info("token revoked", "agent", h)
	return s.respondAgent(c, h)
}

// parseTime accepts epoch milliseconds or RFC 3339.
func parseTime(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, protocol.Invalid("%s must be epoch milliseconds or an RFC 3339 time", name)
	}
	return t.UnixMilli(), nil
}

// limitParam parses limit (1..1000, default 100).
func limitParam(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, protocol.Invalid("limit must be an integer from 1 to 1000")
	}
	return n, nil
}

// sessionFilter parses the listing filters shared by GET /sessions and the
// operator's listing and export, from the request's checked query
// parameters (which of them a route takes is its rule in query.go).
func sessionFilter(c echo.Context) (store.SessionFilter, error) {
	q, err := query(c)
	if err != nil {
		return store.SessionFilter{}, err
	}
	f := store.SessionFilter{State: q.Get("state"), Status: q.Get("status"), Before: q.Get("before")}
	if f.Before == "" {
		f.Before = q.Get("cursor") // next_cursor of the previous page
	}
	if f.State != "" && f.State != protocol.StateActive && f.State != protocol.StateEnded {
		return f, protocol.Invalid("state must be active or ended")
	}
	switch f.Status {
	case "", protocol.StatusInvited, protocol.StatusJoined, protocol.StatusLeft:
	default:
		return f, protocol.Invalid("status must be invited, joined or left")
	}
	if f.Before != "" && !protocol.ValidSessionID(f.Before) {
		if q.Has("cursor") {
			return f, protocol.Invalid("cursor must be a session id (a next_cursor)")
		}
		return f, protocol.Invalid("before must be a session id")
	}
	if f.Limit, err = limitParam(q); err != nil {
		return f, err
	}
	if f.Since, err = parseTime("since", q.Get("since")); err != nil {
		return f, err
	}
	if f.Until, err = parseTime("until", q.Get("until")); err != nil {
		return f, err
	}
	if p := q.Get("participant"); p != "" {
		if !protocol.ValidHandle(p) {
			return f, protocol.Invalid("participant must be a handle")
		}
		f.Participant = p
	}
	return f, nil
}

func (s *Server) adminListSessions(c echo.Context) error {
	f, err := sessionFilter(c)
	if err != nil {
		return err
	}
	sessions, err := s.st.ListSessions(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := SessionList[*protocol.Session]{Sessions: sessions}
	if out.Sessions == nil {
		out.Sessions = []*protocol.Session{}
	}
	if len(sessions) == f.Limit {
		out.NextCursor = sessions[len(sessions)-1].ID
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) adminGetSession(c echo.Context) error {
	id, err := sessionID(c)
	if err != nil {
		return err
	}
	ss, err := s.st.AdminSession(c.Request().Context(), id)
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
	after, limit, err := pageParams(c)
	if err != nil {
		return err
	}
	if _, err := s.st.AdminSession(c.Request().Context(), id); err != nil {
		return err
	}
	evs, err := s.st.EventsAfter(c.Request().Context(), id, after, limit+1)
	if err != nil {
		return err
	}
	more := len(evs) > limit
	if more {
		evs = evs[:limit]
	}
	return c.JSON(http.StatusOK, eventsPage(evs, more))
}

// adminExport streams events as JSON Lines: one session (?session=) or
// every session matching the listing filters (participant, state, since,
// until), each session's events in sequence order.
func (s *Server) adminExport(c echo.Context) error {
	f, err := sessionFilter(c)
	if err != nil {
		return err
	}
	f.Limit = 0
	ctx := c.Request().Context()
	q, err := query(c)
	if err != nil {
		return err
	}
	if id := q.Get("session"); id != "" { // alone: no other filter given (query.go)
		if !protocol.ValidSessionID(id) {
			return protocol.Invalid("session must be a session id")
		}
		if _, err := s.st.AdminSession(ctx, id); err != nil {
			return err
		}
		f = store.SessionFilter{Only: id}
	}
	// The status line goes out before the first event, so success or failure
	// of the whole export is reported in an HTTP trailer: Aspd-Export-Status
	// is "complete" only when every event was written.
	w := c.Response()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Trailer", "Aspd-Export-Status, Aspd-Export-Events")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	n := 0
	err = s.st.ExportEvents(ctx, f, func(e *store.StoredEvent) error {
		n++
		if _, err := bw.Write(e.Body); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err == nil {
		err = bw.Flush()
	}
	status := "complete"
	if err != nil {
		s.log.Error("export failed midway", "events_written", n, "err", err)
		status = "error"
	}
	w.Header().Set("Aspd-Export-Status", status)
	w.Header().Set("Aspd-Export-Events", strconv.Itoa(n))
	return nil
}
