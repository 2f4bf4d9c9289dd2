package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
	"github.com/aspd/aspd/store"
)

// Binding moments (docs/decisions.md). A message's binding part, a data
// part whose data object has a binding_moment or a binding_resolution
// member, is checked here, on the one message path (SendMessage) whatever
// the transport; the store records the moment or the resolution in the
// message's own transaction, where first-resolution-wins is decided.

// Bounds of binding-moment reads.
const (
	MaxAwaitTimeout     = 60 * time.Second // await_decision's longest wait
	DefaultAwaitTimeout = 30 * time.Second
	MaxPendingDecisions = 100 // most moments pending_decisions returns
)

// awaitPollInterval is how often an AwaitDecision re-reads its moment
// without a wake-up (a resolution committed by another process); tests
// lengthen it to show that the wake-up works alone.
var awaitPollInterval = time.Second

// messageBinding finds the binding part of a message's content, validates
// it and returns what the store must record, or nil when there is none. A
// message carries at most one binding part. Error fields are JSON paths into
// the request, from "content".
func (a *App) messageBinding(raw json.RawMessage, sender string) (*store.Binding, error) {
	// Most messages carry none: skip the decode unless a key can be there,
	// written plainly or with \u escapes.
	if !bytes.Contains(raw, []byte(`binding_`)) && !bytes.Contains(raw, []byte(`\u`)) {
		return nil, nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, nil // string content
	}
	var parts []struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, nil // not content parts; ValidateContent has answered already
	}
	var found *store.Binding
	for i, p := range parts {
		if p.Type != "data" || len(p.Data) == 0 {
			continue
		}
		var data map[string]json.RawMessage
		if err := json.Unmarshal(p.Data, &data); err != nil {
			continue
		}
		env, isMoment := data[protocol.BindingMomentKey]
		res, isResolution := data[protocol.BindingResolutionKey]
		if !isMoment && !isResolution {
			continue
		}
		base := "content[" + strconv.Itoa(i) + "].data"
		if found != nil || isMoment && isResolution {
			return nil, bindingErr(frame.CodeFieldInvalid, base, "a message carries at most one binding part (one binding_moment or one binding_resolution)")
		}
		var err error
		if isMoment {
			found, err = momentPart(env, data, sender, base)
		} else {
			found, err = resolutionPart(res, base+"."+protocol.BindingResolutionKey)
		}
		if err != nil {
			return nil, err
		}
	}
	return found, nil
}

