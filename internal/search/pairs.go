package search

import (
	"strings"
	"unicode/utf8"
)

// Word pairs (PostgreSQL's phrase index; docs/search.md "Word pairs").
//
// PostgreSQL's word index has no positions: a phrase of two common words
// is a candidate in every event that holds both, anywhere, and each must
// be read to check the words' order (1% of a grown log for "widget
// release", against 0.06% that hold the phrase). So every event is also
// indexed under the pairs of its adjacent words, each pair as the last
// PairChars characters of the first word and the first PairChars of the
// second ("widget release" gives "get rel"). A phrase's pairs are then
// a condition every text holding it meets, as words in a row and as a
// substring alike: the substring "widget release" can sit in "miniwidget
// released", whose pair is "get rel" too. Shortened words keep a pair
// selective without knowing where a substring's first and last words
// begin and end.

// PairChars is how many characters of each word a pair keeps.
const PairChars = 3

// PairLexemes writes the pairs of adjacent words of words (as Words gives
// them: lower case) to b as a tsvector literal, one quoted lexeme per
// pair ('get rel' 'ase not'). Words hold letters and digits only, so
// nothing needs escaping. PostgreSQL sorts and deduplicates the
// lexemes when it reads the literal.
func PairLexemes(b *strings.Builder, words []string) {
	for i := 0; i+1 < len(words); i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('\'')
		b.WriteString(lastChars(words[i], PairChars))
		b.WriteByte(' ')
		b.WriteString(firstChars(words[i+1], PairChars))
		b.WriteByte('\'')
	}
}

// Pairs are the pairs every event matching t holds (PairLexemes' form,
// unquoted), or nil when t gives none that can be trusted:
//   - t must be ASCII, where Go's and the database's case folding agree;
//   - as a substring (Substring), t's first word may be the end of a longer
//     word and its last word the start of one, so a pair that takes one of
//     those needs PairChars characters of it. Inner words are whole.
//
// (A term of two words is at least three characters long, so it is always
// matched as a substring too; as words in a row, any pair of its words
// would do.)
func (t Term) Pairs() []string {
	if len(t.Words) < 2 {
		return nil
	}
	for i := 0; i < len(t.Text); i++ {
		if t.Text[i] >= utf8.RuneSelf {
			return nil
		}
	}
	var out []string
	last := len(t.Words) - 1
	for i := 0; i < last; i++ {
		a, b := t.Words[i], t.Words[i+1]
		if t.Substring() && (i == 0 && len(a) < PairChars || i+1 == last && len(b) < PairChars) {
			continue
		}
		out = append(out, lastChars(a, PairChars)+" "+firstChars(b, PairChars))
	}
	return out
}

// lastChars is the last n characters of s (all of it if shorter).
func lastChars(s string, n int) string {
	i := len(s)
	for k := 0; k < n && i > 0; k++ {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
	}
	return s[i:]
}

// firstChars is the first n characters of s (all of it if shorter).
func firstChars(s string, n int) string {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}
