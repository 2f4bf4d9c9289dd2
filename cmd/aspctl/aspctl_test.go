package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/internal/aspdtest"
)

var aspdBin string

func TestMain(m *testing.M) {
	for _, v := range []string{"ASPCTL_SERVER", "ASPCTL_TOKEN", "ASPCTL_ADMIN_TOKEN", "ASPCTL_ADMIN_TOKEN_FILE"} {
		os.Unsetenv(v)
	}
	bin, cleanup := aspdtest.MustBuild()
	aspdBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// ---- aspd process ----

// aspd is a running aspd on the embedded store.
type aspd struct {
	t     *testing.T
	url   string
	admin string
	dir   string
	proc  *aspdtest.Process
	log   aspdtest.Log
}

func startAspd(t *testing.T) *aspd {
	t.Helper()
	s := &aspd{t: t, dir: t.TempDir(), admin: fmt.Sprintf("admin-token-%d", time.Now().UnixNano())}
	s.start("127.0.0.1:0")
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("aspd log:\n%s", s.logs())
		}
	})
	return s
}

func (s *aspd) start(listen string) {
	s.t.Helper()
	p, err := aspdtest.Start(aspdBin, []string{"--listen", listen, "--data-dir", s.dir},
		[]string{"ASPD_ADMIN_TOKEN=" + s.admin, "ASPD_DATABASE_URL="}, &s.log)
	if err != nil {
		s.t.Fatalf("%v:\n%s", err, s.logs())
	}
	s.proc, s.url = p, p.URL
}

func (s *aspd) logs() string { return s.log.String() }

// stop terminates aspd with SIGTERM (WebSockets are closed 1001).
func (s *aspd) stop() {
	if s.proc != nil {
		s.proc.Stop()
		s.proc = nil
	}
}

// restart starts aspd again on the same address and data directory.
func (s *aspd) restart() {
	s.t.Helper()
	s.start(strings.TrimPrefix(s.url, "http://"))
}

// ---- running aspctl ----

type result struct {
	code           int
	stdout, stderr string
}

func ctl(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// asAdmin runs an operator command.
func (s *aspd) asAdmin(args ...string) result {
	s.t.Helper()
	return ctl(s.t, append([]string{"--server", s.url, "--admin-token", s.admin}, args...)...)
}

// as runs an agent command with token.
func (s *aspd) as(token string, args ...string) result {
	s.t.Helper()
	return ctl(s.t, append([]string{"--server", s.url, "--token", token}, args...)...)
}

// ok requires exit status 0 and decodes stdout into v (if not nil).
func (r result) ok(t *testing.T, v any) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
			t.Fatalf("stdout is not the expected JSON: %v\n%s", err, r.stdout)
		}
	}
	return r
}

// fails requires the exit status and that stderr contains want.
func (r result) fails(t *testing.T, code int, want string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stderr, want) {
		t.Fatalf("exit %d, stderr %q; want exit %d and stderr containing %q (stdout %q)", r.code, r.stderr, code, want, r.stdout)
	}
}

type agentJSON struct {
	Handle        string   `json:"handle"`
	Owner         string   `json:"owner"`
	InboundPolicy string   `json:"inbound_policy"`
	Allowlist     []string `json:"allowlist"`
	Blocks        []string `json:"blocks"`
	Roles         []string `json:"roles"`
	HasToken      bool     `json:"has_token"`
	Token         string   `json:"token"`
}

// newAgent creates an open agent and returns its token.
func (s *aspd) newAgent(handle string) string {
	s.t.Helper()
	var a agentJSON
	s.asAdmin("agent", "create", handle, "--policy", "open").ok(s.t, &a)
	if a.Token == "" {
		s.t.Fatalf("agent create %s printed no token", handle)
	}
	return a.Token
}

type eventJSON struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Sequence  int64           `json:"sequence"`
	Payload   json.RawMessage `json:"payload"`
}

func (e eventJSON) field(t *testing.T, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if v, ok := m[name]; ok {
		if err := json.Compact(&b, v); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

type eventsJSON struct {
	Events     []eventJSON `json:"events"`
	NextCursor string      `json:"next_cursor"`
}

func types(evs []eventJSON) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func sequences(evs []eventJSON) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Sequence
	}
	return out
}

