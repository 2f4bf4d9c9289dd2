package store_test

import (
	"reflect"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Named operator tokens: create, authenticate by hash, list, rotate (the old
// hash stops working), revoke (the token stops working), conflicts and
// unknown names.
func TestOperatorTokenLifecycle(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		tok, err := s.CreateOperatorToken(bg, "ci", protocol.ScopeRead, []byte("hash-ci-1"))
		must(t, err)
		if tok.Name != "ci" || tok.Scope != "read" || tok.CreatedAt <= 0 {
			t.Fatalf("created %+v", tok)
		}
		_, err = s.CreateOperatorToken(bg, "ci", protocol.ScopeAdmin, []byte("hash-ci-other"))
		wantConflict(t, err, protocol.CodeConflict)
		if _, _, err := s.AuthenticateOperator(bg, []byte("hash-ci-other")); err == nil {
			t.Fatal("the refused duplicate's hash authenticates")
		}
		_, err = s.CreateOperatorToken(bg, "ops", protocol.ScopeAdmin, []byte("hash-ops"))
		must(t, err)

		name, scope, err := s.AuthenticateOperator(bg, []byte("hash-ci-1"))
		if err != nil || name != "ci" || scope != "read" {
			t.Fatalf("authenticate: %q %q %v", name, scope, err)
		}
		must(t, s.TouchOperatorToken(bg, "ci", 1234))

		list, err := s.ListOperatorTokens(bg)
		must(t, err)
		if len(list) != 2 || list[0].Name != "ci" || list[0].LastUsedAt != 1234 || list[0].RotatedAt != 0 || list[1].Name != "ops" || list[1].LastUsedAt != 0 {
			t.Fatalf("list: %+v", list)
		}

		rot, err := s.RotateOperatorToken(bg, "ci", []byte("hash-ci-2"))
		must(t, err)
		if rot.Name != "ci" || rot.Scope != "read" || rot.CreatedAt != tok.CreatedAt || rot.RotatedAt <= 0 {
			t.Fatalf("rotated: %+v", rot)
		}
		if _, _, err := s.AuthenticateOperator(bg, []byte("hash-ci-1")); err == nil {
			t.Fatal("the old hash still authenticates after rotation")
		}
		if name, _, err := s.AuthenticateOperator(bg, []byte("hash-ci-2")); err != nil || name != "ci" {
			t.Fatalf("new hash: %q %v", name, err)
		}
		_, err = s.RotateOperatorToken(bg, "nobody", []byte("x"))
		wantNotFound(t, err)

		must(t, s.DeleteOperatorToken(bg, "ci"))
		if _, _, err := s.AuthenticateOperator(bg, []byte("hash-ci-2")); err == nil {
			t.Fatal("a revoked token authenticates")
		}
		wantNotFound(t, s.DeleteOperatorToken(bg, "ci"))
		list, err = s.ListOperatorTokens(bg)
		must(t, err)
		if len(list) != 1 || list[0].Name != "ops" {
			t.Fatalf("list after revoke: %+v", list)
		}
	})
}

// The audit row is written by the change's own transaction: a change that
// commits writes exactly one row, whatever else the request runs after it;
// a change that fails writes none; a context without an entry writes none.
func TestAuditRowCommitsWithTheChange(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		// No entry in the context: no row.
		mustAgent(t, s, "@acme.support", "open")

		e := &store.AuditEntry{Actor: "ops", Action: "agent.policy.set", Target: "@acme.support", RequestID: "req-1",
			Detail: map[string]any{"inbound_policy": "allowlist"}}
		ctx := store.WithAudit(bg, e)
		must(t, s.SetPolicy(ctx, "@acme.support", "allowlist"))
		// A second transaction of the same request writes no second row.
		must(t, s.SetRoles(ctx, "@acme.support", []string{"x"}))

		// A failed change writes nothing.
		failed := store.WithAudit(bg, &store.AuditEntry{Actor: "ops", Action: "agent.policy.set", Target: "@acme.nobody", RequestID: "req-2"})
		wantNotFound(t, s.SetPolicy(failed, "@acme.nobody", "open"))

		rows, err := s.ListAudit(bg, store.AuditFilter{})
		must(t, err)
		if len(rows) != 1 {
			t.Fatalf("audit rows: %+v, want one", rows)
		}
		r := rows[0]
		if r.ID <= 0 || r.At <= 0 || r.Actor != "ops" || r.Action != "agent.policy.set" || r.Target != "@acme.support" || r.RequestID != "req-1" ||
			string(r.Detail) != `{"inbound_policy":"allowlist"}` {
			t.Fatalf("audit row: %+v (detail %s)", r, r.Detail)
		}
	})
}

// ListAudit pages newest first by id and filters by actor, action, target.
func TestAuditListPagesAndFilters(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		for i, c := range []struct{ actor, action, name string }{
			{"a", "operator_token.create", "t1"}, {"b", "operator_token.create", "t2"},
			{"a", "operator_token.revoke", "t1"}, {"a", "operator_token.create", "t3"},
		} {
			ctx := store.WithAudit(bg, &store.AuditEntry{Actor: c.actor, Action: c.action, Target: c.name, RequestID: string(rune('0' + i))})
			if c.action == "operator_token.revoke" {
				must(t, s.DeleteOperatorToken(ctx, c.name))
			} else {
				_, err := s.CreateOperatorToken(ctx, c.name, protocol.ScopeRead, []byte("h-"+c.name))
				must(t, err)
			}
		}
		reqs := func(f store.AuditFilter) []string {
			t.Helper()
			rows, err := s.ListAudit(bg, f)
			must(t, err)
			out := []string{}
			for _, r := range rows {
				out = append(out, r.RequestID)
			}
			return out
		}
		all, err := s.ListAudit(bg, store.AuditFilter{})
		must(t, err)
		for _, tc := range []struct {
			f    store.AuditFilter
			want []string
		}{
			{store.AuditFilter{}, []string{"3", "2", "1", "0"}},
			{store.AuditFilter{Limit: 2}, []string{"3", "2"}},
			{store.AuditFilter{Limit: 2, Before: all[1].ID}, []string{"1", "0"}},
			{store.AuditFilter{Actor: "a"}, []string{"3", "2", "0"}},
			{store.AuditFilter{Action: "operator_token.create", Actor: "a"}, []string{"3", "0"}},
			{store.AuditFilter{Target: "t1"}, []string{"2", "0"}},
			{store.AuditFilter{Target: "t1", Before: all[1].ID}, []string{"0"}},
			{store.AuditFilter{Actor: "nobody"}, []string{}},
		} {
			if got := reqs(tc.f); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%+v: %v, want %v", tc.f, got, tc.want)
			}
		}
	})
}
