package protocol

import "github.com/aspd/aspd/trust"

// The operator's agent resource: /admin/v1/agents.

// Agent is an agent's record as the operator sees it. The token is never
// stored, only its hash; HasToken says whether a valid token exists.
type Agent struct {
	Handle        string   `json:"handle"`
	Owner         string   `json:"owner"`
	InboundPolicy string   `json:"inbound_policy"`
	Allowlist     []string `json:"allowlist"`
	Blocks        []string `json:"blocks"`
	Roles         []string `json:"roles"`
	HasToken      bool     `json:"has_token"`
	CreatedAt     int64    `json:"created_at"`
}

// Trust returns the agent's trust configuration for package trust.
func (a *Agent) Trust() trust.Agent {
	return trust.Agent{Handle: a.Handle, Policy: trust.Policy(a.InboundPolicy), Allowlist: a.Allowlist, Blocks: a.Blocks}
}

// AgentWithToken is the answer to agent creation and token rotation: the
// only time a token is ever shown.
type AgentWithToken struct {
	*Agent
	Token string `json:"token"`
}

// CreateAgentRequest is the body of POST /admin/v1/agents.
type CreateAgentRequest struct {
	Handle        string   `json:"handle"`
	InboundPolicy string   `json:"inbound_policy"`
	Allowlist     []string `json:"allowlist"`
	Roles         []string `json:"roles"`
}

// PolicyRequest is the body of PUT /admin/v1/agents/{handle}/policy.
type PolicyRequest struct {
	InboundPolicy string `json:"inbound_policy"`
}

// AllowlistRequest is the body of the allowlist updates.
type AllowlistRequest struct {
	Entries []string `json:"entries"`
}

// RolesRequest is the body of PUT /admin/v1/agents/{handle}/roles.
type RolesRequest struct {
	Roles []string `json:"roles"`
}

// BlockRequest is the body of POST /admin/v1/agents/{handle}/blocks.
type BlockRequest struct {
	Handle string `json:"handle"`
}
