package frame

import "strings"

// Filter axes of draft section 9.
const (
	AxisKind        = "kind"
	AxisSender      = "sender"
	AxisContentType = "content_type"
	AxisTool        = "tool"
	AxisOrg         = "org"
)

// Filter is a parsed subscribe filter: every clause must match. The zero
// Filter, like the empty string, matches every frame.
type Filter struct {
	clauses []Clause
}

// Clause is one axis:value clause of a filter.
type Clause struct {
	Axis, Value string
}

// ParseFilter parses a subscribe filter, a comma-separated list of
// axis:value clauses (section 9). The value is everything after the first
// colon, so a content type may itself contain one. Nothing is trimmed: a
// filter is a narrowing the subscriber relies on, so anything unexpected,
// stray whitespace included, is refused rather than guessed at.
//
// An axis outside kind, sender, content_type, tool and org, a clause with no
// colon or an empty clause is filter-axis-unknown (a bare "kind" is
// filter-value-invalid: the axis is known, its value missing). A value that is
// invalid for its axis is filter-value-invalid: a kind outside the catalogue,
// a sender that is not an ASP handle (the draft's ~handle, read as in
// validHandle), an org that is not an ASP owner, a tool class outside
// [A-Za-z0-9._-]{1,128}, an empty content type. Errors carry field "filter".
func ParseFilter(s string) (Filter, *Error) {
	if s == "" {
		return Filter{}, nil
	}
	var f Filter
	for _, c := range strings.Split(s, ",") {
		axis, val, ok := strings.Cut(c, ":")
		if !ok {
			if isAxis(c) {
				return Filter{}, filterError(CodeFilterValueInvalid, "clause %s has no value", quote(c))
			}
			return Filter{}, filterError(CodeFilterAxisUnknown, "clause %s is not axis:value", quote(c))
		}
		if !isAxis(axis) {
			return Filter{}, filterError(CodeFilterAxisUnknown, "unknown axis %s; axes are kind, sender, content_type, tool, org", quote(axis))
		}
		if !validAxisValue(axis, val) {
			return Filter{}, filterError(CodeFilterValueInvalid, "%s is not a valid %s value", quote(val), axis)
		}
		f.clauses = append(f.clauses, Clause{axis, val})
	}
	return f, nil
}

func isAxis(a string) bool {
	switch a {
	case AxisKind, AxisSender, AxisContentType, AxisTool, AxisOrg:
		return true
	}
	return false
}

func validAxisValue(axis, v string) bool {
	switch axis {
	case AxisKind:
		return isKind(v)
	case AxisSender:
		return validHandle(v)
	case AxisOrg:
		return validPart(v)
	case AxisTool:
		return validToken(v)
	default: // content_type: any non-empty value, compared exactly
		return v != ""
	}
}

func filterError(code, format string, args ...any) *Error {
	return newError(code, "filter", format, args...)
}

// Match reports whether fr satisfies every clause. A nil frame matches
// nothing.
//
// content_type matches only a frame whose payload carries an equal
// content_type; a frame without one does not match (section 9: opt-in, not
// default-pass). tool and org clauses match no frame: section 9 makes them
// forward-compatibility axes that parse but take effect only once the server
// implements them, and the draft defines no frame member that names a tool
// class. A clause that cannot yet be evaluated must narrow, never widen.
func (f Filter) Match(fr *Frame) bool {
	if fr == nil {
		return false
	}
	for _, c := range f.clauses {
		var ok bool
		switch c.Axis {
		case AxisKind:
			ok = fr.Kind == c.Value
		case AxisSender:
			ok = fr.SenderHandle == c.Value
		case AxisContentType:
			ok = fr.ContentType != "" && fr.ContentType == c.Value
		}
		if !ok {
			return false
		}
	}
	return true
}

// Clauses returns the filter's clauses in the order written.
func (f Filter) Clauses() []Clause { return append([]Clause(nil), f.clauses...) }

// String returns the filter as ParseFilter reads it.
func (f Filter) String() string {
	parts := make([]string, len(f.clauses))
	for i, c := range f.clauses {
		parts[i] = c.Axis + ":" + c.Value
	}
	return strings.Join(parts, ",")
}
