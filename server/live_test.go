package server_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aspd/aspd/protocol"
)

// TestWebSocket: /connect delivers committed events live, and rotating the
// agent's token closes the connection with 4001.
func TestWebSocket(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		alice, bob := e.agent("@acme.alice"), e.agent("@acme.bob")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		url := strings.Replace(e.srv.URL, "http://", "ws://", 1) + "/connect"
		if _, resp, err := websocket.Dial(ctx, url, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("dial without a token: %v", err)
		}
		ws, _, err := websocket.Dial(ctx, url+"?token="+bob, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()

		var created protocol.CreateSessionResponse
		e.must(http.StatusCreated, "POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"},
			"initial_message": map[string]any{"content": "over the wire"}}, &created)
		seen := ""
		for !strings.Contains(seen, "session.invited") {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v (seen %s)", err, seen)
			}
			seen += string(msg)
		}
		if !strings.Contains(seen, created.SessionID) {
			t.Fatalf("events for another session: %s", seen)
		}

		e.must(http.StatusOK, "POST", "/admin/v1/agents/@acme.bob/token", adminToken, nil, nil)
		for {
			_, _, err := ws.Read(ctx)
			if err == nil {
				continue
			}
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != 4001 {
				t.Fatalf("after rotation: %v, want close 4001", err)
			}
			break
		}
	})
}

func frame(t *testing.T, sender, recipient string) map[string]any {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return map[string]any{
		"envelope_version": "1.0", "frame_id": fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:]),
		"kind": "agent_advisory", "sender_handle": sender, "recipient_handle": recipient,
		"created_at": time.Now().UTC().Format(time.RFC3339), "ttl_ms": 60000,
		"acted_by": "~alice", "drafted_with": "~cc-example-model",
		"provenance_compute_location": "local-only", "provenance_method": []any{"session-context-snapshot"},
		"provenance_context_check": "passed", "provenance_basis": "agent-channel",
		"payload": map[string]any{"advisory_text": "hi", "file_refs": []any{"a.go"}, "branch": "main"},
	}
}

// TestFrameStream: GET /stream is an SSE stream that receives the frames
// POST /frames addresses to it; the roster shows it to its owner only; the
// frame rate limit answers 429 with Retry-After.
func TestFrameStream(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		alice, bob := e.agent("@acme.alice"), e.agent("@acme.bob")
		wantError(t, e.do("GET", "/stream?instrument=bad%20one", bob, nil), http.StatusBadRequest, "field-invalid")

		resp := e.raw("GET", "/stream?instrument=cc", bob)
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		rd := bufio.NewReader(resp.Body)
		if line, _ := rd.ReadString('\n'); line != ": aspd frame stream\n" {
			t.Fatalf("first line %q", line)
		}
		var roster struct {
			Streams []map[string]any `json:"streams"`
		}
		e.must(http.StatusOK, "GET", "/stream/roster", bob, nil, &roster)
		if len(roster.Streams) != 1 {
			t.Fatalf("bob's roster: %+v", roster)
		}
		e.must(http.StatusOK, "GET", "/stream/roster", alice, nil, &roster)
		if len(roster.Streams) != 0 {
			t.Fatalf("alice's roster: %+v", roster)
		}

		var res struct {
			Subscriptions int  `json:"subscriptions"`
			Exact         bool `json:"exact"`
		}
		e.must(http.StatusOK, "POST", "/frames", alice, map[string]any{"scope": "@acme.bob", "frame": frame(t, "@acme.alice", "@acme.bob")}, &res)
		if res.Subscriptions != 1 || res.Exact {
			t.Fatalf("submission: %+v", res)
		}
		got := ""
		for !strings.HasPrefix(got, "data:") {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			if strings.HasPrefix(line, "event:") && strings.TrimSpace(line) != "event: agent_advisory" {
				t.Fatalf("event line %q", line)
			}
			got = line
		}
		if !strings.Contains(got, `"sender_handle":"@acme.alice"`) {
			t.Fatalf("data line %q", got)
		}
		wantError(t, e.do("POST", "/frames", alice, map[string]any{"scope": "@acme.bob", "frame": frame(t, "@acme.bob", "@acme.bob")}),
			http.StatusForbidden, "sender-identity-mismatch")
	})
}
