package search

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// shape renders a parsed query compactly: groups joined by " AND ", a
// group's terms by "|", phrases quoted, excluded terms after " NOT ".
func shape(q *Query) string {
	var groups []string
	term := func(t Term) string {
		if t.Phrase {
			return `"` + t.Text + `"`
		}
		return t.Text
	}
	for _, g := range q.All {
		var alts []string
		for _, t := range g {
			alts = append(alts, term(t))
		}
		groups = append(groups, strings.Join(alts, "|"))
	}
	out := strings.Join(groups, " AND ")
	for _, t := range q.None {
		out += " NOT " + term(t)
	}
	return out
}

func TestParse(t *testing.T) {
	for q, want := range map[string]string{
		"widget":                     "widget",
		"  widget   release ":        "widget AND release",
		`"widget release" tonight`:   `"widget release" AND tonight`,
		"widget -broken":             "widget NOT broken",
		`widget -"is broken"`:        `widget NOT "is broken"`,
		"invoice or revenue":         "invoice|revenue",
		"a b OR c d":                 "a AND b|c AND d",
		"a or b or c":                "a|b|c",
		`"or"`:                       `"or"`,
		`"unclosed phrase`:           `"unclosed phrase"`,
		"alice@example.com":          "alice@example.com",
		"x - y":                      "", // "-" alone is a term without letters: refused
		"==>":                        "==>",
		"=>":                         "",
		"-->":                        "", // the exclusion of "->": too short
		"@kim.assistant -@kim.other": "@kim.assistant NOT @kim.other",
	} {
		got, err := Parse(q)
		if want == "" {
			if err == nil {
				t.Errorf("Parse(%q) = %s, want an error", q, shape(got))
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", q, err)
			continue
		}
		if s := shape(got); s != want {
			t.Errorf("Parse(%q) = %s, want %s", q, s, want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, q := range []string{
		"", "   ",
		strings.Repeat("x", MaxQueryChars+1),
		strings.Repeat("w ", MaxTerms+1),
		"-only", `-"only this"`,
		"or", "or widget", "widget or", "a or or b",
		"a or -b", "-a or b",
		`""`, `" "`,
		"@@", ".",
	} {
		if got, err := Parse(q); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", q, shape(got))
		} else if _, ok := err.(*Error); !ok {
			t.Errorf("Parse(%q): error %T, want *Error", q, err)
		}
	}
	// The limits themselves are accepted.
	if _, err := Parse(strings.Repeat("w", MaxQueryChars)); err != nil {
		t.Errorf("a query of %d characters: %v", MaxQueryChars, err)
	}
	if _, err := Parse(strings.TrimSpace(strings.Repeat("w ", MaxTerms))); err != nil {
		t.Errorf("a query of %d terms: %v", MaxTerms, err)
	}
}

func TestTermWordsAndSubstring(t *testing.T) {
	q, err := Parse(`alice@Example.com go "Hello, World"`)
	if err != nil {
		t.Fatal(err)
	}
	got := [][]string{q.All[0][0].Words, q.All[1][0].Words, q.All[2][0].Words}
	want := [][]string{{"alice", "example", "com"}, {"go"}, {"hello", "world"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("words %v, want %v", got, want)
	}
	if !q.All[0][0].Substring() || q.All[1][0].Substring() {
		t.Fatalf("substring: %q %v, %q %v; want true, false", q.All[0][0].Text, q.All[0][0].Substring(), q.All[1][0].Text, q.All[1][0].Substring())
	}
	if w, _ := WordText("Ping @kim.assistant: go-live 3.14 Café"); w != "ping kim assistant go live 3 14 café" {
		t.Fatalf("WordText = %q", w)
	}
}

func TestExtract(t *testing.T) {
	msg := func(content string) []byte {
		return []byte(`{"id":"msg_1","session_id":"sess_1","sender":"@a.b","sequence":1,"created_at":1,"content":` + content + `}`)
	}
	for _, tc := range []struct {
		typ, payload, want string
	}{
		{"session.message", string(msg(`"plain text"`)), "plain text"},
		{"session.message", string(msg(`[{"type":"text","text":"one"},{"type":"image","url":"https://x.example/i.png","name":"pic"},{"type":"text","text":"two"}]`)), "one\ntwo"},
		{"session.message", string(msg(`[{"type":"data","data":{"k":"v","n":1,"b":true,"z":null,"arr":["a",{"deep":"d","list":[["e"]]}],"obj":{"key":"f"}}}]`)), "v\na\nd\ne\nf"},
		{"session.message", string(msg(`[{"type":"data","data":{"only":3}}]`)), ""},
		{"session.message", string(msg(`[{"type":"text","text":"   "}]`)), ""},
		{"session.invited", `{"invitee":"@a.b","by":"@c.d","topic":"secret plans","initial_message":{"content":"hi"}}`, ""},
		{"session.joined", `{"agent":"@a.b"}`, ""},
		{"session.message", `not json`, ""},
	} {
		if got := Extract(tc.typ, []byte(tc.payload)); got != tc.want {
			t.Errorf("Extract(%s, %s) = %q, want %q", tc.typ, tc.payload, got, tc.want)
		}
	}
	// The write path extracts from the request's content; it must agree
	// with extraction from the stored payload (the backfill's).
	for _, content := range []string{`"plain"`, ` "leading space"`, `[{"type":"text","text":"a"},{"type":"data","data":{"k":["v"]}}]`, ` [{"type":"text","text":"b"}]`, `{}`, `"`} {
		if got, want := ExtractContent(json.RawMessage(content)), Extract("session.message", msg(content)); got != want {
			t.Errorf("ExtractContent(%s) = %q, Extract gives %q", content, got, want)
		}
	}
	body, _ := json.Marshal(map[string]any{"type": "session.message", "payload": json.RawMessage(msg(`"in an envelope"`))})
	if got := ExtractEvent("session.message", body); got != "in an envelope" {
		t.Errorf("ExtractEvent = %q", got)
	}
	// A redacted event's placeholder is not indexed (an import's backfill).
	body, _ = json.Marshal(map[string]any{"type": "session.message", "payload": json.RawMessage(msg(`"[redacted]"`)),
		"redacted": map[string]any{"at": 1, "by": "bootstrap", "reason": "r"}})
	if got := ExtractEvent("session.message", body); got != "" {
		t.Errorf("ExtractEvent of a redacted event = %q", got)
	}
}

func TestSnippet(t *testing.T) {
	parse := func(q string) *Query {
		t.Helper()
		p, err := Parse(q)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	render := func(parts []Part) string {
		var b strings.Builder
		for _, p := range parts {
			if p.Match {
				b.WriteString("[" + p.Text + "]")
			} else {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	for _, tc := range []struct{ text, q, want string }{
		{"Deploy the widget release", "WIDGET", "Deploy the [widget] release"},
		{"a widget and another Widget", "widget", "a [widget] and another [Widget]"},
		{"go google go", "go", "[go] google [go]"},
		{"write to alice@example.com now", "alice@example.com", "write to [alice@example.com] now"},
		{"hello, world", `"hello world"`, "[hello], [world]"},
		{"line one\nline two", "two", "line one line [two]"},
		{"<b>bold</b> & more", "bold", "<b>[bold]</b> & more"},
		{"nothing here", "absent", "nothing here"},
		{"Café Москва", "москва", "Café [Москва]"},
	} {
		if got := render(Snippet(tc.text, parse(tc.q))); got != tc.want {
			t.Errorf("Snippet(%q, %q) = %q, want %q", tc.text, tc.q, got, tc.want)
		}
	}

	// A long text: the window holds the first match with some text before
	// it, is about SnippetChars long, and is marked as cut on both sides.
	long := strings.Repeat("lorem ipsum ", 100) + "NEEDLE" + strings.Repeat(" dolor sit", 100)
	parts := Snippet(long, parse("needle"))
	got := render(parts)
	if !strings.Contains(got, "[NEEDLE]") || !strings.HasPrefix(got, "…") || !strings.HasSuffix(got, "…") {
		t.Fatalf("long snippet %q", got)
	}
	if n := len([]rune(strings.NewReplacer("[", "", "]", "", "…", "").Replace(got))); n != SnippetChars {
		t.Fatalf("long snippet is %d characters, want %d", n, SnippetChars)
	}
	if i := strings.Index(got, "[NEEDLE]"); len([]rune(got[:i])) < snippetLead/2 {
		t.Fatalf("long snippet %q has too little context before its match", got)
	}
}

// BenchmarkExtractEvent is the write path's added work per message: the
// extraction from the event body, as eventValues does it.
func BenchmarkExtractEvent(b *testing.B) {
	for name, content := range map[string]string{
		"string":     `"Deploy the widget release tonight; mail alice@example.com if it fails"`,
		"parts+data": `[{"type":"text","text":"Deploy the widget release tonight"},{"type":"data","data":{"url":"https://status.example.org/incident/42","tags":["alpha","beta"],"owner":{"handle":"@kim.assistant","count":3}}}]`,
	} {
		body := []byte(`{"type":"session.message","session_id":"sess_01","event_id":"evt_01","sequence":7,"created_at":1,"payload":{"id":"msg_1","session_id":"sess_01","sender":"@a.b","sequence":7,"content":` + content + `,"created_at":1}}`)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if ExtractEvent("session.message", body) == "" {
					b.Fatal("nothing extracted")
				}
			}
		})
	}
}

func TestSubstringWords(t *testing.T) {
	for _, c := range []struct {
		text   string
		inner  []string
		prefix string
	}{
		{"tickets.example.org/issue/4242", []string{"example", "org", "issue"}, "4242"},
		{"@acme.agent42", []string{"acme"}, "agent42"},
		{"user42@example.com", []string{"example"}, "com"},
		{"Carol@Example.COM.", []string{"example", "com"}, ""},
		{"widget", nil, ""},
		{"wid", nil, ""},
		{"-a-", []string{"a"}, ""},
		{"==>", nil, ""},
		{"café.menu", nil, ""}, // not ASCII: none
	} {
		inner, prefix := Term{Text: c.text}.SubstringWords()
		if !slices.Equal(inner, c.inner) || prefix != c.prefix {
			t.Errorf("%q: inner %q, prefix %q; want %q, %q", c.text, inner, prefix, c.inner, c.prefix)
		}
		// Each is in the words of a text that holds the term.
		words := Words("see x" + strings.ToUpper(c.text) + "9 now")
		for _, w := range inner {
			if !slices.Contains(words, w) {
				t.Errorf("%q: inner word %q is not a word of a text holding it: %q", c.text, w, words)
			}
		}
		if prefix != "" && !slices.ContainsFunc(words, func(w string) bool { return strings.HasPrefix(w, prefix) }) {
			t.Errorf("%q: no word of %q starts with %q", c.text, words, prefix)
		}
	}
}
