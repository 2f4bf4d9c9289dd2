package store_test

// Helpers shared by the conformance_*_test.go files. Every assertion helper
// fails the test with the offending values; nothing here sleeps.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

var bg = context.Background()

// text is a plain-text message content.
func text(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// answerTo is the answer a client gets for err: the store speaks in domain
// errors, and the edge maps them (app.WireError, internal/app/errors.go).
func answerTo(err error) (*protocol.Error, bool) {
	pe := app.WireError(err)
	return pe, pe != nil
}

// wantErr asserts that err is answered with the given status and code.
func wantErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %d %s", status, code)
	}
	pe, ok := answerTo(err)
	if !ok {
		t.Fatalf("got %T %v, want *protocol.Error %d %s", err, err, status, code)
	}
	if pe.Status != status || pe.Code != code {
		t.Fatalf("got %d %s (%s), want %d %s", pe.Status, pe.Code, pe.Message, status, code)
	}
}

func wantNotFound(t *testing.T, err error) {
	t.Helper()
	wantErr(t, err, http.StatusNotFound, protocol.CodeNotFound)
	if pe, _ := answerTo(err); pe.Message != "not found" {
		t.Fatalf("not-found message %q, want the one shared body %q", pe.Message, "not found")
	}
}

func wantConflict(t *testing.T, err error, code string) {
	t.Helper()
	wantErr(t, err, http.StatusConflict, code)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// create creates a session and returns its id.
func create(t *testing.T, s *store.Store, creator, topic string, invite ...string) string {
	t.Helper()
	resp, _, err := s.CreateSession(bg, store.CreateSession{Creator: creator, Invite: invite, Topic: topic})
	if err != nil {
		t.Fatalf("create session by %s inviting %v: %v", creator, invite, err)
	}
	if resp.SessionID == "" || resp.Sequence != nil {
		t.Fatalf("create response %+v", resp)
	}
	return resp.SessionID
}

// send appends a text message and returns the response.
func send(t *testing.T, s *store.Store, sid, sender, body string) protocol.SendMessageResponse {
	t.Helper()
	resp, commit, err := s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: sender, Content: text(body)})
	if err != nil {
		t.Fatalf("send by %s: %v", sender, err)
	}
	if commit == nil || len(commit.Events) != 1 || commit.Events[0].Sequence != resp.Sequence {
		t.Fatalf("send commit %+v for response %+v", commit, resp)
	}
	return resp
}

func join(t *testing.T, s *store.Store, sid string, handles ...string) {
	t.Helper()
	for _, h := range handles {
		if _, err := s.Join(bg, sid, h); err != nil {
			t.Fatalf("join %s: %v", h, err)
		}
	}
}

// wire is a decoded event: the envelope plus its payload as a generic map.
type wire struct {
	protocol.Event
	P map[string]any
}

func decode(t *testing.T, e store.StoredEvent) wire {
	t.Helper()
	var w wire
	if err := json.Unmarshal(e.Body, &w.Event); err != nil {
		t.Fatalf("event body %s: %v", e.Body, err)
	}
	if err := json.Unmarshal(w.Payload, &w.P); err != nil {
		t.Fatalf("event payload %s: %v", w.Payload, err)
	}
	// The stored columns and the wire body must agree.
	if w.Type != e.Type || w.SessionID != e.SessionID || w.Sequence != e.Sequence || w.EventID != e.EventID || w.CreatedAt != e.CreatedAt {
		t.Fatalf("stored columns %+v disagree with body %s", e, e.Body)
	}
	if !strings.HasPrefix(w.EventID, protocol.EventPrefix) {
		t.Fatalf("event_id %q", w.EventID)
	}
	return w
}

// fullLog returns every event of a session, unfiltered, checking that the
// sequences are exactly 1..N and that bodies match the stored columns.
func fullLog(t *testing.T, s *store.Store, sid string) []store.StoredEvent {
	t.Helper()
	evs, err := s.EventsAfter(bg, sid, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("session %s: event %d has sequence %d; log %v", sid, i, e.Sequence, describe(evs))
		}
		decode(t, e)
	}
	return evs
}

// visible returns what viewer may see of a session, from the start.
func visible(t *testing.T, s *store.Store, sid, viewer string) []store.StoredEvent {
	t.Helper()
	evs, more, err := s.VisibleEvents(bg, sid, viewer, 0, 1000)
	if err != nil {
		t.Fatalf("visible events of %s: %v", viewer, err)
	}
	if more {
		t.Fatalf("visible events of %s: more than 1000", viewer)
	}
	for _, e := range evs {
		decode(t, e)
	}
	return evs
}

// step is one expected event: type, sequence and (when P is not nil) the
// exact payload.
type step struct {
	Type string
	Seq  int64
	P    map[string]any
}

func describe(evs []store.StoredEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %d %s subject=%s audience=%v %s", e.Sequence, e.Type, e.Subject, e.Audience, e.Body)
	}
	return b.String()
}

