package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

func mkAgents(t *testing.T, s *store.Store, handles ...string) {
	t.Helper()
	for _, h := range handles {
		must(t, s.CreateAgent(bg, store.NewAgent{Handle: h, InboundPolicy: "open", TokenHash: []byte("tok-" + h)}))
	}
}

// TestChorusOutbox walks the outbox on both stores: registration starts at
// the heads, one pending row per (agent, session), leases, retries, the
// cursor advancing on delivery only.
func TestChorusOutbox(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		now := time.Now()
		s.SetClock(func() time.Time { return now })
		mkAgents(t, s, "@a.x", "@b.x")
		if _, err := s.SetChorusEndpoint(bg, "@no.body", []byte("u"), []byte("s")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("endpoint for a missing agent: %v", err)
		}
		sid := create(t, s, "@a.x", "t", "@b.x")
		join(t, s, sid, "@b.x")
		send(t, s, sid, "@a.x", "before")
		existed, err := s.SetChorusEndpoint(bg, "@b.x", []byte("u1"), []byte("s1"))
		if err != nil || existed {
			t.Fatalf("first registration: %v %v", existed, err)
		}
		cands, err := s.ChorusCandidates(bg, 10)
		must(t, err)
		if len(cands) != 0 {
			t.Fatalf("registration must start at the heads; candidates %+v", cands)
		}

		m1 := send(t, s, sid, "@a.x", "m1")
		send(t, s, sid, "@a.x", "m2")
		cands, err = s.ChorusCandidates(bg, 10)
		must(t, err)
		if len(cands) != 1 || cands[0].SessionID != sid || cands[0].View.Handle != "@b.x" || cands[0].LastSeq != m1.Sequence+1 {
			t.Fatalf("candidates %+v", cands)
		}
		d1 := &store.ChorusDelivery{ID: "msg_1", Handle: "@b.x", SessionID: sid, Sequence: m1.Sequence, EventType: "session.message"}
		must(t, s.ChorusEnqueueBatch(bg, []store.ChorusEnqueue{{Handle: "@b.x", SessionID: sid, Cursor: m1.Sequence - 1, Next: d1}}))
		if cands, _ = s.ChorusCandidates(bg, 10); len(cands) != 0 {
			t.Fatalf("a pair with a pending delivery is a candidate: %+v", cands)
		}

		claimed, err := s.ClaimChorusDeliveries(bg, "node-a", now.Add(time.Minute).UnixMilli(), 10)
		must(t, err)
		if len(claimed) != 1 || claimed[0].ID != "msg_1" || claimed[0].Attempts != 0 {
			t.Fatalf("claimed %+v", claimed)
		}
		if again, _ := s.ClaimChorusDeliveries(bg, "node-b", now.Add(time.Minute).UnixMilli(), 10); len(again) != 0 {
			t.Fatalf("a leased delivery was claimed twice: %+v", again)
		}
		stale := claimed[0]
		stale.Lease = "node-b/1"
		if _, _, ok, err := s.ChorusAttempted(bg, stale, store.ChorusOutcome{State: store.ChorusDelivered}); ok || err != nil {
			t.Fatalf("a node without the lease recorded an attempt: %v %v", ok, err)
		}
		since, wasFailing, ok, err := s.ChorusAttempted(bg, claimed[0], store.ChorusOutcome{State: store.ChorusPending, Status: 500,
			Error: "HTTP 500", NextAttempt: now.Add(5 * time.Second).UnixMilli()})
		if err != nil || !ok || wasFailing || since != now.UnixMilli() {
			t.Fatalf("retry: since %d failing %v ok %v err %v", since, wasFailing, ok, err)
		}
		if c, _ := s.ClaimChorusDeliveries(bg, "node-a", now.Add(time.Minute).UnixMilli(), 10); len(c) != 0 {
			t.Fatalf("a retry was claimed before it was due: %+v", c)
		}
		now = now.Add(6 * time.Second)
		claimed, err = s.ClaimChorusDeliveries(bg, "node-b", now.Add(time.Minute).UnixMilli(), 10)
		must(t, err)
		if len(claimed) != 1 || claimed[0].Attempts != 1 {
			t.Fatalf("due retry: %+v", claimed)
		}
		since, _, ok, err = s.ChorusAttempted(bg, claimed[0], store.ChorusOutcome{State: store.ChorusDelivered, Status: 200})
		if err != nil || !ok || since != 0 {
			t.Fatalf("delivery: %d %v %v", since, ok, err)
		}
		cur := cands0(t, s)
		if len(cur) != 1 || cur[0].Cursor != m1.Sequence {
			t.Fatalf("after delivery the cursor is %+v, want %d", cur, m1.Sequence)
		}
		recs, err := s.ChorusDeliveries(bg, "@b.x", 10)
		must(t, err)
		if len(recs) != 1 || recs[0].State != store.ChorusDelivered || recs[0].Attempts != 2 || recs[0].LastStatus != 200 {
			t.Fatalf("records %+v", recs)
		}
		n, oldest, err := s.ChorusBacklog(bg)
		if err != nil || n != 0 || oldest != 0 {
			t.Fatalf("backlog %d %d %v", n, oldest, err)
		}
		must(t, s.RedeliverChorus(bg, "@b.x", "msg_1"))
		if n, _, _ := s.ChorusBacklog(bg); n != 1 {
			t.Fatalf("redelivery is not pending")
		}
		if err := s.RedeliverChorus(bg, "@a.x", "msg_1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another agent's delivery redelivered: %v", err)
		}

		// Rotation keeps cursors and makes queued rows due now.
		existed, err = s.SetChorusEndpoint(bg, "@b.x", []byte("u2"), []byte("s2"))
		if err != nil || !existed {
			t.Fatalf("rotation: %v %v", existed, err)
		}
		e, err := s.ChorusEndpoint(bg, "@b.x")
		if err != nil || string(e.URLSealed) != "u2" || e.Failing {
			t.Fatalf("endpoint after rotation: %+v %v", e, err)
		}
		must(t, s.DeleteChorusEndpoint(bg, "@b.x"))
		if err := s.DeleteChorusEndpoint(bg, "@b.x"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second removal: %v", err)
		}
		if recs, _ := s.ChorusDeliveries(bg, "@b.x", 10); len(recs) != 0 {
			t.Fatalf("records survive removal: %+v", recs)
		}
	})
}

