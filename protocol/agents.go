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

// AdminAgent is one row of the operator's agent listing (GET
// /admin/v1/agents): the agent and how it is reached now.
type AdminAgent struct {
	Agent
	Online      bool  `json:"online"`                 // network presence (any node, or a healthy Chorus endpoint)
	LastSeenAt  int64 `json:"last_seen_at,omitempty"` // epoch ms it went offline; absent while online or if never seen
	Connections int   `json:"connections"`            // live WebSocket connections on the answering node
	// Doors are the ways events reach it: "websocket" (live connections),
	// "chorus" (a registered webhook). MCP agents poll and have no door.
	Doors  []string `json:"doors"`
	Chorus string   `json:"chorus,omitempty"` // "healthy" or "failing" when registered
}
