package search

import (
	"sort"
	"unicode"
)

// SnippetChars is the length of a snippet's window, in characters.
const SnippetChars = 160

// snippetLead is how many characters of context precede the first match.
const snippetLead = 60

// Part is one piece of a snippet; Match marks the text a term matched.
type Part struct {
	Text  string
	Match bool
}

// Snippet returns a window of about SnippetChars characters of text around
// its first match of q's terms (excluded terms aside), as parts, matches
// flagged. It is plain text, never HTML: the client escapes it as it
// displays it. Line breaks become spaces. A term of MinSubstringChars
// characters or more is found anywhere (case-insensitively), as the
// trigram index finds it; each of a term's words is found as a whole word,
// as the word index finds it. With no match in the text (which does not
// happen for a hit), the snippet is the window at the text's start.
func Snippet(text string, q *Query) []Part {
	runes := []rune(text)
	folded := make([]rune, len(runes))
	for i, r := range runes {
		if r == '\n' || r == '\r' || r == '\t' {
			runes[i] = ' '
		}
		folded[i] = unicode.ToLower(runes[i])
	}
	type needle struct {
		runes []rune
		whole bool
	}
	var needles []needle
	for _, group := range q.All {
		for _, t := range group {
			if t.Substring() {
				needles = append(needles, needle{[]rune(lower(t.Text)), false})
			}
			for _, w := range t.Words {
				needles = append(needles, needle{[]rune(w), true})
			}
		}
	}
	// The window starts before the earliest first occurrence of any
	// needle; only the window is then searched for every occurrence, so a
	// long text costs one scan per needle at most.
	first := -1
	for _, n := range needles {
		if sp := find(folded, n.runes, n.whole, 0, len(folded), true); len(sp) > 0 && (first < 0 || sp[0][0] < first) {
			first = sp[0][0]
		}
	}
	start := 0
	if first > 0 {
		start = max(0, first-snippetLead)
	}
	end := min(len(runes), start+SnippetChars)
	start = max(0, min(start, end-SnippetChars))
	var spans [][2]int
	for _, n := range needles {
		spans = append(spans, find(folded, n.runes, n.whole, start, end, false)...)
	}
	spans = merge(spans)

	var parts []Part
	add := func(from, to int, match bool) {
		if from >= to {
			return
		}
		s := string(runes[from:to])
		if !match && from == start && start > 0 {
			s = "…" + s
		}
		if !match && to == end && end < len(runes) {
			s += "…"
		}
		parts = append(parts, Part{Text: s, Match: match})
	}
	at := start
	for _, sp := range spans {
		from, to := max(sp[0], start), min(sp[1], end)
		if from >= to {
			continue
		}
		add(at, from, false)
		add(from, to, true)
		at = to
	}
	add(at, end, false)
	if len(parts) > 0 && parts[0].Match && start > 0 {
		parts = append([]Part{{Text: "…"}}, parts...)
	}
	if n := len(parts); n > 0 && parts[n-1].Match && end < len(runes) {
		parts = append(parts, Part{Text: "…"})
	}
	if parts == nil {
		parts = []Part{}
	}
	return parts
}

func lower(s string) string {
	r := []rune(s)
	for i := range r {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

// find returns the spans of needle in hay that start at or after lo and
// end at or before hi (only the first, if firstOnly); whole requires the
// match to be a whole word (no word character on either side).
func find(hay, needle []rune, whole bool, lo, hi int, firstOnly bool) [][2]int {
	var out [][2]int
	if len(needle) == 0 {
		return nil
	}
	for i := lo; i+len(needle) <= hi; i++ {
		if !equal(hay[i:i+len(needle)], needle) {
			continue
		}
		j := i + len(needle)
		if whole && (i > 0 && isWordRune(hay[i-1]) || j < len(hay) && isWordRune(hay[j])) {
			continue
		}
		out = append(out, [2]int{i, j})
		if firstOnly {
			return out
		}
	}
	return out
}

func equal(a, b []rune) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// merge sorts spans and joins those that overlap or touch.
func merge(spans [][2]int) [][2]int {
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var out [][2]int
	for _, s := range spans {
		if n := len(out); n > 0 && s[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}
