package frame

import (
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	valid := []struct {
		in   string
		want Scope
	}{
		{"@alice.cc", Scope{Kind: ScopeAgent, Handle: "@alice.cc", Owner: "alice"}},
		{"@alice.cc/*", Scope{Kind: ScopeAgent, Handle: "@alice.cc", Owner: "alice"}},
		{"@alice.cc/cc-*", Scope{Kind: ScopeInstrumentPrefix, Handle: "@alice.cc", Owner: "alice", InstrumentPrefix: "cc-"}},
		{"@a-b_c.d_e-f/Cursor.v2*", Scope{Kind: ScopeInstrumentPrefix, Handle: "@a-b_c.d_e-f", Owner: "a-b_c", InstrumentPrefix: "Cursor.v2"}},
		{"@alice.cc/cc@sess_01HZX", Scope{Kind: ScopeStream, Handle: "@alice.cc", Owner: "alice", Instrument: "cc", Session: "sess_01HZX"}},
		{"@alice.cc/cc-cli@6f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f", Scope{Kind: ScopeStream, Handle: "@alice.cc", Owner: "alice", Instrument: "cc-cli", Session: "6f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f"}},
		{"org:acme/members/*", Scope{Kind: ScopeOrgMembers, Owner: "acme"}},
		{"org:acme/members/eng/*", Scope{Kind: ScopeOrgRole, Owner: "acme", Role: "eng"}},
		{"org:acme/members/on-call.primary/*", Scope{Kind: ScopeOrgRole, Owner: "acme", Role: "on-call.primary"}},
		{"accord:globex/grant:support", Scope{Kind: ScopeAccord, Owner: "globex", Grant: "support"}},
	}
	for _, c := range valid {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseScope(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
			// String is canonical and parses back to the same scope.
			again, err := ParseScope(got.String())
			if err != nil || again != got {
				t.Fatalf("String %q does not round-trip: %+v %v", got.String(), again, err)
			}
		})
	}

	invalid := []string{
		"",
		"*",
		"alice",
		"~alice", // the draft's notation; aspd uses ASP handles
		"~alice/*",
		"@alice",     // no agent part
		"@Alice.cc",  // upper case
		"@alice.cc/", // empty selector
		"@alice.cc//*",
		"@alice.cc/cc", // neither *, prefix* nor instrument@session
		"@alice.cc/**", // prefix "*"
		"@alice.cc/c*c*",
		"@alice.cc/*cc",
		"@alice.cc/@s1",    // empty instrument
		"@alice.cc/cc@",    // empty session
		"@alice.cc/cc@s@1", // '@' in session
		"@alice.cc/cc@s*",  // '*' in session
		"@alice.cc/c c*",   // space
		"@alice.cc/*/x",
		"@alice.cc/x@" + strings.Repeat("a", 129), // session over 128 octets
		" @alice.cc",
		"org:",
		"org:acme",
		"org:acme/",
		"org:acme/members",
		"org:acme/members/",
		"org:acme/members/**",
		"org:acme/members//*",
		"org:acme/members/eng",
		"org:acme/members/eng/*/x",
		"org:acme/members/a/b/*",
		"org:ACME/members/*",
		"org:@acme.cc/members/*",
		"org:/members/*",
		"accord:",
		"accord:globex",
		"accord:globex/",
		"accord:globex/grant:",
		"accord:globex/support",
		"accord:globex/grant:a/b",
		"accord:/grant:x",
		"ORG:acme/members/*",
	}
	for _, in := range invalid {
		t.Run("invalid "+in, func(t *testing.T) {
			got, err := ParseScope(in)
			if err == nil {
				t.Fatalf("accepted as %+v", got)
			}
			if err.Code != CodeFieldInvalid || err.Field != "scope" {
				t.Fatalf("got %s at %s", err.Code, err.Field)
			}
			if got.Kind != 0 {
				t.Fatalf("kind %v with an error", got.Kind)
			}
		})
	}
}

func TestScopeKindString(t *testing.T) {
	for k, want := range map[ScopeKind]string{
		0: "invalid", ScopeAgent: "agent", ScopeInstrumentPrefix: "instrument-prefix", ScopeStream: "stream",
		ScopeOrgMembers: "org-members", ScopeOrgRole: "org-role", ScopeAccord: "accord", 99: "invalid", -1: "invalid",
	} {
		if got := k.String(); got != want {
			t.Errorf("%d: %q", int(k), got)
		}
	}
	if (Scope{}).String() != "" {
		t.Error("zero Scope has a string")
	}
}
