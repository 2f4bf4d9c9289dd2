package integration

import (
	"bytes"
	"net/http"
	"testing"
)

// missingSession is a well-formed session id that does not exist.
const missingSession = "sess_01J2K3ZZZZZZZZZZZZZZZZZZZZ"

// TestTrust drives the trust rules of §6.2 through the HTTP API: allowlists
// gate both directions, owner globs, mixed pairs, blocks in either direction
// and with current participants, all-or-nothing invite lists, and that every
// denial is the very same 404 as a handle or session that does not exist.
func TestTrust(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		nick := s.provision("@nick.assistant", "open")

		// The reference 404s: a session that does not exist, and an
		// invitation of a handle that does not exist.
		code, ref := nick.do("GET", "/sessions/"+missingSession, nil)
		wantError(t, "missing session", code, ref, http.StatusNotFound, "not_found")
		code, out := nick.do("POST", "/sessions", map[string]any{"invite": []string{"@nobody.here"}})
		wantError(t, "missing handle", code, out, http.StatusNotFound, "not_found")
		if !bytes.Equal(out, ref) {
			t.Fatalf("404 for a missing handle %q differs from 404 for a missing session %q", out, ref)
		}

		// deny asserts the byte-identical 404.
		deny := func(a *agent, what, method, path string, body any) {
			t.Helper()
			code, out := a.do(method, path, body)
			wantError(t, a.handle+": "+what, code, out, http.StatusNotFound, "not_found")
			if !bytes.Equal(out, ref) {
				t.Fatalf("%s: %s: 404 body %q differs from the missing-session 404 %q", a.handle, what, out, ref)
			}
		}
		// canCreate / cannotCreate: POST /sessions inviting `to`.
		canCreate := func(from, to *agent) string {
			t.Helper()
			return from.createSession(map[string]any{"invite": []string{to.handle}})
		}
		cannotCreate := func(from, to *agent) {
			t.Helper()
			deny(from, "create inviting "+to.handle, "POST", "/sessions", map[string]any{"invite": []string{to.handle}})
		}
		// cannotInvite: POST /sessions/{id}/invite from a fresh session of from's own.
		cannotInvite := func(from, to *agent) {
			t.Helper()
			sid := from.createSession(map[string]any{})
			deny(from, "invite "+to.handle, "POST", "/sessions/"+sid+"/invite", map[string]any{"invite": []string{to.handle}})
			if evs := from.events(sid); len(evs) != 0 {
				t.Fatalf("a refused invite wrote events: %v", types(evs))
			}
		}

		// ---- allowlist gates both directions ----
		alpha := s.provision("@alpha.list", "allowlist") // lists nobody
		beta := s.provision("@beta.open", "open")
		cannotCreate(alpha, beta) // alpha's own allowlist lacks beta
		cannotCreate(beta, alpha) // beta is open, but alpha does not list it
		cannotInvite(alpha, beta)
		cannotInvite(beta, alpha)

		// One-sided listing between two allowlist agents is not enough.
		half := s.provision("@half.one", "allowlist", "@half2.two")
		half2 := s.provision("@half2.two", "allowlist")
		cannotCreate(half, half2)
		cannotCreate(half2, half)

		// ---- mutual allowlist ----
		mut := s.provision("@mut.one", "allowlist", "@mut2.two")
		mut2 := s.provision("@mut2.two", "allowlist", "@mut.one")
		canCreate(mut, mut2)
		canCreate(mut2, mut)

		// ---- owner glob ----
		target := s.provision("@gl.target", "allowlist", "@org.*")
		member := s.provision("@org.member", "open")
		outsider := s.provision("@orgx.member", "open") // "@org.*" is not a prefix match on owners
		canCreate(member, target)
		canCreate(target, member)
		cannotCreate(outsider, target)
		cannotCreate(target, outsider)

		// ---- mixed pair: the allowlist side decides ----
		mixList := s.provision("@mix.list", "allowlist", "@mix2.open")
		mixOpen := s.provision("@mix2.open", "open")
		mixOther := s.provision("@mix2.other", "open")
		canCreate(mixList, mixOpen)
		canCreate(mixOpen, mixList)
		cannotCreate(mixList, mixOther)
		cannotCreate(mixOther, mixList)

		// ---- blocks, in both directions ----
		b1 := s.provision("@blk.one", "open")
		b2 := s.provision("@blk.two", "open")
		b3 := s.provision("@blk.three", "open")
		// Before the block, b3's session has b1 joined.
		shared := b3.createSession(map[string]any{"invite": []string{b1.handle}})
		b1.join(shared)
		if code, body := s.adminDo("POST", "/agents/@blk.one/blocks", map[string]any{"handle": "@blk.two"}); code != http.StatusOK {
			t.Fatalf("block: %d %s", code, body)
		}
		cannotCreate(b1, b2) // blocker -> blocked
		cannotCreate(b2, b1) // blocked -> blocker
		cannotInvite(b1, b2)
		cannotInvite(b2, b1)
		// A block with a current participant refuses the invitation too,
		// though the inviter (b3) and b2 may contact each other.
		deny(b3, "invite a participant's blocked agent", "POST", "/sessions/"+shared+"/invite", map[string]any{"invite": []string{b2.handle}})
		canCreate(b3, b2)
		// The block is also refused the other way round: b2 blocks b3's
		// new partner b4, then b3 cannot bring b4 into a session with b2.
		b4 := s.provision("@blk.four", "open")
		if code, body := s.adminDo("POST", "/agents/@blk.four/blocks", map[string]any{"handle": "@blk.one"}); code != http.StatusOK {
			t.Fatalf("block: %d %s", code, body)
		}
		deny(b3, "invite an agent that blocked a participant", "POST", "/sessions/"+shared+"/invite", map[string]any{"invite": []string{b4.handle}})
		wantSeqs(t, "shared session after refused invites", b3.events(shared), 1, 2) // invited, joined

		// ---- all-or-nothing: one unreachable invitee refuses the whole request ----
		reach := s.provision("@reach.able", "open")
		reachIn := newInbox(reach.connect())
		before := len(nick.mySessions())
		for _, bad := range []string{alpha.handle, "@nobody.here"} {
			deny(nick, "create with "+bad, "POST", "/sessions", map[string]any{
				"invite": []string{reach.handle, bad}, "topic": "mixed", "initial_message": map[string]any{"content": "hi"},
			})
		}
		if after := len(nick.mySessions()); after != before {
			t.Fatalf("refused creates listed new sessions: %d -> %d", before, after)
		}
		if rows := reach.mySessions(); len(rows) != 0 {
			t.Fatalf("reachable invitee has sessions %+v", rows)
		}
		if code, body := s.adminDo("GET", "/sessions?participant=@reach.able", nil); code != http.StatusOK || !bytes.Contains(body, []byte(`"sessions":[]`)) {
			t.Fatalf("operator sees sessions of the reachable invitee: %d %s", code, body)
		}
		// The same through /invite: nothing is written, nobody is told.
		sid := nick.createSession(map[string]any{"topic": "all or nothing"})
		deny(nick, "invite mixed list", "POST", "/sessions/"+sid+"/invite", map[string]any{"invite": []string{reach.handle, alpha.handle}})
		if evs := nick.events(sid); len(evs) != 0 {
			t.Fatalf("refused invite wrote events: %v", types(evs))
		}
		reachIn.quiet(quietFor)
		if got := nick.invite(sid, reach.handle); len(got) != 1 {
			t.Fatalf("invite of the reachable agent alone: %v", got)
		}
		e := reachIn.expect("session.invited")[0]
		wantEvent(t, e, "session.invited", sid, 1)

		// ---- non-participants see the same 404 ----
		for _, p := range []string{"/sessions/" + sid, "/sessions/" + sid + "/events", "/sessions/" + sid + "/events?after_sequence=0&limit=10"} {
			deny(beta, "read a foreign session", "GET", p, nil)
		}
		for _, act := range []string{"join", "leave", "end"} {
			deny(beta, act+" a foreign session", "POST", "/sessions/"+sid+"/"+act, nil)
		}
		deny(beta, "message a foreign session", "POST", "/sessions/"+sid+"/messages", map[string]any{"content": "hello?"})
		deny(beta, "invite into a foreign session", "POST", "/sessions/"+sid+"/invite", map[string]any{"invite": []string{mixOpen.handle}})
		deny(beta, "reopen a foreign session", "POST", "/sessions/"+sid+"/reopen", map[string]any{})
		deny(beta, "malformed session id", "GET", "/sessions/not-a-session", nil)
		deny(beta, "missing session events", "GET", "/sessions/"+missingSession+"/events", nil)

		// ---- reopen re-invitations pass trust again ----
		reach.join(sid)
		nick.end(sid)
		reachIn.expect("session.joined", "session.ended")
		if code, body := s.adminDo("PUT", "/agents/@reach.able/policy", map[string]any{"inbound_policy": "allowlist"}); code != http.StatusOK {
			t.Fatalf("set policy: %d %s", code, body)
		}
		deny(nick, "reopen re-inviting an agent that now refuses", "POST", "/sessions/"+sid+"/reopen", map[string]any{"invite": []string{reach.handle}})
		if d := nick.getSession(sid); d.State != "ended" {
			t.Fatalf("refused reopen changed the session: %s", d.Raw)
		}
		reachIn.quiet(quietFor)

		// ---- agents cannot change trust ----
		// The operator API refuses agent tokens...
		for _, c := range []struct{ method, path string }{
			{"PUT", "/admin/v1/agents/@alpha.list/policy"},
			{"POST", "/admin/v1/agents/@alpha.list/allowlist"},
			{"PUT", "/admin/v1/agents/@alpha.list/allowlist"},
			{"DELETE", "/admin/v1/agents/@blk.one/blocks/@blk.two"},
			{"POST", "/admin/v1/agents/@beta.open/blocks"},
			{"POST", "/admin/v1/agents"},
		} {
			code, body := request(t, c.method, s.url+c.path, alpha.token, map[string]any{
				"inbound_policy": "open", "entries": []string{"@beta.open"}, "handle": "@beta.open"})
			wantError(t, "agent token on "+c.method+" "+c.path, code, body, http.StatusUnauthorized, "unauthorized")
		}
		// ...and the agent API has no endpoint for it.
		for _, c := range []struct{ method, path string }{
			{"PUT", "/agents/@alpha.list/policy"},
			{"POST", "/agents/@alpha.list/allowlist"},
			{"POST", "/allowlist"},
			{"POST", "/blocks"},
		} {
			code, body := alpha.do(c.method, c.path, map[string]any{"inbound_policy": "open", "entries": []string{"@beta.open"}})
			wantError(t, "agent "+c.method+" "+c.path, code, body, http.StatusNotFound, "not_found")
		}
		// Nothing changed.
		cannotCreate(beta, alpha)
		cannotCreate(b2, b1)
		code, body := s.adminDo("GET", "/agents/@alpha.list", nil)
		if code != http.StatusOK || !bytes.Contains(body, []byte(`"inbound_policy":"allowlist"`)) {
			t.Fatalf("alpha after agent attempts: %d %s", code, body)
		}
	})
}
