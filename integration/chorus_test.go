package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	_ "modernc.org/sqlite" // reading the SQLite store at rest
)

// ---- a webhook agent: an httptest server that records what it is sent ----

type chorusPayload struct {
	Channel struct {
		ID      string `json:"id"`
		Name    string `json:"name"`
		Service string `json:"service"`
		Context string `json:"context"`
	} `json:"channel"`
	Message struct {
		ID       string          `json:"id"`
		Sender   string          `json:"sender"`
		Content  string          `json:"content"`
		Type     string          `json:"type"`
		Sequence int64           `json:"sequence"`
		Event    json.RawMessage `json:"event"`
	} `json:"message"`
	Callback string `json:"callback"`
	MCP      struct {
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	} `json:"mcp"`
}

// hookDelivery is one POST the hook received and what it answered.
type hookDelivery struct {
	id     string
	header http.Header
	body   []byte
	status int
	p      chorusPayload
}

type hook struct {
	t      testing.TB
	srv    *httptest.Server
	mu     sync.Mutex
	script []int // statuses to answer, in order; 200 once spent
	got    chan hookDelivery
}

func newHook(t testing.TB) *hook {
	h := &hook{t: t, got: make(chan hookDelivery, 100)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		status := http.StatusOK
		if len(h.script) > 0 {
			status, h.script = h.script[0], h.script[1:]
		}
		h.mu.Unlock()
		d := hookDelivery{id: r.Header.Get("webhook-id"), header: r.Header.Clone(), body: body, status: status}
		_ = json.Unmarshal(body, &d.p)
		w.WriteHeader(status)
		h.got <- d
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// answer sets the statuses of the next POSTs.
func (h *hook) answer(statuses ...int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.script = statuses
}

func (h *hook) next() hookDelivery {
	h.t.Helper()
	select {
	case d := <-h.got:
		return d
	case <-time.After(15 * time.Second):
		h.t.Fatalf("no Chorus delivery within 15s")
	}
	return hookDelivery{}
}

// nextOf skips deliveries until one of event type typ arrives.
func (h *hook) nextOf(typ string) hookDelivery {
	h.t.Helper()
	for {
		if d := h.next(); d.p.Message.Type == typ {
			return d
		}
	}
}

func (h *hook) quiet(d time.Duration) {
	h.t.Helper()
	select {
	case got := <-h.got:
		h.t.Fatalf("unexpected Chorus delivery: %s", got.body)
	case <-time.After(d):
	}
}

// verify checks a delivery's signature with the Standard Webhooks library.
func verify(t testing.TB, secret string, d hookDelivery) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(d.body, d.header); err != nil {
		t.Fatalf("signature of delivery %s does not verify: %v", d.id, err)
	}
	other, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if other.Verify(d.body, d.header) == nil {
		t.Fatalf("delivery %s verifies with a wrong secret", d.id)
	}
}

// registerHook sets the agent's connection string and returns its secret.
func registerHook(t testing.TB, s *server, handle, connection string) string {
	t.Helper()
	code, body := s.adminDo("PUT", "/agents/"+handle+"/chorus", map[string]any{"connection_string": connection})
	if code != http.StatusOK {
		t.Fatalf("register chorus for %s: %d %s", handle, code, body)
	}
	if bytes.Contains(body, []byte(connection)) {
		t.Fatalf("the registration answer echoes the connection string: %s", body)
	}
	var r struct {
		SigningSecret string `json:"signing_secret"`
	}
	mustUnmarshal(t, body, &r)
	if !strings.HasPrefix(r.SigningSecret, "whsec_") {
		t.Fatalf("signing secret %q", r.SigningSecret)
	}
	return r.SigningSecret
}

type deliveryRecord struct {
	ID          string `json:"id"`
	Sequence    int64  `json:"sequence"`
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	LastStatus  int    `json:"last_status"`
	LastError   string `json:"last_error"`
	AgentStatus string `json:"agent_status"`
}

func deliveries(t testing.TB, s *server, handle string) []deliveryRecord {
	t.Helper()
	code, body := s.adminDo("GET", "/agents/"+handle+"/chorus/deliveries?limit=100", nil)
	if code != http.StatusOK {
		t.Fatalf("deliveries of %s: %d %s", handle, code, body)
	}
	var r struct {
		Deliveries []deliveryRecord `json:"deliveries"`
	}
	mustUnmarshal(t, body, &r)
	return r.Deliveries
}

func record(t testing.TB, s *server, handle, id string) deliveryRecord {
	t.Helper()
	for _, d := range deliveries(t, s, handle) {
		if d.ID == id {
			return d
		}
	}
	t.Fatalf("no delivery record %s for %s", id, handle)
	return deliveryRecord{}
}

// chorusKeyFile writes a fresh Chorus key for a test server.
func chorusKeyFile(t testing.TB) string {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	p := filepath.Join(t.TempDir(), "chorus.key")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(raw)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func callback(t testing.TB, url string, body any) (int, []byte) {
	t.Helper()
	return request(t, "POST", url, "", body)
}

// TestChorusConversation: a webhook agent receives an invitation and a
// message (both signed), joins through the MCP configuration it was handed,
// replies through the callback (seen by a WebSocket participant), reports a
// status (no session event); forged callbacks are 404; failed attempts are
// retried as one logical delivery, in order.
func TestChorusConversation(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--chorus-key-file", chorusKeyFile(t), "--chorus-allow-loopback",
			"--chorus-retry-schedule", "100ms,100ms,100ms", "--chorus-poll-interval", "50ms")
		alice := s.provision("@alice.chorus", "open")
		bot := s.provision("@bot.chorus", "open")
		h := newHook(t)
		secret := registerHook(t, s, bot.handle, h.srv.URL+"/inbox/sk_test_secret")
		ws := alice.connect()

		sid := alice.createSession(map[string]any{"invite": []string{bot.handle}, "topic": "weather",
			"initial_message": map[string]any{"content": "hi bot"}})
		inv := h.next()
		verify(t, secret, inv)
		if inv.p.Message.Type != "session.invited" || inv.p.Channel.ID != sid || inv.p.Channel.Name != "weather" || inv.p.Message.Sender != alice.handle {
			t.Fatalf("invitation delivery: %s", inv.body)
		}
		if inv.p.Callback == "" || inv.p.MCP.URL != s.url+"/mcp" || !strings.HasPrefix(inv.p.MCP.Headers["Authorization"], "Bearer ") {
			t.Fatalf("invitation delivery lacks callback or MCP: %s", inv.body)
		}

		// Join through the MCP configuration of the delivery, with the SDK client.
		tok := strings.TrimPrefix(inv.p.MCP.Headers["Authorization"], "Bearer ")
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "chorus-agent", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: inv.p.MCP.URL, HTTPClient: &http.Client{Transport: bearer{tok, http.DefaultTransport}},
				DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("mcp connect with the delivery's config: %v", err)
		}
		defer cs.Close()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "join_session", Arguments: map[string]any{"session_id": sid}})
		if err != nil || res.IsError {
			t.Fatalf("join_session over MCP: %v %+v", err, res)
		}
		for ws.next().Type != "session.joined" {
		}

		// The join makes the transcript visible: the first message arrives.
		msg := h.nextOf("session.message")
		verify(t, secret, msg)
		if msg.p.Message.Content != "hi bot" || msg.p.Message.Sender != alice.handle || msg.p.Channel.ID != sid {
			t.Fatalf("message delivery: %s", msg.body)
		}
		if msg.id == inv.id || msg.p.Callback == inv.p.Callback {
			t.Fatalf("two deliveries share an id or a callback")
		}

		// Reply through the callback; a retried POST is the same message.
		code, body := callback(t, msg.p.Callback, map[string]any{"type": "message", "content": "Oslo is 3°C"})
		if code != http.StatusOK {
			t.Fatalf("callback message: %d %s", code, body)
		}
		code2, body2 := callback(t, msg.p.Callback, map[string]any{"type": "message", "content": "Oslo is 3°C"})
		if code2 != http.StatusOK || !bytes.Equal(body, body2) {
			t.Fatalf("retried callback: %d %s, first %s", code2, body2, body)
		}
		reply := ws.expect("session.message")[0]
		wantMessage(t, reply, sid, reply.Sequence, bot.handle, "Oslo is 3°C")

		// tool_call is recorded in the transcript as a data part.
		code, body = callback(t, msg.p.Callback, map[string]any{"type": "tool_call", "id": "tc_1", "name": "web_search", "args": map[string]any{"q": "oslo"}})
		if code != http.StatusOK {
			t.Fatalf("callback tool_call: %d %s", code, body)
		}
		tc := ws.expect("session.message")[0]
		if !bytes.Contains(tc.Payload, []byte(`"type":"data"`)) || !bytes.Contains(tc.Payload, []byte(`web_search`)) {
			t.Fatalf("tool_call event: %s", tc.Raw)
		}

		// status is not a session event; it lands in the delivery record.
		before := len(alice.events(sid))
		code, body = callback(t, msg.p.Callback, map[string]any{"type": "status", "status": "searching weather data"})
		if code != http.StatusOK {
			t.Fatalf("callback status: %d %s", code, body)
		}
		ws.quiet(300 * time.Millisecond)
		if after := len(alice.events(sid)); after != before {
			t.Fatalf("a status callback appended %d session events", after-before)
		}
		if r := record(t, s, bot.handle, msg.id); r.AgentStatus != "searching weather data" || r.State != "delivered" {
			t.Fatalf("delivery record after status: %+v", r)
		}

		// Invalid callbacks are refused like REST; forged ones are 404.
		code, body = callback(t, msg.p.Callback, map[string]any{"type": "message", "content": "x", "status": "y"})
		wantError(t, "callback with a foreign field", code, body, http.StatusBadRequest, "invalid_request")
		unknownCode, unknownBody := request(t, "POST", s.url+"/no/such/path", "", map[string]any{"type": "status", "status": "x"})
		forged := msg.p.Callback[:len(msg.p.Callback)-4] + "AAAA"
		code, body = callback(t, forged, map[string]any{"type": "message", "content": "forged"})
		if code != http.StatusNotFound || code != unknownCode || !bytes.Equal(body, unknownBody) {
			t.Fatalf("forged callback: %d %s; unknown path: %d %s", code, body, unknownCode, unknownBody)
		}

		// 500, 500, then 200: one logical delivery (same webhook-id), and
		// the next message only after it.
		h.answer(http.StatusInternalServerError, http.StatusInternalServerError)
		alice.send(sid, "m1")
		alice.send(sid, "m2")
		var got []hookDelivery
		for len(got) < 4 {
			got = append(got, h.nextOf("session.message"))
		}
		for i, want := range []struct {
			content string
			status  int
		}{{"m1", 500}, {"m1", 500}, {"m1", 200}, {"m2", 200}} {
			if got[i].p.Message.Content != want.content || got[i].status != want.status {
				t.Fatalf("attempt %d: %q answered %d, want %q %d", i, got[i].p.Message.Content, got[i].status, want.content, want.status)
			}
			verify(t, secret, got[i])
		}
		if got[0].id != got[1].id || got[1].id != got[2].id || got[2].id == got[3].id {
			t.Fatalf("webhook-ids %s %s %s %s: want one id for m1's attempts", got[0].id, got[1].id, got[2].id, got[3].id)
		}
		if r := record(t, s, bot.handle, got[0].id); r.State != "delivered" || r.Attempts != 3 || r.LastStatus != 200 {
			t.Fatalf("record of m1: %+v", r)
		}

		// A permanent 4xx dead-letters; the operator redelivers by hand.
		h.answer(http.StatusGone)
		alice.send(sid, "m3")
		gone := h.nextOf("session.message")
		waitFor(t, "dead letter", func() bool { return record(t, s, bot.handle, gone.id).State == "failed" })
		if code, body := s.adminDo("POST", "/agents/"+bot.handle+"/chorus/deliveries/"+gone.id+"/redeliver", nil); code != http.StatusAccepted {
			t.Fatalf("redeliver: %d %s", code, body)
		}
		again := h.nextOf("session.message")
		if again.id != gone.id || again.p.Message.Content != "m3" || again.status != 200 {
			t.Fatalf("redelivery: %s (%d), want id %s", again.body, again.status, gone.id)
		}

		// The MCP token dies with the agent's own token.
		if code, body := s.adminDo("POST", "/agents/"+bot.handle+"/token", struct{}{}); code != http.StatusOK {
			t.Fatalf("rotate token: %d %s", code, body)
		}
		if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_sessions", Arguments: map[string]any{}}); err == nil && !res.IsError {
			t.Fatalf("the MCP token still works after the agent's token was rotated")
		}
	})
}

