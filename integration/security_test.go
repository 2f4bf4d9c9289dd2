package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestFrameDetectionSeesEscapedKeys: a data object whose key is written
// "envelope\u005fversion" is an agent-channel frame to every JSON parser,
// so aspd must validate it as one (here: an unsupported version), not let it
// through as plain data.
func TestFrameDetectionSeesEscapedKeys(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t))
	a := s.provision("@esc.a", "open")
	sid := a.createSession(map[string]any{})
	body := `{"content":[{"type":"data","data":{"envelope\u005fversion":"9.9","kind":"agent_advisory"}}]}`
	code, out := a.do("POST", "/sessions/"+sid+"/messages", body)
	var e struct {
		Error struct{ Code, Field string } `json:"error"`
	}
	mustUnmarshal(t, out, &e)
	if code != http.StatusBadRequest || e.Error.Code != "envelope-version-unsupported" || e.Error.Field != "envelope_version" {
		t.Fatalf("escaped envelope_version: %d %s, want 400 envelope-version-unsupported", code, out)
	}
	if evs := a.events(sid); len(evs) != 0 {
		t.Fatalf("a rejected message was stored: %d events", len(evs))
	}
	// A plain data object is still just data.
	a.send(sid, []map[string]any{{"type": "data", "data": map[string]any{"note": "caf\u00e9"}}})
}

// TestFrameOrgScopeObeysTrust: an org: scope is a contact attempt on every
// member: a member whose allowlist or block refuses the sender gets nothing,
// and the answer's count is coarsened so the sender cannot tell.
func TestFrameOrgScopeObeysTrust(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t))
	closed := s.provision("@org.closed", "allowlist") // admits nobody
	blocker := s.provision("@org.blocker", "open")
	sender := s.provision("@org.sender", "open")
	if code, out := s.adminDo("POST", "/agents/@org.blocker/blocks", map[string]any{"handle": "@org.sender"}); code != http.StatusOK {
		t.Fatalf("block: %d %s", code, out)
	}
	closedStream := sseOpen(t, s, closed.token, "/stream?instrument=x", nil)
	blockerStream := sseOpen(t, s, blocker.token, "/stream?instrument=x", nil)
	fr := frNew(t, "@org.sender", "@org.sender", "agent_broadcast", "")
	frWantCount(t, sender, "org:org/members/*", fr, 0, false)
	closedStream.quiet(300 * time.Millisecond)
	blockerStream.quiet(0)
}

// TestDuplicateKeysRefused: a part with two "data" members means a forged
// frame to a first-wins parser and benign data to a last-wins one; aspd
// refuses any duplicate member name (400 invalid_request) and stores nothing.
func TestDuplicateKeysRefused(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t))
	a := s.provision("@dup.a", "open")
	sid := a.createSession(map[string]any{})
	body := `{"content":[{"type":"data","data":{"envelope_version":"1.0","sender_handle":"@dup.b"},"data":{"note":"benign"}}]}`
	code, out := a.do("POST", "/sessions/"+sid+"/messages", body)
	wantError(t, "duplicate data member", code, out, http.StatusBadRequest, "invalid_request")
	if evs := a.events(sid); len(evs) != 0 {
		t.Fatalf("stored %d events", len(evs))
	}
}

// TestFormerParticipantSeesSessionAsOfHorizon: a blocked (or departed)
// participant's snapshot and listing stop at its horizon: no later invitee,
// no growing last_sequence, no state change after it was gone.
func TestFormerParticipantSeesSessionAsOfHorizon(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@h.alice", "open")
		carol := s.provision("@h.carol", "open")
		eve := s.provision("@h.eve", "open")
		s.provision("@h.bob", "open")
		sid := alice.createSession(map[string]any{"invite": []string{"@h.carol", "@h.eve"}})
		carol.join(sid)
		eve.join(sid)
		before := eve.getSession(sid)
		if code, out := s.adminDo("POST", "/agents/@h.alice/blocks", map[string]any{"handle": "@h.eve"}); code != http.StatusOK {
			t.Fatalf("block: %d %s", code, out)
		}
		alice.send(sid, "after the block")
		alice.must(http.StatusOK, "POST", "/sessions/"+sid+"/invite", map[string]any{"invite": []string{"@h.bob"}}, "PostSessionsInviteResponse")

		after := eve.getSession(sid)
		// Only eve's own status moved: §6.2, "the blocked agent's status becomes left".
		if want := strings.Replace(before.statuses(), "@h.eve=joined", "@h.eve=left", 1); after.statuses() != want || after.State != "active" {
			t.Fatalf("blocked agent's snapshot changed after the block:\nbefore %s\nafter  %s", before.Raw, after.Raw)
		}
		rows := eve.mySessions()
		if len(rows) != 1 || rows[0].LastSeq != 4 { // invited, invited, joined, joined
			t.Fatalf("blocked agent's listing %+v, want last_sequence 4", rows)
		}
		if live := alice.getSession(sid); live.statuses() != "[@h.alice=joined @h.bob=invited @h.carol=joined @h.eve=left]" {
			t.Fatalf("live snapshot %s", live.Raw)
		}
	})
}
