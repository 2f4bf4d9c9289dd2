package store_test

import (
	"reflect"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

func TestAgentCreateGetListAndDuplicate(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@acme.support", "open")
		mustAgent(t, s, "@acme.engineer", "allowlist", "@nick.assistant", "@acme.*")
		mustAgent(t, s, "@nick.assistant", "allowlist")

		got, err := s.GetAgent(bg, "@acme.engineer")
		must(t, err)
		want := &protocol.Agent{Handle: "@acme.engineer", Owner: "acme", InboundPolicy: "allowlist",
			Allowlist: []string{"@acme.*", "@nick.assistant"}, Blocks: []string{}, Roles: []string{}, HasToken: true, CreatedAt: got.CreatedAt}
		if got.CreatedAt <= 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("get agent: %+v, want %+v", got, want)
		}

		// A duplicate handle is a conflict and changes nothing.
		err = s.CreateAgent(bg, store.NewAgent{Handle: "@acme.support", InboundPolicy: "allowlist", Allowlist: []string{"@x.y"}, TokenHash: []byte("other")})
		wantConflict(t, err, protocol.CodeConflict)
		sup, err := s.GetAgent(bg, "@acme.support")
		must(t, err)
		if sup.InboundPolicy != "open" || len(sup.Allowlist) != 0 {
			t.Fatalf("duplicate create changed the agent: %+v", sup)
		}
		if h, err := s.Authenticate(bg, []byte("other")); err == nil {
			t.Fatalf("the rejected duplicate's token authenticates as %s", h)
		}

		_, err = s.GetAgent(bg, "@acme.nobody")
		wantNotFound(t, err)

		handlesOf := func(owner string) []string {
			t.Helper()
			list, err := s.ListAgents(bg, owner)
			must(t, err)
			out := []string{}
			for _, a := range list {
				if owner != "" && a.Owner != owner {
					t.Fatalf("owner filter %q returned %+v", owner, a)
				}
				out = append(out, a.Handle)
			}
			return out
		}
		for _, tc := range []struct {
			owner string
			want  []string
		}{
			{"", []string{"@acme.engineer", "@acme.support", "@nick.assistant"}},
			{"acme", []string{"@acme.engineer", "@acme.support"}},
			{"nick", []string{"@nick.assistant"}},
			{"ac", []string{}},
		} {
			if got := handlesOf(tc.owner); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("list agents owner %q: %v, want %v", tc.owner, got, tc.want)
			}
		}
	})
}

func TestAgentDeleteRetiresHandle(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@acme.support", "open")
		mustAgent(t, s, "@nick.assistant", "open")
		// A session it shares: deletion makes it leave (others see session.left).
		sid := create(t, s, "@nick.assistant", "", "@acme.support")
		join(t, s, sid, "@acme.support")

		if h, err := s.Authenticate(bg, []byte("hash-@acme.support")); err != nil || h != "@acme.support" {
			t.Fatalf("before delete: %q %v", h, err)
		}
		commits, err := s.DeleteAgent(bg, "@acme.support")
		must(t, err)
		if len(commits) != 1 || commits[0].SessionID != sid {
			t.Fatalf("delete commits %+v", commits)
		}
		wantEvents(t, "log after delete", fullLog(t, s, sid),
			step{protocol.EventInvited, 1, nil}, step{protocol.EventJoined, 2, nil},
			step{protocol.EventLeft, 3, pLeft("@acme.support", protocol.LeftReasonLeft)})
		wantState(t, s, sid, protocol.StateActive)

		_, err = s.GetAgent(bg, "@acme.support")
		wantNotFound(t, err)
		list, err := s.ListAgents(bg, "acme")
		must(t, err)
		if len(list) != 0 {
			t.Fatalf("deleted agent still listed: %+v", list)
		}
		_, err = s.Authenticate(bg, []byte("hash-@acme.support"))
		wantNotFound(t, err)
		_, err = s.DeleteAgent(bg, "@acme.support")
		wantNotFound(t, err)
		// Handles are never reused.
		err = s.CreateAgent(bg, store.NewAgent{Handle: "@acme.support", InboundPolicy: "open", TokenHash: []byte("fresh")})
		wantConflict(t, err, protocol.CodeConflict)
		_, err = s.Authenticate(bg, []byte("fresh"))
		wantNotFound(t, err)
		// Operator changes to a deleted agent are not found.
		wantNotFound(t, s.SetPolicy(bg, "@acme.support", "allowlist"))
		wantNotFound(t, s.SetTokenHash(bg, "@acme.support", []byte("again")))
		wantNotFound(t, s.SetAllowlist(bg, "@acme.support", []string{"@x.*"}))
		wantNotFound(t, s.SetRoles(bg, "@acme.support", []string{"r"}))
		// And it cannot be invited any more.
		_, _, err = s.CreateSession(bg, store.CreateSession{Creator: "@nick.assistant", Invite: []string{"@acme.support"}})
		wantNotFound(t, err)
		_, _, err = s.Invite(bg, sid, "@nick.assistant", []string{"@acme.support"})
		wantNotFound(t, err)
	})
}

