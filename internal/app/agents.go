package app

import (
	"context"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// The operator's actions on agents.

// AllowlistOp is how an allowlist update combines with the current list.
type AllowlistOp int

// The allowlist updates.
const (
	AllowlistReplace AllowlistOp = iota
	AllowlistAdd
	AllowlistRemove
)

// checkHandle refuses anything but a handle with the same 404 as an agent
// that does not exist.
func checkHandle(h string) error {
	if !protocol.ValidHandle(h) {
		return protocol.NotFound()
	}
	return nil
}

func validPolicy(p string) error {
	if p != protocol.PolicyOpen && p != protocol.PolicyAllowlist {
		return protocol.Invalid("inbound_policy must be \"allowlist\" or \"open\"")
	}
	return nil
}

func validEntries(entries []string) error {
	for i, e := range entries {
		if !protocol.ValidAllowlistEntry(e) {
			return protocol.Invalid("allowlist[%d] %q is not a handle or an owner glob (@owner.*)", i, e)
		}
	}
	return nil
}

func validRoles(roles []string) error {
	for i, r := range roles {
		if !validRole(r) {
			return protocol.Invalid("roles[%d] %q must be 1-64 characters of a-z 0-9 _ -", i, r)
		}
	}
	return nil
}

func validRole(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for _, ch := range r {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			return false
		}
	}
	return true
}

// CreateAgent registers an agent and returns it with its first token.
func (a *App) CreateAgent(ctx context.Context, req protocol.CreateAgentRequest) (protocol.AgentWithToken, error) {
	var none protocol.AgentWithToken
	if !protocol.ValidHandle(req.Handle) {
		return none, protocol.Invalid("handle %q is not a handle (@owner.agent, lower-case a-z 0-9 _ -, at most %d bytes)", req.Handle, protocol.MaxHandleLen)
	}
	if req.InboundPolicy == "" {
		req.InboundPolicy = protocol.PolicyAllowlist // §6.2: closed by default
	}
	if err := validPolicy(req.InboundPolicy); err != nil {
		return none, err
	}
	if err := validEntries(req.Allowlist); err != nil {
		return none, err
	}
	if err := validRoles(req.Roles); err != nil {
		return none, err
	}
	auditTarget(ctx, req.Handle, "inbound_policy", req.InboundPolicy)
	tok := NewToken()
	// One transaction writes the agent with its allowlist and roles and
	// reads back its record: either the operator gets the agent and its
	// token, or no agent exists (a failure after a commit would lose the
	// token of an agent that exists).
	ag, err := a.st.CreateAgentRecord(ctx, store.NewAgent{Handle: req.Handle, InboundPolicy: req.InboundPolicy,
		Allowlist: req.Allowlist, Roles: req.Roles, TokenHash: HashToken(tok)})
	if err != nil {
		return none, err
	}
	a.log.Info("agent created", "agent", req.Handle, "policy", req.InboundPolicy)
	return protocol.AgentWithToken{Agent: ag, Token: tok}, nil
}

// Agents lists the agents, all of them or one owner's.
func (a *App) Agents(ctx context.Context, owner string) ([]*protocol.Agent, error) {
	if owner != "" && !protocol.ValidHandle("@"+owner+".x") {
		return nil, protocol.Invalid("owner must be an owner name without \"@\" (a-z 0-9 _ -), as in acme for @acme.support")
	}
	return a.st.ListAgents(ctx, owner)
}

// Agent returns one agent's record.
func (a *App) Agent(ctx context.Context, handle string) (*protocol.Agent, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	return a.st.GetAgent(ctx, handle)
}

// DeleteAgent deletes an agent: it leaves its sessions, and its token,
// connections and streams stop working at once.
func (a *App) DeleteAgent(ctx context.Context, handle string) error {
	if err := checkHandle(handle); err != nil {
		return err
	}
	commits, err := a.st.DeleteAgent(ctx, handle)
	if err != nil {
		return err
	}
	a.cutOff(handle, "agent deleted")
	a.revokeChorus(handle) // its endpoint went with it (store.DeleteAgent)
	a.publish(commits...)
	a.log.Info("agent deleted", "agent", handle, "sessions_left", len(commits))
	return nil
}

