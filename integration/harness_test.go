package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/aspd/aspd/internal/aspdtest"
	"github.com/aspd/aspd/internal/dbtest"
)

var aspdBin string

func TestMain(m *testing.M) {
	bin, cleanup := aspdtest.MustBuild()
	aspdBin = bin
	if err := installResponseCheck(); err != nil {
		cleanup()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// ---- schemas ----

var (
	schemaOnce sync.Once
	schemas    map[string]*jsonschema.Schema
	schemaErr  error
)

// schema returns a compiled schema, e.g. "events.json" or
// "http.json#/$defs/PostSessionsResponse".
func schema(t testing.TB, loc string) *jsonschema.Schema {
	t.Helper()
	schemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		for _, name := range []string{"common.json", "events.json", "http.json"} {
			b, err := os.ReadFile(filepath.Join("..", "protocol", "schemas", name))
			if err != nil {
				schemaErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				schemaErr = err
				return
			}
			if err := c.AddResource("https://asp.dev/schemas/"+name, doc); err != nil {
				schemaErr = err
				return
			}
		}
		schemas = map[string]*jsonschema.Schema{}
		for _, loc := range []string{"events.json"} {
			s, err := c.Compile("https://asp.dev/schemas/" + loc)
			if err != nil {
				schemaErr = err
				return
			}
			schemas[loc] = s
		}
		for _, def := range []string{"PostSessionsResponse", "PostSessionsJoinResponse", "PostSessionsInviteResponse",
			"PostSessionsMessagesResponse", "PostSessionsLeaveResponse", "PostSessionsEndResponse", "PostSessionsReopenResponse",
			"GetSessionResponse", "GetSessionEventsResponse", "PostSessionsRequest", "PostSessionsMessagesRequest"} {
			loc := "http.json#/$defs/" + def
			s, err := c.Compile("https://asp.dev/schemas/" + loc)
			if err != nil {
				schemaErr = err
				return
			}
			schemas[loc] = s
		}
	})
	if schemaErr != nil {
		t.Fatalf("schemas: %v", schemaErr)
	}
	s, ok := schemas[loc]
	if !ok {
		t.Fatalf("no schema %s", loc)
	}
	return s
}

// validate fails the test if raw does not validate against the schema at loc.
func validate(t testing.TB, loc string, raw []byte) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", loc, err, raw)
	}
	if err := schema(t, loc).Validate(doc); err != nil {
		t.Fatalf("%s: does not validate: %v\n%s", loc, err, raw)
	}
}

// ---- server process ----

// server is a running aspd process.
type server struct {
	t     testing.TB
	url   string // http://127.0.0.1:port
	dbURL string
	dir   string
	admin string
	args  []string
	proc  *aspdtest.Process
	log   aspdtest.Log // across restarts
}

// backends runs fn once per store backend, each with a fresh database.
func backends(t *testing.T, fn func(t *testing.T, dbURL string)) {
	dbtest.ForEach(t, fn)
}

// startServer starts aspd on a fresh loopback port with the given database
// and extra flags, and stops it when the test ends.
func startServer(t testing.TB, dbURL string, args ...string) *server {
	t.Helper()
	s := &server{t: t, dbURL: dbURL, dir: t.TempDir(), admin: "admin-" + fmt.Sprint(time.Now().UnixNano()), args: args}
	s.start("127.0.0.1:0")
	responseCheck.Own(t, s.url)
	t.Cleanup(func() {
		s.stop()
		// Under GOFLAGS=-race the server is built with the race detector,
		// which reports to its log, not to this test.
		if strings.Contains(s.logs(), "DATA RACE") {
			t.Errorf("the race detector reported a data race in aspd")
		}
		if t.Failed() {
			t.Logf("aspd log:\n%s", s.logs())
		}
	})
	return s
}

func (s *server) start(listen string) {
	s.t.Helper()
	args := append([]string{"--listen", listen, "--database-url", s.dbURL, "--data-dir", s.dir}, s.args...)
	p, err := aspdtest.Start(aspdBin, args, []string{"ASPD_ADMIN_TOKEN=" + s.admin}, &s.log)
	if err != nil {
		s.t.Fatalf("%v:\n%s", err, s.logs())
	}
	s.proc, s.url = p, p.URL
}

func (s *server) logs() string { return s.log.String() }

