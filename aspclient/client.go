// Package aspclient is a Go client of an aspd server (Agent Session
// Protocol): the agent REST API, the WebSocket /connect event stream, and
// the operator API.
//
// A Client holds a server URL and one agent token. Its REST methods
// (CreateSession, Invite, Join, Leave, End, Reopen, SendMessage, Session,
// Sessions, Events) take and return the wire types of package protocol;
// Do (and Open, for an answer read as a stream) reaches any other call. An
// error answer of the server is an *Error. Stream delivers the agent's
// events to a handler, reconnecting with backoff when the connection drops,
// never calling the handler twice for one (session_id, sequence), and
// acknowledging each event once the handler returns nil (docs/delivery.md,
// "Confirmation"), so that a reconnection resumes right after it.
//
// Under Stream is Conn (Client.Dial): one connection that passes on every
// frame as it arrives, duplicates included, and acknowledges only what it
// is told to; it is for programs that observe delivery itself, such as
// aspbench. Admin (NewAdmin) calls the operator API (/admin/v1) with the
// operator token: CreateAgent, Agent, DeleteAgent, and Do/Open for the rest.
package aspclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aspd/aspd/protocol"
)

// DefaultTimeout bounds one REST call unless WithTimeout says otherwise.
const DefaultTimeout = 30 * time.Second

// Client calls one aspd as one agent. It is safe for concurrent use.
type Client struct {
	base       string // http(s)://host[:port][/prefix], no trailing slash
	token      string
	http       *http.Client
	timeout    time.Duration
	backoffMin time.Duration
	backoffMax time.Duration
	onDrop     func(err error, wait time.Duration) error
	readLimit  int64
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client of REST calls and of the WebSocket
// handshake (default http.DefaultClient).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithTimeout sets the per-request timeout of REST calls and of the
// WebSocket handshake (default DefaultTimeout); 0 means none.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithReadLimit sets the largest WebSocket frame Dial's connections (and
// so Stream) accept (default DefaultReadLimit); a larger one ends the
// connection.
func WithReadLimit(n int64) Option { return func(c *Client) { c.readLimit = n } }

// WithBackoff sets Stream's reconnection delays: the first wait is min,
// doubling up to max (default 1s to 30s). The wait is reset once a
// connection succeeds.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) { c.backoffMin, c.backoffMax = min, max }
}

// WithOnDisconnect sets a function Stream calls when a connection ends or
// cannot be opened and it is about to wait before reconnecting, e.g. to
// log it. If f returns an error, Stream returns it instead of reconnecting
// (f may return err itself to never reconnect).
func WithOnDisconnect(f func(err error, wait time.Duration) error) Option {
	return func(c *Client) { c.onDrop = f }
}

// New returns a client of the aspd at baseURL (http:// or https://, e.g.
// "http://127.0.0.1:8080") authenticated with an agent token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("aspclient: base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("aspclient: base URL %q is not an http:// or https:// URL with a host and no query", baseURL)
	}
	if token == "" {
		return nil, errors.New("aspclient: empty token")
	}
	c := &Client{
		base:       strings.TrimRight(u.String(), "/"),
		token:      token,
		http:       http.DefaultClient,
		timeout:    DefaultTimeout,
		backoffMin: time.Second,
		backoffMax: 30 * time.Second,
		readLimit:  DefaultReadLimit,
	}
	for _, o := range opts {
		o(c)
	}
	if c.backoffMin <= 0 {
		c.backoffMin = time.Second
	}
	if c.backoffMax < c.backoffMin {
		c.backoffMax = c.backoffMin
	}
	return c, nil
}

// Error is an error answered by the server:
// {"error": {"code": "...", "message": "..."}}. An answer without that shape
// (a proxy's error page, say) gets the code "http_<status>".
type Error struct {
	Status  int    // HTTP status
	Code    string // stable code, e.g. "not_found" (protocol.Code*)
	Message string // for humans
}

func (e *Error) Error() string {
	return fmt.Sprintf("aspd: %s: %s (HTTP %d)", e.Code, e.Message, e.Status)
}

// Is reports whether target is an *Error with the same Code, so that
// errors.Is(err, aspclient.ErrNotFound) tests the code of an answer.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is: they match any *Error with their code.
var (
	ErrNotFound      = &Error{Code: protocol.CodeNotFound}
	ErrUnauthorized  = &Error{Code: protocol.CodeUnauthorized}
	ErrInvalid       = &Error{Code: protocol.CodeInvalidRequest}
	ErrSessionEnded  = &Error{Code: protocol.CodeSessionEnded}
	ErrNotJoined     = &Error{Code: protocol.CodeNotJoined}
	ErrNotInvited    = &Error{Code: protocol.CodeNotInvited}
	ErrRateLimited   = &Error{Code: protocol.CodeRateLimited}
	ErrSessionActive = &Error{Code: protocol.CodeSessionActive}
)

