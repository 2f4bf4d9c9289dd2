package frame

import (
	"unicode/utf16"
	"unicode/utf8"
)

// The frame is parsed by a small strict JSON parser of its own rather than
// with encoding/json, because json.Unmarshal silently resolves exactly the
// cases a validator must refuse: it keeps the last of duplicate members,
// matches struct fields case-insensitively, replaces invalid UTF-8 and
// unpaired surrogate escapes with U+FFFD, and turns integers into float64.
// Here each of these is field-invalid, so an accepted frame has exactly one
// meaning. (json.Decoder's Token API could be made to do the same, but costs
// several times more time and allocations per frame.) The grammar is RFC
// 8259's; FuzzValidate checks it against encoding/json.

// maxDepth bounds nesting. The deepest legal value,
// payload.question.options[i].label, is at depth 5; the margin only lets an
// unknown member nested a little deeper be reported as field-unknown.
const maxDepth = 16

type valueKind uint8

const (
	kindNull valueKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

var kindNames = [...]string{"null", "boolean", "number", "string", "array", "object"}

func (k valueKind) String() string { return kindNames[k] }

type value struct {
	kind    valueKind
	text    string // string contents, or the number literal exactly as written
	boolean bool
	elems   []*value
	members []member // in document order; names are unique
	// start and end delimit the value in the input, so the payload can be
	// handed on byte for byte.
	start, end int
}

type member struct {
	name string
	val  *value
}

// get returns the member named name, or nil.
func (v *value) get(name string) *value {
	for i := range v.members {
		if v.members[i].name == name {
			return v.members[i].val
		}
	}
	return nil
}

type parser struct {
	data []byte
	pos  int
}

// decode parses data as exactly one JSON object.
func decode(data []byte) (*value, *Error) {
	if !utf8.Valid(data) {
		return nil, invalid("", "frame is not valid UTF-8")
	}
	p := &parser{data: data}
	p.skipSpace()
	if p.pos < len(data) && data[p.pos] != '{' {
		return nil, invalid("", "frame must be a JSON object")
	}
	root, err := p.value("", 1)
	if err != nil {
		return nil, err
	}
	if p.skipSpace(); p.pos != len(data) {
		return nil, invalid("", "unexpected data after the frame object at byte %d", p.pos)
	}
	return root, nil
}

// syntaxError reports input that is not JSON at all. Its message begins
// "malformed JSON", which the fuzz test relies on.
func (p *parser) syntaxError(path, what string) *Error {
	if p.pos >= len(p.data) {
		return invalid(path, "malformed JSON: unexpected end of input, expected %s", what)
	}
	return invalid(path, "malformed JSON at byte %d: expected %s, found %q", p.pos, what, rune(p.data[p.pos]))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(path string, depth int) (*value, *Error) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return nil, p.syntaxError(path, "a value")
	}
	start := p.pos
	var v *value
	var err *Error
	switch c := p.data[p.pos]; {
	case c == '{' || c == '[':
		if depth > maxDepth {
			return nil, invalid(path, "nested too deeply")
		}
		if c == '{' {
			v, err = p.object(path, depth)
		} else {
			v, err = p.array(path, depth)
		}
	case c == '"':
		var s string
		s, err = p.string(path)
		v = &value{kind: kindString, text: s}
	case c == '-' || c >= '0' && c <= '9':
		v, err = p.number(path)
	case p.literal("true"):
		v = &value{kind: kindBool, boolean: true}
	case p.literal("false"):
		v = &value{kind: kindBool}
	case p.literal("null"):
		v = &value{kind: kindNull}
	default:
		return nil, p.syntaxError(path, "a value")
	}
	if err != nil {
		return nil, err
	}
	v.start, v.end = start, p.pos
	return v, nil
}

func (p *parser) literal(lit string) bool {
	if len(p.data)-p.pos >= len(lit) && string(p.data[p.pos:p.pos+len(lit)]) == lit {
		p.pos += len(lit)
		return true
	}
	return false
}

