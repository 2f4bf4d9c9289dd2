package store_test

import (
	"net/http"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// The operator's session actions and the console's listing reads, on both
// stores: OperatorEnd, RemoveParticipant, SessionsActivity, AgentsPresence.
func TestOperatorSessionActions(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@op.alice", "@op.bob", "@op.carol"
		agents(t, s, a, b, c)
		resp, _, err := s.CreateSession(bg, store.CreateSession{Creator: a, Invite: []string{b, c}, Topic: "ops",
			Initial: &protocol.InitialMessage{Content: text("hi")}})
		must(t, err)
		sid := resp.SessionID
		_, err = s.Join(bg, sid, b)
		must(t, err)
		send(t, s, sid, b, "two")

		act, err := s.SessionsActivity(bg, []string{sid, "sess_NOSUCH"})
		must(t, err)
		got := act[sid]
		sess, err := s.AdminSession(bg, sid)
		must(t, err)
		if len(act) != 1 || got.MessageCount != 2 || got.LastSequence < 4 || got.LastActivityAt < sess.CreatedAt {
			t.Fatalf("activity %+v of %d sessions", got, len(act))
		}

		// Removing someone who is not a current participant is not found.
		_, err = s.RemoveParticipant(bg, sid, "@op.nobody")
		wantNotFound(t, err)
		commit, err := s.RemoveParticipant(bg, sid, c) // invited
		must(t, err)
		if commit == nil || len(commit.Events) != 1 || commit.Events[0].Type != protocol.EventLeft {
			t.Fatalf("removal commit %+v", commit)
		}
		_, err = s.RemoveParticipant(bg, sid, c)
		wantNotFound(t, err)

		// Ending: one session.ended with no ended_by; then it is ended.
		commit, err = s.OperatorEnd(bg, sid)
		must(t, err)
		if commit == nil || len(commit.Events) != 1 || commit.Events[0].Type != protocol.EventEnded {
			t.Fatalf("end commit %+v", commit)
		}
		if p := decode(t, commit.Events[0]).P; p["ended_by"] != nil && p["ended_by"] != "" {
			t.Fatalf("operator end names %v", p["ended_by"])
		}
		_, err = s.OperatorEnd(bg, sid)
		wantErr(t, err, http.StatusConflict, protocol.CodeSessionEnded)
		_, err = s.RemoveParticipant(bg, sid, b)
		wantErr(t, err, http.StatusConflict, protocol.CodeSessionEnded)
		_, err = s.OperatorEnd(bg, "sess_NOSUCH")
		wantNotFound(t, err)

		// Presence: never seen, online, then offline since a time.
		_, err = s.MarkOnline(bg, a)
		must(t, err)
		_, err = s.MarkOnline(bg, b)
		must(t, err)
		_, err = s.MarkOffline(bg, b)
		must(t, err)
		pr, err := s.AgentsPresence(bg, []string{a, b, c})
		must(t, err)
		if _, ok := pr[c]; ok || !pr[a].Online || pr[a].OfflineSince != 0 || pr[b].Online || pr[b].OfflineSince == 0 {
			t.Fatalf("presence %+v", pr)
		}
	})
}
