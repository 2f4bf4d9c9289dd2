package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/aspd/aspd/protocol"
)

// decodeEvent reads what the benchmark needs of one received frame: the
// event (wireEvent) and, for a session.message, its benchmark marker. ok is
// false for a frame that is not JSON or that json.Unmarshal would refuse
// into a wireEvent; the caller then counts it as malformed.
//
// Every received event passed through json.Unmarshal twice (the event,
// then the content for the marker), which was a fifth of the load
// generator's CPU under the closed-loop chat load, on the same two cores
// as the server it measures. This reads the frame in place after one
// json.Valid, with protocol's walker, for the shapes aspd writes: plain
// member names and string values without escapes. Anything else (an
// escape, a member name in another case, a value of an unexpected kind)
// goes to decodeEventSlow, the two Unmarshal calls, so the result is
// always theirs (TestDecodeEventMatchesUnmarshal, FuzzDecodeEvent).
// Content aliases raw.
func decodeEvent(raw []byte) (ev wireEvent, mark *benchMark, ok bool) {
	if !json.Valid(raw) {
		return wireEvent{}, nil, false
	}
	if ev, mark, fast := decodeEventFast(raw); fast {
		return ev, mark, true
	}
	return decodeEventSlow(raw)
}

// decodeEventSlow is decodeEvent through encoding/json.
func decodeEventSlow(raw []byte) (ev wireEvent, mark *benchMark, ok bool) {
	if err := json.Unmarshal(raw, &ev); err != nil {
		return wireEvent{}, nil, false
	}
	if ev.Type == "session.message" {
		mark = parseMark(ev.Payload.Content)
	}
	return ev, mark, true
}

// decodeEventFast is decodeEvent for valid JSON; fast is false when the
// frame needs encoding/json's reading.
func decodeEventFast(raw []byte) (ev wireEvent, mark *benchMark, fast bool) {
	obj := bytes.TrimSpace(raw)
	if len(obj) == 0 || obj[0] != '{' {
		return ev, nil, false
	}
	var content []byte
	fast = walk(obj, []string{"type", "session_id", "sequence", "payload"}, func(f string, v []byte) bool {
		switch f {
		case "type":
			return plainString(v, &ev.Type)
		case "session_id":
			return plainString(v, &ev.SessionID)
		case "sequence":
			return plainInt(v, &ev.Sequence)
		}
		if string(v) == "null" { // payload
			return true
		}
		return walk(v, []string{"agent", "invitee", "sender", "content"}, func(f string, v []byte) bool {
			switch f {
			case "agent":
				return plainString(v, &ev.Payload.Agent)
			case "invitee":
				return plainString(v, &ev.Payload.Invitee)
			case "sender":
				return plainString(v, &ev.Payload.Sender)
			}
			content = v
			return true
		})
	})
	if !fast {
		return wireEvent{}, nil, false
	}
	ev.Payload.Content = content
	if ev.Type == "session.message" {
		var marked bool
		if mark, marked = markFast(content); !marked {
			mark = parseMark(content)
		}
	}
	return ev, mark, true
}

// markFast is parseMark for the content aspbench itself sends (post, in
// provision.go); marked is false when parseMark must read the content.
func markFast(content []byte) (mark *benchMark, marked bool) {
	if len(content) == 0 || content[0] != '[' || !bytes.Contains(content, []byte(`"bench"`)) {
		return nil, true // parseMark's own first test
	}
	marked = true
	protocol.Elements(content, func(part []byte) {
		if !marked {
			return
		}
		var typ string
		var bench *benchMark
		marked = walk(part, []string{"type", "data"}, func(f string, v []byte) bool {
			if f == "type" {
				return plainString(v, &typ)
			}
			var ok bool
			bench, ok = dataBench(v)
			return ok
		})
		// The first data part with a marker wins, as in parseMark; the later
		// parts are still read, since a type error in any of them makes
		// Unmarshal, and so parseMark, fail.
		if marked && mark == nil && typ == "data" && bench != nil {
			mark = bench
		}
	})
	if !marked {
		return nil, false
	}
	return mark, true
}

// dataBench reads a data part's "data" value: the benchmark marker, if any.
func dataBench(v []byte) (bench *benchMark, ok bool) {
	if string(v) == "null" {
		return nil, true
	}
	ok = walk(v, []string{"bench"}, func(_ string, v []byte) bool {
		if string(v) == "null" {
			bench = nil
			return true
		}
		m := &benchMark{}
		bench = m
		return walk(v, []string{"run", "id", "t"}, func(f string, v []byte) bool {
			switch f {
			case "run":
				return plainString(v, &m.Run)
			case "id":
				return plainInt(v, &m.ID)
			}
			return plainInt(v, &m.T)
		})
	})
	return bench, ok
}

// walk calls fn with each member of obj that is one of names, and reports
// whether fast reading may go on: false when obj is not an object, when a
// member matches a name only as encoding/json matches names, when one of
// names comes twice, or when fn says so.
func walk(obj []byte, names []string, fn func(f string, v []byte) bool) bool {
	if obj[0] != '{' {
		return false
	}
	ok := true
	var seen members
	protocol.Members(obj, func(name, v []byte) {
		if !ok {
			return
		}
		switch f := field(name, names...); f {
		case "":
		case "?":
			ok = false
		default:
			ok = seen.first(f) && fn(f, v)
		}
	})
	return ok
}

// members records which fields an object has had, so that a repeated one
// goes to encoding/json (which merges a repeated object into the first).
// Every object read here has at most four fields.
type members struct {
	n int
	f [4]string
}

// first reports whether f is new, and records it.
func (m *members) first(f string) bool {
	for _, g := range m.f[:m.n] {
		if g == f {
			return false
		}
	}
	m.f[m.n] = f
	m.n++
	return true
}

// field returns which of names the member name is: "" for none, "?" for one
// that matches only as encoding/json matches names, case-insensitively
// (the slow path decides those).
func field(name []byte, names ...string) string {
	for _, n := range names {
		if string(name) == n {
			return n
		}
		if strings.EqualFold(string(name), n) {
			return "?"
		}
	}
	// encoding/json also folds the Kelvin sign and the long s; such names
	// are not ASCII.
	for _, c := range name {
		if c >= 0x80 {
			return "?"
		}
	}
	return ""
}

// plainString sets *s from a JSON string literal without escapes (null
// leaves it, as Unmarshal does); false for anything else.
func plainString(v []byte, s *string) bool {
	if string(v) == "null" {
		return true
	}
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return false
	}
	body := v[1 : len(v)-1]
	for _, c := range body {
		if c >= 0x80 {
			return false // Unmarshal replaces invalid UTF-8; leave it to it
		}
	}
	*s = string(body)
	return true
}

// plainInt sets *n from a JSON number that is an int64 as written (null
// leaves it); false for anything else, which Unmarshal then judges.
func plainInt(v []byte, n *int64) bool {
	if string(v) == "null" {
		return true
	}
	x, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return false
	}
	*n = x
	return true
}
