package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
)

// checkDuplicateKeys refuses a JSON document in which any object repeats a
// member name (after unescaping: "k" and "\u006b" are the same name).
// encoding/json keeps the last duplicate while other parsers keep the first,
// and aspd stores and forwards request bytes verbatim, so an object with
// duplicates could mean one thing to aspd's validation and another to a
// recipient: a forged frame behind a benign duplicate, say.
//
// The document has already been decoded by encoding/json, so it is valid
// JSON (and nests at most 10,000 deep); this scanner only tracks keys, and
// allocates only for keys that contain escapes and for large objects.
func checkDuplicateKeys(body []byte) error {
	s := dupScanner{b: body}
	s.space()
	if err := s.value(); err != nil {
		return fmt.Errorf("duplicate key %q in %s", err.key, err.where())
	}
	return nil
}

type dupError struct {
	key  string
	path []string // innermost last, built while unwinding
}

func (e *dupError) where() string {
	if len(e.path) == 0 {
		return "the body"
	}
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		p := e.path[i]
		if i != len(e.path)-1 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

type dupScanner struct {
	b []byte
	i int
}

func (s *dupScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *dupScanner) value() *dupError {
	switch s.b[s.i] {
	case '{':
		return s.object()
	case '[':
		return s.array()
	case '"':
		s.str()
	default: // number, true, false, null
		for s.i < len(s.b) && !strings.ContainsRune(",}] \t\n\r", rune(s.b[s.i])) {
			s.i++
		}
	}
	return nil
}

// str skips a string and returns its raw bytes, quotes excluded.
func (s *dupScanner) str() []byte {
	start := s.i + 1
	for s.i++; s.b[s.i] != '"'; s.i++ {
		if s.b[s.i] == '\\' {
			s.i++
		}
	}
	raw := s.b[start:s.i]
	s.i++
	return raw
}

func (s *dupScanner) object() *dupError {
	s.i++ // {
	var small [8]string
	keys := small[:0]
	var set map[string]bool
	for {
		s.space()
		if s.b[s.i] == '}' {
			s.i++
			return nil
		}
		raw := s.str()
		key := string(raw)
		if strings.IndexByte(key, '\\') >= 0 {
			_ = json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &key)
		}
		if set == nil && len(keys) == len(small) {
			set = make(map[string]bool, 2*len(small))
			for _, k := range keys {
				set[k] = true
			}
		}
		dup := false
		if set != nil {
			dup = set[key]
			set[key] = true
		} else {
			for _, k := range keys {
				if k == key {
					dup = true
				}
			}
			keys = append(keys, key)
		}
		if dup {
			return &dupError{key: key}
		}
		s.space()
		s.i++ // :
		s.space()
		if err := s.value(); err != nil {
			err.path = append(err.path, key)
			return err
		}
		s.space()
		if s.b[s.i] == ',' {
			s.i++
		}
	}
}

func (s *dupScanner) array() *dupError {
	s.i++ // [
	for n := 0; ; n++ {
		s.space()
		if s.b[s.i] == ']' {
			s.i++
			return nil
		}
		if err := s.value(); err != nil {
			err.path = append(err.path, fmt.Sprintf("[%d]", n))
			return err
		}
		s.space()
		if s.b[s.i] == ',' {
			s.i++
		}
	}
}