func TestAgentAllowlistReplaceAddRemove(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@acme.support", "allowlist", "@a.one", "@b.*")
		allow := func() []string {
			t.Helper()
			a, err := s.GetAgent(bg, "@acme.support")
			must(t, err)
			return a.Allowlist
		}
		steps := []struct {
			name string
			op   func() error
			want []string
		}{
			{"replace", func() error { return s.SetAllowlist(bg, "@acme.support", []string{"@c.*", "@a.two"}) }, []string{"@a.two", "@c.*"}},
			{"add keeps present entries once", func() error { return s.AddAllowlist(bg, "@acme.support", []string{"@a.two", "@d.x", "@d.x"}) }, []string{"@a.two", "@c.*", "@d.x"}},
			{"remove, absent entries ignored", func() error { return s.RemoveAllowlist(bg, "@acme.support", []string{"@c.*", "@zz.top"}) }, []string{"@a.two", "@d.x"}},
			{"replace with empty closes", func() error { return s.SetAllowlist(bg, "@acme.support", nil) }, []string{}},
		}
		for _, st := range steps {
			must(t, st.op())
			if got := allow(); !reflect.DeepEqual(got, st.want) {
				t.Fatalf("%s: allowlist %v, want %v", st.name, got, st.want)
			}
		}
		wantNotFound(t, s.SetAllowlist(bg, "@no.body", []string{"@a.b"}))
		wantNotFound(t, s.AddAllowlist(bg, "@no.body", []string{"@a.b"}))
		wantNotFound(t, s.RemoveAllowlist(bg, "@no.body", []string{"@a.b"}))
	})
}

func TestAgentRolesAndPolicy(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@acme.support", "allowlist")
		must(t, s.SetRoles(bg, "@acme.support", []string{"sessions:read", "admin"}))
		must(t, s.SetPolicy(bg, "@acme.support", "open"))
		a, err := s.GetAgent(bg, "@acme.support")
		must(t, err)
		if !reflect.DeepEqual(a.Roles, []string{"admin", "sessions:read"}) || a.InboundPolicy != "open" {
			t.Fatalf("agent %+v", a)
		}
		must(t, s.SetRoles(bg, "@acme.support", nil))
		a, err = s.GetAgent(bg, "@acme.support")
		must(t, err)
		if a.Roles == nil || len(a.Roles) != 0 {
			t.Fatalf("cleared roles: %#v", a.Roles)
		}
		wantNotFound(t, s.SetRoles(bg, "@no.body", []string{"x"}))
		wantNotFound(t, s.SetPolicy(bg, "@no.body", "open"))
	})
}