// waitFor polls cond for up to 10s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestChorusRestartRotationExpiry: a retry pending across an aspd restart
// is still delivered (same webhook-id); a rotation sends even queued
// retries to the new endpoint and nothing to the old; an expired callback
// is 404.
func TestChorusRestartRotationExpiry(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--chorus-key-file", chorusKeyFile(t), "--chorus-allow-loopback",
			"--chorus-retry-schedule", "2s,2s,2s", "--chorus-poll-interval", "50ms", "--chorus-callback-ttl", "1500ms")
		alice := s.provision("@alice.chorus", "open")
		bot := s.provision("@bot.chorus", "open")
		h := newHook(t)
		secret := registerHook(t, s, bot.handle, h.srv.URL+"/a")
		sid := alice.createSession(map[string]any{"invite": []string{bot.handle}})
		inv := h.nextOf("session.invited")
		invAt := time.Now()
		bot.join(sid)

		// Restart while a retry is pending.
		h.answer(http.StatusServiceUnavailable)
		alice.send(sid, "r1")
		first := h.nextOf("session.message")
		if first.status != http.StatusServiceUnavailable {
			t.Fatalf("first attempt answered %d", first.status)
		}
		s.stop()
		s.restart()
		retried := h.nextOf("session.message")
		verify(t, secret, retried)
		if retried.id != first.id || retried.p.Message.Content != "r1" || retried.status != http.StatusOK {
			t.Fatalf("after restart: %s (%d), want the retry of %s", retried.body, retried.status, first.id)
		}

		// The invitation's callback has expired by now.
		time.Sleep(time.Until(invAt.Add(1600 * time.Millisecond)))
		code, body := callback(t, inv.p.Callback, map[string]any{"type": "message", "content": "late"})
		if code != http.StatusNotFound {
			t.Fatalf("expired callback: %d %s", code, body)
		}

		// Rotation: a retry queued for the old endpoint goes to the new one.
		h.answer(http.StatusInternalServerError, http.StatusInternalServerError, http.StatusInternalServerError)
		alice.send(sid, "r2")
		old := h.nextOf("session.message")
		h2 := newHook(t)
		secret2 := registerHook(t, s, bot.handle, h2.srv.URL+"/b")
		moved := h2.nextOf("session.message")
		verify(t, secret2, moved)
		if moved.id != old.id || moved.p.Message.Content != "r2" {
			t.Fatalf("after rotation: %s, want the retry of %s", moved.body, old.id)
		}
		alice.send(sid, "r3")
		if d := h2.nextOf("session.message"); d.p.Message.Content != "r3" {
			t.Fatalf("after rotation: %s", d.body)
		}
		h.quiet(500 * time.Millisecond)

		// Removal: nothing more is delivered.
		if code, body := s.adminDo("DELETE", "/agents/"+bot.handle+"/chorus", nil); code != http.StatusOK {
			t.Fatalf("delete chorus: %d %s", code, body)
		}
		alice.send(sid, "r4")
		h2.quiet(500 * time.Millisecond)
	})
}

