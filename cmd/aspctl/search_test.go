package main

import (
	"slices"
	"strings"
	"testing"
)

func TestSearch(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")
	bob := s.newAgent("@acme.bob")
	sid := s.createSession(alice, "--invite", "@acme.bob", "--message", "Deploy the widget release tonight")
	s.as(bob, "join", sid).ok(t, nil)
	s.as(bob, "send", sid, "Mail carol@example.com about the widget").ok(t, nil)
	other := s.createSession(bob, "--message", "widget notes")

	// --json prints the server's answer.
	var r struct {
		Hits []struct {
			SessionID string `json:"session_id"`
			Sequence  int64  `json:"sequence"`
			Sender    string `json:"sender"`
		} `json:"hits"`
		NextCursor string `json:"next_cursor"`
	}
	s.asAdmin("search", "widget", "--sender", "@acme.bob", "--session", sid, "--json").ok(t, &r)
	if len(r.Hits) != 1 || r.Hits[0].SessionID != sid || r.Hits[0].Sender != "@acme.bob" {
		t.Fatalf("search widget --sender @acme.bob --session: %+v", r)
	}
	// Several words are one query; filters narrow it.
	s.asAdmin("search", "carol@example.com", "widget", "--json").ok(t, &r)
	if len(r.Hits) != 1 || r.Hits[0].SessionID != sid {
		t.Fatalf("search carol@example.com widget: %+v", r)
	}
	s.asAdmin("search", "widget", "--participant", "@acme.alice", "--type", "session.message", "--since", "2000-01-01T00:00:00Z", "--limit", "1", "--json").ok(t, &r)
	if len(r.Hits) != 1 || r.Hits[0].SessionID != sid || r.NextCursor == "" {
		t.Fatalf("search widget --participant @acme.alice --limit 1: %+v", r)
	}
	first, cursor := r.Hits[0].Sequence, r.NextCursor
	r.NextCursor = "" // absent from the last page
	s.asAdmin("search", "widget", "--participant", "@acme.alice", "--limit", "1", "--cursor", cursor, "--json").ok(t, &r)
	if len(r.Hits) != 1 || r.Hits[0].SessionID != sid || r.Hits[0].Sequence == first || r.NextCursor != "" {
		t.Fatalf("second page: %+v", r)
	}

	// The readable listing: a header per hit and the snippet, matches in
	// [[ ]], newest first.
	out := s.asAdmin("search", "widget").ok(t, nil).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var headers []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "    ") {
			headers = append(headers, strings.Fields(l)[0])
		}
	}
	if want := []string{other + "/1", sid + "/4", sid + "/1"}; !slices.Equal(headers, want) {
		t.Fatalf("readable hits %v, want %v:\n%s", headers, want, out)
	}
	if !strings.Contains(out, "    Deploy the [[widget]] release tonight\n") {
		t.Fatalf("readable output has no highlighted snippet:\n%s", out)
	}
	if out := s.asAdmin("search", "kubernetes").ok(t, nil).stdout; out != "no hits\n" {
		t.Fatalf("no hits printed %q", out)
	}

	// "--" ends the flags, so a query may start with an exclusion.
	s.asAdmin("search", "--", "-only").fails(t, 1, "aspctl: invalid_request: q only excludes")
	s.asAdmin("search", "widget", "--limit", "500").fails(t, 1, "limit must be an integer from 1 to 100")
	s.asAdmin("search").fails(t, 2, "")
}
