package app

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/internal/chorus"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Chorus webhooks (docs/chorus.md): the rules of registration, of the
// credentials a delivery hands out (callback URLs, MCP tokens), of
// callbacks and of a webhook agent's presence. The outbox's side of the
// door the delivery worker (internal/chorus) goes through is
// chorus_outbox.go.

// ChorusConfig configures Chorus in the application layer.
type ChorusConfig struct {
	// Key seals connection strings and signing secrets at rest (AES-256-GCM).
	// Without a key, Chorus is off: registration answers 503.
	Key []byte
	// PublicURL is aspd's base URL as agents reach it (callbacks, /mcp).
	PublicURL   string
	CallbackTTL time.Duration // lifetime of a callback URL
	MCPTokenTTL time.Duration // lifetime of an MCP token handed to an agent
}

// Bounds of Chorus input.
const (
	MaxConnectionStringBytes = 2048
	maxCallbackIDBytes       = 128
	maxSignalBytes           = 1024
)

// chorusState is the application's Chorus state on this node.
type chorusState struct {
	aead cipher.AEAD   // nil: Chorus off
	wake chan struct{} // a commit may have made deliveries due

	// handles is the set of agents with an endpoint, so that only commits
	// for one of them wake the worker: copy-on-write, read on every
	// publish without a lock. Local registrations update it at once; the
	// worker reloads it every poll (registrations made on other nodes).
	handles atomic.Pointer[map[string]bool]

	mu  sync.Mutex
	mcp map[string]mcpToken // handle -> the MCP token being handed out
	// revoked holds, per handle, a channel closed when its endpoint is
	// rotated or removed through this node: attempts in flight to the old
	// URL watch it (chorus.Attempt.Revoked).
	revoked map[string]chan struct{}

	statusSignals, errorSignals atomic.Uint64 // callbacks received (chorus.Signals)
}

type mcpToken struct {
	token   string
	expires time.Time
}

func newChorusState(cfg ChorusConfig) (*chorusState, error) {
	c := &chorusState{wake: make(chan struct{}, 1), mcp: map[string]mcpToken{}, revoked: map[string]chan struct{}{}}
	if cfg.Key == nil {
		return c, nil
	}
	block, err := aes.NewCipher(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("chorus key: %w", err)
	}
	if c.aead, err = cipher.NewGCM(block); err != nil {
		return nil, fmt.Errorf("chorus key: %w", err)
	}
	return c, nil
}

// chorusRecipient reports whether one of recipients has a Chorus endpoint.
func (a *App) chorusRecipient(recipients []string) bool {
	m := a.chorus.handles.Load()
	if m == nil || len(*m) == 0 {
		return false
	}
	for _, h := range recipients {
		if (*m)[h] {
			return true
		}
	}
	return false
}

// setChorusHandle adds (on) or removes handle in the endpoint set.
func (a *App) setChorusHandle(handle string, on bool) {
	a.chorus.mu.Lock()
	defer a.chorus.mu.Unlock()
	next := map[string]bool{}
	if m := a.chorus.handles.Load(); m != nil {
		for h := range *m {
			next[h] = true
		}
	}
	if on {
		next[handle] = true
	} else {
		delete(next, handle)
	}
	a.chorus.handles.Store(&next)
}

// reloadChorusHandles reads the endpoint set from the store.
func (a *App) reloadChorusHandles(ctx context.Context) error {
	hs, err := a.st.ChorusHandles(ctx)
	if err != nil {
		return err
	}
	next := make(map[string]bool, len(hs))
	for _, h := range hs {
		next[h] = true
	}
	a.chorus.mu.Lock()
	a.chorus.handles.Store(&next)
	a.chorus.mu.Unlock()
	return nil
}

// notifyChorus wakes the Chorus worker without ever blocking the commit
// path; the worker also polls, so a lost wake-up only delays.
func (a *App) notifyChorus() {
	select {
	case a.chorus.wake <- struct{}{}:
	default:
	}
}

// ChorusEnabled reports whether Chorus has a key and may run.
func (a *App) ChorusEnabled() bool { return a.chorus.aead != nil }

// chorusRevoked returns the channel closed when h's endpoint is next
// rotated or removed through this node.
func (a *App) chorusRevoked(h string) <-chan struct{} {
	a.chorus.mu.Lock()
	defer a.chorus.mu.Unlock()
	ch, ok := a.chorus.revoked[h]
	if !ok {
		ch = make(chan struct{})
		a.chorus.revoked[h] = ch
	}
	return ch
}

