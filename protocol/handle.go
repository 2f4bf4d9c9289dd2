package protocol

import "strings"

// MaxHandleLen bounds a handle's length in bytes, "@" and "." included. The
// schema gives no bound; an operator needs one (storage, logs, abuse).
const MaxHandleLen = 64

// ValidHandle reports whether s matches common.json#/$defs/Handle,
// `^@[a-z0-9_-]+\.[a-z0-9_-]+$`, and is at most MaxHandleLen bytes.
func ValidHandle(s string) bool {
	if len(s) > MaxHandleLen || len(s) < 4 || s[0] != '@' {
		return false
	}
	owner, agent, ok := strings.Cut(s[1:], ".")
	return ok && validPart(owner) && validPart(agent)
}

// ValidAllowlistEntry reports whether s matches
// common.json#/$defs/AllowlistEntry: a handle, or an owner glob `@owner.*`.
func ValidAllowlistEntry(s string) bool {
	if owner, ok := strings.CutSuffix(s, ".*"); ok {
		return len(s) <= MaxHandleLen && len(owner) > 1 && owner[0] == '@' && validPart(owner[1:])
	}
	return ValidHandle(s)
}

// Owner returns the owner part of a valid handle: "acme" for "@acme.support".
func Owner(handle string) string {
	owner, _, _ := strings.Cut(strings.TrimPrefix(handle, "@"), ".")
	return owner
}

func validPart(p string) bool {
	if p == "" {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
