package store_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/search"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// mark is an event's redaction mark, nil when it has none.
func mark(t *testing.T, e store.StoredEvent) *protocol.Redaction {
	t.Helper()
	var r protocol.RedactedEvent
	must(t, json.Unmarshal(e.Body, &r))
	return r.Redacted
}

// searchFor returns the hits of query q in session sid.
func searchFor(t *testing.T, s *store.Store, sid, q string) []store.SearchHit {
	t.Helper()
	pq, err := search.Parse(q)
	if err != nil {
		t.Fatal(err)
	}
	hits, err := s.Search(bg, store.SearchFilter{Query: pq, Session: sid, Limit: 10})
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	return hits
}

func TestRedactMessage(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@ann.a", "open")
		mustAgent(t, s, "@bob.b", "open")
		sid := create(t, s, "@ann.a", "topic", "@bob.b")
		join(t, s, sid, "@bob.b")
		secret := send(t, s, sid, "@ann.a", "the launch code is zebra-quartz")
		kept := send(t, s, sid, "@bob.b", "zebra noted")
		if len(searchFor(t, s, sid, "quartz")) != 1 {
			t.Fatal("the message is not indexed before its redaction")
		}
		before := fullLog(t, s, sid)

		evs, changed, err := s.Redact(bg, sid, secret.Sequence, "bootstrap", "leaked a secret")
		must(t, err)
		if !changed || len(evs) != 1 {
			t.Fatalf("changed %v, %d events", changed, len(evs))
		}
		after := fullLog(t, s, sid) // still 1..N, gap-free
		if len(after) != len(before) {
			t.Fatalf("%d events after, %d before", len(after), len(before))
		}
		red := after[secret.Sequence-1]
		w := decode(t, red)
		old := before[secret.Sequence-1]
		if m := mark(t, red); m == nil || m.By != "bootstrap" || m.Reason != "leaked a secret" || m.At == 0 {
			t.Fatalf("redaction mark %+v", m)
		}
		if red.EventID != old.EventID || red.CreatedAt != old.CreatedAt || red.Type != protocol.EventMessage {
			t.Fatalf("identity changed: %+v -> %+v", old, red)
		}
		if w.P["content"] != protocol.RedactedContent || w.P["sender"] != "@ann.a" || w.P["sequence"] != float64(secret.Sequence) || w.P["id"] != secret.MessageID {
			t.Fatalf("tombstone payload %v", w.P)
		}
		if bytes.Contains(red.Body, []byte("zebra")) {
			t.Fatalf("content left in %s", red.Body)
		}
		if !bytes.Equal(evs[0].Body, red.Body) {
			t.Fatalf("answered %s, stored %s", evs[0].Body, red.Body)
		}
		// Every other event is untouched.
		for i := range before {
			if int64(i+1) != secret.Sequence && !bytes.Equal(before[i].Body, after[i].Body) {
				t.Fatalf("event %d changed: %s", i+1, after[i].Body)
			}
		}
		// The participant's read path and search.
		for _, e := range visible(t, s, sid, "@bob.b") {
			if bytes.Contains(e.Body, []byte("quartz")) {
				t.Fatalf("bob still reads %s", e.Body)
			}
		}
		if hits := searchFor(t, s, sid, "quartz"); len(hits) != 0 {
			t.Fatalf("search still finds the redacted text: %+v", hits)
		}
		if hits := searchFor(t, s, sid, "zebra"); len(hits) != 1 || hits[0].Event.Sequence != kept.Sequence {
			t.Fatalf("search for the other message: %+v", hits)
		}
		if hits := searchFor(t, s, sid, "redacted"); len(hits) != 0 {
			t.Fatalf("the tombstone is indexed: %+v", hits)
		}
		// The operator's export.
		must(t, s.ExportEvents(bg, store.SessionFilter{Only: sid}, func(e *store.StoredEvent) error {
			if bytes.Contains(e.Body, []byte("quartz")) {
				t.Fatalf("export holds %s", e.Body)
			}
			return nil
		}))

		// Again: nothing changes, the first redaction stands.
		again, changed, err := s.Redact(bg, sid, secret.Sequence, "someone-else", "other reason")
		must(t, err)
		if changed || !bytes.Equal(again[0].Body, red.Body) {
			t.Fatalf("second redaction changed %v: %s", changed, again[0].Body)
		}
		// Events without content, and events that do not exist.
		_, _, err = s.Redact(bg, sid, 1, "bootstrap", "x") // session.invited
		wantErr(t, err, http.StatusConflict, protocol.CodeNotRedactable)
		_, _, err = s.Redact(bg, sid, 99, "bootstrap", "x")
		wantNotFound(t, err)
		_, _, err = s.Redact(bg, "ses_00000000000000000000000000", 1, "bootstrap", "x")
		wantNotFound(t, err)
	})
}

// A send-and-end message is copied into the session.invited events
// appended with it: the redaction reaches the copies.
func TestRedactSendAndEndCopies(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@ann.a", "open")
		mustAgent(t, s, "@bob.b", "open")
		mustAgent(t, s, "@cat.c", "open")
		resp, _, err := s.CreateSession(bg, store.CreateSession{Creator: "@ann.a", Invite: []string{"@bob.b", "@cat.c"}, Topic: "t",
			Initial: &protocol.InitialMessage{Content: text("wire 100 to account 12345")}, EndAfterSend: true})
		must(t, err)
		evs, changed, err := s.Redact(bg, resp.SessionID, *resp.Sequence, "bootstrap", "account number")
		must(t, err)
		if !changed || len(evs) != 3 {
			t.Fatalf("changed %v, %d events rewritten, want the message and its 2 copies", changed, len(evs))
		}
		for _, e := range fullLog(t, s, resp.SessionID) {
			if bytes.Contains(e.Body, []byte("12345")) {
				t.Fatalf("content left in %s", e.Body)
			}
			if e.Type == protocol.EventInvited {
				w := decode(t, e)
				var p protocol.InvitedPayload
				must(t, json.Unmarshal(w.Payload, &p))
				if mark(t, e) == nil || p.InitialMessage == nil || string(p.InitialMessage.Content) != `"`+protocol.RedactedContent+`"` {
					t.Fatalf("invitation %s", e.Body)
				}
			}
		}
		// What the invitee reads.
		for _, e := range visible(t, s, resp.SessionID, "@bob.b") {
			if bytes.Contains(e.Body, []byte("12345")) {
				t.Fatalf("the invitee reads %s", e.Body)
			}
		}
	})
}
