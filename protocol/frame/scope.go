package frame

import "strings"

// ScopeKind is the form of a recipient scope (draft section 7).
type ScopeKind int

// The zero ScopeKind is no scope; ParseScope never returns it without an
// error.
const (
	ScopeAgent            ScopeKind = iota + 1 // @owner.agent or @owner.agent/*: every session of the handle
	ScopeInstrumentPrefix                      // @owner.agent/<prefix>*: sessions whose instrument begins with prefix
	ScopeStream                                // @owner.agent/<instrument>@<session-id>: one session
	ScopeOrgMembers                            // org:<owner>/members/*: every session of every member
	ScopeOrgRole                               // org:<owner>/members/<role>/*: sessions of members holding role
	ScopeAccord                                // accord:<owner>/grant:<grant-scope>: a peer organisation under an Accord grant
)

var scopeKindNames = [...]string{"invalid", "agent", "instrument-prefix", "stream", "org-members", "org-role", "accord"}

func (k ScopeKind) String() string {
	if k < 0 || int(k) >= len(scopeKindNames) {
		return "invalid"
	}
	return scopeKindNames[k]
}

// Scope is a parsed recipient scope. Only the fields of its Kind are set.
// The server maps it onto live streams, refuses what the sender may not
// address (scope-unauthorised: a Handle other than recipient_handle, an org
// that does not recognise the sender) and answers scope-unimplemented for the
// forms it does not deliver (ScopeAccord at least).
type Scope struct {
	Kind ScopeKind
	// Handle is the addressed handle of the three handle forms.
	Handle string
	// Owner is the owner part of Handle for the handle forms, the
	// organisation for the org: forms and the peer organisation for accord:.
	Owner            string
	Role             string // ScopeOrgRole
	InstrumentPrefix string // ScopeInstrumentPrefix, without the '*'
	Instrument       string // ScopeStream
	Session          string // ScopeStream
	Grant            string // ScopeAccord: the grant scope
}

// ParseScope parses a recipient scope. The draft writes the handle forms with
// ~handle and names org:<org-handle>; aspd's principals are ASP handles, so
// the handle forms take @owner.agent and the organisation is an ASP owner
// (the part before the dot). The accord form follows the draft in full,
// accord:<peer-org>/grant:<grant-scope>, though the server answers it
// scope-unimplemented.
//
// Instruments, instrument prefixes, session ids, roles and grant scopes have
// no grammar in the draft; they are taken as tokens of 1 to 128 octets of
// [A-Za-z0-9._-] (128 is the draft's bound on a session id, 6.3), which
// keeps the separators '/', '@', '*' and ':' unambiguous.
//
// A malformed scope is field-invalid with field "scope".
func ParseScope(s string) (Scope, *Error) {
	switch {
	case strings.HasPrefix(s, "org:"):
		return parseOrgScope(s, s[len("org:"):])
	case strings.HasPrefix(s, "accord:"):
		return parseAccordScope(s, s[len("accord:"):])
	case strings.HasPrefix(s, "@"):
		return parseHandleScope(s)
	}
	return Scope{}, scopeError(s, "must begin with @owner.agent, org: or accord:")
}

func parseHandleScope(s string) (Scope, *Error) {
	h, sel, hasSel := strings.Cut(s, "/")
	if !validHandle(h) {
		return Scope{}, scopeError(s, "%s is not an ASP handle @owner.agent", quote(h))
	}
	sc := Scope{Handle: h, Owner: h[1:strings.IndexByte(h, '.')]}
	inst, sess, hasAt := strings.Cut(sel, "@")
	switch {
	case !hasSel || sel == "*":
		sc.Kind = ScopeAgent
	case hasAt:
		if !validToken(inst) || !validToken(sess) {
			return Scope{}, scopeError(s, "a single session is <instrument>@<session-id>, each 1 to 128 of [A-Za-z0-9._-]")
		}
		sc.Kind, sc.Instrument, sc.Session = ScopeStream, inst, sess
	case strings.HasSuffix(sel, "*"):
		prefix := sel[:len(sel)-1]
		if !validToken(prefix) {
			return Scope{}, scopeError(s, "an instrument prefix is 1 to 128 of [A-Za-z0-9._-] followed by *")
		}
		sc.Kind, sc.InstrumentPrefix = ScopeInstrumentPrefix, prefix
	default:
		return Scope{}, scopeError(s, "after the handle comes /*, /<prefix>* or /<instrument>@<session-id>")
	}
	return sc, nil
}

func parseOrgScope(s, rest string) (Scope, *Error) {
	org, sel, _ := strings.Cut(rest, "/")
	if !validPart(org) {
		return Scope{}, scopeError(s, "the organisation must be an ASP owner, [a-z0-9_-]+")
	}
	if sel == "members/*" {
		return Scope{Kind: ScopeOrgMembers, Owner: org}, nil
	}
	role, ok := strings.CutPrefix(sel, "members/")
	if role, ok2 := strings.CutSuffix(role, "/*"); ok && ok2 && validToken(role) {
		return Scope{Kind: ScopeOrgRole, Owner: org, Role: role}, nil
	}
	return Scope{}, scopeError(s, "must be org:<owner>/members/* or org:<owner>/members/<role>/*")
}

func parseAccordScope(s, rest string) (Scope, *Error) {
	org, sel, _ := strings.Cut(rest, "/")
	if !validPart(org) {
		return Scope{}, scopeError(s, "the peer organisation must be an ASP owner, [a-z0-9_-]+")
	}
	grant, ok := strings.CutPrefix(sel, "grant:")
	if !ok || !validToken(grant) {
		return Scope{}, scopeError(s, "must be accord:<owner>/grant:<grant-scope>")
	}
	return Scope{Kind: ScopeAccord, Owner: org, Grant: grant}, nil
}

// String returns the scope in canonical form (ScopeAgent as @owner.agent/*).
func (sc Scope) String() string {
	switch sc.Kind {
	case ScopeAgent:
		return sc.Handle + "/*"
	case ScopeInstrumentPrefix:
		return sc.Handle + "/" + sc.InstrumentPrefix + "*"
	case ScopeStream:
		return sc.Handle + "/" + sc.Instrument + "@" + sc.Session
	case ScopeOrgMembers:
		return "org:" + sc.Owner + "/members/*"
	case ScopeOrgRole:
		return "org:" + sc.Owner + "/members/" + sc.Role + "/*"
	case ScopeAccord:
		return "accord:" + sc.Owner + "/grant:" + sc.Grant
	}
	return ""
}

func scopeError(s, format string, args ...any) *Error {
	e := invalid("scope", format, args...)
	e.Message = "scope " + quote(s) + ": " + e.Message
	return e
}

// validToken reports whether t is 1 to 128 octets of [A-Za-z0-9._-].
func validToken(t string) bool {
	if t == "" || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