// TestChorusPrivateAddressRefused: without --chorus-allow-loopback, a
// loopback endpoint receives nothing and the delivery record says why.
func TestChorusPrivateAddressRefused(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--chorus-key-file", chorusKeyFile(t), "--chorus-poll-interval", "50ms")
		alice := s.provision("@alice.chorus", "open")
		bot := s.provision("@bot.chorus", "open")
		h := newHook(t)
		secret := registerHook(t, s, bot.handle, h.srv.URL+"/inbox")
		alice.createSession(map[string]any{"invite": []string{bot.handle}})
		var rec deliveryRecord
		waitFor(t, "refused delivery", func() bool {
			ds := deliveries(t, s, bot.handle)
			if len(ds) == 1 {
				rec = ds[0]
			}
			return rec.State == "failed"
		})
		if !strings.Contains(rec.LastError, "SSRF") || !strings.Contains(rec.LastError, "127.0.0.1") {
			t.Fatalf("record of a refused delivery: %+v", rec)
		}
		if strings.Contains(rec.LastError, "/inbox") {
			t.Fatalf("the record quotes the connection string: %+v", rec)
		}
		h.quiet(300 * time.Millisecond)
		if strings.Contains(s.logs(), "/inbox") {
			t.Fatalf("the log holds the connection string")
		}

		// At rest, the connection string and the signing secret are sealed.
		driver := "sqlite"
		if strings.HasPrefix(dbURL, "postgres") {
			driver = "pgx"
		}
		db, err := sql.Open(driver, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var urlSealed, secretSealed []byte
		if err := db.QueryRow(`SELECT url_sealed, secret_sealed FROM chorus_endpoints WHERE handle = $1`, bot.handle).Scan(&urlSealed, &secretSealed); err != nil {
			t.Fatal(err)
		}
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		for _, leak := range [][]byte{[]byte("/inbox"), []byte(h.srv.URL), []byte(secret), []byte(strings.TrimPrefix(secret, "whsec_")), raw} {
			if bytes.Contains(urlSealed, leak) || bytes.Contains(secretSealed, leak) {
				t.Fatalf("a secret is stored in clear: %q", leak)
			}
		}
		if len(urlSealed) < len(h.srv.URL+"/inbox") || len(secretSealed) < len(raw) {
			t.Fatalf("sealed values too short: %d %d", len(urlSealed), len(secretSealed))
		}
	})
}

