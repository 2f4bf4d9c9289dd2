package aspclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/aspd/aspd/protocol"
)

// Admin calls the operator API (/admin/v1) of one aspd with the operator
// token. It is safe for concurrent use. It has methods for provisioning
// agents; the rest of the operator API (docs/api.md) is reached with Do and
// Open, whose paths are relative to /admin/v1 (e.g. "/sessions").
type Admin struct {
	c *Client
}

// NewAdmin returns a client of the operator API of the aspd at baseURL
// (the server's URL, without /admin/v1). Options are those of New;
// Stream's do not apply.
func NewAdmin(baseURL, operatorToken string, opts ...Option) (*Admin, error) {
	c, err := New(baseURL, operatorToken, opts...)
	if err != nil {
		return nil, err
	}
	c.base += "/admin/v1"
	return &Admin{c: c}, nil
}

// Do sends one request to the operator API, as Client.Do does.
func (a *Admin) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	return a.c.Do(ctx, method, path, query, body, out)
}

// Open sends one request to the operator API whose answer is read as a
// stream, as Client.Open does.
func (a *Admin) Open(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	return a.c.Open(ctx, method, path, query, body)
}

// CreateAgent creates an agent and returns it with its token, the only
// time the token is shown (POST /admin/v1/agents).
func (a *Admin) CreateAgent(ctx context.Context, req protocol.CreateAgentRequest) (*protocol.AgentWithToken, error) {
	var out protocol.AgentWithToken
	if err := a.c.Do(ctx, http.MethodPost, "/agents", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteAgent deletes an agent (DELETE /admin/v1/agents/{handle}); its
// connections are closed with CloseUnauthorized.
func (a *Admin) DeleteAgent(ctx context.Context, handle string) error {
	return a.c.Do(ctx, http.MethodDelete, "/agents/"+url.PathEscape(handle), nil, nil, nil)
}

// Agent returns an agent's record (GET /admin/v1/agents/{handle}).
func (a *Admin) Agent(ctx context.Context, handle string) (*protocol.Agent, error) {
	var out protocol.Agent
	if err := a.c.Do(ctx, http.MethodGet, "/agents/"+url.PathEscape(handle), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
