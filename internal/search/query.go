// Package search holds transcript search's rules that do not depend on a
// database: the query language (parsed once, here, so that both stores
// mean the same thing), which text of an event is indexed (Extract, used by
// writes and by the backfill alike), and the highlighted snippet of a hit.
package search

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of a query, documented in docs/search.md.
const (
	// MaxQueryChars is the longest query, in characters.
	MaxQueryChars = 256
	// MaxTerms is the most terms (phrases and words, excluded ones
	// included) in one query.
	MaxTerms = 8
	// MinSubstringChars is the shortest term matched as a substring (by
	// the trigram index); a shorter term matches whole words only.
	MinSubstringChars = 3
)

// Term is one word or quoted phrase of a query.
type Term struct {
	// Text is the term as typed, without its quotes or its "-".
	Text string
	// Words are Text's words as the word index tokenises them (Words), in
	// lower case. Empty when Text has no letter or digit.
	Words []string
	// Phrase is set for a quoted term.
	Phrase bool
}

// Substring reports whether the term is also matched as a case-insensitive
// substring of the text (the trigram index): only when it is at least
// MinSubstringChars characters long.
func (t Term) Substring() bool { return utf8.RuneCountInString(t.Text) >= MinSubstringChars }

// SubstringWords are words that every text holding t.Text as a
// substring (case-insensitively) holds too, as the word index splits it
// (Words): inner, each word of t.Text with a separator (a character that
// is not a letter or digit) on both sides within t.Text, whole; prefix,
// its last word, when a separator precedes it, as the start of a word
// (the text's word there may go on). The first word is neither: the
// text's word there may begin earlier. So "tickets.example.org/issue/4242"
// gives example, org and issue, and the prefix 4242, and a text can hold
// the URL only if it holds those. Only for ASCII text, where Go's and the
// database's case folding agree; otherwise none.
func (t Term) SubstringWords() (inner []string, prefix string) {
	text := t.Text
	for i := 0; i < len(text); i++ {
		if text[i] >= utf8.RuneSelf {
			return nil, ""
		}
	}
	start := -1 // the current word's first byte
	for i := 0; i <= len(text); i++ {
		word := i < len(text) && isWordRune(rune(text[i]))
		switch {
		case word && start < 0:
			start = i
		case !word && start >= 0:
			if start > 0 && i < len(text) {
				inner = append(inner, strings.ToLower(text[start:i]))
			} else if start > 0 {
				prefix = strings.ToLower(text[start:i])
			}
			start = -1
		}
	}
	return inner, prefix
}

// Query is a parsed query: an event matches when, for every group of All,
// at least one of the group's terms matches, and none of None matches.
type Query struct {
	All  [][]Term // AND of ORs
	None []Term   // excluded terms
}

// Error is a query the language refuses; its message says why, for the
// client.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

func errorf(format string, args ...any) error { return &Error{Message: fmt.Sprintf(format, args...)} }

// token is one lexical item of a query.
type token struct {
	text    string
	quoted  bool
	negated bool
	or      bool // the operator "or"
}

// Parse parses a query in the language of docs/search.md: bare words and
// quoted phrases are ANDed, "or" between two terms makes them
// alternatives, and a "-" before a word or phrase excludes it.
func Parse(q string) (*Query, error) {
	if strings.TrimSpace(q) == "" {
		return nil, errorf("q is empty: give at least one word or phrase")
	}
	if n := utf8.RuneCountInString(q); n > MaxQueryChars {
		return nil, errorf("q is %d characters long; the most is %d", n, MaxQueryChars)
	}
	toks, err := lex(q)
	if err != nil {
		return nil, err
	}
	out := &Query{}
	terms := 0
	var group []Term
	pendingOr := false
	for i, tk := range toks {
		if tk.or {
			if len(group) == 0 || pendingOr || i == len(toks)-1 {
				return nil, errorf(`"or" must stand between two terms (quote it to search for the word: "or")`)
			}
			if toks[i+1].negated || toks[i-1].negated {
				return nil, errorf(`an excluded term cannot be an alternative of "or"`)
			}
			pendingOr = true
			continue
		}
		t, err := newTerm(tk)
		if err != nil {
			return nil, err
		}
		if terms++; terms > MaxTerms {
			return nil, errorf("q has more than %d terms", MaxTerms)
		}
		switch {
		case tk.negated:
			out.None = append(out.None, t)
		case pendingOr:
			group = append(group, t)
			pendingOr = false
		default:
			if len(group) > 0 {
				out.All = append(out.All, group)
			}
			group = []Term{t}
		}
	}
	if len(group) > 0 {
		out.All = append(out.All, group)
	}
	if len(out.All) == 0 {
		return nil, errorf("q only excludes: give at least one word or phrase to find")
	}
	return out, nil
}

func newTerm(tk token) (Term, error) {
	t := Term{Text: tk.text, Words: Words(tk.text), Phrase: tk.quoted}
	if len(t.Words) == 0 && !t.Substring() {
		return t, errorf("term %q has no letter or digit and is shorter than %d characters", tk.text, MinSubstringChars)
	}
	return t, nil
}

// lex splits q into terms and operators: whitespace separates; a '"'
// opens a phrase up to the next '"' (an unclosed one runs to the end); a
// leading '-' negates the word or phrase it touches.
func lex(q string) ([]token, error) {
	var toks []token
	rest := q
	for {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			return toks, nil
		}
		var tk token
		if strings.HasPrefix(rest, "-") && len(rest) > 1 && !unicode.IsSpace(rune(rest[1])) {
			tk.negated = true
			rest = rest[1:]
		}
		if strings.HasPrefix(rest, `"`) {
			tk.quoted = true
			body, after, _ := strings.Cut(rest[1:], `"`)
			tk.text, rest = strings.TrimSpace(body), after
			if tk.text == "" {
				return nil, errorf("q has an empty phrase (\"\")")
			}
		} else {
			end := strings.IndexFunc(rest, unicode.IsSpace)
			if end < 0 {
				end = len(rest)
			}
			tk.text, rest = rest[:end], rest[end:]
			if !tk.negated && strings.EqualFold(tk.text, "or") {
				tk.or = true
			}
		}
		toks = append(toks, tk)
	}
}

// isWordRune is the word index's notion of a word character, the same as
// SQLite FTS5's unicode61 tokenizer with its default categories (L*, N*,
// Co): letters, digits and private-use characters. Everything else
// separates words.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Co, r)
}

// Words splits s into lower-case words, as the word index does. On
// PostgreSQL the word index is built from Words joined by spaces (so its
// parser sees exactly these words, and an e-mail address is three words,
// as on SQLite, not one "email" token).
func Words(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return !isWordRune(r) }) {
		out = append(out, strings.ToLower(w))
	}
	return out
}

// WordText is PostgreSQL's index input for the text s: its Words joined
// by single spaces, what the word vector (a tsvector of the simple
// configuration) is built from, and their pairs (PairLexemes), a tsvector
// literal.
func WordText(s string) (words, pairs string) {
	w := Words(s)
	var b strings.Builder
	PairLexemes(&b, w)
	return strings.Join(w, " "), b.String()
}
