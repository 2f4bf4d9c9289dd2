package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/aspd/aspd/internal/framefeed"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
	"github.com/aspd/aspd/store"
	"github.com/aspd/aspd/trust"
)

// The ephemeral fan-out of agent-channel frames: submissions, per-handle
// streams and the caller's roster of them.

// SubmitFrame fans a frame out to the live streams its scope reaches.
func (a *App) SubmitFrame(ctx context.Context, caller string, req protocol.FrameSubmission) (protocol.FrameResult, error) {
	var none protocol.FrameResult
	if err := a.admit(ctx, caller, ActSubmitFrame); err != nil {
		return none, err
	}
	if len(req.Frame) == 0 {
		return none, frameErr(http.StatusBadRequest, frame.CodeFieldMissing, "frame", "frame is required")
	}
	if len(req.Frame) > a.cfg.Frames.MaxFrameBytes {
		return none, protocol.Errorf(http.StatusRequestEntityTooLarge, protocol.CodeContentTooLarge, "the frame is %d bytes; the limit is %d", len(req.Frame), a.cfg.Frames.MaxFrameBytes)
	}
	if req.Scope == "" {
		return none, frameErr(http.StatusBadRequest, frame.CodeFieldMissing, "scope", "scope is required")
	}
	fr, ferr := frame.Validate(req.Frame, a.cfg.Frames.Validation)
	if ferr != nil {
		return none, frameError(http.StatusBadRequest, ferr)
	}
	if fr.SenderHandle != caller {
		return none, frameErr(http.StatusForbidden, frame.CodeSenderIdentityMismatch, "sender_handle", "sender_handle %s is not the authenticated agent", fr.SenderHandle)
	}
	sc, ferr := frame.ParseScope(req.Scope)
	if ferr != nil {
		return none, frameError(http.StatusBadRequest, ferr)
	}
	target, exact, err := a.authoriseScope(ctx, caller, fr, sc)
	if err != nil {
		return none, err
	}
	if n := a.streams.Count(target, fr); n > a.cfg.Frames.MaxReach {
		return none, rateLimited(time.Second, "the scope reaches more streams than the per-submission cap of %d", a.cfg.Frames.MaxReach)
	}
	var data bytes.Buffer
	if err := json.Compact(&data, req.Frame); err != nil {
		return none, protocol.Invalid("frame: %v", err)
	}
	n := a.streams.Emit(target, fr, data.Bytes())
	if !exact {
		n = min(n, 1)
	}
	return protocol.FrameResult{Subscriptions: n, Exact: exact}, nil
}

