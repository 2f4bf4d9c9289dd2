package aspclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aspd/aspd/aspclient"
	"github.com/aspd/aspd/internal/aspdtest"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
)

var aspdBin string

// The aspd of the examples and its two agents, started by TestMain.
var (
	aspdURL    string
	aliceToken string // @example.alice
	bobToken   string // @example.bob
	// operatorToken is the operator token of that aspd.
	operatorToken string
)

func TestMain(m *testing.M) {
	bin, cleanup := aspdtest.MustBuild()
	aspdBin = bin
	code := func() int {
		s, err := newServer("")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.stop()
		aspdURL, operatorToken = s.url, s.admin
		if aliceToken, err = s.agent("@example.alice"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if bobToken, err = s.agent("@example.bob"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	cleanup()
	os.Exit(code)
}

// server is a real aspd process, on the embedded SQLite store in dir or on
// the database dbURL.
type server struct {
	url, admin, dir string
	dbURL           string
	proc            *aspdtest.Process
	log             aspdtest.Log
}

func newServer(dbURL string) (*server, error) {
	dir, err := os.MkdirTemp("", "aspclienttest")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, dbURL: dbURL, admin: fmt.Sprintf("admin-token-%d", time.Now().UnixNano())}
	return s, s.start("127.0.0.1:0")
}

// startServer starts aspd on dbURL ("": the embedded store) until the test
// ends.
func startServer(t *testing.T, dbURL string) *server {
	t.Helper()
	s, err := newServer(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop()
		// Under GOFLAGS=-race aspd is built with the race detector, which
		// reports to its log.
		if strings.Contains(s.log.String(), "DATA RACE") {
			t.Error("the race detector reported a data race in aspd")
		}
		if t.Failed() {
			t.Logf("aspd log:\n%s", s.log.String())
		}
	})
	return s
}

func (s *server) start(listen string) error {
	p, err := aspdtest.Start(aspdBin, []string{"--listen", listen, "--data-dir", s.dir, "--database-url", s.dbURL},
		[]string{"ASPD_ADMIN_TOKEN=" + s.admin}, &s.log)
	if err != nil {
		return fmt.Errorf("%v:\n%s", err, s.log.String())
	}
	s.proc, s.url = p, p.URL
	return nil
}

// restart stops aspd (SIGTERM: WebSockets close 1001) and starts it again
// on the same address and data.
func (s *server) restart(t *testing.T) {
	t.Helper()
	s.proc.Stop()
	s.proc = nil
	if err := s.start(strings.TrimPrefix(s.url, "http://")); err != nil {
		t.Fatal(err)
	}
}

func (s *server) stop() {
	if s.proc != nil {
		s.proc.Stop()
		s.proc = nil
		os.RemoveAll(s.dir)
	}
}

// operator is the server's operator API client.
func (s *server) operator() (*aspclient.Admin, error) {
	return aspclient.NewAdmin(s.url, s.admin)
}

// agent creates an agent with the open policy and returns its token.
func (s *server) agent(handle string) (string, error) {
	ad, err := s.operator()
	if err != nil {
		return "", err
	}
	a, err := ad.CreateAgent(context.Background(), protocol.CreateAgentRequest{Handle: handle, InboundPolicy: "open"})
	if err != nil {
		return "", err
	}
	return a.Token, nil
}

// client creates an agent and returns its client, with short backoffs.
func (s *server) client(t *testing.T, handle string, opts ...aspclient.Option) *aspclient.Client {
	t.Helper()
	tok, err := s.agent(handle)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]aspclient.Option{aspclient.WithBackoff(50*time.Millisecond, 500*time.Millisecond)}, opts...)
	c, err := aspclient.New(s.url, tok, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewValidatesTheURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", "http://host?x=1", "mailto:x@y"} {
		if _, err := aspclient.New(u, "tok"); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := aspclient.New("http://127.0.0.1:8080", ""); err == nil {
		t.Error("New accepted an empty token")
	}
	if _, err := aspclient.New("https://aspd.example/prefix/", "tok"); err != nil {
		t.Errorf("New: %v", err)
	}
}

func TestREST(t *testing.T) { dbtest.ForEach(t, testREST) }

