package aspclient

import "testing"

func TestSeenSetForgetsOldestKeys(t *testing.T) {
	s := newSeenSet(2)
	a, b, c := seenKey{"s", 1}, seenKey{"s", 2}, seenKey{"s", 3}
	s.add(a)
	s.add(b)
	if !s.has(a) || !s.has(b) || s.has(c) {
		t.Fatal("first keys")
	}
	s.add(c) // evicts a
	if s.has(a) || !s.has(b) || !s.has(c) {
		t.Error("after eviction: b and c remembered, a forgotten")
	}
	if len(s.keys) != 2 {
		t.Errorf("set holds %d keys, want 2", len(s.keys))
	}
}