func bindingErr(code, field, format string, args ...any) *protocol.Error {
	return &protocol.Error{Status: http.StatusBadRequest, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// momentPart validates an envelope (frame.ValidateBindingMoment, the same
// check as the agent_binding_moment frame payload) and the resolver named
// beside it.
func momentPart(env json.RawMessage, data map[string]json.RawMessage, sender, base string) (*store.Binding, error) {
	path := base + "." + protocol.BindingMomentKey
	bm, ferr := frame.ValidateBindingMoment(env)
	if ferr != nil {
		field := path
		if ferr.Field != "" {
			field += "." + ferr.Field
		}
		return nil, bindingErr(ferr.Code, field, "malformed binding_moment: %s", ferr.Message)
	}
	m := &store.Moment{OptionCount: len(bm.Question.Options), FreeText: bm.Question.Hatches.FreeText,
		Dialogue: bm.Question.Hatches.Dialogue, Envelope: bytes.TrimSpace(env), Field: base + "." + protocol.BindingResolverKey}
	if r, ok := data[protocol.BindingResolverKey]; ok {
		if err := json.Unmarshal(r, &m.Resolver); err != nil || !protocol.ValidHandle(m.Resolver) {
			return nil, bindingErr(frame.CodeFieldInvalid, m.Field, "resolver must be one handle @owner.agent")
		}
		if m.Resolver == sender {
			return nil, bindingErr(frame.CodeFieldInvalid, m.Field, "the emitter of a binding moment cannot be its resolver")
		}
	}
	return &store.Binding{Moment: m}, nil
}

// resolutionPart validates a binding_resolution's own shape: a closed
// object, a moment id, one of the three outcomes and exactly the members that
// outcome takes. What depends on the moment (the option range, the hatches,
// who may resolve, whether it is still open) is checked by the store in the
// resolution's transaction.
func resolutionPart(raw json.RawMessage, path string) (*store.Binding, error) {
	var members map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&members); err != nil || members == nil {
		return nil, bindingErr(frame.CodeFieldInvalid, path, "binding_resolution must be an object")
	}
	allowed := map[string]bool{"moment": true, "outcome": true, "option_idx": true, "answer": true, "objection": true}
	for name := range members {
		if !allowed[name] {
			return nil, bindingErr(frame.CodeFieldUnknown, path+"."+name, "unknown member %q", name)
		}
	}
	str := func(name string, required bool) (string, error) {
		v, ok := members[name]
		if !ok {
			if required {
				return "", bindingErr(frame.CodeFieldMissing, path+"."+name, "required member is absent")
			}
			return "", nil
		}
		var s string
		// null decodes into a string without error; it is not a string.
		if err := json.Unmarshal(v, &s); err != nil || !bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) {
			return "", bindingErr(frame.CodeFieldInvalid, path+"."+name, "must be a string")
		}
		return s, nil
	}
	res := &store.Resolution{OptionIdx: -1, Field: path}
	var err error
	if res.MomentID, err = str("moment", true); err != nil {
		return nil, err
	}
	if !protocol.ValidMessageID(res.MomentID) {
		return nil, bindingErr(frame.CodeFieldInvalid, path+".moment", "must be the message id (msg_...) of the binding moment")
	}
	if res.Outcome, err = str("outcome", true); err != nil {
		return nil, err
	}
	if res.Answer, err = str("answer", false); err != nil {
		return nil, err
	}
	if res.Objection, err = str("objection", false); err != nil {
		return nil, err
	}
	_, hasIdx := members["option_idx"]
	_, hasAnswer := members["answer"]
	_, hasObjection := members["objection"]
	refuse := func(name, why string) error {
		return bindingErr(frame.CodeFieldInvalid, path+"."+name, "%s", why)
	}
	switch res.Outcome {
	case protocol.OutcomeSelected:
		if !hasIdx {
			return nil, bindingErr(frame.CodeFieldMissing, path+".option_idx", "selected needs option_idx, the index of the chosen option")
		}
		n, err := strconv.ParseInt(string(members["option_idx"]), 10, 32)
		if err != nil || n < 0 {
			return nil, refuse("option_idx", "option_idx must be a non-negative integer")
		}
		res.OptionIdx = int(n)
		if hasAnswer || hasObjection {
			return nil, refuse(map[bool]string{true: "answer", false: "objection"}[hasAnswer], "selected takes option_idx only")
		}
	case protocol.OutcomeAnswered:
		if res.Answer == "" {
			if !hasAnswer {
				return nil, bindingErr(frame.CodeFieldMissing, path+".answer", "answered needs a non-empty answer")
			}
			return nil, refuse("answer", "answered needs a non-empty answer")
		}
		if hasIdx || hasObjection {
			return nil, refuse(map[bool]string{true: "option_idx", false: "objection"}[hasIdx], "answered takes answer only")
		}
	case protocol.OutcomeReferredBack:
		if hasIdx || hasAnswer {
			return nil, refuse(map[bool]string{true: "option_idx", false: "answer"}[hasIdx], "referred_back takes an optional objection only")
		}
	default:
		return nil, refuse("outcome", "outcome must be one of selected, answered, referred_back")
	}
	return &store.Binding{Resolution: res}, nil
}

// RequestDecision emits a binding moment in session id: a message whose
// first part carries the envelope (and the resolver, if named), followed by
// a text part with the synopsis and the question, the conventional payload
// for surfaces that do not render envelopes (draft section 7.1). The
// answer's message_id is the moment id. Error fields are relative to the
// arguments (binding_moment..., resolver).
func (a *App) RequestDecision(ctx context.Context, caller, id string, envelope json.RawMessage, resolver string) (protocol.SendMessageResponse, error) {
	if len(bytes.TrimSpace(envelope)) == 0 {
		return protocol.SendMessageResponse{}, bindingErr(frame.CodeFieldMissing, protocol.BindingMomentKey, "binding_moment is required")
	}
	data := map[string]json.RawMessage{protocol.BindingMomentKey: envelope}
	if resolver != "" {
		data[protocol.BindingResolverKey], _ = json.Marshal(resolver)
	}
	parts := []any{map[string]any{"type": "data", "data": data}}
	if text := momentText(envelope); text != "" {
		parts = append(parts, map[string]any{"type": "text", "text": text})
	}
	resp, err := a.sendParts(ctx, caller, id, parts)
	return resp, relative(err, "content[0].data.")
}

