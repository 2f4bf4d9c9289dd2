package search

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/aspd/aspd/protocol"
)

// IndexedTypes are the event types whose text is indexed. Only
// session.message carries text of its own: session.invited repeats the
// session's topic for each invitee, and its initial_message is the
// session.message appended with it (indexing either would give the same
// text as several hits). Every other event type carries handles only.
var IndexedTypes = []string{"session.message"}

// Indexed reports whether events of type typ are indexed.
func Indexed(typ string) bool {
	for _, t := range IndexedTypes {
		if t == typ {
			return true
		}
	}
	return false
}

// Extract returns the indexed text of an event of type typ with the given
// payload (the event's wire "payload"). For a session.message it is the
// content when that is a string, else its text parts' text and every
// string value inside its data parts (recursively, in document order;
// object keys are not text), one per line. It is "" for every other type,
// and for a payload it cannot read (the event was validated when it was
// written; an unreadable one is not worth failing a write or a backfill
// for).
//
// This is the one extraction rule: the write path (one column of the same
// INSERT that appends the event) and the backfill of events written before
// search existed both call it.
func Extract(typ string, payload []byte) string {
	if !Indexed(typ) {
		return ""
	}
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		return ""
	}
	return ExtractContent(m.Content)
}

// ExtractContent is the indexed text of a session.message whose payload's
// content is content (Extract's rule, given the content itself). The store
// calls it on a request's content before the message's transaction, so
// that the group committer does not decode what the request already holds.
func ExtractContent(content json.RawMessage) string {
	var b strings.Builder
	line := func(s string) {
		if strings.TrimSpace(s) == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
	// Content is a string (plain text) or an array of parts
	// (common.json#/$defs/Content). The first byte tells which. Anything
	// else, and any content that is not valid JSON, has no text.
	t := bytes.Trim(content, " \t\r\n") // JSON's white space, and only it
	if len(t) == 0 || (t[0] != '"' && t[0] != '[') || !json.Valid(t) {
		return ""
	}
	if t[0] == '"' {
		if plain, ok := unquote(t); ok {
			line(plain)
		}
		return b.String()
	}
	// The parts are read in place, not decoded into structs: the message
	// path calls this once per message, and a json.Unmarshal of the parts
	// cost about 6 allocations and 2% of aspd's CPU under the chat load
	// (docs/benchmarks.md). It reads them as json.Unmarshal into
	// []struct{Type, Text string; Data json.RawMessage} did
	// (TestExtractContentMatchesUnmarshal and FuzzExtractContent hold it
	// to that): keys matched without regard to case, the last of a
	// repeated key winning, null leaving a string as it was, and no text at
	// all if a part is not an object or its type or text is not a string.
	type part struct{ typ, text, data []byte }
	var small [8]part
	parts := small[:0]
	ok := true
	protocol.Elements(t, func(v []byte) {
		if !ok {
			return
		}
		switch v[0] {
		case 'n': // null: an empty part
			return
		case '{':
		default:
			ok = false
			return
		}
		var p part
		protocol.Members(v, func(name, val []byte) {
			field := fieldOf(name)
			if field == "" || !ok {
				return
			}
			if field == "data" {
				p.data = val
				return
			}
			switch val[0] {
			case 'n':
				return
			case '"':
			default:
				ok = false
				return
			}
			if field == "type" {
				p.typ = val
			} else {
				p.text = val
			}
		})
		parts = append(parts, p)
	})
	if !ok {
		return ""
	}
	for _, p := range parts {
		switch {
		case stringIs(p.typ, "text") && p.text != nil:
			if text, ok := unquote(p.text); ok {
				line(text)
			}
		case stringIs(p.typ, "data") && p.data != nil:
			dataStrings(p.data, line)
		}
	}
	return b.String()
}

// fieldOf is the part field a member's name names, matched as
// encoding/json matches a struct's fields: exactly or without regard to
// case. "" for any other name.
func fieldOf(name []byte) string {
	for _, f := range [...]string{"type", "text", "data"} {
		if strings.EqualFold(string(name), f) {
			return f
		}
	}
	return ""
}

// stringIs reports whether the JSON string literal lit (nil for none) is
// s, without decoding it when it is s as written.
func stringIs(lit []byte, s string) bool {
	if lit == nil {
		return false
	}
	if len(lit) == len(s)+2 && string(lit[1:len(lit)-1]) == s {
		return true
	}
	v, ok := unquote(lit)
	return ok && v == s
}

// ExtractEvent is Extract on a stored event's wire body (the envelope with
// its payload), for the backfill. A redacted event (one with a "redacted"
// member) has no text: its placeholder content is not the sender's, and
// an imported store's backfill must not index it.
func ExtractEvent(typ string, body []byte) string {
	if !Indexed(typ) {
		return ""
	}
	var env struct {
		Payload  json.RawMessage `json:"payload"`
		Redacted json.RawMessage `json:"redacted"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Redacted != nil {
		return ""
	}
	return Extract(typ, env.Payload)
}

// dataStrings calls emit with every string value in the JSON value raw,
// in document order, skipping object keys. It scans the bytes itself: the
// json.Decoder.Token loop it replaced allocated for every token and cost
// about 3% of aspd's CPU under the chat load (docs/benchmarks.md). raw has
// passed the strict decoder; on a malformed value it stops, keeping what
// it emitted (TestDataStringsMatchesTokens compares it with the Token loop).
func dataStrings(raw json.RawMessage, emit func(string)) {
	// One frame per open container: an array, or an object whose next
	// string is a key or a value.
	const (
		array = iota
		objectKey
		objectValue
	)
	var stack []uint8
	for i := 0; i < len(raw); i++ {
		n := len(stack)
		switch raw[i] {
		case '{':
			stack = append(stack, objectKey)
		case '[':
			stack = append(stack, array)
		case '}', ']':
			if n == 0 {
				return
			}
			stack = stack[:n-1]
		case ',':
			if n > 0 && stack[n-1] == objectValue {
				stack[n-1] = objectKey
			}
		case '"':
			end := stringEnd(raw, i)
			if end < 0 {
				return
			}
			if n > 0 && stack[n-1] == objectKey {
				stack[n-1] = objectValue // a key: its value follows
			} else {
				v, ok := unquote(raw[i : end+1])
				if !ok {
					return
				}
				emit(v)
			}
			i = end
		}
	}
}

// stringEnd is the index of the quote that closes the string opening at
// raw[start], -1 if none does.
func stringEnd(raw []byte, start int) int {
	for j := start + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return -1
}

// unquote decodes one JSON string literal, copying it when it holds no
// escape and is valid UTF-8 (the common case).
func unquote(lit []byte) (string, bool) {
	body := lit[1 : len(lit)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var v string
	return v, json.Unmarshal(lit, &v) == nil
}
