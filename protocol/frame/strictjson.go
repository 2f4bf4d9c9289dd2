package frame

import (
	"bytes"
	"encoding/json"
	"io"
	"unicode/utf8"
)

// The frame is decoded into a small tree of its own rather than with
// json.Unmarshal, because Unmarshal silently resolves exactly the cases a
// validator must refuse: it keeps the last of duplicate members, matches
// struct fields case-insensitively, replaces invalid UTF-8 and unpaired
// surrogate escapes with U+FFFD, and turns integers into float64. Here every
// such input is field-invalid, so an accepted frame has exactly one meaning.

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
	// start and end delimit an object or array in the input, so the payload
	// can be handed on byte for byte.
	start, end int64
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

type decoder struct {
	raw []byte
	dec *json.Decoder
}

// decode parses raw as exactly one JSON object.
func decode(raw []byte) (*value, *Error) {
	if !utf8.Valid(raw) {
		return nil, invalid("", "frame is not valid UTF-8")
	}
	d := &decoder{raw: raw, dec: json.NewDecoder(bytes.NewReader(raw))}
	d.dec.UseNumber()
	tok, err := d.token("")
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, invalid("", "frame must be a JSON object")
	}
	root, err := d.object("", 1)
	if err != nil {
		return nil, err
	}
	if _, e := d.dec.Token(); e != io.EOF {
		return nil, invalid("", "unexpected data after the frame object")
	}
	return root, nil
}

// token reads the next token, refusing strings that carry an unpaired
// surrogate escape (encoding/json would turn it into U+FFFD).
func (d *decoder) token(path string) (json.Token, *Error) {
	before := d.dec.InputOffset()
	tok, err := d.dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, invalid(path, "unexpected end of input")
		}
		return nil, invalid(path, "malformed JSON: %v", err)
	}
	if _, ok := tok.(string); ok && hasLoneSurrogate(d.raw[before:d.dec.InputOffset()]) {
		return nil, invalid(path, "string contains an unpaired UTF-16 surrogate escape")
	}
	return tok, nil
}

func (d *decoder) value(tok json.Token, path string, depth int) (*value, *Error) {
	switch t := tok.(type) {
	case json.Delim:
		if depth > maxDepth {
			return nil, invalid(path, "nested too deeply")
		}
		if t == '{' {
			return d.object(path, depth)
		}
		return d.array(path, depth)
	case string:
		return &value{kind: kindString, text: t}, nil
	case json.Number:
		return &value{kind: kindNumber, text: string(t)}, nil
	case bool:
		return &value{kind: kindBool, boolean: t}, nil
	default: // nil: the decoder yields no other token types
		return &value{kind: kindNull}, nil
	}
}

// object reads the members of an object whose '{' has just been read.
func (d *decoder) object(path string, depth int) (*value, *Error) {
	obj := &value{kind: kindObject, start: d.dec.InputOffset() - 1}
	var seen map[string]bool // built only for large objects; small ones scan
	for d.dec.More() {
		tok, err := d.token(path)
		if err != nil {
			return nil, err
		}
		name := tok.(string) // the decoder accepts only strings as names
		p := join(path, name)
		if seen == nil && len(obj.members) >= 8 {
			seen = make(map[string]bool, 2*len(obj.members))
			for _, m := range obj.members {
				seen[m.name] = true
			}
		}
		if seen != nil && seen[name] || seen == nil && obj.get(name) != nil {
			return nil, invalid(p, "duplicate member %s", quote(name))
		}
		if seen != nil {
			seen[name] = true
		}
		if tok, err = d.token(p); err != nil {
			return nil, err
		}
		v, err := d.value(tok, p, depth+1)
		if err != nil {
			return nil, err
		}
		obj.members = append(obj.members, member{name, v})
	}
	if _, err := d.token(path); err != nil { // '}'
		return nil, err
	}
	obj.end = d.dec.InputOffset()
	return obj, nil
}

// array reads the elements of an array whose '[' has just been read.
func (d *decoder) array(path string, depth int) (*value, *Error) {
	arr := &value{kind: kindArray, start: d.dec.InputOffset() - 1}
	for d.dec.More() {
		p := index(path, len(arr.elems))
		tok, err := d.token(p)
		if err != nil {
			return nil, err
		}
		v, err := d.value(tok, p, depth+1)
		if err != nil {
			return nil, err
		}
		arr.elems = append(arr.elems, v)
	}
	if _, err := d.token(path); err != nil { // ']'
		return nil, err
	}
	arr.end = d.dec.InputOffset()
	return arr, nil
}

// hasLoneSurrogate reports whether seg, which holds one JSON string token and
// the separators before it, has a \u escape for a UTF-16 surrogate that is
// not part of a high-low pair. Outside string literals valid JSON has no
// backslashes, so only escapes need to be looked at.
func hasLoneSurrogate(seg []byte) bool {
	for i := 0; i < len(seg); i++ {
		if seg[i] != '\\' {
			continue
		}
		i++ // the escaped character; a `\\` is skipped whole
		if i >= len(seg) || seg[i] != 'u' {
			continue
		}
		r := hex4(seg[i+1:])
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // low surrogate without a high one
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 < len(seg) && seg[i+1] == '\\' && seg[i+2] == 'u' {
				if lo := hex4(seg[i+3:]); lo >= 0xDC00 && lo <= 0xDFFF {
					i += 6
					continue
				}
			}
			return true
		}
	}
	return false
}

// hex4 decodes four hex digits, or returns -1.
func hex4(b []byte) int {
	if len(b) < 4 {
		return -1
	}
	n := 0
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return n
}
