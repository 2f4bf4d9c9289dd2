package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxDepth is how deeply objects and arrays may nest in a request body; the
// body object itself is level 1. The deepest structure aspd defines (a
// frame in a data part) is a dozen levels; the rest is room for data parts.
const MaxDepth = 64

// checkBody is the one pass over a request body's raw bytes that
// encoding/json cannot make, because it has resolved by the time it hands
// over a value. It refuses:
//
//   - a string anywhere in the body, member names included, that is not
//     valid UTF-8 (encoding/json would silently turn each bad byte into
//     U+FFFD), that holds U+0000 (the escape \u0000), or that escapes an
//     unpaired UTF-16 surrogate such as \ud800 (again U+FFFD). aspd stores
//     request bytes verbatim and PostgreSQL refuses all three, so without
//     this check the same request would be stored by SQLite and fail on
//     PostgreSQL; with it, the answer is the same 400 on both;
//   - nesting deeper than MaxDepth;
//   - an object that repeats a member name (after unescaping: "k" and
//     "\u006b" are the same name). encoding/json keeps the last duplicate
//     while other parsers keep the first, and aspd stores and forwards
//     request bytes verbatim, so an object with duplicates could mean one
//     thing to aspd's validation and another to a recipient: a forged frame
//     behind a benign duplicate, say.
//
// The answer names the offending member by its JSON path. The body has
// already been decoded by encoding/json, so it is valid JSON; the scanner
// only tracks strings, keys and depth, and allocates only for member names
// that contain escapes, for large objects, and for the error.
func checkBody(body []byte) *Error {
	s := scanner{b: body}
	s.space()
	if err := s.value(0); err != nil {
		return Invalid("%s", err.message())
	}
	return nil
}

// problem is what checkBody found wrong.
type problem uint8

const (
	problemNone problem = iota
	problemDuplicate
	problemInvalidUTF8
	problemNUL
	problemSurrogate
	problemDepth
)

var textProblems = [...]string{
	problemInvalidUTF8: "is not valid UTF-8",
	problemNUL:         "contains U+0000 (\\u0000), which no string may hold",
	problemSurrogate:   "contains an unpaired UTF-16 surrogate escape",
}

type scanError struct {
	problem problem
	inName  bool   // the problem is in a member name, not a value
	name    []byte // the duplicate name (unescaped), or the raw bad name
	path    []string
}

func (e *scanError) message() string {
	where := e.where()
	switch {
	case e.problem == problemDuplicate:
		return fmt.Sprintf("duplicate key %q in %s", abbreviate(string(e.name)), where)
	case e.problem == problemDepth:
		return fmt.Sprintf("JSON nesting exceeds the limit of %d levels at %s", MaxDepth, where)
	case e.inName:
		// Show the name as encoding/json would read it (a bad byte or
		// surrogate as U+FFFD), quoted with Go escapes (U+0000 as \x00).
		var name string
		_ = json.Unmarshal(append(append([]byte{'"'}, e.name...), '"'), &name)
		return fmt.Sprintf("member name %q in %s %s", abbreviate(name), where, textProblems[e.problem])
	default:
		return where + " " + textProblems[e.problem]
	}
}

// where renders the path as content[0].data.items[1].
func (e *scanError) where() string {
	if len(e.path) == 0 {
		return "the body"
	}
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		p := e.path[i]
		if i != len(e.path)-1 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(abbreviate(p))
	}
	return b.String()
}

// abbreviate keeps error messages short when member names are long.
func abbreviate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	n := max - 3
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// value scans the value at s.i, which sits inside depth levels of nesting.
func (s *scanner) value(depth int) *scanError {
	switch s.b[s.i] {
	case '{', '[':
		if depth == MaxDepth {
			return &scanError{problem: problemDepth}
		}
		if s.b[s.i] == '{' {
			return s.object(depth + 1)
		}
		return s.array(depth + 1)
	case '"':
		if _, p := s.str(); p != problemNone {
			return &scanError{problem: p}
		}
	default: // number, true, false, null
		for s.i < len(s.b) && !strings.ContainsRune(",}] \t\n\r", rune(s.b[s.i])) {
			s.i++
		}
	}
	return nil
}

// str scans a string from its opening quote to past its closing quote, and
// returns its raw bytes (quotes excluded) and the first problem with its
// text, if any.
func (s *scanner) str() (raw []byte, p problem) {
	s.i++ // "
	start := s.i
	for {
		switch c := s.b[s.i]; {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, p
		case c == '\\':
			if s.b[s.i+1] != 'u' {
				s.i += 2
			} else if q := s.unicodeEscape(); p == problemNone {
				p = q
			}
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 && p == problemNone {
				p = problemInvalidUTF8
			}
			s.i += n
		}
	}
}

// unicodeEscape moves past the \uXXXX at s.i, and past the low half too
// when it is the high half of a surrogate pair, and reports whether it
// escapes U+0000 or an unpaired surrogate.
func (s *scanner) unicodeEscape() problem {
	r := hex4(s.b[s.i+2 : s.i+6])
	s.i += 6
	switch {
	case r == 0:
		return problemNUL
	case r >= 0xDC00 && r <= 0xDFFF:
		return problemSurrogate
	case r >= 0xD800 && r < 0xDC00:
		if s.i+6 <= len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
			if lo := hex4(s.b[s.i+2 : s.i+6]); lo >= 0xDC00 && lo <= 0xDFFF {
				s.i += 6
				return problemNone
			}
		}
		return problemSurrogate
	}
	return problemNone
}

// hex4 decodes four hex digits, which valid JSON guarantees.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a':
			r = r<<4 | rune(c-'a'+10)
		default:
			r = r<<4 | rune(c-'A'+10)
		}
	}
	return r
}

func (s *scanner) object(depth int) *scanError {
	s.i++ // {
	var small [8][]byte
	keys := small[:0]
	var set map[string]struct{}
	for {
		s.space()
		if s.b[s.i] == '}' {
			s.i++
			return nil
		}
		key, p := s.str()
		if p != problemNone {
			return &scanError{problem: p, inName: true, name: key}
		}
		if bytes.IndexByte(key, '\\') >= 0 {
			// The text is known good now, so this decoding is exact.
			var k string
			_ = json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k)
			key = []byte(k)
		}
		if set == nil && len(keys) == len(small) {
			set = make(map[string]struct{}, 2*len(small))
			for _, k := range keys {
				set[string(k)] = struct{}{}
			}
		}
		dup := false
		if set != nil {
			if _, dup = set[string(key)]; !dup {
				set[string(key)] = struct{}{}
			}
		} else {
			for _, k := range keys {
				if string(k) == string(key) {
					dup = true
					break
				}
			}
			keys = append(keys, key)
		}
		if dup {
			return &scanError{problem: problemDuplicate, name: key}
		}
		s.space()
		s.i++ // :
		s.space()
		if err := s.value(depth); err != nil {
			err.path = append(err.path, string(key))
			return err
		}
		s.space()
		if s.b[s.i] == ',' {
			s.i++
		}
	}
}

func (s *scanner) array(depth int) *scanError {
	s.i++ // [
	for n := 0; ; n++ {
		s.space()
		if s.b[s.i] == ']' {
			s.i++
			return nil
		}
		if err := s.value(depth); err != nil {
			err.path = append(err.path, fmt.Sprintf("[%d]", n))
			return err
		}
		s.space()
		if s.b[s.i] == ',' {
			s.i++
		}
	}
}
