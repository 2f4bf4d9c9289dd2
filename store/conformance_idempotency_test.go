package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

func keyed(sid, sender, key, hash, body string) store.SendMessage {
	return store.SendMessage{SessionID: sid, Sender: sender, Content: text(body), IdempotencyKey: key, RequestHash: hash}
}

func TestMessageIdempotency(t *testing.T) {
	t.Parallel()
	forEachSendMode(t, func(t *testing.T, s *store.Store, grouped bool) {
		mustAgent(t, s, "@a.one", "open")
		mustAgent(t, s, "@b.two", "open")
		sid := create(t, s, "@a.one", "", "@b.two")
		join(t, s, sid, "@b.two") // log: invited 1, joined 2

		first, commit, err := s.SendMessage(bg, keyed(sid, "@a.one", "k1", "hash-A", "hello"))
		must(t, err)
		if first.Sequence != 3 || commit == nil {
			t.Fatalf("first send %+v %+v", first, commit)
		}
		w := wantMessage(t, fullLog(t, s, sid)[2], sid, "@a.one", "hello")
		if w.P["idempotency_key"] != "k1" || w.P["id"] != first.MessageID {
			t.Fatalf("stored message %s", w.Payload)
		}

		// Same key, same request: the original answer, nothing appended.
		again, commit, err := s.SendMessage(bg, keyed(sid, "@a.one", "k1", "hash-A", "hello"))
		must(t, err)
		if again != first || commit != nil {
			t.Fatalf("retry returned %+v commit %+v, want %+v and no commit", again, commit, first)
		}
		// Same key, different request: 409.
		_, commit, err = s.SendMessage(bg, keyed(sid, "@a.one", "k1", "hash-B", "bye"))
		wantConflict(t, err, protocol.CodeIdempotencyKey)
		if commit != nil {
			t.Fatalf("rejected retry committed %+v", commit)
		}
		if n := len(fullLog(t, s, sid)); n != 3 {
			t.Fatalf("log has %d events after retries, want 3", n)
		}

		// The key is scoped per sender: another sender's k1 is a new message.
		other, _, err := s.SendMessage(bg, keyed(sid, "@b.two", "k1", "hash-B", "bye"))
		must(t, err)
		if other.Sequence != 4 || other.MessageID == first.MessageID {
			t.Fatalf("other sender's k1: %+v", other)
		}
		// ... and per session.
		sid2 := create(t, s, "@a.one", "")
		inOther, _, err := s.SendMessage(bg, keyed(sid2, "@a.one", "k1", "hash-A", "hello"))
		must(t, err)
		if inOther.Sequence != 1 || inOther.MessageID == first.MessageID {
			t.Fatalf("k1 in another session: %+v", inOther)
		}
		// A message without a key is never de-duplicated.
		r1 := send(t, s, sid, "@a.one", "hello")
		r2 := send(t, s, sid, "@a.one", "hello")
		if r1.Sequence != 5 || r2.Sequence != 6 {
			t.Fatalf("unkeyed sends: %+v %+v", r1, r2)
		}

		// A retry after the sender left and the session ended still answers
		// with the original; a new key is refused by the state.
		_, err = s.Leave(bg, sid, "@b.two")
		must(t, err)
		_, err = s.End(bg, sid, "@a.one")
		must(t, err)
		again, commit, err = s.SendMessage(bg, keyed(sid, "@a.one", "k1", "hash-A", "hello"))
		must(t, err)
		if again != first || commit != nil {
			t.Fatalf("retry after end: %+v %+v", again, commit)
		}
		again, _, err = s.SendMessage(bg, keyed(sid, "@b.two", "k1", "hash-B", "bye"))
		must(t, err)
		if again != other {
			t.Fatalf("left sender's retry: %+v, want %+v", again, other)
		}
		_, _, err = s.SendMessage(bg, keyed(sid, "@a.one", "k2", "hash-A", "hello"))
		wantConflict(t, err, protocol.CodeSessionEnded)
		_, _, err = s.SendMessage(bg, keyed(sid, "@a.one", "k1", "hash-C", "changed"))
		wantConflict(t, err, protocol.CodeIdempotencyKey)
		if n := len(fullLog(t, s, sid)); n != 8 {
			t.Fatalf("log has %d events, want 8 (6 + left + ended)", n)
		}
	})
}

// Concurrent retries of one keyed message append it exactly once. Several
// rounds, so that with group commit some retries share a batch.
func TestMessageIdempotencyConcurrentRetries(t *testing.T) {
	t.Parallel()
	forEachSendMode(t, func(t *testing.T, s *store.Store, grouped bool) {
		mustAgent(t, s, "@a.one", "open")
		sid := create(t, s, "@a.one", "")
		// Unkeyed traffic in another session, released with the retries,
		// keeps committers busy so that retries queue up together.
		noise := create(t, s, "@a.one", "")
		const rounds, n, noisy = 30, 10, 30
		for r := range rounds {
			key, body := fmt.Sprintf("k%d", r), fmt.Sprintf("once %d", r)
			var wg sync.WaitGroup
			resps := make([]protocol.SendMessageResponse, n)
			commits := make([]*store.Commit, n)
			errs := make([]error, n)
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					resps[i], commits[i], errs[i] = s.SendMessage(bg, keyed(sid, "@a.one", key, "hash", body))
				}()
			}
			for range noisy {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if _, _, err := s.SendMessage(bg, store.SendMessage{SessionID: noise, Sender: "@a.one", Content: text("noise")}); err != nil {
						t.Errorf("noise: %v", err)
					}
				}()
			}
			close(start)
			wg.Wait()
			committed := 0
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("round %d retry %d: %v", r, i, errs[i])
				}
				if resps[i] != resps[0] {
					t.Fatalf("round %d retry %d answered %+v, retry 0 %+v", r, i, resps[i], resps[0])
				}
				if commits[i] != nil {
					committed++
				}
			}
			evs := fullLog(t, s, sid)
			if committed != 1 || len(evs) != r+1 || resps[0].Sequence != int64(r+1) {
				t.Fatalf("round %d: %d commits, log %s; want exactly one more message", r, committed, describe(evs))
			}
			if w := wantMessage(t, evs[r], sid, "@a.one", body); w.P["id"] != resps[0].MessageID {
				t.Fatalf("logged id %v, answered %s", w.P["id"], resps[0].MessageID)
			}
		}
	})
}

