package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// checkSessionID refuses a malformed session id with the same 404 as a
// missing session.
func checkSessionID(id string) error {
	if !protocol.ValidSessionID(id) {
		return protocol.NotFound()
	}
	return nil
}

// validateInitial validates an optional initial message and returns the
// recipients of the frames it carries.
func (a *App) validateInitial(m *protocol.InitialMessage, sender string) ([]string, error) {
	if m == nil {
		return nil, nil
	}
	recipients, err := a.validateContent(m.Content, sender)
	if err != nil {
		return nil, err
	}
	// A binding moment needs its resolver joined and its message id known:
	// it is sent with SendMessage, not in an initial message.
	if b, err := a.messageBinding(m.Content, sender); err != nil || b != nil {
		if err == nil {
			err = protocol.Invalid("a binding_moment or binding_resolution cannot be sent in an initial message; send it with POST /sessions/{id}/messages")
		}
		return nil, err
	}
	if err := a.cfg.Limits.ValidateMetadata(m.Metadata); err != nil {
		return nil, err
	}
	return recipients, nil
}

// validateContent validates message content, including the agent-channel
// frames its data parts carry, and returns the frames' recipients.
func (a *App) validateContent(raw json.RawMessage, sender string) ([]string, error) {
	c, err := a.cfg.Limits.ValidateContent(raw)
	if err != nil {
		return nil, err
	}
	return a.sessionFrames(c, sender)
}

// idempotency validates an optional idempotency key and returns it with
// the hash of the request it was given with, encoded by encode (which is
// called only when there is a key).
func idempotency(key *string, encode func() []byte) (string, string, error) {
	if err := protocol.ValidateIdempotencyKey(key); err != nil {
		return "", "", err
	}
	if key == nil {
		return "", "", nil
	}
	return *key, requestHash(encode()), nil
}

// requestHash identifies a request, by its JSON encoding, for idempotent
// retries: the same key with a different request is refused rather than
// silently answered. The encoding is json.Marshal's (compact, so a retry
// that only spaces the JSON differently is the same request); hashes are
// stored, and exported and imported with the network, so it must not change.
func requestHash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// CreateSession creates a session with caller as its creator, inviting
// req.Invite and optionally sending an initial message.
func (a *App) CreateSession(ctx context.Context, caller string, req protocol.CreateSessionRequest) (protocol.CreateSessionResponse, error) {
	var none protocol.CreateSessionResponse
	if err := a.admit(ctx, caller, ActCreateSession); err != nil {
		return none, err
	}
	invite, perr := a.cfg.Limits.ValidateInvitees(caller, req.Invite)
	if perr != nil {
		return none, perr
	}
	if err := a.cfg.Limits.ValidateTopic(req.Topic); err != nil {
		return none, err
	}
	if req.EndAfterSend && req.InitialMessage == nil {
		return none, protocol.Invalid("end_after_send requires initial_message")
	}
	recipients, err := a.validateInitial(req.InitialMessage, caller)
	if err != nil {
		return none, err
	}
	key, hash, err := idempotency(req.IdempotencyKey, func() []byte { b, _ := json.Marshal(req); return b })
	if err != nil {
		return none, err
	}
	resp, commit, err := a.st.CreateSession(ctx, store.CreateSession{
		Creator: caller, Invite: invite, Topic: req.Topic, Initial: req.InitialMessage,
		EndAfterSend: req.EndAfterSend, IdempotencyKey: key, RequestHash: hash, FrameRecipients: recipients})
	if err != nil {
		return none, err
	}
	a.publish(commit)
	return resp, nil
}

// Join accepts caller's invitation to session id.
func (a *App) Join(ctx context.Context, caller, id string) error {
	return a.simple(ctx, caller, id, a.st.Join)
}

// Leave takes caller out of session id.
func (a *App) Leave(ctx context.Context, caller, id string) error {
	return a.simple(ctx, caller, id, a.st.Leave)
}

// End ends session id for everyone.
func (a *App) End(ctx context.Context, caller, id string) error {
	return a.simple(ctx, caller, id, a.st.End)
}

func (a *App) simple(ctx context.Context, caller, id string, act func(ctx context.Context, id, caller string) (*store.Commit, error)) error {
	if err := checkSessionID(id); err != nil {
		return err
	}
	commit, err := act(ctx, id, caller)
	if err != nil {
		return err
	}
	a.publish(commit)
	return nil
}

