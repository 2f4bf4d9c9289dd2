// Package trust decides whether two agents may contact each other under ASP's
// owner-controlled policies (whitepaper §6.2). It is pure: callers load the
// agents' policies, allowlists and blocks and get a yes or a no; every "no" is
// answered 404 by the server, exactly like a handle that does not exist.
package trust

import "strings"

// Policy is an agent's inbound policy.
type Policy string

// The two policies of §6.2. Allowlist with an empty list is the default:
// closed until the owner lists peers.
const (
	Allowlist Policy = "allowlist"
	Open      Policy = "open"
)

// Agent is the trust-relevant configuration of one agent.
type Agent struct {
	Handle    string
	Policy    Policy
	Allowlist []string // handles and @owner.* globs
	Blocks    []string // handles this agent has blocked
}

// CanContact reports whether a and b may communicate: whether either may
// invite the other. It is symmetric by construction:
//   - a block by either side denies, whatever the policies;
//   - an allowlist agent's gate applies in both directions, so with two
//     allowlist agents each must list the other, and with a mixed pair the
//     allowlist side decides;
//   - an open agent has no gate.
//
// An agent contacting itself is never a contact attempt and is denied.
func CanContact(a, b Agent) bool {
	if a.Handle == b.Handle {
		return false
	}
	if Blocked(a, b) {
		return false
	}
	return admits(a, b.Handle) && admits(b, a.Handle)
}

// CanInvite reports whether inviter may bring invitees into a session whose
// other current (invited or joined) participants are members: the one rule of
// POST /sessions, /invite and /reopen. Every invitee must be reachable by the
// inviter (CanContact), and no block, in either direction, may stand between
// an invitee and anyone it would share the session with: a current
// participant or another invitee. §6.2: a blocked agent "cannot be invited
// to new ones", whoever invites it. members may include the inviter and the
// invitees themselves; pairs already sharing the session are not judged.
func CanInvite(inviter Agent, invitees, members []Agent) bool {
	for i, to := range invitees {
		if !CanContact(inviter, to) {
			return false
		}
		for _, m := range members {
			if Blocked(to, m) {
				return false
			}
		}
		for _, other := range invitees[i+1:] {
			if Blocked(to, other) {
				return false
			}
		}
	}
	return true
}

// Blocked reports whether either agent has blocked the other.
func Blocked(a, b Agent) bool {
	return contains(a.Blocks, b.Handle) || contains(b.Blocks, a.Handle)
}

// admits reports whether agent's own gate lets peer through.
func admits(agent Agent, peer string) bool {
	switch agent.Policy {
	case Open:
		return true
	default: // Allowlist, and any unknown value: fail closed.
		for _, e := range agent.Allowlist {
			if EntryMatches(e, peer) {
				return true
			}
		}
		return false
	}
}

// EntryMatches reports whether an allowlist entry (a handle or an owner glob
// `@owner.*`) matches handle. Matching is exact: globs cover one owner's
// agents only, never a prefix of another owner's name.
func EntryMatches(entry, handle string) bool {
	if owner, ok := strings.CutSuffix(entry, ".*"); ok {
		return strings.HasPrefix(handle, owner+".")
	}
	return entry == handle
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
