package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// TestGroupCommitOrderingAndIdempotency hammers several sessions through the
// group-commit path and checks what a lone transaction per message would
// guarantee: gap-free sequences, every acknowledged message in the log
// exactly once, idempotent retries, and per-message errors that do not fail
// the rest of a batch.
func TestGroupCommitOrderingAndIdempotency(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := open(t, url)
		s.EnableGroupCommit(0)
		for _, h := range []string{"@a.one", "@b.two", "@c.three"} {
			mustAgent(t, s, h, "open")
		}
		var sids []string
		for i := 0; i < 4; i++ {
			resp, _, err := s.CreateSession(ctx, store.CreateSession{Creator: "@a.one", Invite: []string{"@b.two"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Join(ctx, resp.SessionID, "@b.two"); err != nil {
				t.Fatal(err)
			}
			sids = append(sids, resp.SessionID)
		}
		const workers, per = 16, 40
		type ack struct {
			sid string
			seq int64
			id  string
		}
		acks := make(chan ack, workers*per)
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				sender := []string{"@a.one", "@b.two"}[w%2]
				for i := 0; i < per; i++ {
					sid := sids[(w+i)%len(sids)]
					key := fmt.Sprintf("k-%d-%d", w, i)
					req := store.SendMessage{SessionID: sid, Sender: sender, Content: json.RawMessage(fmt.Sprintf(`"m %d %d"`, w, i)), IdempotencyKey: key, RequestHash: key}
					resp, _, err := s.SendMessage(ctx, req)
					if err != nil {
						t.Errorf("send: %v", err)
						return
					}
					// An immediate retry returns the original.
					again, commit, err := s.SendMessage(ctx, req)
					if err != nil || again != resp || commit != nil {
						t.Errorf("retry: %+v (commit %v) %v, want %+v and no commit", again, commit != nil, err, resp)
					}
					acks <- ack{sid, resp.Sequence, resp.MessageID}
				}
			}(w)
		}
		// Refused messages in the same batches: a non-participant and a reused key.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				_, _, err := s.SendMessage(ctx, store.SendMessage{SessionID: sids[0], Sender: "@c.three", Content: json.RawMessage(`"x"`)})
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("non-participant: %v, want not found", err)
				}
			}
		}()
		wg.Wait()
		close(acks)
		bySeq := map[string]map[int64]string{}
		for a := range acks {
			if bySeq[a.sid] == nil {
				bySeq[a.sid] = map[int64]string{}
			}
			if prev, dup := bySeq[a.sid][a.seq]; dup {
				t.Fatalf("sequence %d acknowledged twice (%s, %s)", a.seq, prev, a.id)
			}
			bySeq[a.sid][a.seq] = a.id
		}
		total := 0
		for _, sid := range sids {
			evs, err := s.EventsAfter(ctx, sid, 0, 10000)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range evs {
				if e.Sequence != int64(i+1) {
					t.Fatalf("%s: event %d has sequence %d: gap or reorder", sid, i, e.Sequence)
				}
				if e.Type == protocol.EventMessage {
					var ev struct {
						Payload protocol.Message `json:"payload"`
					}
					if err := json.Unmarshal(e.Body, &ev); err != nil {
						t.Fatal(err)
					}
					if bySeq[sid][e.Sequence] != ev.Payload.ID {
						t.Fatalf("%s seq %d: log has %s, acknowledged %q", sid, e.Sequence, ev.Payload.ID, bySeq[sid][e.Sequence])
					}
					total++
				}
			}
		}
		if total != workers*per {
			t.Fatalf("log holds %d messages, %d were acknowledged", total, workers*per)
		}
		// A reused key with a different body is refused, alone or batched.
		_, _, err := s.SendMessage(ctx, store.SendMessage{SessionID: sids[1], Sender: "@b.two", Content: json.RawMessage(`"other"`), IdempotencyKey: "k-1-0", RequestHash: "different"})
		pe, ok := answerTo(err)
		if sids[(1+0)%len(sids)] == sids[1] && (!ok || pe.Code != protocol.CodeIdempotencyKey) {
			t.Fatalf("reused key: %v, want %s", err, protocol.CodeIdempotencyKey)
		}
	})
}