// Invite invites more agents into session id.
func (a *App) Invite(ctx context.Context, caller, id string, req protocol.InviteRequest) (protocol.InviteResponse, error) {
	var none protocol.InviteResponse
	if err := a.admit(ctx, caller, ActInvite); err != nil {
		return none, err
	}
	if err := checkSessionID(id); err != nil {
		return none, err
	}
	if len(req.Invite) == 0 {
		return none, protocol.Invalid("invite must list at least one handle")
	}
	invite, perr := a.cfg.Limits.ValidateInvitees(caller, req.Invite)
	if perr != nil {
		return none, perr
	}
	invited, commit, err := a.st.Invite(ctx, id, caller, invite)
	if err != nil {
		return none, err
	}
	a.publish(commit)
	return protocol.InviteResponse{Invited: invited}, nil
}

// SendMessage sends a message in session id.
func (a *App) SendMessage(ctx context.Context, caller, id string, req protocol.SendMessageRequest) (protocol.SendMessageResponse, error) {
	var none protocol.SendMessageResponse
	if err := a.admit(ctx, caller, ActSendMessage); err != nil {
		return none, err
	}
	if err := checkSessionID(id); err != nil {
		return none, err
	}
	recipients, key, hash, err := a.checkMessage(caller, req)
	if err != nil {
		return none, err
	}
	binding, err := a.messageBinding(req.Content, caller) // decisions.go
	if err != nil {
		return none, err
	}
	resp, commit, err := a.st.SendMessage(ctx, store.SendMessage{SessionID: id, Sender: caller,
		Content: req.Content, Metadata: req.Metadata, IdempotencyKey: key, RequestHash: hash, FrameRecipients: recipients, Binding: binding})
	if err != nil {
		return none, err
	}
	a.publish(commit)
	if binding != nil && binding.Resolution != nil {
		a.decided.resolved(binding.Resolution.MomentID)
	}
	return resp, nil
}

// checkMessage is SendMessage's work before the store: it validates the
// content (and the frames it carries), the metadata and the idempotency
// key, and returns the frames' recipients, the key and the request's hash.
func (a *App) checkMessage(caller string, req protocol.SendMessageRequest) (recipients []string, key, hash string, err error) {
	recipients, err = a.validateContent(req.Content, caller)
	if err != nil {
		return nil, "", "", err
	}
	if err := a.cfg.Limits.ValidateMetadata(req.Metadata); err != nil {
		return nil, "", "", err
	}
	key, hash, err = idempotency(req.IdempotencyKey, func() []byte { return req.AppendJSON(nil) })
	if err != nil {
		return nil, "", "", err
	}
	return recipients, key, hash, nil
}

// Reopen reopens ended session id, optionally inviting and sending an
// initial message.
func (a *App) Reopen(ctx context.Context, caller, id string, req protocol.ReopenRequest) error {
	if err := a.admit(ctx, caller, ActReopen); err != nil {
		return err
	}
	if err := checkSessionID(id); err != nil {
		return err
	}
	invite, perr := a.cfg.Limits.ValidateInvitees(caller, req.Invite)
	if perr != nil {
		return perr
	}
	recipients, err := a.validateInitial(req.InitialMessage, caller)
	if err != nil {
		return err
	}
	commit, err := a.st.Reopen(ctx, id, caller, invite, req.InitialMessage, recipients)
	if err != nil {
		return err
	}
	a.publish(commit)
	return nil
}

// Session is caller's view of session id.
func (a *App) Session(ctx context.Context, caller, id string) (*protocol.Session, error) {
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	return a.st.GetSession(ctx, id, caller)
}

// Sessions lists caller's sessions matching f (f.Participant is caller).
func (a *App) Sessions(ctx context.Context, caller string, f SessionFilter) (protocol.SessionList[protocol.SessionSummary], error) {
	f.Participant = caller
	rows, err := a.st.ListSessionsFor(ctx, f.store())
	if err != nil {
		return protocol.SessionList[protocol.SessionSummary]{}, err
	}
	out := protocol.SessionList[protocol.SessionSummary]{Sessions: rows}
	if len(rows) == f.Limit {
		out.NextCursor = rows[len(rows)-1].ID
	}
	return out, nil
}

// Page selects a page of an event log.
type Page struct {
	After int64 // sequence the page starts after
	Limit int   // at most this many events
}

// Events is the page of session id's events that caller may see.
func (a *App) Events(ctx context.Context, caller, id string, p Page) (protocol.EventsPage, error) {
	if err := checkSessionID(id); err != nil {
		return protocol.EventsPage{}, err
	}
	evs, more, err := a.st.VisibleEvents(ctx, id, caller, p.After, p.Limit)
	if err != nil {
		return protocol.EventsPage{}, err
	}
	return eventsPage(evs, more), nil
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
