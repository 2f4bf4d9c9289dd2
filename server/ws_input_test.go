package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
)

// syncBuffer is a log sink that the server's goroutines may write to while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLoggedEnv is newEnv with the server's log, at DEBUG, kept for the test.
func newLoggedEnv(t *testing.T, dbURL string) (*env, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return startEnv(t, dbURL, testConfig(), log, nil), logs
}

// dialConnect opens WS /connect with the given bearer token and ?token=
// (each left out when empty). On a refused handshake it returns the HTTP
// answer.
func (e *env) dialConnect(ctx context.Context, bearer, query string) (*websocket.Conn, int, []byte, http.Header, error) {
	u := strings.Replace(e.srv.URL, "http://", "ws://", 1) + "/connect"
	if query != "" {
		u += "?token=" + url.QueryEscape(query)
	}
	opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
	if bearer != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+bearer)
	}
	ws, resp, err := websocket.Dial(ctx, u, opts)
	if err == nil {
		return ws, resp.StatusCode, nil, resp.Header, nil
	}
	if resp == nil {
		return nil, 0, nil, nil, err
	}
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(resp.Body)
	}
	return nil, resp.StatusCode, body, resp.Header, err
}

// readUntil reads ws until a message containing want arrives.
func readUntil(ctx context.Context, t *testing.T, ws *websocket.Conn, want string) {
	t.Helper()
	seen := ""
	for !strings.Contains(seen, want) {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (waiting for %q, seen %s)", err, want, seen)
		}
		seen += string(msg)
	}
}

// TestConnectTokensMustAgree: /connect takes its token from the
// Authorization header or from ?token=; a request that carries both must
// carry one token twice. Two different tokens (two agents, or one agent and
// garbage, either way round) are 401 with the body of any other failed
// authentication and no upgrade; the same token twice connects as its
// agent. No token reaches the log.
func TestConnectTokensMustAgree(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, dbURL string) {
		e, logs := newLoggedEnv(t, dbURL)
		alice, bob := e.agent("@tok.alice"), e.agent("@tok.bob")
		bogus := "asp_" + strings.Repeat("x", 43)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		// The answer to a token that is simply wrong, to compare with.
		_, wantStatus, wantBody, wantHeader, _ := e.dialConnect(ctx, bogus, "")
		if wantStatus != http.StatusUnauthorized || len(wantBody) == 0 {
			t.Fatalf("a bad token: %d %s", wantStatus, wantBody)
		}
		for _, tc := range []struct{ name, bearer, query string }{
			{"two agents", alice, bob},
			{"two agents, the other way round", bob, alice},
			{"an agent in the header, garbage in the query", alice, bogus},
			{"garbage in the header, an agent in the query", bogus, alice},
		} {
			ws, status, body, header, err := e.dialConnect(ctx, tc.bearer, tc.query)
			if err == nil {
				ws.CloseNow()
				t.Fatalf("%s: the connection opened", tc.name)
			}
			if status != http.StatusUnauthorized || !bytes.Equal(body, wantBody) ||
				header.Get("WWW-Authenticate") != wantHeader.Get("WWW-Authenticate") {
				t.Fatalf("%s: %d %s (WWW-Authenticate %q), want %d %s (%q)", tc.name, status, body,
					header.Get("WWW-Authenticate"), wantStatus, wantBody, wantHeader.Get("WWW-Authenticate"))
			}
		}

		// One token, given both ways (and each way alone), connects as its
		// agent: alice receives her invitation.
		for _, tc := range []struct{ name, bearer, query string }{
			{"both", alice, alice}, {"header", alice, ""}, {"query", "", alice},
		} {
			ws, _, body, _, err := e.dialConnect(ctx, tc.bearer, tc.query)
			if err != nil {
				t.Fatalf("%s: %v %s", tc.name, err, body)
			}
			var created protocol.CreateSessionResponse
			e.must(http.StatusCreated, "POST", "/sessions", bob, map[string]any{"invite": []string{"@tok.alice"}}, &created)
			readUntil(ctx, t, ws, created.SessionID)
			ws.Close(websocket.StatusNormalClosure, "")
		}

		out := logs.String()
		if !strings.Contains(out, "route=/connect") {
			t.Fatalf("the log has no /connect request line; the check below would prove nothing:\n%s", out)
		}
		for _, tok := range []string{alice, bob, bogus} {
			if strings.Contains(out, tok) {
				t.Fatalf("the log contains a token:\n%s", out)
			}
		}
	})
}

// TestConnectInvalidUTF8 (RFC 6455 §8.1): a text message that is not UTF-8
// closes the connection with 1007. A text message that is UTF-8 but not an
// ack, and a binary message whatever its bytes, are still ignored.
func TestConnectInvalidUTF8(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, nil)
		alice, bob := e.agent("@utf.alice"), e.agent("@utf.bob")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ws, _, body, _, err := e.dialConnect(ctx, alice, "")
		if err != nil {
			t.Fatalf("dial: %v %s", err, body)
		}
		defer ws.CloseNow()
		if err := ws.Write(ctx, websocket.MessageBinary, []byte{0xff, 0xfe}); err != nil {
			t.Fatal(err)
		}
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"héllo"}`)); err != nil {
			t.Fatal(err)
		}
		// Still open: an event arrives after both.
		var created protocol.CreateSessionResponse
		e.must(http.StatusCreated, "POST", "/sessions", bob, map[string]any{"invite": []string{"@utf.alice"}}, &created)
		readUntil(ctx, t, ws, created.SessionID)

		// "{" then a lone continuation byte and a truncated sequence.
		if err := ws.Write(ctx, websocket.MessageText, []byte{'{', 0x80, 0xe2, 0x82}); err != nil {
			t.Fatal(err)
		}
		for {
			_, _, err := ws.Read(ctx)
			if err == nil {
				continue
			}
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusInvalidFramePayloadData || ce.Reason == "" {
				t.Fatalf("after a text message that is not UTF-8: %v, want close 1007 with a reason", err)
			}
			break
		}
	})
}
