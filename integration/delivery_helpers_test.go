package integration

// Helpers for delivery_test.go. Every name starts with dl so that they do not
// collide with helpers of other test files in this package.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dlAgents provisions open agents @dl.<name>.
func dlAgents(s *server, names ...string) []*agent {
	s.t.Helper()
	out := make([]*agent, len(names))
	for i, n := range names {
		out[i] = s.provision("@dl."+n, "open")
	}
	return out
}

// dlSession has creator open a session inviting others, and each of them
// join it; it returns the session id.
func dlSession(creator *agent, topic string, others ...*agent) string {
	creator.t.Helper()
	invite := make([]string, len(others))
	for i, o := range others {
		invite[i] = o.handle
	}
	sid := creator.createSession(map[string]any{"topic": topic, "invite": invite})
	for _, o := range others {
		o.join(sid)
	}
	return sid
}

// dlHTTPClient bounds every request so that a dead server cannot hang a test.
var dlHTTPClient = &http.Client{Timeout: 15 * time.Second}

// dlTry sends an HTTP request and reports transport errors instead of
// failing the test, so it is safe off the test goroutine and across a kill.
func dlTry(method, url, token string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		enc, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := dlHTTPClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// dlAck is a 201 answer to POST /sessions/{id}/messages.
type dlAck struct {
	MessageID string `json:"message_id"`
	Sequence  int64  `json:"sequence"`
}

// dlMsg is one message request, with the answer once acknowledged.
type dlMsg struct {
	from *agent
	sid  string
	text string
	key  string
	ack  dlAck
}

func (m *dlMsg) body() map[string]any {
	b := map[string]any{"content": m.text}
	if m.key != "" {
		b["idempotency_key"] = m.key
	}
	return b
}

// try posts the message; it returns an error for a transport failure or any
// answer but 201 (the answer is in the error), and records the ack.
func (m *dlMsg) try() error {
	code, out, err := dlTry("POST", m.from.s.url+"/sessions/"+m.sid+"/messages", m.from.token, m.body())
	if err != nil {
		return err
	}
	if code != http.StatusCreated {
		return fmt.Errorf("status %d: %s", code, out)
	}
	var ack dlAck
	if err := json.Unmarshal(out, &ack); err != nil || ack.MessageID == "" || ack.Sequence <= 0 {
		return fmt.Errorf("bad 201 body %s (%v)", out, err)
	}
	m.ack = ack
	return nil
}

// dlLog reads a session's whole event log through the operator API
// (unfiltered), validating every page (and so every event), and checks that
// it holds sequences 1..N with no gap.
func dlLog(t testing.TB, s *server, sid string) []event {
	t.Helper()
	return dlLogFrom(t, s, sid, 0)
}

// dlLogFrom is dlLog from after_sequence on: it checks that the events are
// after+1..N with no gap.
func dlLogFrom(t testing.TB, s *server, sid string, from int64) []event {
	t.Helper()
	var all []event
	after := fmt.Sprint(from)
	for {
		code, out := s.adminDo("GET", "/sessions/"+sid+"/events?limit=1000&after_sequence="+after, nil)
		if code != http.StatusOK {
			t.Fatalf("admin events %s: %d %s", sid, code, out)
		}
		validate(t, "http.json#/$defs/GetSessionEventsResponse", out)
		var page struct {
			Events     []json.RawMessage `json:"events"`
			NextCursor string            `json:"next_cursor"`
		}
		mustUnmarshal(t, out, &page)
		for _, raw := range page.Events {
			var e event
			mustUnmarshal(t, raw, &e)
			e.Raw = raw
			all = append(all, e)
		}
		if page.NextCursor == "" {
			break
		}
		after = page.NextCursor
	}
	for i, e := range all {
		if e.Sequence != from+int64(i+1) || e.SessionID != sid {
			t.Fatalf("log of %s: event %d has session %s sequence %d, want %d (gap or disorder)", sid, i, e.SessionID, e.Sequence, from+int64(i+1))
		}
	}
	return all
}

// dlStatus returns handle's participant status in a session, as a sees it.
func dlStatus(a *agent, sid, handle string) string {
	a.t.Helper()
	out := a.must(http.StatusOK, "GET", "/sessions/"+sid, nil, "GetSessionResponse")
	var r struct {
		Participants []struct {
			Handle string `json:"handle"`
			Status string `json:"status"`
		} `json:"participants"`
	}
	mustUnmarshal(a.t, out, &r)
	for _, p := range r.Participants {
		if p.Handle == handle {
			return p.Status
		}
	}
	return ""
}

// dlReadUntil reads events from st until, for every session in heads, an
// event with a sequence >= its head has been received.
func dlReadUntil(st *stream, heads map[string]int64) []event {
	st.t.Helper()
	seen := map[string]int64{}
	done := func() bool {
		for sid, h := range heads {
			if seen[sid] < h {
				return false
			}
		}
		return true
	}
	var out []event
	for !done() {
		e := st.next()
		out = append(out, e)
		seen[e.SessionID] = max(seen[e.SessionID], e.Sequence)
	}
	return out
}

// dlRest returns every event still buffered in a stream whose connection
// has ended (waiting at most d for it to end), validated, and the close
// status (-1 when there was no close frame).
func dlRest(t testing.TB, st *stream, d time.Duration) ([]event, websocket.StatusCode) {
	t.Helper()
	var out []event
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-st.events:
			if !ok {
				return out, <-st.closed
			}
			validate(t, "events.json", e.Raw)
			out = append(out, e)
		case <-deadline:
			t.Fatalf("stream did not end within %v", d)
		}
	}
}