// authoriseScope maps a scope onto stream targets and checks that the sender
// may address it. exact says whether the delivered count may be revealed.
func (a *App) authoriseScope(ctx context.Context, me string, fr *frame.Frame, sc frame.Scope) (*framefeed.Target, bool, error) {
	switch sc.Kind {
	case frame.ScopeAccord:
		return nil, false, frameErr(http.StatusNotImplemented, frame.CodeScopeUnimplemented, "scope", "accord: scopes are not implemented by this operator")
	case frame.ScopeOrgMembers, frame.ScopeOrgRole:
		if protocol.Owner(me) != sc.Owner || protocol.Owner(fr.RecipientHandle) != sc.Owner {
			return nil, false, frameErr(http.StatusForbidden, frame.CodeScopeUnauthorised, "scope", "org:%s scopes are open only to %s's own agents", sc.Owner, sc.Owner)
		}
		members, err := a.st.ListAgents(ctx, sc.Owner)
		if err != nil {
			return nil, false, err
		}
		// Each member is a contact attempt like any other: a member whose
		// trust settings refuse the sender (allowlist, block) is silently
		// left out, and the count is coarsened so that nobody learns which
		// of an owner's agents refuse them or are online.
		var from *protocol.Agent
		for _, m := range members {
			if m.Handle == me {
				from = m
			}
		}
		if from == nil {
			return nil, false, store.ErrNotFound
		}
		t := &framefeed.Target{Org: sc.Owner}
		for _, m := range members {
			if sc.Kind == frame.ScopeOrgRole && !contains(m.Roles, sc.Role) {
				continue
			}
			if m.Handle != me && !trust.CanContact(from.Trust(), m.Trust()) {
				continue
			}
			t.Handles = append(t.Handles, m.Handle)
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
		agents, err := a.st.ListAgentsByHandle(ctx, []string{me, sc.Handle})
		if err != nil {
			return nil, false, err
		}
		from, ok1 := agents[me]
		to, ok2 := agents[sc.Handle]
		if !ok1 || !ok2 || !trust.CanContact(from.Trust(), to.Trust()) {
			return nil, false, store.ErrNotFound
		}
	}
	t := &framefeed.Target{Handles: []string{sc.Handle}}
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

// StreamRequest opens one of the caller's frame streams.
type StreamRequest struct {
	Instrument  string // "" is "default"
	Session     string // optional stream session
	Filter      string // subscribe filter, as in ?filter=
	LastEventID string // resume after this frame id
}

// Stream is an open frame stream: the retained frames to replay first (the
// ones the caller may still be shown), then live deliveries on Sub.C until
// Sub.Dropped or App.Stopping. Close it when done.
type Stream struct {
	Sub    *framefeed.Subscription
	Replay []framefeed.Delivery
	// Gap is true when frames after LastEventID are no longer retained.
	Gap bool

	a *App
}

// Close unregisters the stream.
func (s *Stream) Close() { s.a.streams.Close(s.Sub) }

// OpenStream opens a frame stream for caller, authenticated by token:
// the token is checked again once the stream is registered, so a rotation
// or revocation racing the open cannot leave it running.
func (a *App) OpenStream(ctx context.Context, caller, token string, req StreamRequest) (*Stream, error) {
	instrument := req.Instrument
	if instrument == "" {
		instrument = "default"
	}
	if !validToken(instrument) {
		return nil, frameErr(http.StatusBadRequest, frame.CodeFieldInvalid, "instrument", "instrument must be 1-128 characters of A-Z a-z 0-9 . _ -")
	}
	if req.Session != "" && !validToken(req.Session) {
		return nil, frameErr(http.StatusBadRequest, frame.CodeFieldInvalid, "session", "session must be 1-128 characters of A-Z a-z 0-9 . _ -")
	}
	f, ferr := frame.ParseFilter(req.Filter)
	if ferr != nil {
		return nil, frameError(http.StatusBadRequest, ferr)
	}
	sub, gap := a.streams.Open(caller, instrument, req.Session, f, req.LastEventID, a.cfg.Frames.MaxStreams)
	if sub == nil {
		return nil, rateLimited(5*time.Second, "an agent may hold at most %d open streams", a.cfg.Frames.MaxStreams)
	}
	s := &Stream{Sub: sub, Gap: gap, a: a}
	if err := a.stillValid(caller, token); err != nil {
		s.Close()
		if errors.Is(err, errRevoked) {
			return nil, Unauthorized()
		}
		return nil, err // the store could not say: 503 in an outage, not 401
	}
	replay, err := a.replayable(ctx, caller, sub.Replay)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Replay = replay
	return s, nil
}

// replayable returns the retained frames that a resuming stream of me may
// still be shown. Trust is decided again at replay time, by the decision
// SubmitFrame makes (trust.CanContact on both agents' current settings): a
// frame from another agent is withheld if that agent may no longer contact
// me - a block in either direction, an allowlist entry removed, a policy
// changed - or no longer exists. Frames me sent itself are always replayed.
// The withheld frames are skipped silently, like frames the stream's filter
// excludes; they are not a gap.
func (a *App) replayable(ctx context.Context, me string, replay []framefeed.Replayed) ([]framefeed.Delivery, error) {
	handles := []string{me}
	for _, r := range replay {
		if r.Sender != me && !contains(handles, r.Sender) {
			handles = append(handles, r.Sender)
		}
	}
	allowed := map[string]bool{me: true}
	if len(handles) > 1 {
		agents, err := a.st.ListAgentsByHandle(ctx, handles)
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
	out := make([]framefeed.Delivery, 0, len(replay))
	for _, r := range replay {
		if allowed[r.Sender] {
			out = append(out, r.Delivery)
		}
	}
	return out, nil
}

// Roster lists caller's own live streams, never anyone else's.
func (a *App) Roster(caller string) []protocol.StreamInfo {
	return a.streams.Roster(caller)
}