// TestChorusFailingPresence: an endpoint that keeps failing past
// --chorus-failing-after makes its agent offline (session.disconnected, as
// for a socket); its next success brings it back (session.reconnected).
func TestChorusFailingPresence(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--chorus-key-file", chorusKeyFile(t), "--chorus-allow-loopback", "--chorus-poll-interval", "50ms",
			"--chorus-retry-schedule", strings.Repeat("100ms,", 20)+"100ms", "--chorus-failing-after", "300ms")
		alice := s.provision("@alice.chorus", "open")
		bot := s.provision("@bot.chorus", "open")
		h := newHook(t)
		registerHook(t, s, bot.handle, h.srv.URL+"/in")
		sid := alice.createSession(map[string]any{"invite": []string{bot.handle}})
		h.nextOf("session.invited")
		bot.join(sid)
		ws := alice.connect()
		for ws.next().Type != "session.joined" {
		}
		// A healthy endpoint keeps the agent online when its last WebSocket
		// closes.
		botWS := bot.connect()
		botWS.close()
		ws.quiet(700 * time.Millisecond)

		fails := make([]int, 8)
		for i := range fails {
			fails[i] = http.StatusBadGateway
		}
		h.answer(fails...)
		alice.send(sid, "are you there?")
		for e := ws.next(); e.Type != "session.disconnected"; e = ws.next() {
		}
		var info struct {
			Failing bool `json:"failing"`
		}
		_, body := s.adminDo("GET", "/agents/"+bot.handle+"/chorus", nil)
		mustUnmarshal(t, body, &info)
		if !info.Failing {
			t.Fatalf("endpoint not failing after session.disconnected: %s", body)
		}
		e := ws.next()
		for e.Type == "session.message" {
			e = ws.next()
		}
		if e.Type != "session.reconnected" || e.field("agent") != bot.handle {
			t.Fatalf("after recovery: %s", e.Raw)
		}
	})
}
