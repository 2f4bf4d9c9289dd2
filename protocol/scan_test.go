package protocol

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceProblem is the slow, obviously right reference for checkBody:
// json.Decoder tokens, a set of names per object, a stack for depth, and
// each string's raw literal (found from the decoder's offsets) checked on
// its own. It returns the first problem in document order.
func referenceProblem(body []byte) problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	type level struct {
		keys      map[string]bool // nil for an array
		expectKey bool
	}
	var stack []*level
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return problemNone
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if len(stack) == MaxDepth {
					return problemDepth
				}
				l := &level{}
				if v == '{' {
					l.keys, l.expectKey = map[string]bool{}, true
				}
				stack = append(stack, l)
				continue
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			lit := bytes.TrimLeft(body[before:dec.InputOffset()], " \t\r\n,:")
			if p := literalProblem(lit); p != problemNone {
				return p
			}
			if n := len(stack); n > 0 && stack[n-1].expectKey {
				if stack[n-1].keys[v] {
					return problemDuplicate
				}
				stack[n-1].keys[v] = true
				stack[n-1].expectKey = false
				continue
			}
		}
		// A value ended.
		if len(stack) == 0 {
			return problemNone
		}
		if top := stack[len(stack)-1]; top.keys != nil {
			top.expectKey = true
		}
	}
}

var escapeRE = regexp.MustCompile(`\\(?:u([0-9A-Fa-f]{4})|[^u])`)

// literalProblem returns the first problem, by position, in a raw JSON
// string literal (quotes included).
func literalProblem(lit []byte) problem {
	first, at := problemNone, len(lit)
	for i := 0; i < len(lit); {
		r, n := utf8.DecodeRune(lit[i:])
		if r == utf8.RuneError && n == 1 {
			first, at = problemInvalidUTF8, i
			break
		}
		i += n
	}
	ms := escapeRE.FindAllSubmatchIndex(lit, -1)
	code := func(m []int) uint64 {
		if m[2] < 0 {
			return 1 << 32 // not a \u escape
		}
		v, _ := strconv.ParseUint(string(lit[m[2]:m[3]]), 16, 32)
		return v
	}
	for j := 0; j < len(ms) && ms[j][0] < at; j++ {
		var p problem
		switch v := code(ms[j]); {
		case v == 0:
			p = problemNUL
		case v >= 0xDC00 && v <= 0xDFFF:
			p = problemSurrogate
		case v >= 0xD800 && v < 0xDC00:
			if j+1 < len(ms) && ms[j+1][0] == ms[j][1] && code(ms[j+1]) >= 0xDC00 && code(ms[j+1]) <= 0xDFFF {
				j++
				continue
			}
			p = problemSurrogate
		}
		if p != problemNone {
			return p
		}
	}
	return first
}

// scanProblem is checkBody's verdict as a problem, for comparison with the
// reference.
func scanProblem(body []byte) problem {
	s := scanner{b: body}
	s.space()
	if err := s.value(0); err != nil {
		return err.problem
	}
	return problemNone
}