func testREST(t *testing.T, dbURL string) {
	s := startServer(t, dbURL)
	ctx := context.Background()
	alice, bob, carol := s.client(t, "@rest.alice"), s.client(t, "@rest.bob"), s.client(t, "@rest.carol")

	cr, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{
		Invite: []string{"@rest.bob"}, Topic: "t",
		InitialMessage: &protocol.InitialMessage{Content: aspclient.Text("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cr.Sequence == nil || *cr.Sequence != 1 {
		t.Fatalf("CreateSession: %+v", cr)
	}
	id := cr.SessionID

	list, err := bob.Sessions(ctx, aspclient.SessionsQuery{Status: protocol.StatusInvited})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].ID != id || list.Sessions[0].Topic != "t" {
		t.Fatalf("Sessions: %+v", list)
	}
	if ps := list.Sessions[0].Participants; len(ps) != 2 || ps[0].Handle != "@rest.alice" || ps[0].Status != protocol.StatusJoined ||
		ps[1].Handle != "@rest.bob" || ps[1].Status != protocol.StatusInvited {
		t.Fatalf("Sessions: participants %+v", ps)
	}
	if err := bob.Join(ctx, id); err != nil {
		t.Fatal(err)
	}
	sent, err := bob.SendMessage(ctx, id, protocol.SendMessageRequest{Content: aspclient.Text("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if sent.Sequence != 4 || sent.MessageID == "" {
		t.Fatalf("SendMessage: %+v", sent)
	}
	inv, err := alice.Invite(ctx, id, "@rest.carol")
	if err != nil || len(inv.Invited) != 1 || inv.Invited[0] != "@rest.carol" {
		t.Fatalf("Invite: %+v, %v", inv, err)
	}
	sess, err := alice.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sess.ID != id || sess.State != protocol.StateActive || len(sess.Participants) != 3 {
		t.Fatalf("Session: %+v", sess)
	}

	// Events, two pages: #1 the initial message, #2 bob invited, #3 bob
	// joined, #4 bob's message, #5 carol invited.
	p1, err := alice.Events(ctx, id, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Events) != 2 || p1.Events[0].Sequence != 1 || p1.NextCursor != 2 {
		t.Fatalf("Events page 1: %+v", p1)
	}
	p2, err := alice.Events(ctx, id, p1.NextCursor, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Events) != 3 || p2.Events[0].Sequence != 3 || p2.Events[1].Type != protocol.EventMessage || p2.NextCursor != 0 {
		t.Fatalf("Events page 2: %+v", p2)
	}

	if err := bob.Leave(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := alice.End(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SendMessage(ctx, id, protocol.SendMessageRequest{Content: aspclient.Text("late")}); !errors.Is(err, aspclient.ErrSessionEnded) {
		t.Fatalf("SendMessage to an ended session: %v", err)
	}
	if err := alice.Reopen(ctx, id, protocol.ReopenRequest{}); err != nil {
		t.Fatal(err)
	}

	// A session carol was never part of is not found, like a missing one.
	other, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = carol.Session(ctx, other.SessionID)
	var ae *aspclient.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != protocol.CodeNotFound || ae.Message == "" {
		t.Fatalf("Session of a stranger: %#v", err)
	}
	if !errors.Is(err, aspclient.ErrNotFound) || errors.Is(err, aspclient.ErrUnauthorized) {
		t.Fatalf("errors.Is on %v", err)
	}

	bad, _ := aspclient.New(s.url, "asp_wrong")
	if _, err := bad.Sessions(ctx, aspclient.SessionsQuery{}); !errors.Is(err, aspclient.ErrUnauthorized) {
		t.Fatalf("a wrong token: %v", err)
	}
}

// recorder is a Handler that records every event it is passed.
type recorder struct {
	mu     sync.Mutex
	events []protocol.Event
	seen   map[string]int
	fail   func(protocol.Event) error
}

func (r *recorder) handle(_ context.Context, ev protocol.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(ev); err != nil {
			return err
		}
	}
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	r.seen[fmt.Sprintf("%s#%d", ev.SessionID, ev.Sequence)]++
	r.events = append(r.events, ev)
	return nil
}

// waitFor waits until an event of session id with sequence seq was handled.
func (r *recorder) waitFor(t *testing.T, id string, seq int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := r.seen[fmt.Sprintf("%s#%d", id, seq)]
		r.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("event %s #%d not delivered; got %v", id, seq, r.keys())
}

func (r *recorder) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		out = append(out, fmt.Sprintf("#%d %s", ev.Sequence, ev.Type))
	}
	return out
}

// checkOnce fails unless the handler saw exactly sequences 1..n of id,
// each once.
func (r *recorder) checkOnce(t *testing.T, id string, n int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.seen {
		if c != 1 {
			t.Errorf("%s handled %d times", k, c)
		}
	}
	for i := int64(1); i <= n; i++ {
		if r.seen[fmt.Sprintf("%s#%d", id, i)] != 1 {
			t.Errorf("%s #%d handled %d times", id, i, r.seen[fmt.Sprintf("%s#%d", id, i)])
		}
	}
}

// stream runs c.Stream(h) until the test ends, and returns its result
// channel.
func stream(t *testing.T, c *aspclient.Client, h aspclient.Handler) (cancel func(), result <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- c.Stream(ctx, h); close(res) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-res:
		case <-time.After(10 * time.Second):
			t.Error("Stream did not return after cancel")
		}
	})
	return cancel, res
}

func TestStreamReconnectsAfterRestart(t *testing.T) {
	dbtest.ForEach(t, testStreamReconnectsAfterRestart)
}

