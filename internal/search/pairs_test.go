package search

import (
	"slices"
	"testing"
)

// A term's pairs are those every text matching it holds: as words in a
// row any pair of its words, as a substring only those that take at least
// PairChars characters of its first and last words (which may be parts
// of longer words), and none for a term that is not ASCII.
func TestTermPairs(t *testing.T) {
	for q, want := range map[string][]string{
		`"widget release"`:     {"get rel"},
		`"ship a fix"`:         {"hip a", "a fix"},
		`"go live"`:            nil, // "ago lively" holds it as a substring: "ago liv"
		`"release go"`:         nil,
		`"a b"`:                nil, // "data bank" holds it as a substring
		`"widget release now"`: {"get rel", "ase now"},
		`user42@example.com`:   {"r42 exa", "ple com"},
		`"WIDGET Release"`:     {"get rel"},
		`widget`:               nil,
		`"café crème"`:         nil,
	} {
		parsed, err := Parse(q)
		if err != nil {
			t.Fatal(err)
		}
		if got := parsed.All[0][0].Pairs(); !slices.Equal(got, want) {
			t.Errorf("%s: pairs %q, want %q", q, got, want)
		}
	}
}

// PairLexemes writes the pairs of every two adjacent words, counting
// characters, not bytes.
func TestPairLexemes(t *testing.T) {
	for text, want := range map[string]string{
		"":                            "",
		"one":                         "",
		"Deploy the widget release":   "'loy the' 'the wid' 'get rel'",
		"go ab Москва crème":          "'go ab' 'ab мос' 'ква crè'",
		"user42@example.com, thanks!": "'r42 exa' 'ple com' 'com tha'",
	} {
		if _, pairs := WordText(text); pairs != want {
			t.Errorf("%q: %s, want %s", text, pairs, want)
		}
	}
}
