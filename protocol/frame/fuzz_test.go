package frame

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzValidate checks that Validate never panics, returns exactly one of a
// frame and an error, and that what it accepts survives re-encoding: a frame
// decoded generically (json.Number or float64 numbers) and marshalled again
// must validate to the same frame. That property is what rules out
// ambiguous input (duplicate members, lossy numbers, replaced characters).
// It also holds the strict parser to encoding/json: whatever it parses,
// encoding/json parses to the same value, and whatever it calls malformed
// JSON, encoding/json refuses too.
func FuzzValidate(f *testing.F) {
	for _, kind := range Kinds() {
		f.Add(marshal(f, validFrame(kind)))
	}
	adv := string(marshal(f, validFrame(KindAgentAdvisory)))
	for _, s := range []string{
		`{"envelope_version":"1.0"}`,
		`{"envelope_version":"1.0","kind":"agent_advisory","payload":{"advisory_text":"\ud800"}}`,
		`{"a":1,"a":2}`,
		adv[:len(adv)-1] + `,"ttl_ms":1}`,
		strings.Replace(adv, `"Editing`, `"\u00e9\uD83D\uDE00\"\\\/\n Editing`, 1),
		strings.Replace(adv, `"ttl_ms":60000`, `"ttl_ms":9007199254740991`, 1),
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	opts := testOptions()
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkParser(t, raw)
		fr, err := Validate(raw, opts)
		if (fr == nil) == (err == nil) {
			t.Fatalf("want exactly one of frame and error: %v, %v", fr, err)
		}
		if err != nil {
			if err.Code == "" || err.Message == "" {
				t.Fatalf("incomplete error %+v", err)
			}
			return
		}
		if !json.Valid(raw) || !json.Valid(fr.Payload) {
			t.Fatal("accepted invalid JSON")
		}
		for _, useNumber := range []bool{true, false} {
			d := json.NewDecoder(bytes.NewReader(raw))
			if useNumber {
				d.UseNumber()
			}
			var generic any
			if err := d.Decode(&generic); err != nil {
				t.Fatalf("generic decode of an accepted frame: %v", err)
			}
			re, merr := json.Marshal(generic)
			if merr != nil {
				t.Fatal(merr)
			}
			fr2, err := Validate(re, opts)
			if err != nil {
				t.Fatalf("re-encoded frame refused (UseNumber %v): %v\n%s", useNumber, err, re)
			}
			sameFrame(t, fr, fr2)
		}
	})
}

func checkParser(t *testing.T, raw []byte) {
	v, err := decode(raw)
	if err != nil {
		if strings.HasPrefix(err.Message, "malformed JSON") && json.Valid(raw) {
			t.Fatalf("parser calls valid JSON malformed: %v", err)
		}
		return
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var want any
	if err := d.Decode(&want); err != nil || !json.Valid(raw) {
		t.Fatalf("parser accepts what encoding/json refuses: %v", err)
	}
	if got := generic(v); !reflect.DeepEqual(got, want) {
		t.Fatalf("parsers disagree:\n got %#v\nwant %#v", got, want)
	}
}

// generic converts a parsed value to what encoding/json decodes with
// UseNumber.
func generic(v *value) any {
	switch v.kind {
	case kindObject:
		m := map[string]any{}
		for _, mem := range v.members {
			m[mem.name] = generic(mem.val)
		}
		return m
	case kindArray:
		a := []any{}
		for _, e := range v.elems {
			a = append(a, generic(e))
		}
		return a
	case kindString:
		return v.text
	case kindNumber:
		return json.Number(v.text)
	case kindBool:
		return v.boolean
	}
	return nil
}

func sameFrame(t *testing.T, a, b *Frame) {
	t.Helper()
	if !a.CreatedAt.Equal(b.CreatedAt) || (a.TTLms == nil) != (b.TTLms == nil) || a.TTLms != nil && *a.TTLms != *b.TTLms {
		t.Fatalf("frames differ: %+v / %+v", a, b)
	}
	var pa, pb any
	if json.Unmarshal(a.Payload, &pa) != nil || json.Unmarshal(b.Payload, &pb) != nil || !reflect.DeepEqual(pa, pb) {
		t.Fatalf("payloads differ: %s / %s", a.Payload, b.Payload)
	}
	a2, b2 := *a, *b
	a2.CreatedAt, a2.TTLms, a2.Payload = b2.CreatedAt, nil, nil
	b2.TTLms, b2.Payload = nil, nil
	if !reflect.DeepEqual(a2, b2) {
		t.Fatalf("frames differ: %+v / %+v", a2, b2)
	}
}

// FuzzParseScope: no panics, and an accepted scope's canonical form parses
// back to the same scope.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"@alice.cc", "@alice.cc/cc-*", "@alice.cc/cc@s1", "org:acme/members/*", "org:acme/members/eng/*", "accord:globex/grant:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScope(s)
		if err != nil {
			if sc != (Scope{}) || err.Field != "scope" {
				t.Fatalf("%+v, %v", sc, err)
			}
			return
		}
		again, err := ParseScope(sc.String())
		if err != nil || again != sc {
			t.Fatalf("%q -> %q -> %+v %v", s, sc.String(), again, err)
		}
	})
}

// FuzzParseFilter: no panics, and an accepted filter round-trips through
// String.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"", "kind:agent_advisory,sender:@alice.cc", "content_type:text/plain", "tool:cc,org:acme"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := ParseFilter(s)
		if err != nil {
			return
		}
		again, err := ParseFilter(fl.String())
		if err != nil || !slices.Equal(again.Clauses(), fl.Clauses()) {
			t.Fatalf("%q does not round-trip: %v", s, err)
		}
	})
}
