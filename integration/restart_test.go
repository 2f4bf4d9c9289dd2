package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// snapshot is everything the agent API answers about some sessions, per
// agent, as raw bytes.
type snapshot map[string][]byte

func takeSnapshot(t testing.TB, agents []*agent, sids []string) snapshot {
	t.Helper()
	snap := snapshot{}
	for _, a := range agents {
		snap[a.handle+" GET /sessions"] = a.must(http.StatusOK, "GET", "/sessions", nil, "")
		for _, sid := range sids {
			code, out := a.do("GET", "/sessions/"+sid, nil)
			snap[fmt.Sprintf("%s GET /sessions/%s", a.handle, sid)] = append([]byte(fmt.Sprint(code, " ")), out...)
			if code != http.StatusOK {
				wantError(t, "GET /sessions/"+sid, code, out, http.StatusNotFound, "not_found")
				continue
			}
			validate(t, "http.json#/$defs/GetSessionResponse", out)
			snap[fmt.Sprintf("%s events %s", a.handle, sid)] = bytes.Join(a.rawEvents(sid), []byte("\n"))
		}
	}
	return snap
}

func (before snapshot) same(t testing.TB, after snapshot, what string) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%s: %d answers before, %d after", what, len(before), len(after))
	}
	for k, b := range before {
		if !bytes.Equal(b, after[k]) {
			t.Fatalf("%s: %s changed:\nbefore %s\nafter  %s", what, k, b, after[k])
		}
	}
}

// TestRestart checks that a restart, graceful or not, loses nothing:
// sessions, participants, the event log byte for byte, and idempotency keys.
func TestRestart(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@rs.alice", "open")
		b := s.provision("@rs.bob", "open")
		c := s.provision("@rs.carol", "allowlist", "@rs.*")
		agents := []*agent{a, b, c}

		// sid1: active, with a joined invitee, a pending invitee and keyed messages.
		create := map[string]any{"invite": []string{b.handle, c.handle}, "topic": "durable",
			"initial_message": map[string]any{"content": "first", "metadata": map[string]any{"k": "v"}}, "idempotency_key": "create-1"}
		createOut := a.must(http.StatusCreated, "POST", "/sessions", create, "PostSessionsResponse")
		var created struct {
			SessionID string `json:"session_id"`
		}
		mustUnmarshal(t, createOut, &created)
		sid1 := created.SessionID
		b.join(sid1)
		m1 := map[string]any{"content": []any{map[string]any{"type": "text", "text": "keyed"}, map[string]any{"type": "data", "data": map[string]any{"n": 1}}}, "idempotency_key": "m-1"}
		m1Out := a.must(http.StatusCreated, "POST", "/sessions/"+sid1+"/messages", m1, "PostSessionsMessagesResponse")
		m2 := map[string]any{"content": "from bob", "idempotency_key": "m-1"} // same key, other sender
		m2Out := b.must(http.StatusCreated, "POST", "/sessions/"+sid1+"/messages", m2, "PostSessionsMessagesResponse")
		// sid2: send-and-end.
		sid2 := a.createSession(map[string]any{"invite": []string{b.handle}, "initial_message": map[string]any{"content": "fyi"}, "end_after_send": true})
		// sid3: ended after a leave, then reopened.
		sid3 := b.createSession(map[string]any{"invite": []string{a.handle, c.handle}})
		a.join(sid3)
		c.join(sid3)
		c.leave(sid3)
		b.end(sid3)
		a.must(http.StatusOK, "POST", "/sessions/"+sid3+"/reopen", map[string]any{"invite": []string{b.handle}}, "PostSessionsReopenResponse")
		sids := []string{sid1, sid2, sid3}
		lastSeq := int64(len(a.events(sid1)))

		before := takeSnapshot(t, agents, sids)
		if len(before) != 3+3*3*2-1 { // c never saw sid2: 404, no events
			t.Fatalf("snapshot has %d answers", len(before))
		}

		check := func(what string) {
			t.Helper()
			takeSnapshot(t, agents, sids).same(t, before, what)
			// Retries answer the original responses and append nothing.
			if out := a.must(http.StatusCreated, "POST", "/sessions", create, "PostSessionsResponse"); !bytes.Equal(out, createOut) {
				t.Fatalf("%s: create retry answered %s, want %s", what, out, createOut)
			}
			if out := a.must(http.StatusCreated, "POST", "/sessions/"+sid1+"/messages", m1, "PostSessionsMessagesResponse"); !bytes.Equal(out, m1Out) {
				t.Fatalf("%s: message retry answered %s, want %s", what, out, m1Out)
			}
			if out := b.must(http.StatusCreated, "POST", "/sessions/"+sid1+"/messages", m2, "PostSessionsMessagesResponse"); !bytes.Equal(out, m2Out) {
				t.Fatalf("%s: bob's message retry answered %s, want %s", what, out, m2Out)
			}
			a.mustFail(http.StatusConflict, "idempotency_key_reused", "POST", "/sessions/"+sid1+"/messages", map[string]any{"content": "other", "idempotency_key": "m-1"})
			takeSnapshot(t, agents, sids).same(t, before, what+" after retries")
		}

		s.stop()
		s.restart()
		check("graceful restart")

		// The next message takes the next sequence: no gap, no reuse.
		if seq := a.send(sid1, "after restart"); seq != lastSeq+1 {
			t.Fatalf("next sequence after restart %d, want %d", seq, lastSeq+1)
		}
		lastSeq++
		before = takeSnapshot(t, agents, sids)

		s.kill()
		s.restart()
		check("restart after SIGKILL")
		if seq := b.send(sid1, "after crash"); seq != lastSeq+1 {
			t.Fatalf("next sequence after crash %d, want %d", seq, lastSeq+1)
		}
		// The pending invitee can still join, and sees the whole transcript.
		c.join(sid1)
		evs := c.events(sid1)
		wantSeqs(t, "carol after joining", evs, seqRange(1, lastSeq+2)...)
		if evs[0].field("content") != "first" {
			t.Fatalf("first message after restarts: %s", evs[0].Raw)
		}
	})
}