// wantEvents asserts the exact sequence of events, and the exact payloads
// where given.
func wantEvents(t *testing.T, what string, evs []store.StoredEvent, want ...step) {
	t.Helper()
	ok := len(evs) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = evs[i].Type == want[i].Type && evs[i].Sequence == want[i].Seq
	}
	if !ok {
		var w strings.Builder
		for _, s := range want {
			fmt.Fprintf(&w, "\n  %d %s", s.Seq, s.Type)
		}
		t.Fatalf("%s:\ngot:%s\nwant:%s", what, describe(evs), w.String())
	}
	for i, s := range want {
		if s.P == nil {
			continue
		}
		got := decode(t, evs[i]).P
		if !reflect.DeepEqual(got, s.P) {
			t.Fatalf("%s: event %d %s payload %v, want %v", what, s.Seq, s.Type, got, s.P)
		}
	}
}

// Payload constructors (decoded JSON: strings and nested maps).
func pInvited(invitee, by, topic string) map[string]any {
	p := map[string]any{"invitee": invitee, "by": by}
	if topic != "" {
		p["topic"] = topic
	}
	return p
}
func pAgent(h string) map[string]any { return map[string]any{"agent": h} }
func pLeft(h, reason string) map[string]any {
	return map[string]any{"agent": h, "reason": reason}
}
func pEnded(by string) map[string]any {
	if by == "" {
		return map[string]any{}
	}
	return map[string]any{"ended_by": by}
}
func pReopened(by string) map[string]any { return map[string]any{"reopened_by": by} }

// msgPayload asserts a session.message event's payload fields.
func wantMessage(t *testing.T, e store.StoredEvent, sid, sender, body string) wire {
	t.Helper()
	w := decode(t, e)
	if w.Type != protocol.EventMessage {
		t.Fatalf("event %d is %s, want %s", e.Sequence, w.Type, protocol.EventMessage)
	}
	var m protocol.Message
	if err := json.Unmarshal(w.Payload, &m); err != nil {
		t.Fatal(err)
	}
	if m.SessionID != sid || m.Sender != sender || m.Sequence != e.Sequence || string(m.Content) != string(text(body)) ||
		!strings.HasPrefix(m.ID, protocol.MessagePrefix) || m.CreatedAt != e.CreatedAt {
		t.Fatalf("message payload %s, want sender %s sequence %d content %q in %s", w.Payload, sender, e.Sequence, body, sid)
	}
	return w
}

// participants returns handle -> status from the session snapshot.
func participants(t *testing.T, s *store.Store, sid string) map[string]string {
	t.Helper()
	sess, err := s.AdminSession(bg, sid)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range sess.Participants {
		out[p.Handle] = p.Status
	}
	return out
}

func wantParticipants(t *testing.T, s *store.Store, sid string, want map[string]string) {
	t.Helper()
	if got := participants(t, s, sid); !reflect.DeepEqual(got, want) {
		t.Fatalf("participants of %s: %v, want %v", sid, got, want)
	}
}

func wantState(t *testing.T, s *store.Store, sid, state string) {
	t.Helper()
	sess, err := s.AdminSession(bg, sid)
	if err != nil {
		t.Fatal(err)
	}
	if sess.State != state {
		t.Fatalf("session %s is %s, want %s", sid, sess.State, state)
	}
	if (state == protocol.StateEnded) != (sess.EndedAt != 0) {
		t.Fatalf("session %s state %s with ended_at %d", sid, sess.State, sess.EndedAt)
	}
}

// sessionsOf lists the ids of sessions h is or was part of (ListSessionsFor).
func sessionsOf(t *testing.T, s *store.Store, h string) []string {
	t.Helper()
	rows, err := s.ListSessionsFor(bg, store.SessionFilter{Participant: h, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

// allSessions lists every session id (operator listing).
func allSessions(t *testing.T, s *store.Store) []string {
	t.Helper()
	rows, err := s.ListSessions(bg, store.SessionFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func lastSeq(evs []store.StoredEvent) int64 {
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Sequence
}

// commitsBySession indexes commits by session id, failing on duplicates.
func commitsBySession(t *testing.T, commits []*store.Commit) map[string]*store.Commit {
	t.Helper()
	out := map[string]*store.Commit{}
	for _, c := range commits {
		if c == nil {
			t.Fatal("nil commit in list")
		}
		if _, dup := out[c.SessionID]; dup {
			t.Fatalf("two commits for session %s", c.SessionID)
		}
		out[c.SessionID] = c
	}
	return out
}

// reopen calls Store.Reopen without agent-channel frames.
func reopen(s *store.Store, sid, caller string, invite []string, initial *protocol.InitialMessage) (*store.Commit, error) {
	return s.Reopen(bg, sid, caller, invite, initial, nil)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// forEachSendMode runs fn on both backends, once with SendMessage in its own
// transaction per message and once through group commit (as aspd runs it).
// With group commit a caller may get a nil Commit when another caller of the
// same batch publishes the session's combined Commit.
func forEachSendMode(t *testing.T, fn func(t *testing.T, s *store.Store, grouped bool)) {
	for _, grouped := range []bool{false, true} {
		name := "single"
		if grouped {
			name = "group-commit"
		}
		t.Run(name, func(t *testing.T) {
			dbtest.ForEach(t, func(t *testing.T, url string) {
				s := open(t, url)
				if grouped {
					s.EnableGroupCommit(0)
				}
				fn(t, s, grouped)
			})
		})
	}
}