func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[{"c":2,"c":3}]}`, `{"k":1,"\u006b":2}`, `{"a":{"a":{"a":1}}}`, `[{"x":1},{"x":2}]`,
		`{"a":"\"}","b":[1,2,{"a":null}],"c":true}`, `{"1":1,"2":2,"3":3,"4":4,"5":5,"6":6,"7":7,"8":8,"9":9,"1":0}`,
		` { "s" : "x\\" , "t" : [ ] } `, `"just a string"`, `12.5e3`,
		"{\"a\":\"\xff\"}", "{\"\xc3\x28\":1}", `{"a":"x\u0000"}`, `{"\u0000":1}`, `{"a":"\ud800"}`, `{"a":"\udc00\ud800"}`,
		`{"a":"\ud83d\ude00"}`, `{"a":"\\ud800"}`, `{"a":"\ud800\u0000"}`, `{"a":"\ud800\ud800\udc00"}`, "{\"a\":\"\xed\xa0\x80\"}",
		`{"a":"\uFFFD\ufffd"}`, "{\"a\":\"\xef\xbf\xbd\"}", `{"k":1,"k":"\u0000"}`, `{"k":"\u0000","k":1}`,
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
		strings.Repeat(`{"a":`, MaxDepth) + `"\u0000"` + strings.Repeat("}", MaxDepth),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return // the scanner runs only on bodies encoding/json accepted
		}
		if got, want := scanProblem(body), referenceProblem(body); got != want {
			t.Fatalf("checkBody(%q) finds problem %d, the reference %d", body, got, want)
		}
	})
}

func TestCheckBody(t *testing.T) {
	deep := func(n int, inner string) string {
		return `{"content":"x","metadata":` + strings.Repeat(`{"a":`, n-1) + inner + strings.Repeat("}", n-1) + "}"
	}
	tests := []struct{ body, msg string }{
		{`{"content":"plain, caf\u00e9, \ud83d\ude00 and \\ud800 spelled out"}`, ""},
		{"{\"content\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}", ""},
		{"{\"content\":\"\xff\"}", "content is not valid UTF-8"},
		{"{\"content\":[{\"type\":\"text\",\"text\":\"ok\"},{\"type\":\"text\",\"text\":\"a\xc3\"}]}", "content[1].text is not valid UTF-8"},
		{"{\"content\":\"\xed\xa0\x80\"}", "content is not valid UTF-8"}, // a surrogate encoded in UTF-8
		{`{"content":"a\u0000b"}`, `content contains U+0000`},
		{`{"content":"\ud800"}`, `content contains an unpaired UTF-16 surrogate escape`},
		{`{"content":"\udc00\ud800"}`, `content contains an unpaired UTF-16 surrogate escape`},
		{`{"content":"\ud800x"}`, `content contains an unpaired UTF-16 surrogate escape`},
		{`{"content":[{"type":"data","data":{"items":[{"id":1},{"name":"\u0000"}]}}]}`, `content[0].data.items[1].name contains U+0000`},
		{`{"content":"x","metadata":{"trace":{"b\u0000d":1}}}`, `member name "b\x00d" in metadata.trace contains U+0000`},
		{"{\"content\":\"x\",\"metadata\":{\"a\xffb\":1}}", "member name \"a\ufffdb\" in metadata is not valid UTF-8"},
		{"{\"con\xfftent\":1}", "member name \"con\ufffdtent\" in the body is not valid UTF-8"},
		{`{"topic":"\u0000"}`, `topic contains U+0000`},
		{deep(MaxDepth-2, `{"a":[1]}`), ""},                                                                            // exactly MaxDepth levels
		{deep(MaxDepth-2, `{"a":[[1]]}`), "limit of 64 levels at metadata" + strings.Repeat(".a", MaxDepth-2) + "[0]"}, // one more
		{`{"content":"x","content":"\u0000"}`, `duplicate key "content" in the body`},
		{`{"content":"\u0000","content":"x"}`, `content contains U+0000`},
		{`{"content":[{"type":"data","data":{"` + strings.Repeat("k", 200) + `":1,"` + strings.Repeat("k", 200) + `":2}}]}`,
			`duplicate key "` + strings.Repeat("k", 61) + `..." in content[0].data`},
	}
	for _, tt := range tests {
		err := checkBody([]byte(tt.body))
		if tt.msg == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.body, err)
			}
			continue
		}
		if err == nil || err.Code != CodeInvalidRequest || err.Status != http.StatusBadRequest || !strings.Contains(err.Message, tt.msg) {
			t.Errorf("%q: got %+v, want invalid_request containing %q", tt.body, err, tt.msg)
		}
		if err != nil && !utf8.ValidString(err.Message) {
			t.Errorf("%q: the message %q is not valid UTF-8", tt.body, err.Message)
		}
	}
}

// TestCheckBodyAllocations: the scan of an ordinary message allocates nothing.
func TestCheckBodyAllocations(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = checkBody(benchBody) }); n != 0 {
		t.Fatalf("checkBody allocates %v times per ordinary body, want 0", n)
	}
}
