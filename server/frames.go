package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
	"github.com/aspd/aspd/store"
	"github.com/aspd/aspd/streams"
	"github.com/aspd/aspd/trust"
)

// FramesConfig configures agent-channel frames: validation, the ephemeral
// fan-out and its abuse limits.
type FramesConfig struct {
	Validation    frame.Options
	RatePerSecond float64 // frame submissions per sender per second (token bucket)
	Burst         int     // bucket size
	MaxReach      int     // most streams one submission may reach
	MaxStreams    int     // most open streams per agent
	Keepalive     time.Duration
	WriteTimeout  time.Duration
	Retention     streams.Config
	MaxFrameBytes int // largest frame on POST /frames
}

// DefaultFramesConfig is what aspd runs with unless configured otherwise.
func DefaultFramesConfig() FramesConfig {
	return FramesConfig{Validation: frame.DefaultOptions(), RatePerSecond: 20, Burst: 40, MaxReach: 256, MaxStreams: 32,
		Keepalive: 15 * time.Second, WriteTimeout: 10 * time.Second,
		Retention: streams.Config{RetainCount: 64, RetainAge: time.Minute, RetainBytes: 32 << 20, Buffer: 256}, MaxFrameBytes: 64 << 10}
}

// frameError converts a frame validation error to an API error.
func frameError(status int, e *frame.Error) *protocol.Error {
	return &protocol.Error{Status: status, Code: e.Code, Field: e.Field, Message: e.Message}
}

func frameErr(status int, code, field, format string, args ...any) *protocol.Error {
	return &protocol.Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// sessionFrames validates the agent-channel frames among a message's data
// parts (a data object carrying envelope_version is a frame) and returns the
// recipient handles they name, which must be participants of the session.
// One bad frame rejects the whole message.
func (s *Server) sessionFrames(c *protocol.Content, sender string) ([]string, error) {
	var recipients []string
	for i, data := range c.DataParts {
		// Most data parts are not frames: skip the decode unless the key
		// can be there at all, written plainly or with \u escapes (which
		// any JSON parser would decode to envelope_version).
		if !bytes.Contains(data, []byte(`envelope_version`)) && !bytes.Contains(data, []byte(`\u`)) {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil || !frame.IsFrame(obj) {
			continue
		}
		fr, ferr := frame.Validate(data, s.cfg.Frames.Validation)
		if ferr != nil {
			ferr.Message = fmt.Sprintf("data part %d: %s", i, ferr.Message)
			return nil, frameError(http.StatusBadRequest, ferr)
		}
		if fr.SenderHandle != sender {
			return nil, frameErr(http.StatusBadRequest, frame.CodeSenderIdentityMismatch, "sender_handle",
				"data part %d: sender_handle %s is not the authenticated sender", i, fr.SenderHandle)
		}
		recipients = append(recipients, fr.RecipientHandle)
	}
	return recipients, nil
}

// ---- ephemeral fan-out: POST /frames, GET /stream, GET /stream/roster ----

// FrameSubmission is the body of POST /frames.
type FrameSubmission struct {
	Scope string          `json:"scope"`
	Frame json.RawMessage `json:"frame"`
}

// FrameResult answers POST /frames: how many streams the frame reached.
// Exact is false when the count is coarsened to 0 or 1 (at least one),
// which it is whenever the scope addresses another agent's streams.
type FrameResult struct {
	Subscriptions int  `json:"subscriptions"`
	Exact         bool `json:"exact"`
}

func (s *Server) submitFrame(c echo.Context) error {
	me := agent(c)
	if wait, ok := s.limiter.allow(me); !ok {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		return protocol.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, "frame submission rate limit is %g per second", s.cfg.Frames.RatePerSecond)
	}
	var req FrameSubmission
	if err := s.decode(c, &req); err != nil {
		return err
	}
	if len(req.Frame) == 0 {
		return frameErr(http.StatusBadRequest, frame.CodeFieldMissing, "frame", "frame is required")
	}
	if len(req.Frame) > s.cfg.Frames.MaxFrameBytes {
		return protocol.Errorf(http.StatusRequestEntityTooLarge, protocol.CodeContentTooLarge, "the frame is %d bytes; the limit is %d", len(req.Frame), s.cfg.Frames.MaxFrameBytes)
	}
	if req.Scope == "" {
		return frameErr(http.StatusBadRequest, frame.CodeFieldMissing, "scope", "scope is required")
	}
	fr, ferr := frame.Validate(req.Frame, s.cfg.Frames.Validation)
	if ferr != nil {
		return frameError(http.StatusBadRequest, ferr)
	}
	if fr.SenderHandle != me {
		return frameErr(http.StatusForbidden, frame.CodeSenderIdentityMismatch, "sender_handle", "sender_handle %s is not the authenticated agent", fr.SenderHandle)
	}
	sc, ferr := frame.ParseScope(req.Scope)
	if ferr != nil {
		return frameError(http.StatusBadRequest, ferr)
	}
	target, exact, err := s.authoriseScope(c, me, fr, sc)
	if err != nil {
		return err
	}
	if n := s.streams.Count(target, fr); n > s.cfg.Frames.MaxReach {
		c.Response().Header().Set("Retry-After", "1")
		return protocol.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, "the scope reaches more streams than the per-submission cap of %d", s.cfg.Frames.MaxReach)
	}
	var data bytes.Buffer
	if err := json.Compact(&data, req.Frame); err != nil {
		return protocol.Invalid("frame: %v", err)
	}
	n := s.streams.Emit(target, fr, data.Bytes())
	if !exact {
		n = min(n, 1)
	}
	return c.JSON(http.StatusOK, FrameResult{Subscriptions: n, Exact: exact})
}