// stop terminates aspd gracefully (SIGTERM) and waits for it.
func (s *server) stop() {
	if s.proc != nil {
		s.proc.Stop()
		s.proc = nil
	}
}

// kill terminates aspd with SIGKILL: no shutdown code runs.
func (s *server) kill() {
	s.proc.Kill()
	s.proc = nil
}

// restart starts aspd again on the same address and database.
func (s *server) restart() {
	s.t.Helper()
	s.start(strings.TrimPrefix(s.url, "http://"))
}

// ---- HTTP clients ----

// request sends an HTTP request and returns the status and body.
func request(t testing.TB, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// adminDo calls the operator API.
func (s *server) adminDo(method, path string, body any) (int, []byte) {
	s.t.Helper()
	return request(s.t, method, s.url+"/admin/v1"+path, s.admin, body)
}

// agent is an ASP agent client with its token.
type agent struct {
	t      testing.TB
	s      *server
	handle string
	token  string
}

// provision creates an agent through the operator API.
func (s *server) provision(handle, policy string, allowlist ...string) *agent {
	s.t.Helper()
	if allowlist == nil {
		allowlist = []string{}
	}
	code, body := s.adminDo("POST", "/agents", map[string]any{"handle": handle, "inbound_policy": policy, "allowlist": allowlist})
	if code != http.StatusCreated {
		s.t.Fatalf("provision %s: %d %s", handle, code, body)
	}
	var r struct {
		Token string `json:"token"`
	}
	mustUnmarshal(s.t, body, &r)
	return &agent{t: s.t, s: s, handle: handle, token: r.Token}
}

// do calls the agent API.
func (a *agent) do(method, path string, body any) (int, []byte) {
	a.t.Helper()
	return request(a.t, method, a.s.url+path, a.token, body)
}

// must calls the agent API, requires the status, and validates the body
// against the http.json definition named (if any).
func (a *agent) must(want int, method, path string, body any, def string) []byte {
	a.t.Helper()
	code, out := a.do(method, path, body)
	if code != want {
		a.t.Fatalf("%s %s %s: status %d, want %d: %s", a.handle, method, path, code, want, out)
	}
	if def != "" {
		validate(a.t, "http.json#/$defs/"+def, out)
	}
	return out
}

// createSession opens a session and returns its id.
func (a *agent) createSession(body map[string]any) string {
	a.t.Helper()
	out := a.must(http.StatusCreated, "POST", "/sessions", body, "PostSessionsResponse")
	var r struct {
		SessionID string `json:"session_id"`
	}
	mustUnmarshal(a.t, out, &r)
	return r.SessionID
}

// send posts a text message and returns its sequence.
func (a *agent) send(sid string, content any) int64 {
	a.t.Helper()
	out := a.must(http.StatusCreated, "POST", "/sessions/"+sid+"/messages", map[string]any{"content": content}, "PostSessionsMessagesResponse")
	var r struct {
		Sequence int64 `json:"sequence"`
	}
	mustUnmarshal(a.t, out, &r)
	return r.Sequence
}

func (a *agent) join(sid string) {
	a.t.Helper()
	a.must(http.StatusOK, "POST", "/sessions/"+sid+"/join", nil, "PostSessionsJoinResponse")
}

// events reads the whole eligible event log of a session through the read
// API, following next_cursor.
func (a *agent) events(sid string) []event {
	a.t.Helper()
	var all []event
	after := "0"
	for {
		out := a.must(http.StatusOK, "GET", "/sessions/"+sid+"/events?limit=1000&after_sequence="+after, nil, "GetSessionEventsResponse")
		var page struct {
			Events     []json.RawMessage `json:"events"`
			NextCursor string            `json:"next_cursor"`
		}
		mustUnmarshal(a.t, out, &page)
		for _, raw := range page.Events {
			all = append(all, decodeEvent(a.t, raw))
		}
		if page.NextCursor == "" {
			return all
		}
		after = page.NextCursor
	}
}

func mustUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// ---- events and WebSocket ----

// event is a decoded session event.
type event struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	EventID   string          `json:"event_id"`
	Sequence  int64           `json:"sequence"`
	CreatedAt int64           `json:"created_at"`
	Payload   json.RawMessage `json:"payload"`
	Raw       []byte          `json:"-"`
}

