package integration

import (
	"net/http"
	"testing"
	"time"
)

// quietFor is how long a stream must stay silent to count as "receives
// nothing": long enough for the hub to have delivered a published commit.
const quietFor = 300 * time.Millisecond

// TestWalkthrough plays whitepaper §7.1 (cross-organization help) and §7.2
// (send-and-end) over HTTP and WebSocket, with all three agents connected
// from the start, and checks every stream and every eligibility-filtered read.
func TestWalkthrough(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		walkthrough(t, s, s, s)
	})
}

// walkthrough plays the walkthrough with each agent on the given node (one
// node three times, or three nodes of a cluster: cluster_test.go). Each
// agent is provisioned through the operator API of its own node.
func walkthrough(t *testing.T, nickNode, supportNode, engNode *server) {
	{
		nick := nickNode.provision("@nick.assistant", "open")
		support := supportNode.provision("@acme.support", "open")
		eng := engNode.provision("@acme.engineer", "allowlist", "@acme.*")
		nickIn, supIn, engIn := newInbox(nick.connect()), newInbox(support.connect()), newInbox(eng.connect())

		// ---- Creating the session ----
		const topic = "Question about widget v3 export"
		const msg1 = "Hi — having trouble with the widget v3 export feature. Is there a known issue?"
		create := map[string]any{
			"invite":          []string{"@acme.support"},
			"topic":           topic,
			"initial_message": map[string]any{"content": msg1},
			"idempotency_key": "01HW7AB12CDEF",
		}
		out := nick.must(http.StatusCreated, "POST", "/sessions", create, "PostSessionsResponse")
		var created struct {
			SessionID string `json:"session_id"`
			Sequence  int64  `json:"sequence"`
		}
		mustUnmarshal(t, out, &created)
		sid := created.SessionID
		if created.Sequence != 1 {
			t.Fatalf("initial message sequence %d, want 1", created.Sequence)
		}

		// The creator gets the echo of its message, then the invitation.
		ev := nickIn.expect("session.message", "session.invited")
		wantMessage(t, ev[0], sid, 1, "@nick.assistant", msg1)
		wantEvent(t, ev[1], "session.invited", sid, 2)
		wantPayload(t, ev[1], map[string]any{"invitee": "@acme.support", "by": "@nick.assistant", "topic": topic})
		msg1ID := payload(t, ev[0])["id"]

		// The invitee gets only the invitation, not the message.
		ev = supIn.expect("session.invited")
		wantEvent(t, ev[0], "session.invited", sid, 2)
		wantPayload(t, ev[0], map[string]any{"invitee": "@acme.support", "by": "@nick.assistant", "topic": topic})
		supIn.quiet(quietFor)
		engIn.quiet(0)

		// A retry of the same POST /sessions answers the same session and
		// delivers nothing new.
		out = nick.must(http.StatusCreated, "POST", "/sessions", create, "PostSessionsResponse")
		var retried struct {
			SessionID string `json:"session_id"`
			Sequence  int64  `json:"sequence"`
		}
		mustUnmarshal(t, out, &retried)
		if retried != created {
			t.Fatalf("retry answered %+v, want %+v", retried, created)
		}
		if rows := nick.mySessions(); len(rows) != 1 || rows[0].ID != sid {
			t.Fatalf("after a retried create, nick has sessions %+v, want only %s", rows, sid)
		}
		nickIn.quiet(quietFor)
		supIn.quiet(0)

		d := nick.getSession(sid)
		if d.State != "active" || d.Topic != topic || d.statuses() != "[@acme.support=invited @nick.assistant=joined]" {
			t.Fatalf("after create: %s", d.Raw)
		}

		// ---- Joining ----
		support.join(sid)
		ev = nickIn.expect("session.joined")
		wantEvent(t, ev[0], "session.joined", sid, 3)
		wantPayload(t, ev[0], map[string]any{"agent": "@acme.support"})
		// The joiner's stream replays the transcript from sequence 1.
		ev = supIn.expect("session.message", "session.joined")
		wantMessage(t, ev[0], sid, 1, "@nick.assistant", msg1)
		if payload(t, ev[0])["id"] != msg1ID {
			t.Fatalf("replayed message id %v, want %v", payload(t, ev[0])["id"], msg1ID)
		}
		wantEvent(t, ev[1], "session.joined", sid, 3)
		// Joining again is a no-op.
		support.join(sid)
		nickIn.quiet(quietFor)

		// ---- Messages flow ----
		// The body cannot carry a sender: the sender is the caller.
		support.mustFail(http.StatusBadRequest, "invalid_request", "POST", "/sessions/"+sid+"/messages",
			map[string]any{"content": "spoofed", "sender": "@nick.assistant"})
		const msg2 = "Looking into it. Bringing in our engineer."
		if seq := support.send(sid, msg2); seq != 4 {
			t.Fatalf("msg2 sequence %d, want 4", seq)
		}
		wantMessage(t, nickIn.expect("session.message")[0], sid, 4, "@acme.support", msg2)
		wantMessage(t, supIn.expect("session.message")[0], sid, 4, "@acme.support", msg2)

		// ---- Adding a third participant (allowed by the @acme.* glob) ----
		if got := support.invite(sid, "@acme.engineer"); len(got) != 1 || got[0] != "@acme.engineer" {
			t.Fatalf("invited %v", got)
		}
		inv := map[string]any{"invitee": "@acme.engineer", "by": "@acme.support", "topic": topic}
		for _, in := range []*inbox{nickIn, supIn, engIn} {
			e := in.expect("session.invited")[0]
			wantEvent(t, e, "session.invited", sid, 5)
			wantPayload(t, e, inv)
		}
		// Inviting a participant again lists nobody.
		if got := support.invite(sid, "@acme.engineer", "@nick.assistant"); len(got) != 0 {
			t.Fatalf("re-invite of current participants invited %v", got)
		}
		engIn.quiet(quietFor)

		eng.join(sid)
		for _, in := range []*inbox{nickIn, supIn} {
			e := in.expect("session.joined")[0]
			wantEvent(t, e, "session.joined", sid, 6)
			wantPayload(t, e, map[string]any{"agent": "@acme.engineer"})
		}
		// The engineer receives the prior transcript (msg 1 and msg 2), then its join.
		var engSeen []event
		for {
			e := engIn.next()
			engSeen = append(engSeen, e)
			if e.Type == "session.joined" && e.field("agent") == "@acme.engineer" {
				break
			}
		}
		// Its own invitation (seq 5) was already seen; the rest is new.
		wantSeqs(t, "engineer join replay", engSeen, 1, 2, 3, 4, 6)
		wantMessage(t, engSeen[0], sid, 1, "@nick.assistant", msg1)
		wantMessage(t, engSeen[3], sid, 4, "@acme.support", msg2)

		const msg3 = "Hotfix 3.0.1 fixes the export."
		if seq := eng.send(sid, msg3); seq != 7 {
			t.Fatalf("msg3 sequence %d, want 7", seq)
		}
		for _, in := range []*inbox{nickIn, supIn, engIn} {
			wantMessage(t, in.expect("session.message")[0], sid, 7, "@acme.engineer", msg3)
		}

		// ---- The engineer leaves ----
		eng.leave(sid)
		for _, in := range []*inbox{nickIn, supIn, engIn} {
			e := in.expect("session.left")[0]
			wantEvent(t, e, "session.left", sid, 8)
			wantPayload(t, e, map[string]any{"agent": "@acme.engineer", "reason": "left"})
		}
		eng.mustFail(http.StatusConflict, "not_joined", "POST", "/sessions/"+sid+"/messages", map[string]any{"content": "still here?"})
		eng.mustFail(http.StatusConflict, "not_invited", "POST", "/sessions/"+sid+"/join", nil)
		const msg4 = "Confirmed, works now. Thanks!"
		if seq := nick.send(sid, msg4); seq != 9 {
			t.Fatalf("msg4 sequence %d, want 9", seq)
		}
		wantMessage(t, nickIn.expect("session.message")[0], sid, 9, "@nick.assistant", msg4)
		wantMessage(t, supIn.expect("session.message")[0], sid, 9, "@nick.assistant", msg4)

		// ---- Nick ends ----
		nick.end(sid)
		for _, in := range []*inbox{nickIn, supIn} {
			e := in.expect("session.ended")[0]
			wantEvent(t, e, "session.ended", sid, 10)
			wantPayload(t, e, map[string]any{"ended_by": "@nick.assistant"})
		}
		engIn.quiet(quietFor) // nothing after its own session.left
		support.mustFail(http.StatusConflict, "session_ended", "POST", "/sessions/"+sid+"/messages", map[string]any{"content": "late"})
		support.mustFail(http.StatusConflict, "session_ended", "POST", "/sessions/"+sid+"/end", nil)

		d = nick.getSession(sid)
		if d.State != "ended" || d.EndedAt == 0 || d.ID != sid ||
			d.statuses() != "[@acme.engineer=left @acme.support=joined @nick.assistant=joined]" {
			t.Fatalf("after end: %s", d.Raw)
		}
		// A former participant may still read the snapshot, as of its own
		// session.left: it does not learn that the session ended after it left.
		if d2 := eng.getSession(sid); d2.statuses() != d.statuses() || d2.State != "active" || d2.EndedAt != 0 {
			t.Fatalf("engineer's snapshot %s", d2.Raw)
		}
		wantSeqs(t, "engineer events after end", eng.events(sid), seqRange(1, 8)...)
		wantSeqs(t, "support events after end", support.events(sid), seqRange(1, 10)...)

		// ---- Reopening, two days later ----
		const followUp = "Quick follow-up — is the same hotfix relevant for the import side too?"
		nick.must(http.StatusOK, "POST", "/sessions/"+sid+"/reopen", map[string]any{
			"invite":          []string{"@acme.support"},
			"initial_message": map[string]any{"content": followUp},
		}, "PostSessionsReopenResponse")
		ev = nickIn.expect("session.reopened", "session.invited", "session.message")
		wantEvent(t, ev[0], "session.reopened", sid, 11)
		wantPayload(t, ev[0], map[string]any{"reopened_by": "@nick.assistant"})
		wantEvent(t, ev[1], "session.invited", sid, 12)
		wantPayload(t, ev[1], map[string]any{"invitee": "@acme.support", "by": "@nick.assistant", "topic": topic})
		wantMessage(t, ev[2], sid, 13, "@nick.assistant", followUp)
		// The re-invited support sees the reopen and its invitation, not the message.
		ev = supIn.expect("session.reopened", "session.invited")
		wantEvent(t, ev[0], "session.reopened", sid, 11)
		wantEvent(t, ev[1], "session.invited", sid, 12)
		supIn.quiet(quietFor)
		engIn.quiet(0)
		nick.mustFail(http.StatusConflict, "session_active", "POST", "/sessions/"+sid+"/reopen", map[string]any{})
		wantSeqs(t, "support events while re-invited", support.events(sid), seqRange(1, 12)...)
		if d := support.getSession(sid); d.State != "active" || d.statuses() != "[@acme.engineer=left @acme.support=invited @nick.assistant=joined]" {
			t.Fatalf("after reopen: %s", d.Raw)
		}
		support.mustFail(http.StatusConflict, "not_joined", "POST", "/sessions/"+sid+"/messages", map[string]any{"content": "early"})

		// On joining, support sees the prior conversation and the new message.
		support.join(sid)
		ev = supIn.expect("session.message", "session.joined")
		wantMessage(t, ev[0], sid, 13, "@nick.assistant", followUp)
		wantEvent(t, ev[1], "session.joined", sid, 14)
		wantEvent(t, nickIn.expect("session.joined")[0], "session.joined", sid, 14)
		all := support.events(sid)
		wantSeqs(t, "support events after rejoin", all, seqRange(1, 14)...)
		wantMessage(t, all[0], sid, 1, "@nick.assistant", msg1)
		wantMessage(t, all[3], sid, 4, "@acme.support", msg2)
		wantMessage(t, all[6], sid, 7, "@acme.engineer", msg3)
		wantMessage(t, all[8], sid, 9, "@nick.assistant", msg4)
		wantMessage(t, all[12], sid, 13, "@nick.assistant", followUp)
		engIn.quiet(quietFor)
		wantSeqs(t, "engineer events after reopen", eng.events(sid), seqRange(1, 8)...)
		wantSeqs(t, "nick events after reopen", nick.events(sid), seqRange(1, 14)...)

		// ---- §7.2 send-and-end ----
		const fyi = "FYI: widget v3 working after the hotfix. Thanks!"
		out = nick.must(http.StatusCreated, "POST", "/sessions", map[string]any{
			"invite":          []string{"@acme.support"},
			"initial_message": map[string]any{"content": fyi},
			"end_after_send":  true,
		}, "PostSessionsResponse")
		var sae struct {
			SessionID string `json:"session_id"`
			Sequence  int64  `json:"sequence"`
		}
		mustUnmarshal(t, out, &sae)
		if sae.Sequence != 1 || sae.SessionID == sid {
			t.Fatalf("send-and-end answered %s", out)
		}
		sid2 := sae.SessionID

		ev = nickIn.expect("session.message", "session.invited", "session.ended")
		wantMessage(t, ev[0], sid2, 1, "@nick.assistant", fyi)
		fyiID := payload(t, ev[0])["id"]
		wantEvent(t, ev[2], "session.ended", sid2, 3)
		wantPayload(t, ev[2], map[string]any{"ended_by": "@nick.assistant"})

		// The invitee gets the invitation with the message inline, then the end.
		ev = supIn.expect("session.invited", "session.ended")
		wantEvent(t, ev[0], "session.invited", sid2, 2)
		p := payload(t, ev[0])
		im, _ := p["initial_message"].(map[string]any)
		if p["invitee"] != "@acme.support" || p["by"] != "@nick.assistant" || im == nil ||
			im["id"] != fyiID || im["sender"] != "@nick.assistant" || im["sequence"] != float64(1) ||
			im["content"] != fyi || im["session_id"] != sid2 {
			t.Fatalf("send-and-end invitation %s", ev[0].Raw)
		}
		if _, ok := im["created_at"].(float64); !ok {
			t.Fatalf("inline initial_message has no created_at: %s", ev[0].Raw)
		}
		wantEvent(t, ev[1], "session.ended", sid2, 3)
		wantPayload(t, ev[1], map[string]any{"ended_by": "@nick.assistant"})
		supIn.quiet(quietFor)
		engIn.quiet(0)

		// Reads: invitee-throughout sees only its invitation and the end.
		ev = support.events(sid2)
		wantSeqs(t, "send-and-end invitee events", ev, 2, 3)
		if ev[0].Type != "session.invited" || ev[1].Type != "session.ended" {
			t.Fatalf("send-and-end invitee events %v", types(ev))
		}
		wantSeqs(t, "send-and-end creator events", nick.events(sid2), 1, 2, 3)
		if d := support.getSession(sid2); d.State != "ended" || d.statuses() != "[@acme.support=left @nick.assistant=joined]" {
			t.Fatalf("send-and-end session %s", d.Raw)
		}
		// The engineer was never part of it: 404.
		eng.mustFail(http.StatusNotFound, "not_found", "GET", "/sessions/"+sid2, nil)

		// GET /sessions lists each agent's own sessions.
		if rows := support.mySessions(); len(rows) != 2 || rows[0].ID != sid2 || rows[0].Status != "left" ||
			rows[1].ID != sid || rows[1].Status != "joined" || rows[1].State != "active" || rows[1].LastSeq != 14 {
			t.Fatalf("support's sessions %+v", rows)
		}
		if rows := eng.mySessions(); len(rows) != 1 || rows[0].ID != sid || rows[0].Status != "left" {
			t.Fatalf("engineer's sessions %+v", rows)
		}

		// The invitee cannot join an ended session; §7.2: "if it wants to
		// acknowledge, it reopens the session rather than joining an active
		// one". It becomes the joined reopener and re-invites the sender.
		support.mustFail(http.StatusConflict, "session_ended", "POST", "/sessions/"+sid2+"/join", nil)
		support.must(http.StatusOK, "POST", "/sessions/"+sid2+"/reopen", map[string]any{
			"invite":          []string{"@nick.assistant"},
			"initial_message": map[string]any{"content": "Thanks, glad it works."},
		}, "PostSessionsReopenResponse")
		ev = supIn.expect("session.reopened", "session.invited", "session.message")
		wantEvent(t, ev[0], "session.reopened", sid2, 4)
		wantPayload(t, ev[0], map[string]any{"reopened_by": "@acme.support"})
		wantEvent(t, ev[2], "session.message", sid2, 6)
		// The sender, re-invited, sees the reopen and its invitation, not the reply until it joins.
		ev = nickIn.expect("session.reopened", "session.invited")
		wantEvent(t, ev[1], "session.invited", sid2, 5)
		nickIn.quiet(quietFor)
		if d := support.getSession(sid2); d.State != "active" || d.statuses() != "[@acme.support=joined @nick.assistant=invited]" {
			t.Fatalf("reopened send-and-end session %s", d.Raw)
		}
		// Only the first reopen is the invitee's privilege: ended again, the
		// rule of Appendix C.3 applies (nick, invited at the end, may not reopen).
		support.must(http.StatusOK, "POST", "/sessions/"+sid2+"/end", nil, "PostSessionsEndResponse")
		nick.mustFail(http.StatusConflict, "not_joined", "POST", "/sessions/"+sid2+"/reopen", map[string]any{})
	}
}