// authoriseScope maps a scope onto stream targets and checks that the sender
// may address it. exact says whether the delivered count may be revealed.
func (s *Server) authoriseScope(c echo.Context, me string, fr *frame.Frame, sc frame.Scope) (*streams.Target, bool, error) {
	ctx := c.Request().Context()
	switch sc.Kind {
	case frame.ScopeAccord:
		return nil, false, frameErr(http.StatusNotImplemented, frame.CodeScopeUnimplemented, "scope", "accord: scopes are not implemented by this operator")
	case frame.ScopeOrgMembers, frame.ScopeOrgRole:
		if protocol.Owner(me) != sc.Owner || protocol.Owner(fr.RecipientHandle) != sc.Owner {
			return nil, false, frameErr(http.StatusForbidden, frame.CodeScopeUnauthorised, "scope", "org:%s scopes are open only to %s's own agents", sc.Owner, sc.Owner)
		}
		members, err := s.st.ListAgents(ctx, sc.Owner)
		if err != nil {
			return nil, false, err
		}
		// Each member is a contact attempt like any other: a member whose
		// trust settings refuse the sender (allowlist, block) is silently
		// left out, and the count is coarsened so that nobody learns which
		// of an owner's agents refuse them or are online.
		var from *store.Agent
		for _, a := range members {
			if a.Handle == me {
				from = a
			}
		}
		if from == nil {
			return nil, false, store.ErrNotFound
		}
		t := &streams.Target{Org: sc.Owner}
		for _, a := range members {
			if sc.Kind == frame.ScopeOrgRole && !contains(a.Roles, sc.Role) {
				continue
			}
			if a.Handle != me && !trust.CanContact(from.Trust(), a.Trust()) {
				continue
			}
			t.Handles = append(t.Handles, a.Handle)
		}
		return t, false, nil
	}
	// The handle forms: the scope must name recipient_handle.
	if sc.Handle != fr.RecipientHandle {
		return nil, false, frameErr(http.StatusForbidden, frame.CodeScopeUnauthorised, "scope", "scope names %s but recipient_handle is %s", sc.Handle, fr.RecipientHandle)
	}
	if sc.Handle != me {
		// Addressing another agent is a contact attempt: ASP trust applies,
		// and a refusal is the same 404 as a handle that does not exist.
		agents, err := s.st.ListAgentsByHandle(ctx, []string{me, sc.Handle})
		if err != nil {
			return nil, false, err
		}
		from, ok1 := agents[me]
		to, ok2 := agents[sc.Handle]
		if !ok1 || !ok2 || !trust.CanContact(from.Trust(), to.Trust()) {
			return nil, false, store.ErrNotFound
		}
	}
	t := &streams.Target{Handles: []string{sc.Handle}}
	switch sc.Kind {
	case frame.ScopeInstrumentPrefix:
		t.PrefixOnly, t.InstrumentPrefix = true, sc.InstrumentPrefix
	case frame.ScopeStream:
		t.Exact, t.Instrument, t.Session = true, sc.Instrument, sc.Session
	}
	return t, sc.Handle == me, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validToken checks an instrument or stream-session identifier: 1 to 128
// octets of [A-Za-z0-9._-], the grammar the scope parser accepts.
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			return false
		}
	}
	return true
}

