package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Every event type draws from the same per-session counter: 1..N, no gaps.
func TestSequencesAreGapFreeAcrossEventTypes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		for _, h := range []string{"@a.one", "@b.two", "@c.three"} {
			mustAgent(t, s, h, "open")
		}
		resp, commit, err := s.CreateSession(bg, store.CreateSession{Creator: "@a.one", Invite: []string{"@b.two"}, Topic: "seq",
			Initial: &protocol.InitialMessage{Content: text("one")}})
		must(t, err)
		sid := resp.SessionID
		if resp.Sequence == nil || *resp.Sequence != 1 {
			t.Fatalf("create response %+v", resp)
		}
		var got []int64
		record := func(c *store.Commit) {
			t.Helper()
			if c == nil {
				t.Fatal("operation appended nothing")
			}
			for _, e := range c.Events {
				got = append(got, e.Sequence)
			}
		}
		record(commit)
		c, err := s.Join(bg, sid, "@b.two")
		must(t, err)
		record(c)
		_, c, err = s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: "@b.two", Content: text("two")})
		must(t, err)
		record(c)
		_, c, err = s.Invite(bg, sid, "@a.one", []string{"@c.three"})
		must(t, err)
		record(c)
		cs, err := s.MarkOffline(bg, "@b.two")
		must(t, err)
		record(cs[0])
		cs, err = s.MarkOnline(bg, "@b.two")
		must(t, err)
		record(cs[0])
		c, err = s.Leave(bg, sid, "@b.two")
		must(t, err)
		record(c)
		c, err = s.End(bg, sid, "@a.one")
		must(t, err)
		record(c)
		c, err = reopen(s, sid, "@a.one", []string{"@b.two"}, &protocol.InitialMessage{Content: text("again")})
		must(t, err)
		record(c)
		c, err = s.Leave(bg, sid, "@a.one") // last joined: left + ended
		must(t, err)
		record(c)

		evs := fullLog(t, s, sid)
		wantEvents(t, "log", evs,
			step{protocol.EventMessage, 1, nil},
			step{protocol.EventInvited, 2, nil},
			step{protocol.EventJoined, 3, nil},
			step{protocol.EventMessage, 4, nil},
			step{protocol.EventInvited, 5, nil},
			step{protocol.EventDisconnected, 6, pAgent("@b.two")},
			step{protocol.EventReconnected, 7, pAgent("@b.two")},
			step{protocol.EventLeft, 8, nil},
			step{protocol.EventEnded, 9, pEnded("@a.one")},
			step{protocol.EventReopened, 10, pReopened("@a.one")},
			step{protocol.EventInvited, 11, pInvited("@b.two", "@a.one", "seq")},
			step{protocol.EventMessage, 12, nil},
			step{protocol.EventLeft, 13, pLeft("@a.one", protocol.LeftReasonLeft)},
			step{protocol.EventEnded, 14, pEnded("")})
		for i, seq := range got {
			if seq != int64(i+1) {
				t.Fatalf("commits carried sequences %v, want 1..%d", got, len(evs))
			}
		}
		if len(got) != len(evs) {
			t.Fatalf("commits carried %d events, log has %d", len(got), len(evs))
		}
		// Message payloads carry the envelope's sequence.
		for _, i := range []int{0, 3, 11} {
			decodeMessageSeq(t, evs[i])
		}
		// Another session counts from 1 on its own.
		other := create(t, s, "@c.three", "")
		if r := send(t, s, other, "@c.three", "x"); r.Sequence != 1 {
			t.Fatalf("second session's first event has sequence %d", r.Sequence)
		}
	})
}

func decodeMessageSeq(t *testing.T, e store.StoredEvent) {
	t.Helper()
	w := decode(t, e)
	if seq, ok := w.P["sequence"].(float64); !ok || int64(seq) != e.Sequence {
		t.Fatalf("message payload sequence %v, envelope %d", w.P["sequence"], e.Sequence)
	}
}

