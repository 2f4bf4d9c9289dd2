package protocol

import (
	"encoding/json"
	"unicode/utf8"
)

// A walk over JSON text that is known to be valid (json.Valid has accepted
// it, or a decoder captured it as a json.RawMessage): it finds the raw bytes
// of array elements and object members without decoding or copying them, so
// one pass over message content replaces a decode of the content and
// another of each part. Nothing here may see text that is not valid JSON.
// Elements and Members are exported for the search text's extraction
// (internal/search), which reads message content the same way.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just past the string whose opening quote is
// at b[i].
func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// skipValue returns the index just past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && !isSpace(b[i]) {
			i++
		}
		return i
	}
}

// Elements calls fn with the raw bytes of each element of the array arr.
func Elements(arr []byte, fn func(v []byte)) {
	i := skipSpace(arr, 1)
	for i < len(arr) && arr[i] != ']' {
		end := skipValue(arr, i)
		fn(arr[i:end])
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
}

// Members calls fn with each member of the object obj: its name as
// encoding/json decodes it (escapes resolved, invalid UTF-8 as U+FFFD) and
// its value's raw bytes. Unless the name needs decoding, it aliases obj.
func Members(obj []byte, fn func(name, v []byte)) {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] != '}' {
		end := skipString(obj, i)
		name := obj[i+1 : end-1]
		if !plainName(name) {
			var s string
			_ = json.Unmarshal(obj[i:end], &s)
			name = []byte(s)
		}
		i = skipSpace(obj, end)
		i = skipSpace(obj, i+1) // :
		end = skipValue(obj, i)
		fn(name, obj[i:end])
		i = skipSpace(obj, end)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
}

// plainName reports whether a string's raw bytes are its decoded text.
func plainName(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			return utf8.Valid(raw) && !containsByte(raw, '\\')
		}
	}
	return true
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// HasMember reports whether the data object of the validated content's
// i-th data part (DataParts[i]) has a member called name, as a decode into a
// map would: escaped names count as what they decode to. It reads the
// object's own members only, not nested ones, and decodes nothing.
func (c *Content) HasMember(i int, name string) bool {
	found := false
	Members(c.DataParts[i], func(n, _ []byte) {
		if string(n) == name {
			found = true
		}
	})
	return found
}

// appendCompactHTML appends valid JSON src to dst as json.Marshal writes a
// json.RawMessage: without insignificant white space, and with <, >, &,
// U+2028 and U+2029 escaped.
func appendCompactHTML(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	inString := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case inString && c == '\\':
			i++
		case inString && c == '"':
			inString = false
		case inString && (c == '<' || c == '>' || c == '&'):
			dst = append(append(dst, src[start:i]...), '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case inString && c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			dst = append(append(dst, src[start:i]...), '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			start = i + 3
			i += 2
		case inString:
		case c == '"':
			inString = true
		case isSpace(c):
			dst = append(dst, src[start:i]...)
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}

// AppendJSON appends the request to dst exactly as json.Marshal encodes it
// (the bytes its idempotency hash has always been taken of), without
// reflection and in one pass over the content and metadata, which must be
// valid JSON, as decoded or validated requests' are.
func (r *SendMessageRequest) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"content":`...)
	if r.Content == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendCompactHTML(dst, r.Content)
	}
	if r.IdempotencyKey != nil {
		k, _ := json.Marshal(*r.IdempotencyKey)
		dst = append(append(dst, `,"idempotency_key":`...), k...)
	}
	if len(r.Metadata) > 0 {
		dst = appendCompactHTML(append(dst, `,"metadata":`...), r.Metadata)
	}
	return append(dst, '}')
}
