package main

import (
	"strings"
	"testing"
)

// TestOperatorTokenAndAuditCommands: create a read and an admin token,
// use them (whoami; the read token is refused a change), rotate, revoke,
// and read the audit log with its filters and --all, against a real aspd.
func TestOperatorTokenAndAuditCommands(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	type tokJSON struct {
		Name, Scope, Token string
	}
	var viewer, ops tokJSON
	r := s.asAdmin("operator-token", "create", "viewer").ok(t, &viewer)
	if viewer.Name != "viewer" || viewer.Scope != "read" || !strings.HasPrefix(viewer.Token, "aspo_") || !strings.Contains(r.stderr, "shown only once") {
		t.Fatalf("create: %s %s", r.stdout, r.stderr)
	}
	s.asAdmin("operator-token", "create", "ops", "--scope", "admin").ok(t, &ops)
	s.asAdmin("operator-token", "create", "x", "--scope", "root").fails(t, 2, "--scope must be read or admin")
	s.asAdmin("operator-token", "create", "ops").fails(t, 1, "conflict")

	as := func(tok string, args ...string) result {
		return ctl(t, append([]string{"--server", s.url, "--admin-token", tok}, args...)...)
	}
	var who struct{ Name, Scope string }
	as(viewer.Token, "whoami").ok(t, &who)
	if who.Name != "viewer" || who.Scope != "read" {
		t.Fatalf("whoami: %+v", who)
	}
	as(viewer.Token, "agent", "list").ok(t, nil)
	as(viewer.Token, "agent", "create", "@acme.x").fails(t, 1, "insufficient_scope")
	as(ops.Token, "agent", "create", "@acme.bot").ok(t, nil)

	var list struct {
		Items []struct {
			Name, Scope string
		}
	}
	r = s.asAdmin("operator-token", "list").ok(t, &list)
	if len(list.Items) != 2 || list.Items[0].Name != "ops" || list.Items[1].Name != "viewer" || strings.Contains(r.stdout, viewer.Token) {
		t.Fatalf("list: %s", r.stdout)
	}
	var rot tokJSON
	s.asAdmin("operator-token", "rotate", "viewer").ok(t, &rot)
	if rot.Token == "" || rot.Token == viewer.Token {
		t.Fatalf("rotate: %+v", rot)
	}
	as(viewer.Token, "whoami").fails(t, 1, "unauthorized")
	as(rot.Token, "whoami").ok(t, nil)
	s.asAdmin("operator-token", "revoke", "viewer").ok(t, nil)
	as(rot.Token, "whoami").fails(t, 1, "unauthorized")
	s.asAdmin("operator-token", "revoke", "viewer").fails(t, 1, "not_found")

	type auditJSON struct {
		Items []struct {
			Actor, Action, Target string
		}
		NextBefore int64 `json:"next_before"`
	}
	var page auditJSON
	r = s.asAdmin("audit", "--limit", "2").ok(t, &page)
	if len(page.Items) != 2 || page.NextBefore == 0 || page.Items[0].Action != "operator_token.revoke" || page.Items[0].Actor != "bootstrap" {
		t.Fatalf("audit page: %s", r.stdout)
	}
	var all auditJSON
	s.asAdmin("audit", "--all", "--limit", "2").ok(t, &all)
	// viewer and ops created, agent created by ops, viewer rotated and revoked.
	if len(all.Items) != 5 {
		t.Fatalf("audit --all: %+v", all.Items)
	}
	var byOps auditJSON
	s.asAdmin("audit", "--actor", "ops").ok(t, &byOps)
	if len(byOps.Items) != 1 || byOps.Items[0].Action != "agent.create" || byOps.Items[0].Target != "@acme.bot" {
		t.Fatalf("audit --actor ops: %+v", byOps.Items)
	}
	for _, sec := range []string{viewer.Token, ops.Token, rot.Token} {
		if strings.Contains(s.asAdmin("audit", "--all").stdout, sec) {
			t.Fatal("a token is in the audit log")
		}
	}
}