// field returns a top-level payload field as a string ("" if absent).
func (e event) field(name string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(e.Payload, &m)
	var s string
	_ = json.Unmarshal(m[name], &s)
	return s
}

func decodeEvent(t testing.TB, raw []byte) event {
	t.Helper()
	validate(t, "events.json", raw)
	var e event
	mustUnmarshal(t, raw, &e)
	e.Raw = append([]byte(nil), raw...)
	return e
}

// stream is a WebSocket /connect client that validates every event.
type stream struct {
	t      testing.TB
	ws     *websocket.Conn
	events chan event
	closed chan websocket.StatusCode
	cancel context.CancelFunc
}

// connect opens WS /connect for the agent.
func (a *agent) connect() *stream {
	a.t.Helper()
	return dial(a.t, a.s, a.token)
}

func dial(t testing.TB, s *server, token string) *stream {
	t.Helper()
	return dialAck(t, s, token, true)
}

// dialNoAck opens WS /connect for a client that never sends acks: only the
// server's confirmation pings (answered by the client library) confirm.
func dialNoAck(t testing.TB, s *server, token string) *stream {
	t.Helper()
	return dialAck(t, s, token, false)
}

func dialAck(t testing.TB, s *server, token string, ack bool) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ws, _, err := websocket.Dial(ctx, strings.Replace(s.url, "http://", "ws://", 1)+"/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		cancel()
		t.Fatalf("dial /connect: %v", err)
	}
	return newStreamAck(t, ws, cancel, ack)
}

// newStream reads ws in a goroutine, queueing every event. The test
// client acknowledges every event it receives, before queueing it (an
// explicit-ack client, docs/delivery.md): when a test has read an event, the
// server has its ack, so a test that closes and reconnects knows exactly
// where replay resumes. Tests of pong-only confirmation use dialNoAck.
func newStream(t testing.TB, ws *websocket.Conn, cancel context.CancelFunc) *stream {
	return newStreamAck(t, ws, cancel, true)
}

func newStreamAck(t testing.TB, ws *websocket.Conn, cancel context.CancelFunc, ack bool) *stream {
	ws.SetReadLimit(1 << 20)
	st := &stream{t: t, ws: ws, events: make(chan event, 100000), closed: make(chan websocket.StatusCode, 1), cancel: cancel}
	go func() {
		ctx := context.Background()
		for {
			_, raw, err := ws.Read(ctx)
			if err != nil {
				st.closed <- websocket.CloseStatus(err)
				close(st.events)
				return
			}
			var e event
			if json.Unmarshal(raw, &e) != nil {
				st.t.Errorf("non-JSON event: %s", raw)
				continue
			}
			e.Raw = raw
			if ack {
				msg := fmt.Sprintf(`{"type":"ack","session_id":%q,"sequence":%d}`, e.SessionID, e.Sequence)
				_ = ws.Write(ctx, websocket.MessageText, []byte(msg)) // fails only once closing
			}
			st.events <- e
		}
	}()
	t.Cleanup(st.close)
	return st
}

func (st *stream) close() {
	st.ws.Close(websocket.StatusNormalClosure, "")
	st.cancel()
}

// next returns the next event, validated against events.json.
func (st *stream) next() event {
	st.t.Helper()
	select {
	case e, ok := <-st.events:
		if !ok {
			st.t.Fatalf("stream closed while waiting for an event")
		}
		validate(st.t, "events.json", e.Raw)
		return e
	case <-time.After(10 * time.Second):
		st.t.Fatalf("no event within 10s")
	}
	return event{}
}

// expect reads events and checks their types in order; it returns them.
func (st *stream) expect(types ...string) []event {
	st.t.Helper()
	out := make([]event, 0, len(types))
	for i, typ := range types {
		e := st.next()
		if e.Type != typ {
			st.t.Fatalf("event %d: got %s (seq %d), want %s: %s", i, e.Type, e.Sequence, typ, e.Raw)
		}
		out = append(out, e)
	}
	return out
}

// quiet asserts that no event arrives within d.
func (st *stream) quiet(d time.Duration) {
	st.t.Helper()
	select {
	case e, ok := <-st.events:
		if ok {
			st.t.Fatalf("unexpected event: %s", e.Raw)
		}
	case <-time.After(d):
	}
}
