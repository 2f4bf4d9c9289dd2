package aspclient_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aspd/aspd/aspclient"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
)

// next reads frames of c until an event of session id arrives, and returns
// its sequence; other frames are skipped.
func next(t *testing.T, c *aspclient.Conn, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		frame, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if ev, ok := aspclient.ParseEvent(frame); ok && ev.SessionID == id {
			return ev.Sequence
		}
	}
}

func dial(t *testing.T, c *aspclient.Client) *aspclient.Conn {
	t.Helper()
	conn, err := c.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

// Conn passes on what the server sends, duplicates included: without an
// ack, a new connection gets the same events again; after Ack it resumes
// after the acknowledged sequence.
func TestConn(t *testing.T) { dbtest.ForEach(t, testConn) }

func testConn(t *testing.T, dbURL string) {
	s := startServer(t, dbURL)
	ctx := context.Background()
	alice, bob := s.client(t, "@conn.alice"), s.client(t, "@conn.bob")
	cr, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{Invite: []string{"@conn.bob"}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.SessionID
	if err := bob.Join(ctx, id); err != nil {
		t.Fatal(err)
	}

	c1 := dial(t, bob)
	if got := next(t, c1, id); got != 1 {
		t.Fatalf("first connection starts at #%d, want #1", got)
	}
	if err := c1.Close("done"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The server detaches a closed connection a moment after the close
	// handshake. Until then the agent's next connection overlaps it, and the
	// first connection's unconfirmed events stay under the agent's cursor
	// until a connection opened after it confirms past them
	// (docs/delivery.md): wait, so that c2 is that later connection.
	waitNoConnections(t, s)

	// Nothing was acknowledged: the next connection is sent #1 again.
	c2 := dial(t, bob)
	if got := next(t, c2, id); got != 1 {
		t.Fatalf("unacknowledged: the second connection starts at #%d, want #1 again", got)
	}
	if got := next(t, c2, id); got != 2 {
		t.Fatalf("the second connection's second event is #%d, want #2", got)
	}
	if err := c2.Ack(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close("done"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitNoConnections(t, s) // c2's detach saves the cursor

	if _, err := alice.SendMessage(ctx, id, protocol.SendMessageRequest{Content: aspclient.Text("after the ack")}); err != nil {
		t.Fatal(err)
	}
	c3 := dial(t, bob)
	if got := next(t, c3, id); got != 3 {
		t.Fatalf("after Ack(#2) the third connection starts at #%d, want #3", got)
	}
}

// A Conn reports the server's close frame: a rotated token closes it with
// CloseUnauthorized and the reason, and the old token no longer dials.
func TestConnCloseReason(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	bob := s.client(t, "@close.bob")
	c := dial(t, bob)
	res := make(chan error, 1)
	go func() {
		for {
			if _, err := c.Next(context.Background()); err != nil {
				res <- err
				return
			}
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Ping(pctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	ad, err := s.operator()
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.Do(ctx, http.MethodPost, "/agents/@close.bob/token", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		var ce *aspclient.CloseError
		if !errors.As(err, &ce) || ce.Code != aspclient.CloseUnauthorized || ce.Reason != "token rotated" {
			t.Fatalf("Next: %#v, want a 4001 \"token rotated\" *CloseError", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the connection stayed open after the token was rotated")
	}
	if _, err := bob.Dial(ctx); !errors.Is(err, aspclient.ErrUnauthorized) {
		t.Fatalf("Dial with the rotated token: %v, want ErrUnauthorized", err)
	}
}

// Admin provisions agents on the operator API; Do reaches the rest of it.
func TestAdmin(t *testing.T) { dbtest.ForEach(t, testAdmin) }

func testAdmin(t *testing.T, dbURL string) {
	s := startServer(t, dbURL)
	ctx := context.Background()
	ad, err := s.operator()
	if err != nil {
		t.Fatal(err)
	}
	a, err := ad.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@adm.carol", InboundPolicy: "open", Roles: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Token == "" || a.Agent == nil || a.Handle != "@adm.carol" {
		t.Fatalf("CreateAgent: %+v", a)
	}
	if _, err := ad.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@adm.carol"}); err == nil {
		t.Fatal("CreateAgent accepted a handle twice")
	}
	if err := ad.Do(ctx, http.MethodPut, "/agents/@adm.carol/policy", nil, protocol.PolicyRequest{InboundPolicy: "allowlist"}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := ad.Agent(ctx, "@adm.carol")
	if err != nil {
		t.Fatal(err)
	}
	if got.InboundPolicy != "allowlist" || !got.HasToken || len(got.Roles) != 1 || got.Roles[0] != "ops" {
		t.Fatalf("Agent: %+v", got)
	}
	// The token works on the agent API.
	carol, err := aspclient.New(s.url, a.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Sessions(ctx, aspclient.SessionsQuery{}); err != nil {
		t.Fatalf("the created agent's token: %v", err)
	}
	var list struct {
		Agents []protocol.Agent `json:"agents"`
	}
	if err := ad.Do(ctx, http.MethodGet, "/agents", nil, nil, &list); err != nil || len(list.Agents) != 1 {
		t.Fatalf("GET /agents: %v, %+v", err, list)
	}
	if err := ad.DeleteAgent(ctx, "@adm.carol"); err != nil {
		t.Fatal(err)
	}
	if _, err := ad.Agent(ctx, "@adm.carol"); !errors.Is(err, aspclient.ErrNotFound) {
		t.Fatalf("Agent after DeleteAgent: %v, want ErrNotFound", err)
	}
	if err := ad.DeleteAgent(ctx, "@adm.carol"); !errors.Is(err, aspclient.ErrNotFound) {
		t.Fatalf("DeleteAgent twice: %v, want ErrNotFound", err)
	}
	wrong, err := aspclient.NewAdmin(s.url, "not-the-operator-token")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.Agent(ctx, "@adm.carol"); !errors.Is(err, aspclient.ErrUnauthorized) {
		t.Fatalf("a wrong operator token: %v, want ErrUnauthorized", err)
	}
}

// waitNoConnections waits (bounded) until the server holds no WebSocket
// connection.
func waitNoConnections(t *testing.T, s *server) {
	t.Helper()
	admin, err := s.operator()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var h protocol.OperatorHealth
		if err := admin.Do(context.Background(), http.MethodGet, "/health", nil, nil, &h); err != nil {
			t.Fatal(err)
		}
		if h.Connections == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d connections after 10s", h.Connections)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
