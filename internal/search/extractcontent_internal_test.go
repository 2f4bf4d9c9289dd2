package search

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// extractContentReference is ExtractContent as it was, through
// json.Unmarshal: the reference the in-place reading must agree with.
func extractContentReference(content json.RawMessage) string {
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
	if t := bytes.TrimLeft(content, " \t\r\n"); len(t) > 0 && t[0] == '"' {
		var plain string
		if json.Unmarshal(content, &plain) == nil {
			line(plain)
		}
		return b.String()
	}
	var parts []struct {
		Type string          `json:"type"`
		Text string          `json:"text"`
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(content, &parts) != nil {
		return ""
	}
	for _, p := range parts {
		switch p.Type {
		case "text":
			line(p.Text)
		case "data":
			dataStrings(p.Data, line)
		}
	}
	return b.String()
}

// contentCases are contents whose reading is easy to get wrong: escapes,
// case-folded and repeated keys, nulls, wrong kinds, invalid JSON and
// invalid UTF-8.
var contentCases = []string{
	`"hello world"`,
	`  "with spaces around"  `,
	`"esc\u0061ped \"quote\" \\ \n line"`,
	"\"bad utf-8 \xff here\"",
	"\"control \x01 char\"",
	`""`,
	`"unterminated`,
	`"a" "b"`,
	`[{"type":"text","text":"one"},{"type":"data","data":{"k":"two","n":[1,"three",{"x":"four"}]}}]`,
	`[{"TYPE":"text","Text":"folded keys"}]`,
	`[{"t\u0079pe":"text","text":"escaped key"}]`,
	`[{"type":"text","text":"first","text":"last wins"}]`,
	`[{"type":"text","text":"kept","text":null}]`,
	`[{"type":null,"text":"no type"}]`,
	`[{"type":"text","text":5}]`,
	`[{"type":"text","text":{"a":"b"}}]`,
	`[{"type":1}]`,
	`[{"type":"text","text":"fine"}, "not an object"]`,
	`[{"type":"text","text":"fine"}, 7]`,
	`[{"type":"text","text":"fine"}, [1]]`,
	`[{"type":"text","text":"fine"}, null]`,
	`[{"type":"text","text":"fine"}, true]`,
	`[{"type":"data","data":{"a":"x"},"data":null}]`,
	`[{"type":"data","data":"a string"}]`,
	`[{"type":"data","data":[ "x" , {"y" : "z"} ]}]`,
	`[{"type":"data"}]`,
	`[{"type":"image","url":"https://x.test/a.png","text":"not text"}]`,
	`[ { "type" : "text" , "text" : "spaced" , "extra" : [ 1 , 2 , { } ] } ]`,
	`[{"type":"text","text":"a"},{"type":"text","text":"   "},{"type":"text","text":"b"}]`,
	`[{"type":"text","text":"x\ty"}]`,
	`[{"type":"text","text":"tab	raw"}]`,
	`[]`,
	`null`,
	`{"type":"text","text":"an object"}`,
	`42`,
	`[{"type":"text","text":"trailing"}] x`,
	`[{"type":"text","text":"unclosed"}`,
	`[{"type":"text","text":"ſ and K"},{"ſtype":"text"}]`,
	`[{"type":"text","text":-1.5e3}]`,
	`[{"type":"text","text":"n","num":-1.5e+3,"t":true,"f":false}]`,
	``,
	`   `,
}

// TestExtractContentMatchesUnmarshal: the in-place reading gives what the
// json.Unmarshal it replaced gave, on every case above.
func TestExtractContentMatchesUnmarshal(t *testing.T) {
	for _, c := range contentCases {
		if got, want := ExtractContent(json.RawMessage(c)), extractContentReference(json.RawMessage(c)); got != want {
			t.Errorf("ExtractContent(%q) = %q, want %q", c, got, want)
		}
	}
}

// FuzzExtractContent: the same agreement on any input
// (go test ./internal/search -run '^$' -fuzz FuzzExtractContent).
func FuzzExtractContent(f *testing.F) {
	for _, c := range contentCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, c string) {
		if got, want := ExtractContent(json.RawMessage(c)), extractContentReference(json.RawMessage(c)); got != want {
			t.Errorf("ExtractContent(%q) = %q, want %q", c, got, want)
		}
	})
}

// BenchmarkExtractContent: one message's parts, as the chat benchmark and a
// typical agent send them.
func BenchmarkExtractContent(b *testing.B) {
	for _, bc := range []struct{ name, content string }{
		{"text", `"can you check the order status for #4412?"`},
		{"parts", `[{"type":"text","text":"order status"},{"type":"data","data":{"bench":{"run":"5r72b2","id":30,"t":1431071664}}}]`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			raw := json.RawMessage(bc.content)
			b.ReportAllocs()
			for range b.N {
				ExtractContent(raw)
			}
		})
		b.Run(bc.name+"/unmarshal", func(b *testing.B) {
			raw := json.RawMessage(bc.content)
			b.ReportAllocs()
			for range b.N {
				extractContentReference(raw)
			}
		})
	}
}