// 20 goroutines x 25 messages into one session: every message gets its own
// sequence, the log is exactly 1..N, and SQLite never reports a locked
// database.
func TestSequencesUnderConcurrentSends(t *testing.T) {
	t.Parallel()
	const workers, perWorker = 20, 25
	forEachSendMode(t, func(t *testing.T, s *store.Store, grouped bool) {
		senders := []string{"@a.one", "@b.two", "@c.three", "@d.four"}
		for _, h := range senders {
			mustAgent(t, s, h, "open")
		}
		sid := create(t, s, senders[0], "", senders[1:]...)
		join(t, s, sid, senders[1:]...)
		base := int64(len(fullLog(t, s, sid))) // 3 invited + 3 joined

		type result struct {
			resp protocol.SendMessageResponse
			body string
		}
		results := make(chan result, workers*perWorker)
		errs := make(chan error, workers*perWorker)
		commits := make(chan *store.Commit, workers*perWorker)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sender := senders[w%len(senders)]
				for i := range perWorker {
					body := fmt.Sprintf("w%d-m%d", w, i)
					resp, commit, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: sender, Content: text(body)})
					if err != nil {
						errs <- fmt.Errorf("%s %s: %w", sender, body, err)
						continue
					}
					// One transaction per message: its own Commit. Group
					// commit: at most one Commit per session and batch.
					if !grouped && (commit == nil || len(commit.Events) != 1 || commit.Events[0].Sequence != resp.Sequence) {
						errs <- fmt.Errorf("%s: commit %+v for %+v", body, commit, resp)
						continue
					}
					if commit != nil {
						commits <- commit
					}
					results <- result{resp, body}
				}
			}()
		}
		wg.Wait()
		close(errs)
		close(results)
		close(commits)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
		bySeq := map[int64]string{}
		ids := map[string]bool{}
		for r := range results {
			if prev, dup := bySeq[r.resp.Sequence]; dup {
				t.Fatalf("sequence %d given to %s and %s", r.resp.Sequence, prev, r.body)
			}
			if ids[r.resp.MessageID] {
				t.Fatalf("message id %s given twice", r.resp.MessageID)
			}
			bySeq[r.resp.Sequence] = r.body
			ids[r.resp.MessageID] = true
		}
		// Every appended event is published in exactly one Commit.
		published := map[int64]bool{}
		for c := range commits {
			for _, e := range c.Events {
				if published[e.Sequence] || c.SessionID != sid || e.Type != protocol.EventMessage {
					t.Fatalf("event %d published twice or wrongly: %+v", e.Sequence, c)
				}
				published[e.Sequence] = true
			}
		}
		if len(published) != workers*perWorker {
			t.Fatalf("%d events published, %d appended", len(published), workers*perWorker)
		}
		total := base + workers*perWorker
		evs := fullLog(t, s, sid) // asserts 1..N exactly
		if int64(len(evs)) != total || len(bySeq) != workers*perWorker {
			t.Fatalf("log has %d events, %d messages answered; want %d events", len(evs), len(bySeq), total)
		}
		perWorkerOrder := map[string]int{}
		for _, e := range evs[base:] {
			w := decode(t, e)
			body, _ := w.P["content"].(string)
			if w.Type != protocol.EventMessage || body == "" {
				t.Fatalf("event %d: %s", e.Sequence, e.Body)
			}
			if bySeq[e.Sequence] != body {
				t.Fatalf("event %d holds %q, the response for it was %q", e.Sequence, body, bySeq[e.Sequence])
			}
			if w.P["id"] == nil || !ids[w.P["id"].(string)] {
				t.Fatalf("event %d message id %v was never returned", e.Sequence, w.P["id"])
			}
			// Each goroutine's messages appear in the order it sent them.
			var wn, mn int
			fmt.Sscanf(body, "w%d-m%d", &wn, &mn)
			key := fmt.Sprint(wn)
			if mn != perWorkerOrder[key] {
				t.Fatalf("worker %d: message %d logged before message %d", wn, mn, perWorkerOrder[key])
			}
			perWorkerOrder[key]++
		}
		// Paged reads see the same gap-free log.
		var paged []int64
		after := int64(0)
		for {
			page, err := s.EventsAfter(bg, sid, after, 37)
			must(t, err)
			if len(page) == 0 {
				break
			}
			for _, e := range page {
				paged = append(paged, e.Sequence)
			}
			after = page[len(page)-1].Sequence
		}
		for i, seq := range paged {
			if seq != int64(i+1) {
				t.Fatalf("paged read: position %d has sequence %d", i, seq)
			}
		}
		if int64(len(paged)) != total {
			t.Fatalf("paged read returned %d events, want %d", len(paged), total)
		}
	})
}