// openStream is GET /stream: the caller's per-handle SSE stream.
func (s *Server) openStream(c echo.Context) error {
	me := agent(c)
	instrument := c.QueryParam("instrument")
	if instrument == "" {
		instrument = "default"
	}
	if !validToken(instrument) {
		return frameErr(http.StatusBadRequest, frame.CodeFieldInvalid, "instrument", "instrument must be 1-128 characters of A-Z a-z 0-9 . _ -")
	}
	session := c.QueryParam("session")
	if session != "" && !validToken(session) {
		return frameErr(http.StatusBadRequest, frame.CodeFieldInvalid, "session", "session must be 1-128 characters of A-Z a-z 0-9 . _ -")
	}
	f, ferr := frame.ParseFilter(c.QueryParam("filter"))
	if ferr != nil {
		return frameError(http.StatusBadRequest, ferr)
	}
	lastID := c.Request().Header.Get("Last-Event-ID")
	sub, gap := s.streams.Open(me, instrument, session, f, lastID, s.cfg.Frames.MaxStreams)
	if sub == nil {
		c.Response().Header().Set("Retry-After", "5")
		return protocol.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, "an agent may hold at most %d open streams", s.cfg.Frames.MaxStreams)
	}
	defer s.streams.Close(sub)
	if !s.stillValid(c) {
		return unauthorized()
	}
	replay, err := s.replayable(c.Request().Context(), me, sub.Replay)
	if err != nil {
		return err
	}

	w := c.Response()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.Frames.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := write([]byte(": aspd frame stream\n\n")); err != nil {
		return nil
	}
	if gap && lastID != "" {
		msg, _ := json.Marshal(map[string]string{"code": "resume-gap", "last_event_id": lastID,
			"message": "frames after this id are no longer retained; continuing from the oldest retained frame"})
		if err := write([]byte("event: stream-gap\ndata: " + string(msg) + "\n\n")); err != nil {
			return nil
		}
	}
	var buf bytes.Buffer
	send := func(d streams.Delivery) error {
		buf.Reset()
		fmt.Fprintf(&buf, "id: %s\nevent: %s\ndata: %s\n\n", d.ID, d.Kind, d.Data)
		return write(buf.Bytes())
	}
	for _, d := range replay {
		if err := send(d); err != nil {
			return nil
		}
	}
	keep := time.NewTicker(s.cfg.Frames.Keepalive)
	defer keep.Stop()
	ctx := c.Request().Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Dropped():
			return nil
		case <-s.stop:
			return nil
		case <-keep.C:
			if err := write([]byte(": keepalive\n\n")); err != nil {
				return nil
			}
		case d := <-sub.C:
			if err := send(d); err != nil {
				return nil
			}
		}
	}
}

// replayable returns the retained frames that a resuming stream of me may
// still be shown. Trust is decided again at replay time, by the decision
// POST /frames makes (trust.CanContact on both agents' current settings): a
// frame from another agent is withheld if that agent may no longer contact
// me - a block in either direction, an allowlist entry removed, a policy
// changed - or no longer exists. Frames me sent itself are always replayed.
// The withheld frames are skipped silently, like frames the stream's filter
// excludes; they are not a gap.
func (s *Server) replayable(ctx context.Context, me string, replay []streams.Replayed) ([]streams.Delivery, error) {
	handles := []string{me}
	for _, r := range replay {
		if r.Sender != me && !contains(handles, r.Sender) {
			handles = append(handles, r.Sender)
		}
	}
	allowed := map[string]bool{me: true}
	if len(handles) > 1 {
		agents, err := s.st.ListAgentsByHandle(ctx, handles)
		if err != nil {
			return nil, err
		}
		if to, ok := agents[me]; ok {
			for _, h := range handles[1:] {
				from, ok := agents[h]
				allowed[h] = ok && trust.CanContact(from.Trust(), to.Trust())
			}
		}
	}
	out := make([]streams.Delivery, 0, len(replay))
	for _, r := range replay {
		if allowed[r.Sender] {
			out = append(out, r.Delivery)
		}
	}
	return out, nil
}

// roster is GET /stream/roster: the caller's own live streams, never anyone else's.
func (s *Server) roster(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"streams": s.streams.Roster(agent(c))})
}

// rateLimiter is a token bucket per sender.
type rateLimiter struct {
	rate  float64
	burst float64
	mu    sync.Mutex
	b     map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newRateLimiter(rate float64, burst int) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), b: map[string]*bucket{}}
}

// allow takes a token for key, or says how long until one is available.
func (l *rateLimiter) allow(key string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	b, ok := l.b[key]
	if !ok {
		if len(l.b) > 100_000 {
			clear(l.b)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.b[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}
