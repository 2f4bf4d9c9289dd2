package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// ---- de-duplicating event reader ----

// inbox reads a stream the way a client does: it drops events already seen
// (same session_id and sequence), which a join replay re-sends.
type inbox struct {
	st   *stream
	seen map[string]bool
}

func newInbox(st *stream) *inbox { return &inbox{st: st, seen: map[string]bool{}} }

func eventKey(e event) string { return fmt.Sprintf("%s/%d", e.SessionID, e.Sequence) }

// next returns the next event not seen before (validated by stream.next).
func (in *inbox) next() event {
	in.st.t.Helper()
	for {
		e := in.st.next()
		if k := eventKey(e); !in.seen[k] {
			in.seen[k] = true
			return e
		}
	}
}

// expect reads new events and checks their types in order.
func (in *inbox) expect(types ...string) []event {
	in.st.t.Helper()
	out := make([]event, 0, len(types))
	for i, typ := range types {
		e := in.next()
		if e.Type != typ {
			in.st.t.Fatalf("event %d: got %s (seq %d), want %s: %s", i, e.Type, e.Sequence, typ, e.Raw)
		}
		out = append(out, e)
	}
	return out
}

// quiet asserts that no new event (duplicates are fine) arrives within d.
func (in *inbox) quiet(d time.Duration) {
	in.st.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-in.st.events:
			if !ok {
				return
			}
			validate(in.st.t, "events.json", e.Raw)
			if !in.seen[eventKey(e)] {
				in.st.t.Fatalf("unexpected event: %s", e.Raw)
			}
		case <-deadline:
			return
		}
	}
}

// ---- assertions on events ----

// wantEvent checks an event's type, session and sequence.
func wantEvent(t testing.TB, e event, typ, sid string, seq int64) {
	t.Helper()
	if e.Type != typ || e.SessionID != sid || e.Sequence != seq {
		t.Fatalf("got %s %s seq %d, want %s %s seq %d: %s", e.Type, e.SessionID, e.Sequence, typ, sid, seq, e.Raw)
	}
}

// payload decodes an event's payload into a generic map.
func payload(t testing.TB, e event) map[string]any {
	t.Helper()
	var m map[string]any
	mustUnmarshal(t, e.Payload, &m)
	return m
}

// wantPayload checks that an event's payload is exactly want (JSON equality).
func wantPayload(t testing.TB, e event, want map[string]any) {
	t.Helper()
	got := payload(t, e)
	wb, _ := json.Marshal(want)
	var norm map[string]any
	mustUnmarshal(t, wb, &norm)
	gb, _ := json.Marshal(got)
	nb, _ := json.Marshal(norm)
	if !bytes.Equal(gb, nb) {
		t.Fatalf("%s seq %d payload:\n got %s\nwant %s", e.Type, e.Sequence, gb, nb)
	}
}

// wantMessage checks a session.message: sequence, sender and string content.
func wantMessage(t testing.TB, e event, sid string, seq int64, sender, content string) {
	t.Helper()
	wantEvent(t, e, "session.message", sid, seq)
	p := payload(t, e)
	if p["sender"] != sender || p["content"] != content || p["session_id"] != sid || p["sequence"] != float64(seq) {
		t.Fatalf("message seq %d: got %s, want sender %s content %q", seq, e.Payload, sender, content)
	}
	if id, _ := p["id"].(string); len(id) < 5 || id[:4] != "msg_" {
		t.Fatalf("message id %q", p["id"])
	}
}

// seqs returns the sequences of events.
func seqs(evs []event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Sequence
	}
	return out
}

func wantSeqs(t testing.TB, what string, evs []event, want ...int64) {
	t.Helper()
	got := seqs(evs)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: sequences %v, want %v", what, got, want)
	}
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// ---- errors ----

