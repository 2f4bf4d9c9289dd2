package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// hasDuplicateKeys is the slow, obviously right reference: json.Decoder
// tokens, a set per object.
func hasDuplicateKeys(t *testing.T, body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type obj struct {
		keys      map[string]bool
		expectKey bool
	}
	var stack []*obj
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		top := (*obj)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				goto after
			}
			k := tok.(string)
			if top.keys[k] {
				return true
			}
			top.keys[k] = true
			top.expectKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &obj{keys: map[string]bool{}, expectKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, nil)
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	after:
		if len(stack) > 0 && stack[len(stack)-1] != nil {
			stack[len(stack)-1].expectKey = true
		}
		if len(stack) == 0 {
			return false
		}
	}
}

func FuzzCheckDuplicateKeys(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[{"c":2,"c":3}]}`, `{"k":1,"\u006b":2}`, `{"a":{"a":{"a":1}}}`, `[{"x":1},{"x":2}]`,
		`{"a":"\"}","b":[1,2,{"a":null}],"c":true}`, `{"1":1,"2":2,"3":3,"4":4,"5":5,"6":6,"7":7,"8":8,"9":9,"1":0}`,
		` { "s" : "x\\" , "t" : [ ] } `, `"just a string"`, `12.5e3`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return // the scanner runs only on bodies encoding/json accepted
		}
		got := checkDuplicateKeys(body) != nil
		if want := hasDuplicateKeys(t, body); got != want {
			t.Fatalf("checkDuplicateKeys(%s) = %v, reference says %v", body, got, want)
		}
	})
}