// dlOf returns the events of one session.
func dlOf(evs []event, sid string) []event {
	var out []event
	for _, e := range evs {
		if e.SessionID == sid {
			out = append(out, e)
		}
	}
	return out
}

// dlAfter returns the events with a sequence greater than seq.
func dlAfter(evs []event, seq int64) []event {
	var out []event
	for _, e := range evs {
		if e.Sequence > seq {
			out = append(out, e)
		}
	}
	return out
}

// dlSeqs lists the sequences of events (for messages).
func dlSeqs(evs []event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Sequence
	}
	return out
}

// dlRun fails unless evs (of one session) have exactly the sequences
// from..to, in order: strictly increasing, no gap, no duplicate.
func dlRun(t testing.TB, who string, evs []event, from, to int64) {
	t.Helper()
	if want := to - from + 1; int64(len(evs)) != want {
		t.Fatalf("%s: got %d events, want %d (sequences %d..%d); got sequences %s", who, len(evs), want, from, to, dlSeqString(evs))
	}
	for i, e := range evs {
		if e.Sequence != from+int64(i) {
			t.Fatalf("%s: event %d has sequence %d, want %d; got sequences %s", who, i, e.Sequence, from+int64(i), dlSeqString(evs))
		}
	}
}

// dlSame fails unless got are exactly the log events want (same sequence,
// type and event id, in order).
func dlSame(t testing.TB, who string, got, want []event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events %s, want %d %s", who, len(got), dlSeqString(got), len(want), dlSeqString(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Sequence != w.Sequence || g.Type != w.Type || g.EventID != w.EventID {
			t.Fatalf("%s: event %d is %s seq %d (%s), want %s seq %d (%s)", who, i, g.Type, g.Sequence, g.EventID, w.Type, w.Sequence, w.EventID)
		}
	}
}

func dlSeqString(evs []event) string {
	if len(evs) > 40 {
		return fmt.Sprintf("%v ... %v", dlSeqs(evs[:20]), dlSeqs(evs[len(evs)-20:]))
	}
	return fmt.Sprint(dlSeqs(evs))
}

// dlIs fails unless e has the type and, for each key/value pair, payload
// field values.
func dlIs(t testing.TB, e event, typ string, fields ...string) {
	t.Helper()
	if e.Type != typ {
		t.Fatalf("got %s (seq %d), want %s: %s", e.Type, e.Sequence, typ, e.Raw)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if got := e.field(fields[i]); got != fields[i+1] {
			t.Fatalf("%s seq %d: payload %s = %q, want %q: %s", typ, e.Sequence, fields[i], got, fields[i+1], e.Raw)
		}
	}
}

