package frame

import (
	"slices"
	"testing"
)

func TestParseFilter(t *testing.T) {
	valid := []struct {
		in   string
		want []Clause
	}{
		{"", nil},
		{"kind:agent_advisory", []Clause{{AxisKind, KindAgentAdvisory}}},
		{"kind:agent_query,sender:@alice.cc", []Clause{{AxisKind, KindAgentQuery}, {AxisSender, "@alice.cc"}}},
		{"content_type:text/plain", []Clause{{AxisContentType, "text/plain"}}},
		{"content_type:application/vnd.x+json:v=1", []Clause{{AxisContentType, "application/vnd.x+json:v=1"}}},
		{"tool:cc-cli", []Clause{{AxisTool, "cc-cli"}}},
		{"org:acme", []Clause{{AxisOrg, "acme"}}},
		{"kind:agent_advisory,kind:agent_broadcast", []Clause{{AxisKind, KindAgentAdvisory}, {AxisKind, KindAgentBroadcast}}},
	}
	for _, c := range valid {
		t.Run(c.in, func(t *testing.T) {
			f, err := ParseFilter(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.Clauses(), c.want) {
				t.Fatalf("clauses %v", f.Clauses())
			}
			if f.String() != c.in {
				t.Fatalf("String() = %q", f.String())
			}
		})
	}

	invalid := []struct{ in, code string }{
		{"kinds:agent_advisory", CodeFilterAxisUnknown},
		{"Kind:agent_advisory", CodeFilterAxisUnknown},
		{"recipient:@alice.cc", CodeFilterAxisUnknown},
		{"agent_advisory", CodeFilterAxisUnknown},
		{",", CodeFilterAxisUnknown},
		{"kind:agent_advisory,", CodeFilterAxisUnknown},
		{",kind:agent_advisory", CodeFilterAxisUnknown},
		{"kind:agent_advisory, sender:@alice.cc", CodeFilterAxisUnknown},
		{":x", CodeFilterAxisUnknown},
		{"kind", CodeFilterValueInvalid},
		{"kind:", CodeFilterValueInvalid},
		{"kind:agent_advisories", CodeFilterValueInvalid},
		{"kind:AGENT_ADVISORY", CodeFilterValueInvalid},
		{"kind: agent_advisory", CodeFilterValueInvalid},
		{"sender:alice", CodeFilterValueInvalid},
		{"sender:~alice", CodeFilterValueInvalid},
		{"sender:@alice", CodeFilterValueInvalid},
		{"sender:", CodeFilterValueInvalid},
		{"content_type:", CodeFilterValueInvalid},
		{"tool:", CodeFilterValueInvalid},
		{"tool:cc cli", CodeFilterValueInvalid},
		{"org:", CodeFilterValueInvalid},
		{"org:Acme", CodeFilterValueInvalid},
		{"org:@acme.cc", CodeFilterValueInvalid},
		{"kind:agent_advisory,sender:bad", CodeFilterValueInvalid},
	}
	for _, c := range invalid {
		t.Run("invalid "+c.in, func(t *testing.T) {
			f, err := ParseFilter(c.in)
			if err == nil {
				t.Fatalf("accepted: %v", f.Clauses())
			}
			if err.Code != c.code || err.Field != "filter" {
				t.Fatalf("got %s at %s, want %s at filter", err.Code, err.Field, c.code)
			}
		})
	}
}

func TestFilterMatch(t *testing.T) {
	advisory := &Frame{Kind: KindAgentAdvisory, SenderHandle: "@alice.cc", ContentType: "text/plain"}
	query := &Frame{Kind: KindAgentQuery, SenderHandle: "@bob.cursor"}
	cases := []struct {
		filter       string
		fr           *Frame
		wantMatching bool
	}{
		{"", advisory, true},
		{"", query, true},
		{"kind:agent_advisory", advisory, true},
		{"kind:agent_advisory", query, false},
		{"sender:@alice.cc", advisory, true},
		{"sender:@alice.cc", query, false},
		{"kind:agent_advisory,sender:@alice.cc", advisory, true},
		{"kind:agent_advisory,sender:@bob.cursor", advisory, false},
		{"kind:agent_advisory,kind:agent_query", advisory, false},
		{"content_type:text/plain", advisory, true},
		{"content_type:text/markdown", advisory, false},
		{"content_type:Text/Plain", advisory, false},
		// Opt-in: a frame without a content type matches no content_type clause.
		{"content_type:text/plain", query, false},
		// Forward-compatibility axes parse but never widen: they match nothing.
		{"tool:cc", advisory, false},
		{"org:acme", advisory, false},
		{"kind:agent_advisory,tool:cc", advisory, false},
		{"", nil, false},
	}
	for _, c := range cases {
		f, err := ParseFilter(c.filter)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Match(c.fr); got != c.wantMatching {
			t.Errorf("%q.Match(%+v) = %v", c.filter, c.fr, got)
		}
	}
	var zero Filter
	if !zero.Match(advisory) {
		t.Error("zero Filter must match every frame")
	}
}

// The filter applies to frames as Validate returns them.
func TestFilterMatchValidated(t *testing.T) {
	fr, err := Validate(marshal(t, validFrame(KindAgentAdvisory)), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	f, perr := ParseFilter("kind:agent_advisory,sender:@alice.cc,content_type:text/plain")
	if perr != nil {
		t.Fatal(perr)
	}
	if !f.Match(fr) {
		t.Fatal("filter does not match its frame")
	}
}