func (p *parser) object(path string, depth int) (*value, *Error) {
	p.pos++ // '{'
	obj := &value{kind: kindObject}
	var seen map[string]bool // built only for large objects; small ones scan
	if p.skipSpace(); p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return obj, nil
	}
	for {
		if p.skipSpace(); p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.syntaxError(path, "a member name")
		}
		name, err := p.string(path)
		if err != nil {
			return nil, err
		}
		mpath := join(path, name)
		if seen == nil && len(obj.members) >= 8 {
			seen = make(map[string]bool, 2*len(obj.members))
			for _, m := range obj.members {
				seen[m.name] = true
			}
		}
		if seen != nil && seen[name] || seen == nil && obj.get(name) != nil {
			return nil, invalid(mpath, "duplicate member %s", quote(name))
		}
		if seen != nil {
			seen[name] = true
		}
		if p.skipSpace(); p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.syntaxError(mpath, "':'")
		}
		p.pos++
		v, err := p.value(mpath, depth+1)
		if err != nil {
			return nil, err
		}
		obj.members = append(obj.members, member{name, v})
		if p.skipSpace(); p.pos < len(p.data) && p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			p.pos++
			return obj, nil
		}
		return nil, p.syntaxError(path, "',' or '}'")
	}
}

func (p *parser) array(path string, depth int) (*value, *Error) {
	p.pos++ // '['
	arr := &value{kind: kindArray}
	if p.skipSpace(); p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return arr, nil
	}
	for {
		v, err := p.value(index(path, len(arr.elems)), depth+1)
		if err != nil {
			return nil, err
		}
		arr.elems = append(arr.elems, v)
		if p.skipSpace(); p.pos < len(p.data) && p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			p.pos++
			return arr, nil
		}
		return nil, p.syntaxError(path, "',' or ']'")
	}
}

// number scans a number, keeping its literal: whether it is an integer, and
// of what size, is the rule's question, not the parser's.
func (p *parser) number(path string) (*value, *Error) {
	start := p.pos
	digits := func() bool {
		n := p.pos
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
		}
		return p.pos > n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++ // no leading zeros: "01" ends the number after the 0
	} else if !digits() {
		return nil, p.syntaxError(path, "a digit")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if !digits() {
			return nil, p.syntaxError(path, "a digit")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if !digits() {
			return nil, p.syntaxError(path, "a digit")
		}
	}
	return &value{kind: kindNumber, text: string(p.data[start:p.pos])}, nil
}

// string scans a string literal starting at its opening quote. The input is
// known to be valid UTF-8; what is left to refuse is raw control characters,
// bad escapes and escapes of unpaired UTF-16 surrogates.
func (p *parser) string(path string) (string, *Error) {
	p.pos++ // '"'
	start := p.pos
	// Fast path: most strings have no escapes and are used as they stand.
	for p.pos < len(p.data) {
		switch c := p.data[p.pos]; {
		case c == '"':
			p.pos++
			return string(p.data[start : p.pos-1]), nil
		case c == '\\':
			return p.escapedString(path, start)
		case c < 0x20:
			return "", p.syntaxError(path, "no raw control character in a string")
		default:
			p.pos++
		}
	}
	return "", p.syntaxError(path, "'\"'")
}

func (p *parser) escapedString(path string, start int) (string, *Error) {
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.syntaxError(path, "no raw control character in a string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		p.pos++ // '\\'
		if p.pos >= len(p.data) {
			break
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.unicodeEscape(path)
			if err != nil {
				return "", err
			}
			buf = utf8.AppendRune(buf, r)
		default:
			p.pos--
			return "", p.syntaxError(path, "a valid escape character")
		}
	}
	return "", p.syntaxError(path, "'\"'")
}

// unicodeEscape reads the XXXX of \uXXXX (and the low half of a surrogate
// pair).
func (p *parser) unicodeEscape(path string) (rune, *Error) {
	hi, ok := p.hex4()
	if !ok {
		return 0, p.syntaxError(path, "four hex digits")
	}
	if !utf16.IsSurrogate(hi) {
		return hi, nil
	}
	if hi < 0xDC00 && len(p.data)-p.pos >= 2 && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
		p.pos += 2
		lo, ok := p.hex4()
		if !ok {
			return 0, p.syntaxError(path, "four hex digits")
		}
		if r := utf16.DecodeRune(hi, lo); r != utf8.RuneError {
			return r, nil
		}
	}
	return 0, invalid(path, "string contains an unpaired UTF-16 surrogate escape")
}

func (p *parser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}