// dlMessage fails unless e is the session.message acknowledged by ack with
// the given text content.
func dlMessage(t testing.TB, e event, ack dlAck, text string) {
	t.Helper()
	dlIs(t, e, "session.message", "id", ack.MessageID)
	var p struct {
		Sequence int64 `json:"sequence"`
	}
	_ = json.Unmarshal(e.Payload, &p)
	if e.Sequence != ack.Sequence || p.Sequence != ack.Sequence {
		t.Fatalf("message %s: event sequence %d, payload sequence %d, want %d", ack.MessageID, e.Sequence, p.Sequence, ack.Sequence)
	}
	if text != "" {
		if got := dlText(e); got != text {
			t.Fatalf("message seq %d: content %q, want %q", e.Sequence, got, text)
		}
	}
}

// dlText returns a message event's content when it is a plain string or a
// single text part.
func dlText(e event) string {
	var p struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(e.Payload, &p)
	var s string
	if json.Unmarshal(p.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(p.Content, &parts) == nil && len(parts) == 1 && parts[0].Type == "text" {
		return parts[0].Text
	}
	return string(p.Content)
}

// dlConnections returns the live connection count from /readyz.
func dlConnections(t testing.TB, s *server) int {
	t.Helper()
	code, out := request(t, "GET", s.url+"/readyz", "", nil)
	if code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, out)
	}
	var r struct {
		Connections *int `json:"connections"`
	}
	mustUnmarshal(t, out, &r)
	if r.Connections == nil {
		t.Fatalf("/readyz has no connections count: %s", out)
	}
	return *r.Connections
}

// dlWaitConnections waits (bounded) until the server has n live connections.
func dlWaitConnections(t testing.TB, s *server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := dlConnections(t, s)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server has %d live connections after 10s, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dlWaitLog waits (bounded) until the session log has an event matching
// pred, and returns it.
func dlWaitLog(t testing.TB, s *server, sid string, what string, pred func(event) bool) event {
	t.Helper()
	return dlWaitLogFrom(t, s, sid, 0, what, pred)
}

// dlWaitLogFrom is dlWaitLog looking only past sequence from.
func dlWaitLogFrom(t testing.TB, s *server, sid string, from int64, what string, pred func(event) bool) event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, e := range dlLogFrom(t, s, sid, from) {
			if pred(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: no %s in the log after 10s", sid, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dlRaw is a /connect client that reads nothing until told to: the server's
// writes to it pile up in the socket buffers.
type dlRaw struct {
	ws     *websocket.Conn
	cancel context.CancelFunc
}

func dlDialRaw(t testing.TB, s *server, token string) *dlRaw {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ws, _, err := websocket.Dial(ctx, strings.Replace(s.url, "http://", "ws://", 1)+"/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		cancel()
		t.Fatalf("dial /connect: %v", err)
	}
	ws.SetReadLimit(1 << 20)
	r := &dlRaw{ws: ws, cancel: cancel}
	t.Cleanup(func() {
		ws.CloseNow()
		cancel()
	})
	return r
}

// readAll resumes reading: it returns every message until the connection
// ends (or d passes), and the error that ended it. It does not use t, so it
// may run on any goroutine.
func (r *dlRaw) readAll(d time.Duration) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out [][]byte
	for {
		_, raw, err := r.ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			return out, err
		}
		out = append(out, raw)
	}
}

// dlSendConcurrently has a send messages of about size bytes into sid from
// workers goroutines while more(i) holds for the i-th message (checked
// before each). It returns at once; the function it returns waits for the
// workers and gives the acknowledged messages, or the first failure.
func dlSendConcurrently(a *agent, sid string, size, workers int, more func(i int64) bool) func() ([]*dlMsg, error) {
	pad := strings.Repeat("x", size)
	var (
		mu   sync.Mutex
		msgs []*dlMsg
		next atomic.Int64
		wg   sync.WaitGroup
	)
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if !more(i) {
					return
				}
				m := &dlMsg{from: a, sid: sid, text: fmt.Sprintf("%d %s", i, pad)}
				if err := m.try(); err != nil {
					errs <- fmt.Errorf("message %d: %w", i, err)
					return
				}
				mu.Lock()
				msgs = append(msgs, m)
				mu.Unlock()
			}
		}()
	}
	return func() ([]*dlMsg, error) {
		wg.Wait()
		close(errs)
		return msgs, <-errs // nil when no worker failed
	}
}