func TestCreateSessionIdempotency(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@a.one", "open")
		mustAgent(t, s, "@b.two", "open")
		mustAgent(t, s, "@c.three", "allowlist")
		req := store.CreateSession{Creator: "@a.one", Invite: []string{"@b.two"}, Topic: "t",
			Initial: &protocol.InitialMessage{Content: text("hi")}, IdempotencyKey: "ck", RequestHash: "h1"}
		first, commit, err := s.CreateSession(bg, req)
		must(t, err)
		if first.Sequence == nil || *first.Sequence != 1 || commit == nil {
			t.Fatalf("first create %+v %+v", first, commit)
		}
		again, commit, err := s.CreateSession(bg, req)
		must(t, err)
		if again.SessionID != first.SessionID || again.Sequence == nil || *again.Sequence != 1 || commit != nil {
			t.Fatalf("retry %+v %+v, want %+v and no commit", again, commit, first)
		}
		changed := req
		changed.RequestHash = "h2"
		_, commit, err = s.CreateSession(bg, changed)
		wantConflict(t, err, protocol.CodeIdempotencyKey)
		if commit != nil {
			t.Fatal("rejected retry committed")
		}
		if ids := allSessions(t, s); len(ids) != 1 || len(fullLog(t, s, first.SessionID)) != 2 {
			t.Fatalf("sessions %v after retries", ids)
		}

		// Scoped per creator: the same key from another creator is new.
		other, _, err := s.CreateSession(bg, store.CreateSession{Creator: "@b.two", IdempotencyKey: "ck", RequestHash: "h1"})
		must(t, err)
		if other.SessionID == first.SessionID || other.Sequence != nil {
			t.Fatalf("other creator's key: %+v", other)
		}

		// A retry after the session ended returns the original response.
		_, err = s.End(bg, first.SessionID, "@a.one")
		must(t, err)
		again, commit, err = s.CreateSession(bg, req)
		must(t, err)
		if again.SessionID != first.SessionID || *again.Sequence != 1 || commit != nil {
			t.Fatalf("retry after end %+v %+v", again, commit)
		}
		wantState(t, s, first.SessionID, protocol.StateEnded)

		// Send-and-end: the retry returns the same ended session.
		sae := store.CreateSession{Creator: "@a.one", Invite: []string{"@b.two"}, Initial: &protocol.InitialMessage{Content: text("fyi")},
			EndAfterSend: true, IdempotencyKey: "sae", RequestHash: "h3"}
		r1, _, err := s.CreateSession(bg, sae)
		must(t, err)
		r2, commit, err := s.CreateSession(bg, sae)
		must(t, err)
		if r2.SessionID != r1.SessionID || *r2.Sequence != 1 || commit != nil {
			t.Fatalf("send-and-end retry %+v vs %+v", r2, r1)
		}

		// A create refused by trust writes no key: once trust allows it, the
		// same key creates the session.
		denied := store.CreateSession{Creator: "@a.one", Invite: []string{"@c.three"}, IdempotencyKey: "dk", RequestHash: "h4"}
		_, _, err = s.CreateSession(bg, denied)
		wantNotFound(t, err)
		must(t, s.SetPolicy(bg, "@c.three", "open"))
		r, commit, err := s.CreateSession(bg, denied)
		must(t, err)
		if r.SessionID == "" || commit == nil {
			t.Fatalf("create after the refusal: %+v %+v", r, commit)
		}
		wantEvents(t, "created after refusal", fullLog(t, s, r.SessionID), step{protocol.EventInvited, 1, pInvited("@c.three", "@a.one", "")})
		if ids := allSessions(t, s); len(ids) != 4 {
			t.Fatalf("%d sessions, want 4", len(ids))
		}
	})
}

func TestCreateSessionIdempotencyConcurrentRetries(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@a.one", "open")
		mustAgent(t, s, "@b.two", "open")
		req := store.CreateSession{Creator: "@a.one", Invite: []string{"@b.two"}, Initial: &protocol.InitialMessage{Content: text("hi")},
			IdempotencyKey: "same", RequestHash: "h"}
		const n = 10
		var wg sync.WaitGroup
		resps := make([]protocol.CreateSessionResponse, n)
		commits := make([]*store.Commit, n)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resps[i], commits[i], errs[i] = s.CreateSession(bg, req)
			}()
		}
		close(start)
		wg.Wait()
		committed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("retry %d: %v", i, errs[i])
			}
			if resps[i].SessionID != resps[0].SessionID || resps[i].Sequence == nil || *resps[i].Sequence != 1 {
				t.Fatalf("retry %d answered %+v, retry 0 %+v", i, resps[i], resps[0])
			}
			if commits[i] != nil {
				committed++
			}
		}
		if ids := allSessions(t, s); committed != 1 || len(ids) != 1 || ids[0] != resps[0].SessionID {
			t.Fatalf("%d commits, sessions %v; want exactly one", committed, ids)
		}
		wantEvents(t, "log", fullLog(t, s, resps[0].SessionID), step{protocol.EventMessage, 1, nil}, step{protocol.EventInvited, 2, nil})
	})
}