// cands0 returns the candidates after making sure none is pending.
func cands0(t *testing.T, s *store.Store) []store.ChorusCandidate {
	t.Helper()
	c, err := s.ChorusCandidates(bg, 10)
	must(t, err)
	return c
}

// TestChorusCredentials: callback tokens and MCP tokens are found by hash
// until they expire; MCP tokens die with the agent's own token.
func TestChorusCredentials(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		now := time.Now()
		s.SetClock(func() time.Time { return now })
		mkAgents(t, s, "@a.x")
		cb := store.ChorusCallback{Handle: "@a.x", SessionID: "sess_1", DeliveryID: "msg_1"}
		must(t, s.AddChorusCallback(bg, []byte("hash-1-of-thirty-two-bytes-xxxxx"), cb, now.Add(time.Minute).UnixMilli()))
		got, err := s.ChorusCallbackByHash(bg, []byte("hash-1-of-thirty-two-bytes-xxxxx"))
		if err != nil || got != cb {
			t.Fatalf("callback lookup: %+v %v", got, err)
		}
		if _, err := s.ChorusCallbackByHash(bg, []byte("hash-2-of-thirty-two-bytes-xxxxx")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown callback: %v", err)
		}
		must(t, s.AddChorusMCPToken(bg, []byte("mcp-hash"), "@a.x", now.Add(time.Minute).UnixMilli()))
		if h, err := s.AuthenticateChorusMCP(bg, []byte("mcp-hash")); err != nil || h != "@a.x" {
			t.Fatalf("mcp token: %q %v", h, err)
		}
		now = now.Add(2 * time.Minute)
		if _, err := s.ChorusCallbackByHash(bg, []byte("hash-1-of-thirty-two-bytes-xxxxx")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("expired callback: %v", err)
		}
		if _, err := s.AuthenticateChorusMCP(bg, []byte("mcp-hash")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("expired mcp token: %v", err)
		}
		must(t, s.AddChorusMCPToken(bg, []byte("mcp-hash-2"), "@a.x", now.Add(time.Minute).UnixMilli()))
		must(t, s.SetTokenHash(bg, "@a.x", nil))
		if _, err := s.AuthenticateChorusMCP(bg, []byte("mcp-hash-2")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("mcp token of an agent whose token is revoked: %v", err)
		}
		must(t, s.PruneChorus(bg, now.UnixMilli()))
	})
}

