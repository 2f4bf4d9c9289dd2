package search

import (
	"testing"
	"unicode/utf8"
)

// FuzzParse feeds the operator search language arbitrary input: Parse must
// never panic, must refuse or bound what the docs bound (length, terms),
// and every query it accepts must have something to find.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`widget`, `"widget release"`, `a or b`, `-spam hello`, `or`, `"or"`, `- -`, `""`, `@acme.support`,
		`kim@example.com`, `https://example.com/x?y=1`, `"unterminated`, "\xff", `a or -b`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		out, err := Parse(q)
		if err != nil {
			if out != nil {
				t.Fatalf("both a query and an error for %q", q)
			}
			return
		}
		if utf8.RuneCountInString(q) > MaxQueryChars {
			t.Fatalf("accepted %d characters, over MaxQueryChars", utf8.RuneCountInString(q))
		}
		if len(out.All) == 0 {
			t.Fatalf("accepted %q with nothing to find", q)
		}
		n := len(out.None)
		for _, g := range out.All {
			if len(g) == 0 {
				t.Fatalf("an empty alternative group in %q", q)
			}
			n += len(g)
		}
		if n > MaxTerms {
			t.Fatalf("accepted %d terms in %q, over MaxTerms", n, q)
		}
	})
}
