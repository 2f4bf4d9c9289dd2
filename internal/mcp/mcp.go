// Package mcp is aspd's MCP adapter: the agent API as Model Context Protocol
// tools, served over Streamable HTTP at /mcp in stateless mode, for agents
// (language-model agents, mostly) that act through tool calls and cannot
// hold a WebSocket between turns.
//
// It is a thin adapter, like package server: each tool decodes its typed
// arguments, calls one method of the application layer (internal/app) with
// the caller's handle and answers with the method's result, as structured
// content plus a JSON text copy. Validation, trust, rate limits, storage and
// publishing are the application's; errors are mapped by app.Answer, the
// same mapping the HTTP adapter uses, into a tool result with isError set
// whose text is the REST error body ({"error": {"code", "message"}}).
//
// Callers authenticate with their own agent token (Authorization: Bearer),
// through the SDK's bearer-token middleware, whose verifier is
// App.Authenticate: the same cache as REST, so rotation and revocation apply
// at once. wait_for_events is App.WaitForEvents: polled delivery on the
// agent's durable cursors. See docs/mcp.md.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// Version is the implementation version aspd announces to MCP clients.
const Version = "1"

// Handler returns the /mcp endpoint over a: the SDK's stateless Streamable
// HTTP handler behind bearer-token authentication. maxBody bounds request
// bodies (0 = unbounded).
func Handler(a *app.App, maxBody int64) http.Handler {
	srv := NewServer(a)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true})
	verify := func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		handle, err := authenticated(ctx, a, r, token)
		if err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) && pe.Status == http.StatusUnauthorized {
				return nil, auth.ErrInvalidToken
			}
			return nil, err
		}
		return &auth.TokenInfo{UserID: handle}, nil
	}
	protected := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if maxBody > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		// The SDK's middleware answers any verifier error but an invalid
		// token with 500 and the error's text. A store that cannot check the
		// token now (an outage) is answered here instead, as REST answers
		// it: 503 store_unavailable with Retry-After, never 401 (the token
		// may well be valid) nor 500. The answer is handed to the verifier
		// in the request's context, so the token is checked once (a Chorus
		// MCP token, which is not cached, costs one database read, not two).
		// A missing or refused token is answered here too, as REST answers
		// it: 401 with the error body (docs/errors.md) and the challenge; the
		// SDK's middleware would answer text/plain, which the OpenAPI
		// description (every 4xx is an error body) does not allow.
		tok := bearerToken(r)
		if tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aspd"`)
			writeError(w, app.Unauthorized(), 0)
			return
		}
		handle, err := a.Authenticate(r.Context(), tok)
		if err != nil {
			pe := app.Answer(err)
			switch {
			case app.StoreUnavailable(err):
				writeError(w, pe, app.StoreRetryAfterSeconds)
				return
			case pe.Status == http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", `Bearer realm="aspd"`)
				writeError(w, pe, 0)
				return
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), authKey{}, &authResult{token: tok, handle: handle, err: err}))
		protected.ServeHTTP(&challenge{ResponseWriter: w}, r)
	})
}

// authResult is Handler's check of a request's bearer token, handed to the
// SDK's verifier through the request's context.
type authResult struct {
	token, handle string
	err           error
}

type authKey struct{}

// authenticated is the handle token authenticated as: Handler's check of
// this request, or a check now if Handler read another token than the
// SDK did (it reads the header as the SDK does, so it should not happen).
func authenticated(ctx context.Context, a *app.App, r *http.Request, token string) (string, error) {
	if res, ok := r.Context().Value(authKey{}).(*authResult); ok && res.token == token {
		return res.handle, res.err
	}
	return a.Authenticate(ctx, token)
}

// bearerToken is the request's bearer token, as the SDK's middleware reads
// it, or "".
func bearerToken(r *http.Request) string {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
		return ""
	}
	return f[1]
}

// writeError answers an HTTP request with the REST error body, and
// Retry-After when retryAfter > 0.
func writeError(w http.ResponseWriter, pe *protocol.Error, retryAfter int) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(pe.Status)
	_ = json.NewEncoder(w).Encode(protocol.ErrorBody{Error: pe})
}

// challenge adds WWW-Authenticate: Bearer to a 401 that has none (the SDK
// sets it only when resource metadata or scopes are configured).
type challenge struct{ http.ResponseWriter }

func (c *challenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized && c.Header().Get("WWW-Authenticate") == "" {
		c.Header().Set("WWW-Authenticate", `Bearer realm="aspd"`)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *challenge) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *challenge) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// caller is the handle the bearer token authenticated.
func caller(req *mcp.CallToolRequest) (string, error) {
	if req.Extra == nil || req.Extra.TokenInfo == nil || req.Extra.TokenInfo.UserID == "" {
		return "", toolError{e: app.Unauthorized()}
	}
	return req.Extra.TokenInfo.UserID, nil
}

// toolError is an application error as a tool result: isError, and as text
// the REST error body with the same code and message. A rate limit's
// refusal and a store outage (store_unavailable) also say when to retry
// (retry_after_seconds), which REST says in its Retry-After header.
type toolError struct {
	e          *protocol.Error
	retryAfter int
}

func (t toolError) Error() string {
	b, _ := json.Marshal(struct {
		Error      *protocol.Error `json:"error"`
		RetryAfter int             `json:"retry_after_seconds,omitempty"`
	}{t.e, t.retryAfter})
	return string(b)
}

func answer(err error) error {
	var te toolError
	if errors.As(err, &te) {
		return te
	}
	var re *app.RetryError
	if errors.As(err, &re) {
		return toolError{re.Err, re.RetryAfterSeconds()}
	}
	if app.StoreUnavailable(err) {
		return toolError{app.Answer(err), app.StoreRetryAfterSeconds}
	}
	return toolError{e: app.Answer(err)}
}

// raw encodes a free-form argument (content, metadata, a frame) for the
// application layer; nil stays absent.
func raw(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, protocol.Invalid("cannot encode argument: %v", err)
	}
	return b, nil
}

// events decodes stored event bodies for structured content (numbers kept
// exact).
func events(bodies []json.RawMessage) ([]any, error) {
	out := make([]any, len(bodies))
	for i, b := range bodies {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func itoa[T int | int64](v *T) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(int64(*v), 10)
}

func ptr[T any](v T) *T { return &v }

// tool registers a tool whose handler gets the caller's handle, and maps
// its error to a tool result.
func tool[In, Out any](s *mcp.Server, t *mcp.Tool, h func(ctx context.Context, caller string, in In) (Out, error)) {
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		who, err := caller(req)
		if err != nil {
			return nil, zero, err
		}
		out, err := h(ctx, who, in)
		if err != nil {
			return nil, zero, answer(err)
		}
		return nil, out, nil
	})
}