// SetPolicy sets an agent's inbound policy and returns its record.
func (a *App) SetPolicy(ctx context.Context, handle string, req protocol.PolicyRequest) (*protocol.Agent, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	if err := validPolicy(req.InboundPolicy); err != nil {
		return nil, err
	}
	auditDetail(ctx, "inbound_policy", req.InboundPolicy)
	if err := a.st.SetPolicy(ctx, handle, req.InboundPolicy); err != nil {
		return nil, err
	}
	return a.st.GetAgent(ctx, handle)
}

// UpdateAllowlist replaces, extends or shrinks an agent's allowlist and
// returns its record.
func (a *App) UpdateAllowlist(ctx context.Context, handle string, op AllowlistOp, req protocol.AllowlistRequest) (*protocol.Agent, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	if req.Entries == nil {
		return nil, protocol.Invalid("entries is required (an array of handles and @owner.* globs)")
	}
	if err := validEntries(req.Entries); err != nil {
		return nil, err
	}
	auditDetail(ctx, "entries", req.Entries)
	var err error
	switch op {
	case AllowlistReplace:
		err = a.st.SetAllowlist(ctx, handle, req.Entries)
	case AllowlistAdd:
		err = a.st.AddAllowlist(ctx, handle, req.Entries)
	default:
		err = a.st.RemoveAllowlist(ctx, handle, req.Entries)
	}
	if err != nil {
		return nil, err
	}
	return a.st.GetAgent(ctx, handle)
}

// SetRoles replaces an agent's roles and returns its record.
func (a *App) SetRoles(ctx context.Context, handle string, req protocol.RolesRequest) (*protocol.Agent, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	if err := validRoles(req.Roles); err != nil {
		return nil, err
	}
	if req.Roles == nil {
		req.Roles = []string{}
	}
	auditDetail(ctx, "roles", req.Roles)
	if err := a.st.SetRoles(ctx, handle, req.Roles); err != nil {
		return nil, err
	}
	return a.st.GetAgent(ctx, handle)
}

// Block makes handle block req.Handle: they leave the sessions they share,
// and neither may contact the other. It returns handle's record.
func (a *App) Block(ctx context.Context, handle string, req protocol.BlockRequest) (*protocol.Agent, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	if !protocol.ValidHandle(req.Handle) || req.Handle == handle {
		return nil, protocol.Invalid("handle must be another agent's handle")
	}
	auditDetail(ctx, "blocked", req.Handle)
	commits, err := a.st.Block(ctx, handle, req.Handle)
	if err != nil {
		return nil, err
	}
	a.publish(commits...)
	a.log.Info("agent blocked", "blocker", handle, "blocked", req.Handle, "sessions_left", len(commits))
	return a.st.GetAgent(ctx, handle)
}

// Unblock lifts handle's block of blocked and returns handle's record.
func (a *App) Unblock(ctx context.Context, handle, blocked string) (*protocol.Agent, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	if err := checkHandle(blocked); err != nil {
		return nil, err
	}
	if err := a.st.Unblock(ctx, handle, blocked); err != nil {
		return nil, err
	}
	return a.st.GetAgent(ctx, handle)
}

// RotateToken issues a new token; the old one stops working at once, and
// connections and streams opened with it are closed.
func (a *App) RotateToken(ctx context.Context, handle string) (protocol.AgentWithToken, error) {
	var none protocol.AgentWithToken
	if err := checkHandle(handle); err != nil {
		return none, err
	}
	tok := NewToken()
	// The record comes from the rotation's own transaction: once the new
	// token is stored, the operator gets it (store.RotateTokenHash).
	ag, err := a.st.RotateTokenHash(ctx, handle, HashToken(tok))
	if err != nil {
		return none, err
	}
	a.cutOff(handle, "token rotated")
	a.log.Info("token rotated", "agent", handle)
	return protocol.AgentWithToken{Agent: ag, Token: tok}, nil
}

// RevokeToken removes an agent's token: it can no longer authenticate, and
// its connections and streams are closed. It returns the agent's record.
func (a *App) RevokeToken(ctx context.Context, handle string) (*protocol.Agent, error) {
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	if err := a.st.SetTokenHash(ctx, handle, nil); err != nil {
		return nil, err
	}
	a.cutOff(handle, "token revoked")
	a.log.Info("token revoked", "agent", handle)
	return a.st.GetAgent(ctx, handle)
}