func testStreamReconnectsAfterRestart(t *testing.T, dbURL string) {
	s := startServer(t, dbURL)
	ctx := context.Background()
	var drops sync.Map
	alice := s.client(t, "@re.alice")
	bob := s.client(t, "@re.bob", aspclient.WithOnDisconnect(func(err error, _ time.Duration) error {
		drops.Store(err.Error(), true)
		return nil
	}))
	var r recorder
	stream(t, bob, r.handle)

	cr, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{Invite: []string{"@re.bob"}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.SessionID
	r.waitFor(t, id, 1) // session.invited
	if err := bob.Join(ctx, id); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, id, 2) // the transcript (#1 again: skipped), then session.joined
	if _, err := alice.SendMessage(ctx, id, protocol.SendMessageRequest{Content: aspclient.Text("two")}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, id, 3)

	s.restart(t)
	if _, err := alice.SendMessage(ctx, id, protocol.SendMessageRequest{Content: aspclient.Text("three")}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, id, 4)
	s.restart(t)
	if _, err := alice.SendMessage(ctx, id, protocol.SendMessageRequest{Content: aspclient.Text("four")}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, id, 5)
	time.Sleep(200 * time.Millisecond) // room for a stray duplicate
	r.checkOnce(t, id, 5)
	n := 0
	drops.Range(func(any, any) bool { n++; return true })
	if n == 0 {
		t.Error("OnDisconnect was never called")
	}
}

// Acks move the agent's cursor: a new Stream (with no memory of the first)
// resumes after the events the first one handled.
func TestStreamAcksConfirm(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	alice, bob := s.client(t, "@ack.alice"), s.client(t, "@ack.bob")
	var r1 recorder
	cancel, res := stream(t, bob, r1.handle)
	cr, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{Invite: []string{"@ack.bob"}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.SessionID
	if err := bob.Join(ctx, id); err != nil {
		t.Fatal(err)
	}
	r1.waitFor(t, id, 2)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream after cancel: %v", err)
	}
	if _, err := alice.SendMessage(ctx, id, protocol.SendMessageRequest{Content: aspclient.Text("while away")}); err != nil {
		t.Fatal(err)
	}
	var r2 recorder
	stream(t, bob, r2.handle)
	r2.waitFor(t, id, 3)
	r2.mu.Lock()
	defer r2.mu.Unlock()
	// After #3 come bob's presence events (#4 session.disconnected, #5
	// session.reconnected), but nothing the first stream confirmed.
	if r2.events[0].Sequence != 3 || r2.seen[id+"#1"]+r2.seen[id+"#2"] != 0 {
		t.Fatalf("the second stream got %v, want #3 first and not #1 or #2", r2.events)
	}
}

// A handler error stops Stream with that error, and the event is not
// confirmed: the next Stream gets it again.
func TestStreamHandlerError(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	alice, bob := s.client(t, "@err.alice"), s.client(t, "@err.bob")
	boom := errors.New("boom")
	r1 := recorder{fail: func(protocol.Event) error { return boom }}
	_, res := stream(t, bob, r1.handle)
	cr, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{Invite: []string{"@err.bob"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, boom) {
			t.Fatalf("Stream: %v, want boom", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Stream did not return the handler's error")
	}
	var r2 recorder
	stream(t, bob, r2.handle)
	r2.waitFor(t, cr.SessionID, 1)
}

// A rotated token closes the stream with 4001: Stream returns a
// *CloseError instead of reconnecting; a wrong token is an *Error.
func TestStreamTokenRotated(t *testing.T) {
	s := startServer(t, "")
	bob := s.client(t, "@rot.bob")
	var r recorder
	_, res := stream(t, bob, r.handle)
	time.Sleep(300 * time.Millisecond) // let it connect
	ad, err := s.operator()
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.Do(context.Background(), http.MethodPost, "/agents/@rot.bob/token", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		var ce *aspclient.CloseError
		if !errors.As(err, &ce) || ce.Code != aspclient.CloseUnauthorized {
			t.Fatalf("Stream: %#v, want a 4001 *CloseError", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Stream kept going after the token was rotated")
	}
	bad, _ := aspclient.New(s.url, "asp_wrong")
	if err := bad.Stream(context.Background(), r.handle); !errors.Is(err, aspclient.ErrUnauthorized) {
		t.Fatalf("Stream with a wrong token: %v", err)
	}
}

// OnDisconnect may stop Stream instead of letting it reconnect.
func TestStreamOnDisconnectStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	calls := 0
	c, err := aspclient.New(down, "tok", aspclient.WithOnDisconnect(func(err error, wait time.Duration) error {
		calls++
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Stream(context.Background(), func(context.Context, protocol.Event) error { return nil })
	if !errors.Is(err, syscall.ECONNREFUSED) || calls != 1 {
		t.Fatalf("Stream: %v after %d calls, want connection refused after 1", err, calls)
	}
}
