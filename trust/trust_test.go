package trust

import "testing"

func TestCanContact(t *testing.T) {
	open := func(h string) Agent { return Agent{Handle: h, Policy: Open} }
	list := func(h string, entries ...string) Agent {
		return Agent{Handle: h, Policy: Allowlist, Allowlist: entries}
	}
	blocking := func(a Agent, blocked ...string) Agent { a.Blocks = blocked; return a }

	tests := []struct {
		name string
		a, b Agent
		want bool
	}{
		{"open-open", open("@a.x"), open("@b.y"), true},
		{"allowlist empty is closed", list("@a.x"), open("@b.y"), false},
		{"allowlist both list each other", list("@a.x", "@b.y"), list("@b.y", "@a.x"), true},
		{"allowlist only one side lists", list("@a.x", "@b.y"), list("@b.y"), false},
		{"mixed: allowlist side lists open", list("@a.x", "@b.y"), open("@b.y"), true},
		{"mixed: allowlist side does not list open", list("@a.x", "@c.z"), open("@b.y"), false},
		{"owner glob admits owner's agent", list("@acme.engineer", "@acme.*"), open("@acme.support"), true},
		{"owner glob does not admit other owner", list("@acme.engineer", "@acme.*"), open("@nick.assistant"), false},
		{"owner glob is not a prefix match", list("@a.x", "@acme.*"), open("@acmecorp.bot"), false},
		{"block by a, both open", blocking(open("@a.x"), "@b.y"), open("@b.y"), false},
		{"block by b, both open", open("@a.x"), blocking(open("@b.y"), "@a.x"), false},
		{"block overrides mutual allowlist", blocking(list("@a.x", "@b.y"), "@b.y"), list("@b.y", "@a.x"), false},
		{"block of a third agent is irrelevant", blocking(open("@a.x"), "@c.z"), open("@b.y"), true},
		{"self contact is denied", open("@a.x"), open("@a.x"), false},
		{"unknown policy fails closed", Agent{Handle: "@a.x", Policy: "bogus", Allowlist: []string{"@b.y"}}, open("@b.y"), true},
		{"unknown policy without listing fails closed", Agent{Handle: "@a.x", Policy: "bogus"}, open("@b.y"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CanContact(tt.a, tt.b); got != tt.want {
				t.Errorf("CanContact(a, b) = %v, want %v", got, tt.want)
			}
			if got := CanContact(tt.b, tt.a); got != tt.want {
				t.Errorf("CanContact(b, a) = %v, want %v (trust must be symmetric)", got, tt.want)
			}
		})
	}
}

func TestEntryMatches(t *testing.T) {
	tests := []struct {
		entry, handle string
		want          bool
	}{
		{"@acme.support", "@acme.support", true},
		{"@acme.support", "@acme.supporter", false},
		{"@acme.*", "@acme.support", true},
		{"@acme.*", "@acme2.support", false},
		{"@acme.*", "@acm.support", false},
		{"@acme.*", "acme.support", false},
	}
	for _, tt := range tests {
		if got := EntryMatches(tt.entry, tt.handle); got != tt.want {
			t.Errorf("EntryMatches(%q, %q) = %v, want %v", tt.entry, tt.handle, got, tt.want)
		}
	}
}

func BenchmarkCanContact(b *testing.B) {
	a := Agent{Handle: "@acme.engineer", Policy: Allowlist, Allowlist: []string{"@x.a", "@y.b", "@z.c", "@acme.*"}, Blocks: []string{"@evil.bot"}}
	c := Agent{Handle: "@acme.support", Policy: Open}
	for b.Loop() {
		if !CanContact(a, c) {
			b.Fatal("denied")
		}
	}
}

func TestCanInvite(t *testing.T) {
	open := func(h string, blocks ...string) Agent { return Agent{Handle: h, Policy: Open, Blocks: blocks} }
	list := func(h string, entries ...string) Agent {
		return Agent{Handle: h, Policy: Allowlist, Allowlist: entries}
	}
	inviter := open("@i.nviter")
	tests := []struct {
		name     string
		invitees []Agent
		members  []Agent
		want     bool
	}{
		{"no invitees", nil, nil, true},
		{"reachable invitees", []Agent{open("@a.x"), open("@b.y")}, []Agent{inviter}, true},
		{"one invitee unreachable", []Agent{open("@a.x"), list("@b.y")}, nil, false},
		{"invitee blocked the inviter", []Agent{open("@a.x", "@i.nviter")}, nil, false},
		{"one invitee blocked another", []Agent{open("@a.x", "@b.y"), open("@b.y")}, nil, false},
		{"blocked invitee listed first", []Agent{open("@b.y"), open("@a.x", "@b.y")}, nil, false},
		{"a member blocked an invitee", []Agent{open("@a.x")}, []Agent{inviter, open("@m.z", "@a.x")}, false},
		{"an invitee blocked a member", []Agent{open("@a.x", "@m.z")}, []Agent{inviter, open("@m.z")}, false},
		{"blocks of third agents are irrelevant", []Agent{open("@a.x", "@q.q"), open("@b.y", "@r.r")}, []Agent{open("@m.z", "@s.s")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CanInvite(inviter, tt.invitees, tt.members); got != tt.want {
				t.Errorf("CanInvite = %v, want %v", got, tt.want)
			}
		})
	}
}
