package search

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// tokenStrings is the json.Decoder.Token loop dataStrings replaced: the
// reference it must agree with.
func tokenStrings(raw json.RawMessage) []string {
	var out []string
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct{ object, keyNext bool }
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		isKey := false
		if n := len(stack); n > 0 && stack[n-1].object {
			isKey = stack[n-1].keyNext
			stack[n-1].keyNext = !isKey
		}
		switch v := tok.(type) {
		case json.Delim:
			stack = append(stack, frame{object: v == '{', keyNext: v == '{'})
		case string:
			if !isKey {
				out = append(out, v)
			}
		}
	}
}

func TestDataStringsMatchesTokens(t *testing.T) {
	for _, raw := range []string{
		`"top"`, `""`, `3`, `null`, `[]`, `{}`, `[[[]]]`,
		`{"k":"v","n":1,"b":true,"z":null,"arr":["a",{"deep":"d","list":[["e"]]}],"obj":{"key":"f"}}`,
		`{"a":{"b":{"c":"x"}},"d":"y"}`, `{"a":[1,"two",{"k":"three"}],"b":"four"}`,
		`{"esc\"aped key":"va\"lue","back\\slash":"\\","uni":"caf\u00e9 \ud83d\ude00","nl":"a\nb"}`,
		` { "spaced" : "out" , "list" : [ "x" , "y" ] } `,
		`{"empty":"","k":"{not a container}","k2":"[nor this]","k3":"comma, inside"}`,
		`["\"quoted\"", "ends with backslash\\", "tab\there"]`,
		`{"k":"caf` + "\xff" + `"}`, // invalid UTF-8, replaced as the decoder does
	} {
		var got []string
		dataStrings(json.RawMessage(raw), func(s string) { got = append(got, s) })
		if want := tokenStrings(json.RawMessage(raw)); !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", raw, got, want)
		}
	}
}

func BenchmarkDataStrings(b *testing.B) {
	raw := json.RawMessage(`{"url":"https://status.example.org/incident/42","tags":["alpha","beta"],"owner":{"handle":"@kim.assistant","count":3}}`)
	b.ReportAllocs()
	for range b.N {
		dataStrings(raw, func(string) {})
	}
}

func BenchmarkTokenStrings(b *testing.B) {
	raw := json.RawMessage(`{"url":"https://status.example.org/incident/42","tags":["alpha","beta"],"owner":{"handle":"@kim.assistant","count":3}}`)
	b.ReportAllocs()
	for range b.N {
		tokenStrings(raw)
	}
}