// TestSeed provisions agents from a --seed file (object and bare-string
// forms), uses their tokens, and starts again with the same seed.
func TestSeed(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		const aliceTok, bobTok = "tok_seed_alice_0123456789abcdef", "tok_seed_bob_0123456789abcdef"
		seed := map[string]any{
			"@seed.alice": map[string]any{"token": aliceTok, "inbound_policy": "allowlist", "allowlist": []string{"@seed.*"}},
			"@seed.bob":   bobTok,
		}
		raw, err := json.Marshal(seed)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "seed.json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		s := startServer(t, dbURL, "--seed", path)
		alice := &agent{t: t, s: s, handle: "@seed.alice", token: aliceTok}
		bob := &agent{t: t, s: s, handle: "@seed.bob", token: bobTok}

		// The tokens are Bearer tokens, on REST and /connect.
		aliceIn := newInbox(alice.connect())
		sid := bob.createSession(map[string]any{"invite": []string{alice.handle}, "topic": "seeded"})
		e := aliceIn.expect("session.invited")[0]
		wantPayload(t, e, map[string]any{"invitee": alice.handle, "by": bob.handle, "topic": "seeded"})
		alice.join(sid)
		alice.send(sid, "hello bob")

		// The policies are the seed's: bob (bare string) is open, alice
		// admits only @seed.*.
		outsider := s.provision("@other.agent", "open")
		outsider.createSession(map[string]any{"invite": []string{bob.handle}})
		outsider.mustFail(http.StatusNotFound, "not_found", "POST", "/sessions", map[string]any{"invite": []string{alice.handle}})
		agentsBefore := adminAgent(t, s, "@seed.alice") + adminAgent(t, s, "@seed.bob")
		if want := `"inbound_policy":"allowlist"`; !bytes.Contains([]byte(adminAgent(t, s, "@seed.alice")), []byte(want)) {
			t.Fatalf("alice: %s", adminAgent(t, s, "@seed.alice"))
		}
		if want := `"inbound_policy":"open"`; !bytes.Contains([]byte(adminAgent(t, s, "@seed.bob")), []byte(want)) {
			t.Fatalf("bob: %s", adminAgent(t, s, "@seed.bob"))
		}
		_, list := s.adminDo("GET", "/agents", nil)
		eventsBefore := alice.rawEvents(sid)
		if len(eventsBefore) != 3 {
			t.Fatalf("events before the second start: %d", len(eventsBefore))
		}

		// Starting again with the same seed changes nothing.
		s.stop()
		s.restart()
		if got := adminAgent(t, s, "@seed.alice") + adminAgent(t, s, "@seed.bob"); got != agentsBefore {
			t.Fatalf("seeded agents changed on the second start:\nbefore %s\nafter  %s", agentsBefore, got)
		}
		// Presence (online, connections, doors, last seen) is the one part
		// of the listing a restart may change: alice was online at the stop.
		if _, again := s.adminDo("GET", "/agents", nil); withoutPresence(t, again) != withoutPresence(t, list) {
			t.Fatalf("agent list changed on the second start:\nbefore %s\nafter  %s", list, again)
		}
		// The log is intact; alice, online at the stop, got the start-up
		// session.disconnected (a fresh grace window) and nothing else.
		after := alice.events(sid)
		if len(after) != len(eventsBefore)+1 {
			t.Fatalf("events after the second start: %v", types(after))
		}
		for i := range eventsBefore {
			if !bytes.Equal(after[i].Raw, eventsBefore[i]) {
				t.Fatalf("event %d changed on the second start:\n%s\n%s", i, eventsBefore[i], after[i].Raw)
			}
		}
		wantEvent(t, after[3], "session.disconnected", sid, 4)
		wantPayload(t, after[3], map[string]any{"agent": alice.handle})
		if seq := bob.send(sid, "still here"); seq != 5 {
			t.Fatalf("bob's message after the second start: sequence %d, want 5", seq)
		}
		// The seeded tokens still work on /connect.
		alice2 := newInbox(alice.connect())
		for {
			if e := alice2.next(); e.Type == "session.message" && e.field("content") == "still here" {
				break
			}
		}
		outsider.mustFail(http.StatusNotFound, "not_found", "POST", "/sessions", map[string]any{"invite": []string{alice.handle}})
	})
}

// adminAgent returns GET /admin/v1/agents/{h}, which must succeed.
func adminAgent(t testing.TB, s *server, h string) string {
	t.Helper()
	code, out := s.adminDo("GET", "/agents/"+h, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /admin/v1/agents/%s: %d %s", h, code, out)
	}
	return string(out)
}

// withoutPresence is an admin agent listing without its presence fields,
// re-encoded for comparison.
func withoutPresence(t *testing.T, body []byte) string {
	t.Helper()
	var list struct {
		Agents []map[string]any `json:"agents"`
	}
	mustUnmarshal(t, body, &list)
	for _, a := range list.Agents {
		for _, k := range []string{"online", "connections", "doors", "last_seen_at"} {
			delete(a, k)
		}
	}
	out, err := json.Marshal(list.Agents)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