// revokeChorus aborts this node's attempts in flight to h's endpoint,
// which was rotated or removed.
func (a *App) revokeChorus(h string) {
	a.chorus.mu.Lock()
	defer a.chorus.mu.Unlock()
	if ch, ok := a.chorus.revoked[h]; ok {
		close(ch)
		delete(a.chorus.revoked, h)
	}
}

func chorusOff() error {
	return protocol.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable,
		"Chorus is disabled on this server: it needs a key (--chorus-key-file or ASPD_CHORUS_KEY; see docs/chorus.md)")
}

func (a *App) seal(plain string) []byte {
	nonce := make([]byte, a.chorus.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err)
	}
	return a.chorus.aead.Seal(nonce, nonce, []byte(plain), nil)
}

func (a *App) unseal(sealed []byte) (string, error) {
	n := a.chorus.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("chorus: sealed value too short")
	}
	plain, err := a.chorus.aead.Open(nil, sealed[:n], sealed[n:], nil)
	if err != nil {
		return "", errors.New("chorus: cannot unseal a stored secret: is this the key it was sealed with?")
	}
	return string(plain), nil
}

// validConnectionString checks a connection string without ever quoting
// it back: it is a secret.
func validConnectionString(s string) error {
	if s == "" {
		return protocol.Invalid("connection_string is required")
	}
	if len(s) > MaxConnectionStringBytes {
		return protocol.Invalid("connection_string is longer than %d bytes", MaxConnectionStringBytes)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Hostname() == "" || u.Fragment != "" || u.Opaque != "" {
		return protocol.Invalid("connection_string must be an absolute http or https URL without a fragment")
	}
	return nil
}

// SetChorus registers (or rotates) handle's connection string and returns a
// fresh signing secret. After a rotation, the old endpoint receives nothing
// more: queued retries go to the new one, and attempts in flight on this
// node are aborted.
func (a *App) SetChorus(ctx context.Context, handle string, req protocol.ChorusRequest) (protocol.ChorusRegistration, error) {
	var none protocol.ChorusRegistration
	if err := checkHandle(handle); err != nil {
		return none, err
	}
	if !a.ChorusEnabled() {
		return none, chorusOff()
	}
	if err := validConnectionString(req.ConnectionString); err != nil {
		return none, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return none, err
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(raw)
	existed, err := a.st.SetChorusEndpoint(ctx, handle, a.seal(req.ConnectionString), a.seal(secret))
	if err != nil {
		return none, err
	}
	a.revokeChorus(handle)
	a.setChorusHandle(handle, true)
	a.chorusPresence(ctx, handle, true)
	a.notifyChorus()
	a.log.Info("chorus endpoint registered", "agent", handle, "rotated", existed)
	return protocol.ChorusRegistration{Agent: handle, SigningSecret: secret, Rotated: existed, CreatedAt: time.Now().UnixMilli()}, nil
}

// DeleteChorus removes handle's endpoint; nothing more is delivered to it.
func (a *App) DeleteChorus(ctx context.Context, handle string) error {
	if err := checkHandle(handle); err != nil {
		return err
	}
	if err := a.st.DeleteChorusEndpoint(ctx, handle); err != nil {
		return err
	}
	a.revokeChorus(handle)
	a.setChorusHandle(handle, false)
	a.dropChorusMCP(handle)
	a.chorusPresence(ctx, handle, false)
	a.log.Info("chorus endpoint removed", "agent", handle)
	return nil
}

// Chorus returns handle's endpoint state.
func (a *App) Chorus(ctx context.Context, handle string) (protocol.ChorusInfo, error) {
	if err := checkHandle(handle); err != nil {
		return protocol.ChorusInfo{}, err
	}
	e, err := a.st.ChorusEndpoint(ctx, handle)
	if err != nil {
		return protocol.ChorusInfo{}, err
	}
	return protocol.ChorusInfo{Agent: handle, CreatedAt: e.CreatedAt, Failing: e.Failing, FailingSince: e.FailingSince,
		LastSuccessAt: e.LastSuccessAt, LastError: e.LastError}, nil
}

// MaxChorusDeliveriesListed bounds one listing of delivery records.
const MaxChorusDeliveriesListed = 500

// ChorusDeliveries lists handle's most recent delivery records.
func (a *App) ChorusDeliveries(ctx context.Context, handle string, limit int) ([]protocol.ChorusDelivery, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxChorusDeliveriesListed {
		return nil, protocol.Invalid("limit must be from 1 to %d", MaxChorusDeliveriesListed)
	}
	if _, err := a.st.ChorusEndpoint(ctx, handle); err != nil {
		return nil, err
	}
	ds, err := a.st.ChorusDeliveries(ctx, handle, limit)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.ChorusDelivery, len(ds)) // never nil: an empty list is []
	for i, d := range ds {
		out[i] = protocol.ChorusDelivery{ID: d.ID, Handle: d.Handle, SessionID: d.SessionID, Sequence: d.Sequence, EventType: d.EventType,
			State: d.State, Attempts: d.Attempts, NextAttemptAt: d.NextAttemptAt, LastAttemptAt: d.LastAttemptAt, LastStatus: d.LastStatus,
			LastError: d.LastError, AgentStatus: d.AgentStatus, AgentError: d.AgentError, CreatedAt: d.CreatedAt, FinishedAt: d.FinishedAt}
	}
	return out, nil
}

// RedeliverChorus queues one of handle's deliveries again, due now, with
// the same webhook-id. A redelivery is outside per-session order.
func (a *App) RedeliverChorus(ctx context.Context, handle, id string) error {
	if err := checkHandle(handle); err != nil {
		return err
	}
	if len(id) > 64 {
		return protocol.NotFound()
	}
	if err := a.st.RedeliverChorus(ctx, handle, id); err != nil {
		return err
	}
	a.log.Info("chorus redelivery queued", "agent", handle, "delivery", id)
	a.notifyChorus()
	return nil
}

// chorusTarget unseals handle's endpoint for a delivery attempt.
func (a *App) chorusTarget(ctx context.Context, handle string) (chorus.Target, error) {
	e, err := a.st.ChorusEndpoint(ctx, handle)
	if err != nil {
		return chorus.Target{}, err
	}
	u, err := a.unseal(e.URLSealed)
	if err != nil {
		return chorus.Target{}, err
	}
	s, err := a.unseal(e.SecretSealed)
	if err != nil {
		return chorus.Target{}, err
	}
	return chorus.Target{URL: u, Secret: s}, nil
}

// chorusTokenHash is the SHA-256 under which callback tokens are stored.
func chorusTokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// issueChorusCallback creates a fresh callback URL for one delivery of a
// session to handle: 256 random bits, stored only as their SHA-256.
func (a *App) issueChorusCallback(ctx context.Context, handle, sessionID, deliveryID string) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tok := base64.RawURLEncoding.EncodeToString(raw)
	expires := time.Now().Add(a.cfg.Chorus.CallbackTTL).UnixMilli()
	if err := a.st.AddChorusCallback(ctx, chorusTokenHash(tok), store.ChorusCallback{Handle: handle, SessionID: sessionID, DeliveryID: deliveryID}, expires); err != nil {
		return "", err
	}
	return strings.TrimRight(a.cfg.Chorus.PublicURL, "/") + "/chorus/callback/" + tok, nil
}

