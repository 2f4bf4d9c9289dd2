package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// poison installs a trigger that makes the database refuse any event whose
// body contains POISON: a row-level failure of one message that fails the
// whole statement, and so the whole shared transaction. On PostgreSQL the
// refusal is a data exception (SQLSTATE 22023).
func poison(t *testing.T, s *store.Store) {
	t.Helper()
	var stmts []string
	if s.Dialect() == "postgres" {
		stmts = []string{`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.body LIKE '%POISON%' THEN
					RAISE EXCEPTION 'poisoned event' USING ERRCODE = '22023';
				END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER poison BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION poison()`}
	} else {
		stmts = []string{`CREATE TRIGGER poison BEFORE INSERT ON events WHEN NEW.body LIKE '%POISON%'
			BEGIN SELECT RAISE(ABORT, 'poisoned event'); END`}
	}
	for _, q := range stmts {
		if err := s.ExecForTest(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// wantPoisonRefused: the poisoned member gets an error; on PostgreSQL, the
// data exception is a 400 invalid_request rather than an internal error.
func wantPoisonRefused(t *testing.T, s *store.Store, err error) {
	t.Helper()
	if s.Dialect() == "postgres" {
		wantErr(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
	} else if err == nil || !strings.Contains(err.Error(), "poisoned event") {
		t.Fatalf("poisoned message: %v, want the database's refusal", err)
	}
}

// messages returns the contents of a session's messages, in log order, and
// checks that sequences have no gap.
func messages(t *testing.T, s *store.Store, sid string) []string {
	t.Helper()
	evs, err := s.EventsAfter(bg, sid, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("%s: event %d has sequence %d", sid, i, e.Sequence)
		}
		if e.Type == protocol.EventMessage {
			var ev struct {
				Payload protocol.Message `json:"payload"`
			}
			if err := json.Unmarshal(e.Body, &ev); err != nil {
				t.Fatal(err)
			}
			var c string
			_ = json.Unmarshal(ev.Payload.Content, &c)
			out = append(out, c)
		}
	}
	return out
}

// TestBatchMemberFailureIsIsolated: when one member's row makes the shared
// group-commit transaction fail, the other members are appended anyway, each
// in a transaction of its own, and only the member at fault gets an error.
func TestBatchMemberFailureIsIsolated(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		for _, h := range []string{"@iso.a", "@iso.b", "@iso.c"} {
			mustAgent(t, s, h, "open")
		}
		var sids []string
		for range 2 {
			resp, _, err := s.CreateSession(bg, store.CreateSession{Creator: "@iso.a", Invite: []string{"@iso.b"}})
			must(t, err)
			_, err = s.Join(bg, resp.SessionID, "@iso.b")
			must(t, err)
			sids = append(sids, resp.SessionID)
		}
		s1, s2 := sids[0], sids[1]
		poison(t, s)
		msg := func(sid, sender, content, key string) store.SendMessage {
			return store.SendMessage{SessionID: sid, Sender: sender, Content: text(content), IdempotencyKey: key, RequestHash: key}
		}

		// The happy path is one transaction: one Commit per session, held
		// by the first member that appended to it.
		_, commits, errs := s.SendAsOneBatch([]store.SendMessage{msg(s1, "@iso.a", "one", ""), msg(s1, "@iso.b", "two", "")})
		must(t, errs[0])
		must(t, errs[1])
		if commits[0] == nil || commits[1] != nil || len(commits[0].Events) != 2 {
			t.Fatalf("a clean batch was not one transaction: commits %v", commits)
		}

		batch := []store.SendMessage{
			msg(s1, "@iso.a", "good 1", "k1"),
			msg(s1, "@iso.b", "POISON 1", ""),
			msg(s2, "@iso.a", "good 2", ""),
			msg(s1, "@iso.c", "not a participant", ""),
			msg(s1, "@iso.b", "good 3", "k3"),
			msg(s2, "@iso.b", "POISON 2", "kp"),
		}
		resps, commits, errs := s.SendAsOneBatch(batch)
		for i, r := range batch {
			switch {
			case strings.HasPrefix(string(r.Content), `"POISON`):
				wantPoisonRefused(t, s, errs[i])
			case r.Sender == "@iso.c":
				wantNotFound(t, errs[i])
			default:
				if errs[i] != nil || resps[i].MessageID == "" || commits[i] == nil {
					t.Fatalf("%s: %+v, commit %v, %v; want it appended despite its batch-mates", r.Content, resps[i], commits[i] != nil, errs[i])
				}
				if got := commits[i].Events; len(got) != 1 || got[0].Sequence != resps[i].Sequence {
					t.Fatalf("%s: its own Commit holds %d events, want exactly its message", r.Content, len(got))
				}
			}
		}
		if got := fmt.Sprint(messages(t, s, s1)); got != "[one two good 1 good 3]" {
			t.Fatalf("session 1 holds %s", got)
		}
		if got := fmt.Sprint(messages(t, s, s2)); got != "[good 2]" {
			t.Fatalf("session 2 holds %s", got)
		}
		// Idempotency keys were recorded for the appended, not the refused.
		again, commit, err := s.SendMessage(bg, batch[4])
		if err != nil || again != resps[4] || commit != nil {
			t.Fatalf("retry of good 3: %+v %v %v, want the original answer", again, commit != nil, err)
		}
		// A lone failing member gets the same answer.
		_, _, errs = s.SendAsOneBatch([]store.SendMessage{msg(s2, "@iso.a", "POISON 3", "")})
		wantPoisonRefused(t, s, errs[0])

		// And under real concurrency: poisoned messages share batches with
		// good ones, and not one good message fails.
		s.EnableGroupCommit(0)
		const workers, per = 8, 25
		var wg sync.WaitGroup
		for w := range workers + 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					bad := w >= workers
					content := fmt.Sprintf("w%d-%d", w, i)
					if bad {
						content = "POISON " + content
					}
					_, _, err := s.SendMessage(bg, msg(sids[(w+i)%2], []string{"@iso.a", "@iso.b"}[w%2], content, ""))
					if bad && err == nil {
						t.Errorf("%s was accepted", content)
					}
					if !bad && err != nil {
						t.Errorf("%s failed: %v", content, err)
					}
				}
			}()
		}
		wg.Wait()
		if n := len(messages(t, s, s1)) + len(messages(t, s, s2)); n != 5+workers*per {
			t.Fatalf("the log holds %d messages, want %d", n, 5+workers*per)
		}
	})
}