// momentText is the plain-text fallback of an envelope, read leniently: it
// is only written if the envelope then validates.
func momentText(envelope json.RawMessage) string {
	var bm frame.BindingMoment
	if json.Unmarshal(envelope, &bm) != nil || bm.Synopsis == "" || bm.Question.Stem == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s", bm.Synopsis, bm.Question.Stem)
	for i, o := range bm.Question.Options {
		mark := ""
		if i == bm.Question.RecommendedIdx {
			mark = " (recommended)"
		}
		fmt.Fprintf(&b, "\n%d. %s%s: %s", i+1, o.Label, mark, o.Reasoning)
	}
	return b.String()
}

func (a *App) sendParts(ctx context.Context, caller, id string, parts []any) (protocol.SendMessageResponse, error) {
	content, err := json.Marshal(parts)
	if err != nil {
		return protocol.SendMessageResponse{}, fmt.Errorf("app: encode content: %w", err)
	}
	return a.SendMessage(ctx, caller, id, protocol.SendMessageRequest{Content: content})
}

// relative strips prefix from a binding error's field, so that a tool's
// error names its own argument.
func relative(err error, prefix string) error {
	pe, ok := err.(*protocol.Error)
	if !ok {
		pe = WireError(err) // a store refusal naming a field
	}
	if pe != nil && strings.HasPrefix(pe.Field, prefix) {
		c := *pe
		c.Field = strings.TrimPrefix(pe.Field, prefix)
		return &c
	}
	return err
}

// ResolveDecision resolves moment momentID on caller's behalf: a message in
// the moment's session whose data part carries the binding_resolution,
// followed by a text part saying what was decided. A moment caller may not
// see is not_found; one it may see but not resolve is not_resolver.
func (a *App) ResolveDecision(ctx context.Context, caller, momentID string, req protocol.ResolveRequest) (protocol.SendMessageResponse, error) {
	var none protocol.SendMessageResponse
	m, err := a.visibleMoment(ctx, caller, momentID)
	if err != nil {
		return none, err
	}
	res := protocol.BindingResolution{Moment: momentID, Outcome: req.Outcome, OptionIdx: req.OptionIdx, Answer: req.Answer, Objection: req.Objection}
	parts := []any{map[string]any{"type": "data", "data": map[string]any{protocol.BindingResolutionKey: res}}}
	text := "Decision: " + req.Outcome
	switch {
	case req.OptionIdx != nil:
		text += " option " + strconv.Itoa(*req.OptionIdx+1)
	case req.Answer != "":
		text += ": " + req.Answer
	case req.Objection != "":
		text += ": " + req.Objection
	}
	parts = append(parts, map[string]any{"type": "text", "text": text})
	resp, err := a.sendParts(ctx, caller, m.SessionID, parts)
	return resp, relative(err, "content[0].data.binding_resolution.")
}

// visibleMoment reads a moment that caller may see: its message is in the
// part of the session's log caller may read (visibility.Visible). Any other
// is not_found, like a session caller may not see.
func (a *App) visibleMoment(ctx context.Context, caller, momentID string) (*store.MomentRecord, error) {
	if !protocol.ValidMessageID(momentID) {
		return nil, protocol.NotFound()
	}
	m, err := a.st.GetMoment(ctx, momentID)
	if err != nil {
		return nil, err
	}
	view, err := a.st.View(ctx, m.SessionID, caller)
	if err != nil {
		return nil, err
	}
	if !visibility.Visible(view, visibility.Meta{Sequence: m.Sequence, Type: protocol.EventMessage, Subject: m.Emitter}) {
		return nil, protocol.NotFound()
	}
	return m, nil
}

// Decision is moment momentID as caller sees it. The resolution is shown
// only if caller may see its message too.
func (a *App) Decision(ctx context.Context, caller, momentID string) (*protocol.Decision, error) {
	m, err := a.visibleMoment(ctx, caller, momentID)
	if err != nil {
		return nil, err
	}
	d := decision(m)
	if d.Resolution != nil {
		view, err := a.st.View(ctx, m.SessionID, caller)
		if err != nil {
			return nil, err
		}
		if !visibility.Visible(view, visibility.Meta{Sequence: m.ResolutionSeq, Type: protocol.EventMessage, Subject: m.ResolvedBy}) {
			d.Status, d.Resolution = protocol.DecisionOpen, nil
		}
	}
	return d, nil
}