// chorusMCP returns the /mcp URL and a short-lived token for handle. A
// token is handed out while more than half its lifetime is left, so a busy
// agent costs one token write per half lifetime, not one per delivery.
func (a *App) chorusMCP(ctx context.Context, handle string) (string, string, error) {
	mcpURL := strings.TrimRight(a.cfg.Chorus.PublicURL, "/") + "/mcp"
	a.chorus.mu.Lock()
	t, ok := a.chorus.mcp[handle]
	a.chorus.mu.Unlock()
	if ok && time.Until(t.expires) > a.cfg.Chorus.MCPTokenTTL/2 {
		return mcpURL, t.token, nil
	}
	gen := a.auth.generation()
	tok := chorusMCPTokenPrefix + strings.TrimPrefix(NewToken(), "asp_")
	expires := time.Now().Add(a.cfg.Chorus.MCPTokenTTL)
	if err := a.st.AddChorusMCPToken(ctx, HashToken(tok), handle, expires.UnixMilli()); err != nil {
		return "", "", err
	}
	a.chorus.mu.Lock()
	// A rotation or revocation since gen (which evicts the auth cache) must
	// not find this token cached afterwards.
	if a.auth.generation() == gen {
		a.chorus.mcp[handle] = mcpToken{token: tok, expires: expires}
	}
	a.chorus.mu.Unlock()
	return mcpURL, tok, nil
}