// createSession runs session create and returns the session id.
func (s *aspd) createSession(token string, args ...string) string {
	s.t.Helper()
	var r struct {
		SessionID string `json:"session_id"`
	}
	s.as(token, append([]string{"session", "create"}, args...)...).ok(s.t, &r)
	if !strings.HasPrefix(r.SessionID, "sess_") {
		s.t.Fatalf("session create: session_id %q", r.SessionID)
	}
	return r.SessionID
}

// ---- listen in the background ----

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuffer) lines() []string {
	s := strings.TrimSuffix(b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// listening is aspctl listen running in a goroutine.
type listening struct {
	t      *testing.T
	out    syncBuffer
	err    syncBuffer
	cancel context.CancelFunc
	done   chan int
}

func (s *aspd) listen(token string, args ...string) *listening {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &listening{t: s.t, cancel: cancel, done: make(chan int, 1)}
	argv := append([]string{"--server", s.url, "--token", token, "listen"}, args...)
	go func() { l.done <- runContext(ctx, argv, &l.out, &l.err) }()
	s.t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(10 * time.Second):
			s.t.Errorf("listen did not stop within 10s")
		}
	})
	return l
}

// waitLine waits (bounded) for a stdout line satisfying match and returns it.
func (l *listening) waitLine(what string, match func(line string) bool) string {
	l.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range l.out.lines() {
			if match(line) {
				return line
			}
		}
		select {
		case code := <-l.done:
			l.done <- code
			l.t.Fatalf("listen exited %d before printing %s\nstdout: %s\nstderr: %s", code, what, l.out.String(), l.err.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	l.t.Fatalf("listen printed no %s within 15s\nstdout: %s\nstderr: %s", what, l.out.String(), l.err.String())
	return ""
}

// exitCode waits (bounded) for listen to exit.
func (l *listening) exitCode() int {
	l.t.Helper()
	select {
	case code := <-l.done:
		l.done <- code
		return code
	case <-time.After(15 * time.Second):
		l.t.Fatalf("listen did not exit within 15s\nstderr: %s", l.err.String())
	}
	return -1
}

// stop interrupts listen and returns its exit status.
func (l *listening) stop() int {
	l.t.Helper()
	l.cancel()
	return l.exitCode()
}

// ---- tests ----

func TestAgentCreatePrintsAgentAndToken(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	r := s.asAdmin("agent", "create", "@acme.support", "--policy", "open", "--allow", "@x.y,@acme.*", "--roles", "ops,triage")
	var a agentJSON
	r.ok(t, &a)
	if !strings.HasPrefix(r.stdout, "{\n  \"handle\": \"@acme.support\",\n") {
		t.Errorf("stdout is not pretty-printed JSON starting with the handle:\n%s", r.stdout)
	}
	slices.Sort(a.Allowlist)
	slices.Sort(a.Roles)
	if a.Handle != "@acme.support" || a.Owner != "acme" || a.InboundPolicy != "open" || !a.HasToken ||
		!slices.Equal(a.Allowlist, []string{"@acme.*", "@x.y"}) || !slices.Equal(a.Roles, []string{"ops", "triage"}) {
		t.Errorf("created agent: %+v", a)
	}
	if !strings.HasPrefix(a.Token, "asp_") || len(a.Token) < 40 {
		t.Errorf("token %q", a.Token)
	}
	if !strings.Contains(r.stderr, "shown only once") {
		t.Errorf("stderr %q does not warn that the token is shown once", r.stderr)
	}
	// The printed token authenticates the agent.
	var list struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	s.as(a.Token, "session", "list").ok(t, &list)
	if list.Sessions == nil || len(list.Sessions) != 0 {
		t.Errorf("session list of a new agent: %+v", list)
	}
	// Without --policy the server's default (allowlist) applies.
	var b agentJSON
	s.asAdmin("agent", "create", "@acme.closed").ok(t, &b)
	if b.InboundPolicy != "allowlist" || len(b.Allowlist) != 0 {
		t.Errorf("default policy: %+v", b)
	}
	s.asAdmin("agent", "create", "@acme.support").fails(t, 1, "aspctl: conflict: ")
	s.asAdmin("agent", "create", "Bad Handle").fails(t, 1, "aspctl: invalid_request: ")
	s.asAdmin("agent", "create", "@acme.x", "--policy", "closed").fails(t, 2, "policy must be open or allowlist")
}

func TestAgentList(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	for _, h := range []string{"@acme.b", "@other.c", "@acme.a"} {
		s.newAgent(h)
	}
	handles := func(args ...string) []string {
		t.Helper()
		var r struct {
			Agents []agentJSON `json:"agents"`
		}
		s.asAdmin(append([]string{"agent", "list"}, args...)...).ok(t, &r)
		out := []string{}
		for _, a := range r.Agents {
			if a.Token != "" {
				t.Errorf("agent list shows a token for %s", a.Handle)
			}
			out = append(out, a.Handle)
		}
		return out
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"@acme.a", "@acme.b", "@other.c"}},
		{[]string{"--owner", "acme"}, []string{"@acme.a", "@acme.b"}},
		{[]string{"--owner", "@other"}, []string{"@other.c"}},
		{[]string{"--owner", "nobody"}, []string{}},
	} {
		if got := handles(c.args...); !slices.Equal(got, c.want) {
			t.Errorf("agent list %v = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestAgentAdminCommands(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	s.newAgent("@acme.alice")
	bobTok := s.newAgent("@acme.bob")
	agent := func(args ...string) agentJSON {
		t.Helper()
		var a agentJSON
		s.asAdmin(append([]string{"agent"}, args...)...).ok(t, &a)
		slices.Sort(a.Allowlist)
		return a
	}
	if a := agent("policy", "@acme.bob", "allowlist"); a.InboundPolicy != "allowlist" {
		t.Errorf("policy: %+v", a)
	}
	if a := agent("allow", "@acme.bob", "@x.y,@acme.*", "@z.w"); !slices.Equal(a.Allowlist, []string{"@acme.*", "@x.y", "@z.w"}) {
		t.Errorf("allow: %v", a.Allowlist)
	}
	if a := agent("disallow", "@acme.bob", "@x.y"); !slices.Equal(a.Allowlist, []string{"@acme.*", "@z.w"}) {
		t.Errorf("disallow: %v", a.Allowlist)
	}
	if a := agent("allowlist", "@acme.bob", "@q.r"); !slices.Equal(a.Allowlist, []string{"@q.r"}) {
		t.Errorf("allowlist replace: %v", a.Allowlist)
	}
	if a := agent("allowlist", "@acme.bob"); a.Allowlist == nil || len(a.Allowlist) != 0 {
		t.Errorf("allowlist with no entries: %v", a.Allowlist)
	}
	if a := agent("roles", "@acme.bob", "ops", "billing"); len(a.Roles) != 2 {
		t.Errorf("roles: %v", a.Roles)
	}
	if a := agent("roles", "@acme.bob"); len(a.Roles) != 0 {
		t.Errorf("roles cleared: %v", a.Roles)
	}
	if a := agent("block", "@acme.bob", "@acme.alice"); !slices.Equal(a.Blocks, []string{"@acme.alice"}) {
		t.Errorf("block: %v", a.Blocks)
	}
	if a := agent("unblock", "@acme.bob", "@acme.alice"); len(a.Blocks) != 0 {
		t.Errorf("unblock: %v", a.Blocks)
	}
	if a := agent("get", "@acme.bob"); a.Handle != "@acme.bob" || a.InboundPolicy != "allowlist" || !a.HasToken {
		t.Errorf("get: %+v", a)
	}

	rotated := agent("rotate-token", "@acme.bob")
	if rotated.Token == "" || rotated.Token == bobTok {
		t.Fatalf("rotate-token printed token %q (old %q)", rotated.Token, bobTok)
	}
	s.as(bobTok, "session", "list").fails(t, 1, "aspctl: unauthorized: ")
	s.as(rotated.Token, "session", "list").ok(t, nil)

	if a := agent("revoke-token", "@acme.bob"); a.HasToken || a.Token != "" {
		t.Errorf("revoke-token: %+v", a)
	}
	s.as(rotated.Token, "session", "list").fails(t, 1, "aspctl: unauthorized: ")

	var ok struct {
		OK bool `json:"ok"`
	}
	s.asAdmin("agent", "delete", "@acme.bob").ok(t, &ok)
	if !ok.OK {
		t.Errorf("delete printed %+v", ok)
	}
	s.asAdmin("agent", "get", "@acme.bob").fails(t, 1, "aspctl: not_found: not found (HTTP 404)")
	s.asAdmin("agent", "policy", "@acme.alice", "closed").fails(t, 2, "policy must be open or allowlist")
	s.asAdmin("agent", "block", "@acme.alice").fails(t, 2, "wrong number of arguments")
}

func TestAgentFlow(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")
	bob := s.newAgent("@acme.bob")
	s.newAgent("@acme.carol")

	var created struct {
		SessionID string `json:"session_id"`
		Sequence  int64  `json:"sequence"`
	}
	s.as(alice, "session", "create", "--invite", "@acme.bob", "--topic", "billing", "--message", "hello bob").ok(t, &created)
	id := created.SessionID
	if !strings.HasPrefix(id, "sess_") || created.Sequence != 1 {
		t.Fatalf("session create: %+v", created)
	}

	var mine struct {
		Sessions []struct {
			ID, State, Topic, Status string
		} `json:"sessions"`
	}
	s.as(bob, "session", "list", "--status", "invited").ok(t, &mine)
	if len(mine.Sessions) != 1 || mine.Sessions[0].ID != id || mine.Sessions[0].Topic != "billing" || mine.Sessions[0].State != "active" {
		t.Fatalf("bob's invited sessions: %+v", mine)
	}

	r := s.as(bob, "join", id)
	if r.ok(t, nil); r.stdout != "{\n  \"ok\": true\n}\n" {
		t.Errorf("join printed %q", r.stdout)
	}
	var sent struct {
		MessageID string `json:"message_id"`
		Sequence  int64  `json:"sequence"`
	}
	s.as(bob, "send", id, "hi", "alice").ok(t, &sent)
	if sent.Sequence != 4 || !strings.HasPrefix(sent.MessageID, "msg_") {
		t.Errorf("send: %+v", sent)
	}
	var data, retry struct {
		MessageID string `json:"message_id"`
		Sequence  int64  `json:"sequence"`
	}
	s.as(bob, "send", id, "--data", `{"n":1}`, "--idempotency-key", "k1", "--metadata", `{"trace":"t1"}`).ok(t, &data)
	s.as(bob, "send", id, "--data", `{"n":1}`, "--idempotency-key", "k1", "--metadata", `{"trace":"t1"}`).ok(t, &retry)
	if data.Sequence != 5 || retry != data {
		t.Errorf("idempotent send: first %+v, retry %+v", data, retry)
	}
	s.as(bob, "send", id, "--data", `{"n":2}`, "--idempotency-key", "k1").fails(t, 1, "aspctl: idempotency_key_reused: ")
	s.as(alice, "send", id, "--content", `[{"type":"text","text":"raw"}]`).ok(t, nil)

	var hist eventsJSON
	s.as(alice, "history", id).ok(t, &hist)
	want := []string{"session.message", "session.invited", "session.joined", "session.message", "session.message", "session.message"}
	if got := types(hist.Events); !slices.Equal(got, want) {
		t.Fatalf("history types %v, want %v", got, want)
	}
	if c := hist.Events[3].field(t, "content"); c != `"hi alice"` {
		t.Errorf("bob's text message content %s", c)
	}
	if c := hist.Events[4].field(t, "content"); c != `[{"type":"data","data":{"n":1}}]` {
		t.Errorf("bob's data message content %s", c)
	}
	if m := hist.Events[4].field(t, "metadata"); m != `{"trace":"t1"}` {
		t.Errorf("metadata %s", m)
	}
	var page eventsJSON
	s.as(alice, "history", id, "--after", "2", "--limit", "2").ok(t, &page)
	if !slices.Equal(sequences(page.Events), []int64{3, 4}) || page.NextCursor != "4" {
		t.Errorf("history page: %v next %q", sequences(page.Events), page.NextCursor)
	}
	var all eventsJSON
	s.as(alice, "history", id, "--after", "2", "--limit", "2", "--all").ok(t, &all)
	if !slices.Equal(sequences(all.Events), []int64{3, 4, 5, 6}) || all.NextCursor != "" {
		t.Errorf("history --all: %v next %q", sequences(all.Events), all.NextCursor)
	}

	var inv struct {
		Invited []string `json:"invited"`
	}
	s.as(alice, "invite", id, "@acme.carol", "@acme.bob").ok(t, &inv)
	if !slices.Equal(inv.Invited, []string{"@acme.carol"}) {
		t.Errorf("invite: %v", inv.Invited)
	}
	s.as(alice, "leave", id).ok(t, nil)
	s.as(alice, "send", id, "too late").fails(t, 1, "aspctl: not_joined: ")
	s.as(bob, "end", id).ok(t, nil)
	s.as(bob, "send", id, "after the end").fails(t, 1, "aspctl: session_ended: ")

	var sess struct {
		ID           string `json:"id"`
		State        string `json:"state"`
		Topic        string `json:"topic"`
		Participants []struct {
			Handle, Status string
		} `json:"participants"`
	}
	s.asAdmin("sessions", "get", id).ok(t, &sess)
	status := map[string]string{}
	for _, p := range sess.Participants {
		status[p.Handle] = p.Status
	}
	if sess.State != "ended" || sess.Topic != "billing" || status["@acme.alice"] != "left" || status["@acme.carol"] != "left" {
		t.Errorf("sessions get: %+v", sess)
	}
	var log eventsJSON
	s.asAdmin("sessions", "events", id, "--after", "6").ok(t, &log)
	if got := types(log.Events); !slices.Equal(got, []string{"session.invited", "session.left", "session.ended"}) {
		t.Errorf("operator log after 6: %v", got)
	} else if by := log.Events[2].field(t, "ended_by"); by != `"@acme.bob"` {
		t.Errorf("ended_by %s", by)
	}

	// Only bob was joined when the session ended: alice cannot reopen it.
	s.as(alice, "reopen", id).fails(t, 1, "aspctl: not_joined: ")
	s.as(bob, "reopen", id, "--invite", "@acme.alice", "--message", "again").ok(t, nil)
	var reopened eventsJSON
	s.asAdmin("sessions", "events", id, "--after", "9").ok(t, &reopened)
	if got := types(reopened.Events); !slices.Equal(got, []string{"session.reopened", "session.invited", "session.message"}) {
		t.Errorf("after reopen: %v", got)
	}
	s.as(bob, "session", "get", id).ok(t, &sess)
	if sess.State != "active" || sess.ID != id {
		t.Errorf("session get after reopen: %+v", sess)
	}
}

func TestListenPrintsAnotherAgentsMessage(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")
	bob := s.newAgent("@acme.bob")
	id := s.createSession(alice, "--invite", "@acme.bob")
	s.as(bob, "join", id).ok(t, nil)

	l := s.listen(alice)
	s.as(bob, "send", id, "ping from bob").ok(t, nil)
	line := l.waitLine("bob's message", func(line string) bool { return strings.Contains(line, "ping from bob") })
	var ev struct {
		Type      string `json:"type"`
		SessionID string `json:"session_id"`
		Sequence  int64  `json:"sequence"`
		Payload   struct {
			Sender  string `json:"sender"`
			Content string `json:"content"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(line), &ev); err != nil {
		t.Fatalf("listen line is not JSON: %v: %s", err, line)
	}
	if ev.Type != "session.message" || ev.SessionID != id || ev.Sequence != 3 || ev.Payload.Sender != "@acme.bob" || ev.Payload.Content != "ping from bob" {
		t.Errorf("event %+v", ev)
	}
	if code := l.stop(); code != 0 {
		t.Errorf("listen exited %d after an interrupt, want 0; stderr %q", code, l.err.String())
	}
	// One compact JSON object per line, each event once, in order.
	var seqs []int64
	for _, line := range l.out.lines() {
		var e eventJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil || strings.HasPrefix(line, " ") {
			t.Fatalf("not a JSON line: %q", line)
		}
		seqs = append(seqs, e.Sequence)
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) {
		t.Errorf("sequences printed %v, want [1 2 3] (invited, joined, message)", seqs)
	}
	if l.err.String() != "" {
		t.Errorf("stderr %q", l.err.String())
	}
}

func TestListenPrettyDeduplicatesJoinReplay(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")
	bob := s.newAgent("@acme.bob")
	l := s.listen(bob, "--pretty")
	id := s.createSession(alice, "--invite", "@acme.bob", "--topic", "t", "--message", "hello")
	l.waitLine("the invitation", func(line string) bool { return strings.Contains(line, "session.invited") })
	// Joining restarts bob's stream at sequence 1: #2 arrives again and must
	// not be printed twice.
	s.as(bob, "join", id).ok(t, nil)
	s.as(alice, "send", id, "--data", `{"k":"v"}`, "see", "this").ok(t, nil)
	l.waitLine("alice's second message", func(line string) bool { return strings.Contains(line, "#4 ") })
	want := []string{
		id + ` #2 session.invited @acme.bob by @acme.alice topic "t"`,
		id + ` #1 session.message @acme.alice: hello`,
		id + ` #3 session.joined @acme.bob`,
		id + ` #4 session.message @acme.alice: see this {"k":"v"}`,
	}
	if got := l.out.lines(); !slices.Equal(got, want) {
		t.Errorf("pretty output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if code := l.stop(); code != 0 {
		t.Errorf("listen exited %d, want 0", code)
	}
}

func TestListenServerClose(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")
	for _, args := range [][]string{nil, {"--reconnect"}} {
		l := s.listen(alice, args...)
		s.createSession(alice, "--message", "me")
		l.waitLine("alice's own message", func(line string) bool { return strings.Contains(line, `"content":"me"`) })
		var a agentJSON
		s.asAdmin("agent", "rotate-token", "@acme.alice").ok(t, &a)
		if code := l.exitCode(); code != 1 {
			t.Errorf("listen %v exited %d after the token was rotated, want 1", args, code)
		}
		if got := l.err.String(); !strings.Contains(got, "server closed the connection: 4001 token rotated") {
			t.Errorf("listen %v stderr %q", args, got)
		}
		alice = a.Token
	}
	// A refused token is final, with or without --reconnect.
	for _, args := range [][]string{nil, {"--reconnect"}} {
		l := s.listen("not-a-token", args...)
		if code := l.exitCode(); code != 1 || !strings.Contains(l.err.String(), "aspctl: unauthorized: ") {
			t.Errorf("listen %v with a bad token: exit %d stderr %q", args, code, l.err.String())
		}
	}
}

func TestListenReconnects(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")
	bob := s.newAgent("@acme.bob")
	id := s.createSession(alice, "--invite", "@acme.bob", "--message", "before")
	s.as(bob, "join", id).ok(t, nil)
	l := s.listen(alice, "--pretty", "--reconnect")
	l.waitLine("bob's join", func(line string) bool { return strings.Contains(line, "#3 session.joined @acme.bob") })

	s.stop()
	s.restart()
	s.as(bob, "send", id, "after", "restart").ok(t, nil)
	l.waitLine("the message sent after the restart", func(line string) bool {
		return strings.HasSuffix(line, "session.message @acme.bob: after restart")
	})
	if got := l.err.String(); !strings.Contains(got, "server closed the connection: 1001") || !strings.Contains(got, "reconnecting in 1s") {
		t.Errorf("stderr %q does not report the close and the reconnection", got)
	}
	seen := map[string]bool{}
	for _, line := range l.out.lines() {
		key, _, _ := strings.Cut(line, " session.")
		if seen[key] {
			t.Errorf("printed twice: %s", key)
		}
		seen[key] = true
	}
	if code := l.stop(); code != 0 {
		t.Errorf("listen exited %d, want 0", code)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")

	r := s.as(alice, "session", "get", "sess_01ZZZZZZZZZZZZZZZZZZZZZZZZ")
	if r.code != 1 || r.stderr != "aspctl: not_found: not found (HTTP 404)\n" || r.stdout != "" {
		t.Errorf("404: %+v", r)
	}
	s.asAdmin("sessions", "get", "nope").fails(t, 1, "aspctl: not_found: not found (HTTP 404)")
	s.as("wrong-token", "session", "list").fails(t, 1, "aspctl: unauthorized: missing or invalid bearer token (HTTP 401)")
	ctl(t, "--server", s.url, "--admin-token", "wrong", "agent", "list").fails(t, 1, "aspctl: unauthorized: ")
	s.as(alice, "send", "sess_01ZZZZZZZZZZZZZZZZZZZZZZZZ", "").fails(t, 1, "aspctl: invalid_content: ")
	ctl(t, "--server", "http://127.0.0.1:1", "--token", "x", "session", "list").fails(t, 1, "connection refused")

	// Usage errors exit 2.
	ctl(t).fails(t, 2, "no command given")
	ctl(t, "frobnicate").fails(t, 2, `unknown command "frobnicate"`)
	ctl(t, "agent", "frobnicate").fails(t, 2, `unknown command "agent frobnicate"`)
	s.as(alice, "send", "sess_01ZZZZZZZZZZZZZZZZZZZZZZZZ").fails(t, 2, "send needs TEXT, --data or --content")
	s.as(alice, "send", "x", "--data", "[1]").fails(t, 2, "--data must be a JSON object")
	s.as(alice, "send", "x", "y", "--content", `"z"`).fails(t, 2, "--content cannot be combined")
	s.as(alice, "join").fails(t, 2, "aspctl join: wrong number of arguments")
	s.as(alice, "join", "--bogus", "x").fails(t, 2, "flag provided but not defined: -bogus")
	ctl(t, "--server", s.url, "join", "x").fails(t, 2, "needs an agent token")
	ctl(t, "--bogus").fails(t, 2, "flag provided but not defined")

	// -h: usage on stdout, exit 0; the top-level usage lists every command.
	top := ctl(t, "-h")
	if top.code != 0 {
		t.Fatalf("-h exited %d", top.code)
	}
	for _, c := range commands {
		if c.run != nil && !regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(c.name)+` +\S`).MatchString(top.stdout) {
			t.Errorf("top-level usage lacks %q with a description", c.name)
		}
	}
	if h := ctl(t, "session", "create", "-h"); h.code != 0 || !strings.Contains(h.stdout, "Usage: aspctl session create [--invite") || !strings.Contains(h.stdout, "-end-after-send") {
		t.Errorf("session create -h: %+v", h)
	}
}

func TestSessionsListAndExport(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	alice := s.newAgent("@acme.alice")
	bob := s.newAgent("@acme.bob")
	s.newAgent("@acme.carol")
	first := s.createSession(alice, "--invite", "@acme.bob", "--message", "one")
	s.as(bob, "join", first).ok(t, nil)
	s.as(bob, "send", first, "two").ok(t, nil)
	second := s.createSession(alice, "--message", "solo", "--invite", "@acme.carol", "--end-after-send")
	third := s.createSession(bob, "--message", "bob alone")

	ids := func(args ...string) []string {
		t.Helper()
		var r struct {
			Sessions []struct {
				ID string `json:"id"`
			} `json:"sessions"`
			NextCursor string `json:"next_cursor"`
		}
		s.asAdmin(append([]string{"sessions", "list"}, args...)...).ok(t, &r)
		out := []string{}
		for _, x := range r.Sessions {
			out = append(out, x.ID)
		}
		return out
	}
	if got := ids("--limit", "1", "--all"); !slices.Equal(got, []string{third, second, first}) {
		t.Errorf("sessions list --all = %v, want %v", got, []string{third, second, first})
	}
	if got := ids("--limit", "1"); !slices.Equal(got, []string{third}) {
		t.Errorf("sessions list --limit 1 = %v", got)
	}
	if got := ids("--participant", "@acme.alice"); !slices.Equal(got, []string{second, first}) {
		t.Errorf("--participant @acme.alice = %v", got)
	}
	if got := ids("--state", "ended"); !slices.Equal(got, []string{second}) {
		t.Errorf("--state ended = %v", got)
	}
	if got := ids("--since", "2000-01-01T00:00:00Z", "--until", "1"); len(got) != 0 {
		t.Errorf("--until 1 ms = %v", got)
	}
	s.asAdmin("sessions", "list", "--state", "open").fails(t, 1, "aspctl: invalid_request: state must be active or ended")

	// export --session: that session's events as JSON lines, in order.
	r := s.asAdmin("export", "--session", first).ok(t, nil)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	var got []string
	for i, line := range lines {
		var e eventJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("export line %d is not JSON: %q", i, line)
		}
		if e.SessionID != first || e.Sequence != int64(i+1) {
			t.Errorf("export line %d: session %s sequence %d", i, e.SessionID, e.Sequence)
		}
		got = append(got, e.Type)
	}
	if want := []string{"session.message", "session.invited", "session.joined", "session.message"}; !slices.Equal(got, want) {
		t.Errorf("export types %v, want %v", got, want)
	}

	// export with filters to a file: nothing on stdout, the file holds the
	// events of alice's two sessions (oldest first).
	path := filepath.Join(t.TempDir(), "out.jsonl")
	r = s.asAdmin("export", "--participant", "@acme.alice", "-o", path).ok(t, nil)
	if r.stdout != "" {
		t.Errorf("export -o wrote to stdout: %q", r.stdout)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sessions []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var e eventJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("export file line is not JSON: %q", line)
		}
		if len(sessions) == 0 || sessions[len(sessions)-1] != e.SessionID {
			sessions = append(sessions, e.SessionID)
		}
	}
	if !slices.Equal(sessions, []string{first, second}) {
		t.Errorf("export --participant sessions %v, want %v", sessions, []string{first, second})
	}
	if n := strings.Count(string(b), "\n"); n != 4+3 {
		t.Errorf("export file has %d lines, want 7 (4 + message, invited, ended)\n%s", n, b)
	}

	s.asAdmin("export", "--session", "sess_01ZZZZZZZZZZZZZZZZZZZZZZZZ").fails(t, 1, "aspctl: not_found: not found (HTTP 404)")
	s.asAdmin("export", "--session", first, "--state", "ended").fails(t, 2, "--session cannot be combined")
}

func TestConfigFromEnvironmentAndTokenFile(t *testing.T) {
	s := startAspd(t)
	tokFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokFile, []byte(s.admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ASPCTL_SERVER", s.url)

	// --admin-token-file
	ctl(t, "--admin-token-file", tokFile, "agent", "create", "@acme.env").ok(t, nil)
	// ASPCTL_ADMIN_TOKEN_FILE
	t.Setenv("ASPCTL_ADMIN_TOKEN_FILE", tokFile)
	var list struct {
		Agents []agentJSON `json:"agents"`
	}
	ctl(t, "agent", "list").ok(t, &list)
	if len(list.Agents) != 1 || list.Agents[0].Handle != "@acme.env" {
		t.Errorf("agent list via ASPCTL_ADMIN_TOKEN_FILE: %+v", list)
	}
	// --admin-token wins over the environment.
	ctl(t, "--admin-token", "wrong", "agent", "list").fails(t, 1, "unauthorized")
	t.Setenv("ASPCTL_ADMIN_TOKEN_FILE", "")

	// The default ./aspd-data/admin.token, where aspd writes it.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "aspd-data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "aspd-data", "admin.token"), []byte(s.admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var a agentJSON
	ctl(t, "agent", "rotate-token", "@acme.env").ok(t, &a)

	// ASPCTL_TOKEN for agent commands.
	t.Setenv("ASPCTL_TOKEN", a.Token)
	ctl(t, "session", "list").ok(t, nil)
	t.Chdir(t.TempDir())
	ctl(t, "agent", "list").fails(t, 2, "needs the operator token")
}

// TestListenInterruptClosesNormally checks, against a stub /connect, the
// close frame listen sends when interrupted (aspd does not log it).
func TestListenInterruptClosesNormally(t *testing.T) {
	t.Parallel()
	status := make(chan websocket.StatusCode, 1)
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/connect" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":{"code":"unauthorized","message":"no"}}`, http.StatusUnauthorized)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ev := `{"type":"session.joined","session_id":"sess_01AB","event_id":"evt_01AB","sequence":7,"created_at":1,"payload":{"agent":"@a.b"}}`
		_ = ws.Write(r.Context(), websocket.MessageText, []byte(ev))
		// listen acknowledges the event it printed, then closes.
		var acks []string
		for {
			_, msg, err := ws.Read(r.Context())
			if err != nil {
				if len(acks) != 1 || acks[0] != `{"type":"ack","session_id":"sess_01AB","sequence":7}` {
					t.Errorf("acks before the close: %q, want one for sess_01AB #7", acks)
				}
				status <- websocket.CloseStatus(err)
				return
			}
			acks = append(acks, string(msg))
		}
	}))
	defer stub.Close()
	s := &aspd{t: t, url: stub.URL}
	l := s.listen("tok", "--pretty")
	l.waitLine("the stub's event", func(line string) bool { return line == "sess_01AB #7 session.joined @a.b" })
	if code := l.stop(); code != 0 {
		t.Errorf("listen exited %d, want 0", code)
	}
	select {
	case got := <-status:
		if got != websocket.StatusNormalClosure {
			t.Errorf("close status %d, want 1000", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stub saw no close")
	}
}
