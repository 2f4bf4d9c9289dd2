package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

// wantGuesses asserts the store's guessed-append counters (fastappend.go).
func wantGuesses(t *testing.T, s *store.Store, hits, misses int64) {
	t.Helper()
	if h, m := s.Guesses(); h != hits || m != misses {
		t.Fatalf("guessed appends: %d hits, %d misses; want %d, %d", h, m, hits, misses)
	}
}

// wantLog asserts that sid's log is sequences 1..n without a gap and holds
// every message of want exactly once.
func wantLog(t *testing.T, s *store.Store, sid string, want []string) {
	t.Helper()
	evs, err := s.EventsAfter(bg, sid, 0, 10000)
	must(t, err)
	var got []string
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("event %d has sequence %d: the log has a gap or a duplicate", i, e.Sequence)
		}
		if e.Type == "session.message" {
			got = append(got, string(e.Body))
		}
	}
	for _, w := range want {
		n := 0
		for _, g := range got {
			if strings.Contains(g, `"content":`+string(text(w))) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("message %q is in the log %d times, want once", w, n)
		}
	}
}

// guessedSession creates a session of creator and other on s and sends
// "cache it" (the locking path, which caches the row) and "guessed" (a
// guess that holds) from creator.
func guessedSession(t *testing.T, s *store.Store, creator, other, topic string) string {
	t.Helper()
	sid := create(t, s, creator, topic, other)
	join(t, s, sid, other)
	send(t, s, sid, creator, "cache it")
	send(t, s, sid, creator, "guessed")
	return sid
}

// TestAppendCachedOneRoundTrip: a lone message to a session this store
// wrote last is appended on the cached row (a hit), with the right
// sequence and recipients; a change through another path of the same
// store (a leave) makes the next message take the locking path without a
// failed guess, and the rule still refuses who left.
func TestAppendCachedOneRoundTrip(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@fa.alice", "@fa.bob", "@fa.carol"
		agents(t, s, a, b, c)
		sid := create(t, s, a, "guess", b, c)
		join(t, s, sid, b, c)
		send(t, s, sid, a, "one") // the locking path: it caches the row
		wantGuesses(t, s, 0, 0)
		r := send(t, s, sid, b, "two")
		wantGuesses(t, s, 1, 0)
		if r.Sequence != 6 { // invited, joined, joined, one, two: 1 created by invitation
			evs, _ := s.EventsAfter(bg, sid, 0, 100)
			t.Fatalf("guessed append got sequence %d; log %v", r.Sequence, types(evs))
		}
		_, commit, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: c, Content: text("three")})
		must(t, err)
		wantGuesses(t, s, 2, 0)
		if want := []string{a, b, c}; !slices.Equal(commit.Recipients, want) { // sorted
			t.Fatalf("guessed append's recipients %v, want %v", commit.Recipients, want)
		}

		_, err = s.Leave(bg, sid, c)
		must(t, err)
		_, _, err = s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: c, Content: text("after leaving")})
		if !errors.Is(err, store.ErrNotJoined) && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a participant who left sent: %v", err)
		}
		send(t, s, sid, a, "four") // locking path: the leave dropped the row
		wantGuesses(t, s, 2, 0)
		send(t, s, sid, a, "five")
		wantGuesses(t, s, 3, 0)
		wantLog(t, s, sid, []string{"one", "two", "three", "four", "five"})
	})
}

// TestAppendCachedOtherNode: two stores on one database stand for two
// nodes. A message the other node appended makes this node's guess fail:
// nothing is written by the guess, the message is appended by the locking
// path with the next sequence, and the session's next messages here take
// the locking path for a while (no second failed guess). A row changed
// behind the store's back (members_version, state) fails the guess too,
// and the locking path answers from the row as it is.
func TestAppendCachedOtherNode(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		node1, node2 := open(t, url), open(t, url)
		a, b := "@fb.alice", "@fb.bob"
		agents(t, node1, a, b)
		sid := create(t, node1, a, "two nodes", b)
		join(t, node1, sid, b)
		send(t, node1, sid, a, "n1 first")
		send(t, node1, sid, a, "n1 guessed")
		wantGuesses(t, node1, 1, 0)
		send(t, node2, sid, b, "n2 between")
		r := send(t, node1, sid, a, "n1 after n2")
		wantGuesses(t, node1, 1, 1)
		if r.Sequence != 6 { // invited, joined, then four messages
			t.Fatalf("after a failed guess the message got sequence %d, want 6", r.Sequence)
		}
		send(t, node1, sid, a, "n1 paused")
		wantGuesses(t, node1, 1, 1)
		wantLog(t, node1, sid, []string{"n1 first", "n1 guessed", "n2 between", "n1 after n2", "n1 paused"})

		// Behind the store's back: members_version moves (as another
		// node's change of a participant would move it).
		sid2 := guessedSession(t, node1, a, b, "behind the back")
		wantGuesses(t, node1, 2, 1)
		must(t, node1.ExecForTest(bg, fmt.Sprintf(`UPDATE sessions SET members_version = members_version + 1 WHERE id = '%s'`, sid2)))
		send(t, node1, sid2, a, "after the version moved")
		wantGuesses(t, node1, 2, 2)
		wantLog(t, node1, sid2, []string{"cache it", "guessed", "after the version moved"})

		// The state: a session ended behind the store's back refuses the
		// next message, though the cached row says active.
		sid3 := guessedSession(t, node1, a, b, "ended behind the back")
		wantGuesses(t, node1, 3, 2)
		must(t, node1.ExecForTest(bg, fmt.Sprintf(`UPDATE sessions SET state = 'ended' WHERE id = '%s'`, sid3)))
		if _, _, err := node1.SendMessage(bg, store.SendMessage{SessionID: sid3, Sender: a, Content: text("to an ended session")}); !errors.Is(err, store.ErrSessionEnded) {
			t.Fatalf("message to a session ended behind the cache: %v, want ErrSessionEnded", err)
		}
		wantGuesses(t, node1, 3, 3)
		wantLog(t, node1, sid3, []string{"cache it", "guessed"})
	})
}

// TestAppendCachedConcurrentNodes: two nodes send to one session at once,
// each from several goroutines, so that guesses race with each other and
// with the locking path. Every accepted message is in the log exactly
// once and the sequences have no gap.
func TestAppendCachedConcurrentNodes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		node1, node2 := open(t, url), open(t, url)
		a, b := "@fc.alice", "@fc.bob"
		agents(t, node1, a, b)
		sid := create(t, node1, a, "race", b)
		join(t, node1, sid, b)
		var mu sync.Mutex
		var sent []string
		var wg sync.WaitGroup
		for n, node := range []*store.Store{node1, node2} {
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 25 {
						body := fmt.Sprintf("node%d g%d m%d", n+1, g, i)
						sender := a
						if g%2 == 1 {
							sender = b
						}
						if _, _, err := node.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: sender, Content: text(body)}); err != nil {
							t.Errorf("%s: %v", body, err)
							return
						}
						mu.Lock()
						sent = append(sent, body)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		wantLog(t, node1, sid, sent)
		h1, m1 := node1.Guesses()
		h2, m2 := node2.Guesses()
		t.Logf("guesses: node1 %d hits %d misses, node2 %d hits %d misses", h1, m1, h2, m2)
	})
}