// chorusMCPTokenPrefix marks the MCP tokens of Chorus deliveries, so that
// Authenticate looks them up in their own table and nowhere else.
const chorusMCPTokenPrefix = "aspm_"

func (a *App) authenticateChorusMCP(ctx context.Context, hash []byte) (string, error) {
	if !a.ChorusEnabled() {
		return "", Unauthorized()
	}
	h, err := a.st.AuthenticateChorusMCP(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return "", Unauthorized()
	}
	return h, err
}

// dropChorusMCP forgets and revokes handle's MCP tokens (its agent token
// was rotated or revoked, the agent deleted, or its endpoint removed).
func (a *App) dropChorusMCP(handle string) {
	a.chorus.mu.Lock()
	delete(a.chorus.mcp, handle)
	a.chorus.mu.Unlock()
	if err := a.st.DeleteChorusMCPTokens(context.Background(), handle); err != nil {
		a.log.Error("chorus: revoking MCP tokens failed", "agent", handle, "err", err)
	}
}

// chorusPresence makes a webhook agent online (a healthy endpoint) or
// offline (failing or removed) through the presence code sockets use. An
// agent that also holds a live WebSocket stays online.
func (a *App) chorusPresence(ctx context.Context, h string, online bool) {
	if a.node != nil {
		a.chorusHold(ctx, h, online) // several nodes: cluster.go
		return
	}
	if online {
		presence{a}.Online(ctx, h)
		return
	}
	if a.hub.Online(h) {
		return
	}
	presence{a}.Offline(ctx, h)
}

// chorusFailing marks handle's endpoint failing: it counts as offline from
// now (session.disconnected, then the grace window).
func (a *App) chorusFailing(ctx context.Context, handle string) {
	changed, err := a.st.MarkChorusFailing(ctx, handle)
	if err != nil {
		a.log.Error("chorus: marking the endpoint failing failed", "agent", handle, "err", err)
		return
	}
	if changed {
		a.log.Warn("chorus endpoint failing: the agent counts as offline", "agent", handle)
		a.chorusPresence(ctx, handle, false)
	}
}

// chorusRecovered brings a failing endpoint's agent back online after a
// successful delivery.
func (a *App) chorusRecovered(ctx context.Context, handle string) {
	a.log.Info("chorus endpoint recovered", "agent", handle)
	a.chorusPresence(ctx, handle, true)
}

// chorusKeepsOnline reports whether h has a healthy endpoint, which keeps
// it online when its last WebSocket closes.
func (a *App) chorusKeepsOnline(ctx context.Context, h string) bool {
	if !a.ChorusEnabled() {
		return false
	}
	e, err := a.st.ChorusEndpoint(ctx, h)
	return err == nil && !e.Failing
}

// recoverChorusPresence marks every agent with a healthy endpoint online
// at start-up (after a first start or a crash that left it offline).
func (a *App) recoverChorusPresence(ctx context.Context) error {
	if !a.ChorusEnabled() {
		return nil
	}
	handles, err := a.st.ChorusHealthyHandles(ctx)
	if err != nil {
		return err
	}
	for _, h := range handles {
		a.chorusPresence(ctx, h, true)
	}
	return nil
}