// wantError checks status and that body is exactly
// {"error":{"code":code,"message":"<non-empty>"}}.
func wantError(t testing.TB, what string, gotStatus int, body []byte, status int, code string) {
	t.Helper()
	if gotStatus != status {
		t.Fatalf("%s: status %d, want %d: %s", what, gotStatus, status, body)
	}
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(body, &outer); err != nil || len(outer) != 1 || outer["error"] == nil {
		t.Fatalf("%s: body is not {\"error\":{...}}: %s", what, body)
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(outer["error"], &inner); err != nil || len(inner) != 2 {
		t.Fatalf("%s: error is not {code, message}: %s", what, body)
	}
	var c, m string
	if json.Unmarshal(inner["code"], &c) != nil || json.Unmarshal(inner["message"], &m) != nil || m == "" {
		t.Fatalf("%s: error code/message are not non-empty strings: %s", what, body)
	}
	if c != code {
		t.Fatalf("%s: code %q, want %q: %s", what, c, code, body)
	}
}

// mustFail calls the agent API and checks the error response.
func (a *agent) mustFail(status int, code, method, path string, body any) []byte {
	a.t.Helper()
	got, out := a.do(method, path, body)
	wantError(a.t, a.handle+" "+method+" "+path, got, out, status, code)
	return out
}

// ---- agent API shortcuts ----

func (a *agent) invite(sid string, handles ...string) []string {
	a.t.Helper()
	out := a.must(http.StatusOK, "POST", "/sessions/"+sid+"/invite", map[string]any{"invite": handles}, "PostSessionsInviteResponse")
	var r struct {
		Invited []string `json:"invited"`
	}
	mustUnmarshal(a.t, out, &r)
	return r.Invited
}

func (a *agent) leave(sid string) {
	a.t.Helper()
	a.must(http.StatusOK, "POST", "/sessions/"+sid+"/leave", nil, "PostSessionsLeaveResponse")
}

func (a *agent) end(sid string) {
	a.t.Helper()
	a.must(http.StatusOK, "POST", "/sessions/"+sid+"/end", nil, "PostSessionsEndResponse")
}

// sessionDoc is GET /sessions/{id}.
type sessionDoc struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	Topic        string `json:"topic"`
	CreatedAt    int64  `json:"created_at"`
	EndedAt      int64  `json:"ended_at"`
	Participants []struct {
		Handle   string `json:"handle"`
		Status   string `json:"status"`
		JoinedAt int64  `json:"joined_at"`
		LeftAt   int64  `json:"left_at"`
	} `json:"participants"`
	Raw []byte `json:"-"`
}

// statuses returns "handle=status" pairs sorted by handle.
func (d sessionDoc) statuses() string {
	var out []string
	for _, p := range d.Participants {
		out = append(out, p.Handle+"="+p.Status)
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

func (a *agent) getSession(sid string) sessionDoc {
	a.t.Helper()
	out := a.must(http.StatusOK, "GET", "/sessions/"+sid, nil, "GetSessionResponse")
	var d sessionDoc
	mustUnmarshal(a.t, out, &d)
	d.Raw = out
	return d
}

// sessionRow is one entry of GET /sessions.
type sessionRow struct {
	ID           string            `json:"id"`
	State        string            `json:"state"`
	Topic        string            `json:"topic"`
	Status       string            `json:"status"`
	Participants []json.RawMessage `json:"participants"`
	CreatedAt    int64             `json:"created_at"`
	EndedAt      int64             `json:"ended_at"`
	LastSeq      int64             `json:"last_sequence"`
}

// mySessions is GET /sessions (first page), decoded strictly.
func (a *agent) mySessions() []sessionRow {
	a.t.Helper()
	out := a.must(http.StatusOK, "GET", "/sessions", nil, "")
	var r struct {
		Sessions   []sessionRow `json:"sessions"`
		NextCursor string       `json:"next_cursor"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		a.t.Fatalf("GET /sessions: %v: %s", err, out)
	}
	if r.Sessions == nil {
		a.t.Fatalf("GET /sessions: sessions is not an array: %s", out)
	}
	return r.Sessions
}

// rawEvents returns the raw bytes of every event of a session the agent may
// see, through GET /sessions/{id}/events.
func (a *agent) rawEvents(sid string) [][]byte {
	a.t.Helper()
	var out [][]byte
	for _, e := range a.events(sid) {
		out = append(out, e.Raw)
	}
	return out
}

// types returns the event types, for failure messages.
func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%d:%s", e.Sequence, e.Type)
	}
	return out
}

// ---- WebSocket helpers ----

// dialQuery opens WS /connect with ?token= instead of the Authorization header.
func dialQuery(t testing.TB, s *server, token string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ws, _, err := websocket.Dial(ctx, strings.Replace(s.url, "http://", "ws://", 1)+"/connect?token="+url.QueryEscape(token), nil)
	if err != nil {
		cancel()
		t.Fatalf("dial /connect?token=: %v", err)
	}
	return newStream(t, ws, cancel)
}

// dialStatus attempts WS /connect with the given Authorization header value
// (none if empty) and returns the HTTP status of the refused handshake.
func dialStatus(t testing.TB, s *server, path, authorization string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{}
	if authorization != "" {
		opts.HTTPHeader = http.Header{"Authorization": {authorization}}
	}
	ws, resp, err := websocket.Dial(ctx, strings.Replace(s.url, "http://", "ws://", 1)+path, opts)
	if err == nil {
		ws.Close(websocket.StatusNormalClosure, "")
		t.Fatalf("dial %s with %q succeeded", path, authorization)
	}
	if resp == nil {
		t.Fatalf("dial %s: no HTTP response: %v", path, err)
	}
	return resp.StatusCode
}

// wantClosed waits for the server to close the stream with code, draining
// events that arrive before the close.
func (st *stream) wantClosed(code websocket.StatusCode) {
	st.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-st.events:
			if ok {
				continue
			}
			select {
			case got := <-st.closed:
				if got != code {
					st.t.Fatalf("stream closed with %d, want %d", got, code)
				}
			case <-deadline:
				st.t.Fatalf("stream events closed but no close status")
			}
			return
		case <-deadline:
			st.t.Fatalf("stream not closed within 10s (want %d)", code)
		}
	}
}