func TestAgentAuthenticateRotateRevoke(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@acme.support", "open")
		mustAgent(t, s, "@nick.assistant", "open")
		auth := func(hash string) (string, error) { return s.Authenticate(bg, []byte(hash)) }

		if h, err := auth("hash-@acme.support"); err != nil || h != "@acme.support" {
			t.Fatalf("right hash: %q %v", h, err)
		}
		if h, err := auth("hash-@nick.assistant"); err != nil || h != "@nick.assistant" {
			t.Fatalf("right hash: %q %v", h, err)
		}
		for _, wrong := range []string{"hash-@acme.suppor", "hash-@acme.support\x00", "HASH-@acme.support", "x"} {
			h, err := auth(wrong)
			wantNotFound(t, err)
			if h != "" {
				t.Fatalf("wrong hash %q returned handle %q", wrong, h)
			}
		}

		// Rotation: the old hash fails at once, the new one works.
		must(t, s.SetTokenHash(bg, "@acme.support", []byte("rotated")))
		_, err := auth("hash-@acme.support")
		wantNotFound(t, err)
		if h, err := auth("rotated"); err != nil || h != "@acme.support" {
			t.Fatalf("rotated hash: %q %v", h, err)
		}
		// The other agent is untouched.
		if h, err := auth("hash-@nick.assistant"); err != nil || h != "@nick.assistant" {
			t.Fatalf("other agent after rotation: %q %v", h, err)
		}

		// Revocation: no token authenticates; the agent still exists.
		must(t, s.SetTokenHash(bg, "@acme.support", nil))
		_, err = auth("rotated")
		wantNotFound(t, err)
		a, err := s.GetAgent(bg, "@acme.support")
		must(t, err)
		if a.HasToken {
			t.Fatalf("revoked agent has_token: %+v", a)
		}
		// A revoked token cannot be matched by an empty hash either.
		_, err = auth("")
		wantNotFound(t, err)
		wantNotFound(t, s.SetTokenHash(bg, "@no.body", []byte("h")))
	})
}

func TestUpsertSeedAgentIsIdempotent(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		seed := store.NewAgent{Handle: "@acme.support", InboundPolicy: "allowlist", Allowlist: []string{"@nick.*", "@acme.engineer"}, TokenHash: []byte("seed-hash")}
		must(t, s.UpsertSeedAgent(bg, seed))
		first, err := s.GetAgent(bg, "@acme.support")
		must(t, err)
		must(t, s.UpsertSeedAgent(bg, seed))
		second, err := s.GetAgent(bg, "@acme.support")
		must(t, err)
		want := &protocol.Agent{Handle: "@acme.support", Owner: "acme", InboundPolicy: "allowlist", Allowlist: []string{"@acme.engineer", "@nick.*"},
			Blocks: []string{}, Roles: []string{}, HasToken: true, CreatedAt: first.CreatedAt}
		if !reflect.DeepEqual(first, want) || !reflect.DeepEqual(second, first) {
			t.Fatalf("seed twice:\nfirst  %+v\nsecond %+v\nwant   %+v", first, second, want)
		}
		list, err := s.ListAgents(bg, "")
		must(t, err)
		if len(list) != 1 {
			t.Fatalf("seeding twice made %d agents", len(list))
		}
		if h, err := s.Authenticate(bg, []byte("seed-hash")); err != nil || h != "@acme.support" {
			t.Fatalf("seeded token: %q %v", h, err)
		}

		// A changed seed replaces token, policy and allowlist.
		must(t, s.UpsertSeedAgent(bg, store.NewAgent{Handle: "@acme.support", InboundPolicy: "open", Allowlist: []string{"@x.*"}, TokenHash: []byte("seed-2")}))
		a, err := s.GetAgent(bg, "@acme.support")
		must(t, err)
		if a.InboundPolicy != "open" || !reflect.DeepEqual(a.Allowlist, []string{"@x.*"}) || a.CreatedAt != first.CreatedAt {
			t.Fatalf("re-seeded agent %+v", a)
		}
		_, err = s.Authenticate(bg, []byte("seed-hash"))
		wantNotFound(t, err)
		if h, err := s.Authenticate(bg, []byte("seed-2")); err != nil || h != "@acme.support" {
			t.Fatalf("re-seeded token: %q %v", h, err)
		}
	})
}