func decision(m *store.MomentRecord) *protocol.Decision {
	d := &protocol.Decision{MomentID: m.MomentID, SessionID: m.SessionID, Sequence: m.Sequence, Emitter: m.Emitter, Resolver: m.Resolver,
		CreatedAt: m.CreatedAt, Status: protocol.DecisionOpen, BindingMoment: m.Envelope}
	if m.Outcome != "" {
		d.Status = protocol.DecisionResolved
		r := &protocol.Resolution{Outcome: m.Outcome, Answer: m.Answer, Objection: m.Objection, ResolvedBy: m.ResolvedBy,
			ResolutionID: m.ResolutionID, Sequence: m.ResolutionSeq, ResolvedAt: m.ResolvedAt}
		if m.OptionIdx.Valid {
			i := int(m.OptionIdx.Int64)
			r.OptionIdx = &i
		}
		d.Resolution = r
	}
	return d
}

// PendingDecisions lists, oldest first, the open moments caller may resolve
// (at most MaxPendingDecisions).
func (a *App) PendingDecisions(ctx context.Context, caller string) (protocol.DecisionList, error) {
	ms, err := a.st.PendingMoments(ctx, caller, MaxPendingDecisions)
	if err != nil {
		return protocol.DecisionList{}, err
	}
	out := protocol.DecisionList{Decisions: make([]protocol.Decision, len(ms))}
	for i, m := range ms {
		out.Decisions[i] = *decision(m)
	}
	return out, nil
}

// AwaitDecision waits up to timeoutSeconds (0 to 60, default 30) for moment
// momentID to be resolved and returns it: resolved, or still open when the
// time is up. A resolution committed by this process wakes it at once; one
// committed elsewhere (another aspd on the same database) is seen by the
// next poll, every second.
func (a *App) AwaitDecision(ctx context.Context, caller, momentID string, timeoutSeconds *int) (*protocol.Decision, error) {
	timeout := DefaultAwaitTimeout
	if t := timeoutSeconds; t != nil {
		if *t < 0 || *t > int(MaxAwaitTimeout/time.Second) {
			return nil, protocol.Invalid("timeout_seconds must be from 0 to %d", int(MaxAwaitTimeout/time.Second))
		}
		timeout = time.Duration(*t) * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		// Registered before the read, so a resolution between the read
		// and the wait is not missed.
		wake, done := a.decided.wait(momentID)
		d, err := a.awaitStep(ctx, caller, momentID, wake, deadline)
		done()
		if err != nil || d != nil {
			return d, err
		}
	}
}

// awaitStep reads the moment once and, while it is open and time is left,
// waits for its resolution, the next poll, or the deadline. It returns the
// decision when the wait is over, or nil to read again.
func (a *App) awaitStep(ctx context.Context, caller, momentID string, wake <-chan struct{}, deadline time.Time) (*protocol.Decision, error) {
	d, err := a.Decision(ctx, caller, momentID)
	if err != nil || d.Status == protocol.DecisionResolved {
		return d, err
	}
	left := time.Until(deadline)
	if left <= 0 {
		return d, nil
	}
	t := time.NewTimer(min(left, awaitPollInterval))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-a.stop:
		return d, nil
	case <-wake:
	case <-t.C:
	}
	return nil, nil
}

// decisionSignal wakes the AwaitDecision calls of this process that wait
// for a moment when its resolution commits: one channel per awaited moment,
// closed by the resolution, and dropped when its last waiter leaves, so
// moments nobody awaits cost nothing and a resolution wakes only its own
// waiters.
type decisionSignal struct {
	mu      sync.Mutex
	waiting map[string]*momentWaiters
}

type momentWaiters struct {
	ch chan struct{}
	n  int
}

// wait returns a channel closed when moment id is resolved from now on, and
// the function to call when the caller stops waiting.
func (s *decisionSignal) wait(id string) (<-chan struct{}, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		s.waiting = map[string]*momentWaiters{}
	}
	w := s.waiting[id]
	if w == nil {
		w = &momentWaiters{ch: make(chan struct{})}
		s.waiting[id] = w
	}
	w.n++
	return w.ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if w.n--; w.n == 0 && s.waiting[id] == w {
			delete(s.waiting, id)
		}
	}
}

// resolved wakes moment id's waiters.
func (s *decisionSignal) resolved(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waiting[id]; w != nil {
		close(w.ch)
		delete(s.waiting, id)
	}
}

// waiters is the number of moments being awaited (for tests).
func (s *decisionSignal) waiters() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}