// TestChorusConcurrentClaims: nodes claiming at once never take the same
// delivery (FOR UPDATE SKIP LOCKED on PostgreSQL, one writer on SQLite).
func TestChorusConcurrentClaims(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		var batch []store.ChorusEnqueue
		for i := range 40 {
			sid := "sess_" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			batch = append(batch, store.ChorusEnqueue{Handle: "@b.x", SessionID: sid, Cursor: 0,
				Next: &store.ChorusDelivery{ID: "msg_" + sid, Handle: "@b.x", SessionID: sid, Sequence: 1, EventType: "session.message"}})
		}
		must(t, s.ChorusEnqueueBatch(bg, batch))
		lease := time.Now().Add(time.Minute).UnixMilli()
		results := make(chan []store.ChorusDelivery, 4)
		errs := make(chan error, 4)
		for n := range 4 {
			go func() {
				ds, err := s.ClaimChorusDeliveries(bg, "node-"+string(rune('a'+n)), lease, 15)
				results <- ds
				errs <- err
			}()
		}
		seen := map[string]bool{}
		for range 4 {
			must(t, <-errs)
			for _, d := range <-results {
				if seen[d.ID] {
					t.Fatalf("delivery %s claimed twice", d.ID)
				}
				seen[d.ID] = true
			}
		}
		if len(seen) != 40 {
			t.Fatalf("claimed %d of 40 deliveries", len(seen))
		}
	})
}

// TestChorusRotationDuringAttempts races endpoint rotation and removal
// against delivery attempts for the same agent. Every writer takes the
// endpoint row before the agent's delivery rows; with the opposite order in
// one of them PostgreSQL found a deadlock and rotation answered 500.
func TestChorusRotationDuringAttempts(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mkAgents(t, s, "@b.x")
		if _, err := s.SetChorusEndpoint(bg, "@b.x", []byte("u"), []byte("s")); err != nil {
			t.Fatal(err)
		}
		enqueue := func(round int) error {
			var batch []store.ChorusEnqueue
			for i := range 8 {
				sid := fmt.Sprintf("sess_%d_%d", round, i)
				batch = append(batch, store.ChorusEnqueue{Handle: "@b.x", SessionID: sid,
					Next: &store.ChorusDelivery{ID: "msg_" + sid, Handle: "@b.x", SessionID: sid, Sequence: 1, EventType: "session.message"}})
			}
			return s.ChorusEnqueueBatch(bg, batch)
		}
		const rounds = 60
		errs := make(chan error, 2)
		go func() { // the worker: claim, fail, retry at once
			for r := range rounds {
				ds, err := s.ClaimChorusDeliveries(bg, fmt.Sprintf("w/%d", r), time.Now().Add(time.Minute).UnixMilli(), 8)
				if err != nil {
					errs <- err
					return
				}
				for _, d := range ds {
					if _, _, _, err := s.ChorusAttempted(bg, d, store.ChorusOutcome{State: store.ChorusPending, Status: 500,
						Error: "HTTP 500", NextAttempt: time.Now().UnixMilli()}); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
		go func() { // the operator: rotate, and now and then remove and register again
			for r := range rounds {
				if err := enqueue(r); err != nil {
					errs <- err
					return
				}
				if r%10 == 9 {
					if err := s.DeleteChorusEndpoint(bg, "@b.x"); err != nil {
						errs <- err
						return
					}
				}
				if _, err := s.SetChorusEndpoint(bg, "@b.x", []byte(fmt.Sprint("u", r)), []byte("s")); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
		var failed []error
		for range 2 { // both goroutines end before the test does
			if err := <-errs; err != nil {
				failed = append(failed, err)
			}
		}
		if len(failed) > 0 {
			t.Fatalf("rotation racing attempts: %v", failed)
		}
	})
}
