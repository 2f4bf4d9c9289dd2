package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

func open(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustAgent(t *testing.T, s *store.Store, h, policy string, allow ...string) {
	t.Helper()
	if err := s.CreateAgent(context.Background(), store.NewAgent{Handle: h, InboundPolicy: policy, Allowlist: allow, TokenHash: []byte("hash-" + h)}); err != nil {
		t.Fatalf("create %s: %v", h, err)
	}
}

func types(evs []store.StoredEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func TestSessionLifecycleSmoke(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := open(t, url)
		mustAgent(t, s, "@nick.assistant", "open")
		mustAgent(t, s, "@acme.support", "open")
		resp, commit, err := s.CreateSession(ctx, store.CreateSession{Creator: "@nick.assistant", Invite: []string{"@acme.support"}, Topic: "t",
			Initial: &protocol.InitialMessage{Content: json.RawMessage(`"hi"`)}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Sequence == nil || *resp.Sequence != 1 || len(commit.Events) != 2 {
			t.Fatalf("resp %+v commit %+v", resp, commit)
		}
		// The invitee sees only its invitation.
		evs, _, err := s.VisibleEvents(ctx, resp.SessionID, "@acme.support", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if got := types(evs); len(got) != 1 || got[0] != protocol.EventInvited {
			t.Fatalf("invitee sees %v", got)
		}
		if _, err := s.Join(ctx, resp.SessionID, "@acme.support"); err != nil {
			t.Fatal(err)
		}
		evs, _, _ = s.VisibleEvents(ctx, resp.SessionID, "@acme.support", 0, 100)
		if got := types(evs); len(got) != 3 {
			t.Fatalf("joiner sees %v, want the whole transcript", got)
		}
		if _, _, err := s.SendMessage(ctx, store.SendMessage{SessionID: resp.SessionID, Sender: "@acme.support", Content: json.RawMessage(`"yo"`)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Leave(ctx, resp.SessionID, "@acme.support"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.SendMessage(ctx, store.SendMessage{SessionID: resp.SessionID, Sender: "@nick.assistant", Content: json.RawMessage(`"alone"`)}); err != nil {
			t.Fatal(err)
		}
		evs, _, _ = s.VisibleEvents(ctx, resp.SessionID, "@acme.support", 0, 100)
		if got := types(evs); len(got) != 5 || got[4] != protocol.EventLeft {
			t.Fatalf("leaver sees %v, want up to its own session.left", got)
		}
		sess, err := s.GetSession(ctx, resp.SessionID, "@acme.support")
		if err != nil || sess.State != "active" || len(sess.Participants) != 2 {
			t.Fatalf("get session: %+v %v", sess, err)
		}
	})
}