// DecodeError turns an error answer of aspd into an *Error: the ASP error
// body ({"error": {"code", "message"}}), or, for any other body (a proxy's
// page, say), its first line under the code "http_<status>".
func DecodeError(status int, body []byte) *Error {
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil && e.Error.Code != "" {
		return &Error{Status: status, Code: e.Error.Code, Message: e.Error.Message}
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(msg) > 200 {
		msg = msg[:200]
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Code: "http_" + strconv.Itoa(status), Message: msg}
}

// Do sends one request to path under the base URL (e.g. "/sessions", or
// "/agents" on an Admin) with body, if not nil, as JSON (a json.RawMessage
// is sent as is), and decodes a successful JSON answer into out, if not nil
// (a *json.RawMessage keeps it raw; an empty answer leaves out unchanged). It is the way to the calls that have
// no method here. An error answer is an *Error; a server that cannot be
// reached is the *url.Error of net/http.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := c.Open(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// Open is Do for an answer to read as a stream (an export, say): it returns
// the response of a successful status, whose body the caller reads and
// closes. The client's timeout does not apply; ctx bounds the whole
// exchange.
func (c *Client) Open(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case json.RawMessage:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encoding the body: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, DecodeError(resp.StatusCode, b)
	}
	return resp, nil
}

func sessionPath(id, tail string) string { return "/sessions/" + url.PathEscape(id) + tail }

// CreateSession opens a session (POST /sessions).
func (c *Client) CreateSession(ctx context.Context, req protocol.CreateSessionRequest) (*protocol.CreateSessionResponse, error) {
	var out protocol.CreateSessionResponse
	if err := c.Do(ctx, http.MethodPost, "/sessions", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Invite invites agents to a session (POST /sessions/{id}/invite).
func (c *Client) Invite(ctx context.Context, sessionID string, handles ...string) (*protocol.InviteResponse, error) {
	var out protocol.InviteResponse
	if err := c.Do(ctx, http.MethodPost, sessionPath(sessionID, "/invite"), nil, protocol.InviteRequest{Invite: handles}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Join accepts an invitation (POST /sessions/{id}/join).
func (c *Client) Join(ctx context.Context, sessionID string) error {
	return c.Do(ctx, http.MethodPost, sessionPath(sessionID, "/join"), nil, nil, nil)
}

// Leave leaves a session (POST /sessions/{id}/leave).
func (c *Client) Leave(ctx context.Context, sessionID string) error {
	return c.Do(ctx, http.MethodPost, sessionPath(sessionID, "/leave"), nil, nil, nil)
}

// End ends a session (POST /sessions/{id}/end).
func (c *Client) End(ctx context.Context, sessionID string) error {
	return c.Do(ctx, http.MethodPost, sessionPath(sessionID, "/end"), nil, nil, nil)
}

// Reopen reopens an ended session (POST /sessions/{id}/reopen).
func (c *Client) Reopen(ctx context.Context, sessionID string, req protocol.ReopenRequest) error {
	return c.Do(ctx, http.MethodPost, sessionPath(sessionID, "/reopen"), nil, req, nil)
}

// SendMessage sends a message (POST /sessions/{id}/messages).
func (c *Client) SendMessage(ctx context.Context, sessionID string, req protocol.SendMessageRequest) (*protocol.SendMessageResponse, error) {
	var out protocol.SendMessageResponse
	if err := c.Do(ctx, http.MethodPost, sessionPath(sessionID, "/messages"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Text is message content made of one text string, for
// protocol.SendMessageRequest.Content and protocol.InitialMessage.Content.
func Text(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Session returns a session and its participants (GET /sessions/{id}).
func (c *Client) Session(ctx context.Context, sessionID string) (*protocol.Session, error) {
	var out protocol.Session
	if err := c.Do(ctx, http.MethodGet, sessionPath(sessionID, ""), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SessionsQuery filters GET /sessions; zero fields are left out.
type SessionsQuery struct {
	State  string // protocol.StateActive or protocol.StateEnded
	Status string // the caller's status: protocol.StatusInvited, StatusJoined, StatusLeft
	Before string // a session id: the NextCursor of the previous page
	Limit  int    // 1-1000; the server's default is 100
}

// Sessions returns one page of the caller's sessions, newest first
// (GET /sessions), each with the participants Session would return. Pass
// the page's NextCursor as q.Before for the next one.
func (c *Client) Sessions(ctx context.Context, q SessionsQuery) (*protocol.SessionList[protocol.SessionSummary], error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	if q.Before != "" {
		v.Set("before", q.Before)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out protocol.SessionList[protocol.SessionSummary]
	if err := c.Do(ctx, http.MethodGet, "/sessions", v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EventsPage is one page of a session's events.
type EventsPage struct {
	Events []protocol.Event
	// NextCursor is the afterSequence of the next page, 0 when none follows.
	NextCursor int64
}

// Events returns one page of the events of a session the caller may see,
// those after afterSequence, in sequence order (GET /sessions/{id}/events).
// limit 0 is the server's default (100).
func (c *Client) Events(ctx context.Context, sessionID string, afterSequence int64, limit int) (*EventsPage, error) {
	v := url.Values{}
	if afterSequence > 0 {
		v.Set("after_sequence", strconv.FormatInt(afterSequence, 10))
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var raw struct {
		Events     []protocol.Event `json:"events"`
		NextCursor string           `json:"next_cursor"`
	}
	if err := c.Do(ctx, http.MethodGet, sessionPath(sessionID, "/events"), v, nil, &raw); err != nil {
		return nil, err
	}
	p := &EventsPage{Events: raw.Events}
	if raw.NextCursor != "" {
		n, err := strconv.ParseInt(raw.NextCursor, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("GET events: next_cursor %q is not a sequence", raw.NextCursor)
		}
		p.NextCursor = n
	}
	return p, nil
}