// ChorusCallback handles a POST to a callback URL. An unknown or expired
// token is the plain 404 of an unknown route. message, tool_call and
// tool_result become session.message events from the agent, through
// SendMessage (same validation, limits, rate limits), idempotent per
// callback URL and position (the callback's id, or else its content);
// status and error are not session events: they go to the delivery record,
// the logs and the metrics.
func (a *App) ChorusCallback(ctx context.Context, token string, req protocol.ChorusCallbackRequest) (protocol.ChorusCallbackResponse, error) {
	var none protocol.ChorusCallbackResponse
	if token == "" || len(token) > 64 {
		return none, protocol.NotFound()
	}
	tokHash := chorusTokenHash(token)
	cb, err := a.st.ChorusCallbackByHash(ctx, tokHash)
	if errors.Is(err, store.ErrNotFound) {
		return none, protocol.NotFound()
	}
	if err != nil {
		return none, err
	}
	if len(req.ID) > maxCallbackIDBytes {
		return none, protocol.Invalid("id must be at most %d bytes", maxCallbackIDBytes)
	}
	var content json.RawMessage
	switch req.Type {
	case "message":
		if err := onlyFields(req, "content", "id"); err != nil {
			return none, err
		}
		content = req.Content
	case "tool_call":
		if err := onlyFields(req, "id", "name", "args"); err != nil {
			return none, err
		}
		if req.Name == "" {
			return none, protocol.Invalid("name is required for a tool_call")
		}
		if len(req.Args) > 0 && req.Args[0] != '{' {
			return none, protocol.Invalid("args must be an object")
		}
		content, err = dataContent(map[string]any{"chorus": "tool_call", "id": req.ID, "name": req.Name, "args": req.Args})
	case "tool_result":
		if err := onlyFields(req, "id", "content"); err != nil {
			return none, err
		}
		if len(req.Content) == 0 {
			return none, protocol.Invalid("content is required for a tool_result")
		}
		content, err = dataContent(map[string]any{"chorus": "tool_result", "id": req.ID, "content": req.Content})
	case "status", "error":
		return a.chorusSignal(ctx, cb, req)
	default:
		return none, protocol.Invalid("type must be one of message, tool_call, tool_result, status, error")
	}
	if err != nil {
		return none, err
	}
	// The idempotency key names the callback URL (by its token's hash) and
	// the position in it: the agent's id, or else the content, so a POST
	// retried by the agent is one message.
	pos := req.ID
	if pos == "" {
		pos = "content:" + requestHash(content)
	}
	keyHash := sha256.Sum256(append(append(append(tokHash, req.Type...), 0), pos...))
	key := "chorus_" + hex.EncodeToString(keyHash[:24])
	resp, err := a.SendMessage(ctx, cb.Handle, cb.SessionID, protocol.SendMessageRequest{Content: content, IdempotencyKey: &key})
	if err != nil {
		return none, err
	}
	return protocol.ChorusCallbackResponse{OK: true, MessageID: resp.MessageID, Sequence: resp.Sequence}, nil
}

// onlyFields refuses members that do not belong to the callback's type.
func onlyFields(req protocol.ChorusCallbackRequest, allowed ...string) error {
	set := map[string]bool{"content": len(req.Content) > 0, "id": req.ID != "", "name": req.Name != "", "args": len(req.Args) > 0,
		"status": req.Status != "", "message": req.Message != "", "code": req.Code != ""}
	for _, f := range allowed {
		delete(set, f)
	}
	for f, present := range set {
		if present {
			return protocol.Invalid("field %q does not belong to a %s callback", f, req.Type)
		}
	}
	return nil
}

// dataContent is message content with one data part, the form tool calls
// and results take in the transcript.
func dataContent(data map[string]any) (json.RawMessage, error) {
	for k, v := range data {
		if s, ok := v.(string); ok && s == "" {
			delete(data, k)
		}
		if r, ok := v.(json.RawMessage); ok && len(r) == 0 {
			delete(data, k)
		}
	}
	return json.Marshal([]any{map[string]any{"type": "data", "data": data}})
}

func (a *App) chorusSignal(ctx context.Context, cb store.ChorusCallback, req protocol.ChorusCallbackRequest) (protocol.ChorusCallbackResponse, error) {
	var text string
	if req.Type == "status" {
		if err := onlyFields(req, "status"); err != nil {
			return protocol.ChorusCallbackResponse{}, err
		}
		if req.Status == "" {
			return protocol.ChorusCallbackResponse{}, protocol.Invalid("status is required")
		}
		text = req.Status
	} else {
		if err := onlyFields(req, "message", "code"); err != nil {
			return protocol.ChorusCallbackResponse{}, err
		}
		if req.Message == "" {
			return protocol.ChorusCallbackResponse{}, protocol.Invalid("message is required")
		}
		text = req.Message
		if req.Code != "" {
			text = req.Code + ": " + text
		}
	}
	if len(text) > maxSignalBytes {
		return protocol.ChorusCallbackResponse{}, protocol.Invalid("the %s text is longer than %d bytes", req.Type, maxSignalBytes)
	}
	status, errText := text, ""
	if req.Type == "error" {
		status, errText = "", text
	}
	if err := a.st.SetChorusAgentSignal(ctx, cb.DeliveryID, status, errText); err != nil {
		return protocol.ChorusCallbackResponse{}, err
	}
	a.log.Info("chorus agent signal", "agent", cb.Handle, "session", cb.SessionID, "delivery", cb.DeliveryID, "type", req.Type, "text", text)
	if req.Type == "status" {
		a.chorus.statusSignals.Add(1)
	} else {
		a.chorus.errorSignals.Add(1)
	}
	return protocol.ChorusCallbackResponse{OK: true}, nil
}
