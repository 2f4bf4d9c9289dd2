package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// redactedMark is the redaction object of a redacted event (docs/api.md,
// "Redacted events").
type redactedMark struct {
	Redacted *struct {
		At     int64  `json:"at"`
		By     string `json:"by"`
		Reason string `json:"reason"`
	} `json:"redacted"`
}

// TestRedactionEveryReadPath: an operator redacts a message; its content is
// then gone from every read path, over the wire, while its place in the log
// stays: the agent and operator events APIs, replay after a reconnect (a
// WebSocket whose cursor is behind it, served from the hub's ring), MCP
// read_events and wait_for_events, search, the operator's JSON Lines
// export, a Chorus redelivery, a send-and-end copy in session.invited and
// `aspd export`.
func TestRedactionEveryReadPath(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--chorus-key-file", chorusKeyFile(t), "--chorus-allow-loopback",
			"--chorus-retry-schedule", "100ms", "--chorus-poll-interval", "50ms")
		alice := s.provision("@alice.redact", "open")
		bob := s.provision("@bob.redact", "open")
		carol := s.provision("@carol.redact", "open")
		bot := s.provision("@bot.redact", "open")
		h := newHook(t)
		registerHook(t, s, bot.handle, h.srv.URL+"/inbox")
		const secret = "hunter2-quokka"
		gone := func(what string, b []byte) {
			t.Helper()
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s still holds the redacted content: %s", what, b)
			}
		}

		sid := alice.createSession(map[string]any{"invite": []string{bob.handle, carol.handle, bot.handle}, "topic": "ops"})
		bob.join(sid)
		carol.join(sid)
		bot.join(sid)
		ws := bob.connect()
		for e := ws.next(); e.Type != "session.joined" || e.field("agent") != bot.handle; e = ws.next() {
		}
		ws.close() // bob's cursor stays before the message
		seq := alice.send(sid, "the password is "+secret)
		after := alice.send(sid, "never mind")
		msg := h.nextOf("session.message")
		if !strings.Contains(string(msg.body), secret) || msg.p.Message.Sequence != seq {
			t.Fatalf("the hook got %s", msg.body)
		}
		mcpCarol := mcpConnect(t, s, carol)
		if hits := s.search(t, url.Values{"q": {"quokka"}}); len(hits.Hits) != 1 {
			t.Fatalf("search before the redaction: %d hits", len(hits.Hits))
		}

		// Refusals change nothing.
		path := "/sessions/" + sid + "/events/"
		code, body := s.adminDo("POST", path+itoa(seq)+"/redact", map[string]any{})
		wantError(t, "no reason", code, body, http.StatusBadRequest, "invalid_request")
		code, body = s.adminDo("POST", path+itoa(seq)+"/redact", map[string]any{"reason": strings.Repeat("x", 501)})
		wantError(t, "long reason", code, body, http.StatusBadRequest, "invalid_request")
		code, body = s.adminDo("POST", path+"1/redact", map[string]any{"reason": "x"})
		wantError(t, "a session.invited", code, body, http.StatusConflict, "not_redactable")
		code, body = s.adminDo("POST", path+"999/redact", map[string]any{"reason": "x"})
		wantError(t, "no such event", code, body, http.StatusNotFound, "not_found")
		code, body = s.adminDo("POST", path+"x/redact", map[string]any{"reason": "x"})
		wantError(t, "no such sequence", code, body, http.StatusNotFound, "not_found")
		code, body = request(t, "POST", s.url+"/admin/v1"+path+itoa(seq)+"/redact", alice.token, map[string]any{"reason": "x"})
		if code != http.StatusUnauthorized {
			t.Fatalf("an agent token redacts: %d %s", code, body)
		}
		if raw := alice.rawEvents(sid); !bytes.Contains(raw[seq-1], []byte(secret)) {
			t.Fatalf("a refused redaction changed the event: %s", raw[seq-1])
		}

		// The redaction.
		code, body = s.adminDo("POST", path+itoa(seq)+"/redact", map[string]any{"reason": "a password"})
		if code != http.StatusOK {
			t.Fatalf("redact: %d %s", code, body)
		}
		tomb := decodeEvent(t, body)
		var mark redactedMark
		mustUnmarshal(t, body, &mark)
		if tomb.Sequence != seq || tomb.Type != "session.message" || tomb.field("content") != "[redacted]" || tomb.field("sender") != alice.handle ||
			mark.Redacted == nil || mark.Redacted.By != "bootstrap" || mark.Redacted.Reason != "a password" || mark.Redacted.At == 0 {
			t.Fatalf("redaction answer %s", body)
		}
		gone("the answer", body)
		code, again := s.adminDo("POST", path+itoa(seq)+"/redact", map[string]any{"reason": "another"})
		if code != http.StatusOK || !bytes.Equal(again, body) {
			t.Fatalf("redacting again: %d %s, want 200 and the same tombstone %s", code, again, body)
		}

		// The agent events API, for each participant: same place, no content.
		for _, a := range []*agent{alice, bob, carol} {
			raw := a.rawEvents(sid)
			if int64(len(raw)) < after || !bytes.Equal(raw[seq-1], body) {
				t.Fatalf("%s reads %d events, event %d: %s", a.handle, len(raw), seq, raw[seq-1])
			}
			for _, r := range raw {
				gone(a.handle+"'s events", r)
			}
		}
		// The operator's events API.
		code, body = s.adminDo("GET", "/sessions/"+sid+"/events", nil)
		if code != http.StatusOK {
			t.Fatalf("admin events: %d", code)
		}
		gone("the operator's events", body)
		// Replay after a reconnect, from bob's cursor.
		ws = bob.connect()
		var replayed []event
		for {
			e := ws.next()
			if e.SessionID != sid {
				continue
			}
			replayed = append(replayed, e)
			if e.Sequence == after {
				break
			}
		}
		for _, e := range replayed {
			gone("the replay", e.Raw)
			if e.Sequence == seq && !bytes.Contains(e.Raw, []byte(`"redacted"`)) {
				t.Fatalf("the replayed event is not marked: %s", e.Raw)
			}
		}
		if replayed[0].Sequence > seq {
			t.Fatalf("the replay started at %d, after the redacted event %d", replayed[0].Sequence, seq)
		}
		// MCP: read_events and wait_for_events.
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		mcpCarol.ok("read_events", map[string]any{"session_id": sid}, &page)
		if len(page.Events) == 0 {
			t.Fatal("read_events: no events")
		}
		for _, e := range page.Events {
			gone("read_events", e)
		}
		waited, _ := mcpCarol.wait(1, 100)
		for _, e := range waited {
			gone("wait_for_events", e.Raw)
		}
		// Search.
		if hits := s.search(t, url.Values{"q": {"quokka"}}); len(hits.Hits) != 0 {
			t.Fatalf("search finds the redacted text: %+v", hits.Hits)
		}
		if hits := s.search(t, url.Values{"q": {"mind"}}); len(hits.Hits) != 1 {
			t.Fatalf("search lost the other message: %+v", hits.Hits)
		}
		// The operator's export.
		code, body = s.adminDo("GET", "/export?session="+sid, nil)
		if code != http.StatusOK || !bytes.Contains(body, []byte(`"redacted"`)) {
			t.Fatalf("export: %d %s", code, body)
		}
		gone("the export", body)
		// A Chorus redelivery sends the event as it is now.
		code, body = s.adminDo("POST", "/agents/"+bot.handle+"/chorus/deliveries/"+msg.id+"/redeliver", nil)
		if code != http.StatusAccepted {
			t.Fatalf("redeliver: %d %s", code, body)
		}
		var re hookDelivery
		for re = h.next(); re.id != msg.id; re = h.next() {
		}
		gone("the Chorus redelivery", re.body)
		if re.p.Message.Sequence != seq || !bytes.Contains(re.body, []byte(`"redacted"`)) {
			t.Fatalf("redelivery %s", re.body)
		}

		// A send-and-end message: its copies in session.invited go too.
		sae := alice.createSession(map[string]any{"invite": []string{bob.handle},
			"initial_message": map[string]any{"content": "fyi " + secret}, "end_after_send": true})
		code, body = s.adminDo("POST", "/sessions/"+sae+"/events/1/redact", map[string]any{"reason": "again"})
		if code != http.StatusOK {
			t.Fatalf("redact the send-and-end message: %d %s", code, body)
		}
		for _, r := range bob.rawEvents(sae) {
			gone("the send-and-end invitation", r)
		}

		// `aspd export` (the portable file) holds only tombstones.
		s.stop()
		file := filepath.Join(t.TempDir(), "network.jsonl")
		if code, _, stderr := portableRun(t, nil, nil, "export", "--database-url", dbURL, "-o", file); code != 0 {
			t.Fatalf("aspd export: exit %d\n%s", code, stderr)
		}
		dump, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		gone("aspd export", dump)
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestRetentionPurgesEndedSessions: with --retention-closed-sessions the
// daemon's sweeper purges a session ended longer ago than the period, says
// so in its log and metrics, and leaves an active session alone (the store
// and app tests cover the rest with a clock they control).
func TestRetentionPurgesEndedSessions(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--retention-closed-sessions", "1s", "--retention-interval", "100ms", "--retention-batch", "2")
		alice := s.provision("@alice.retain", "open")
		bob := s.provision("@bob.retain", "open")
		ended := alice.createSession(map[string]any{"invite": []string{bob.handle}})
		bob.join(ended)
		for i := 0; i < 3; i++ {
			alice.send(ended, "old news")
		}
		alice.end(ended)
		active := alice.createSession(map[string]any{"invite": []string{bob.handle}})
		alice.send(active, "still talking")
		waitFor(t, "the ended session purged", func() bool {
			code, _ := s.adminDo("GET", "/sessions/"+ended, nil)
			return code == http.StatusNotFound
		})
		code, _ := alice.do("GET", "/sessions/"+ended+"/events", nil)
		if code != http.StatusNotFound {
			t.Fatalf("a participant reads a purged session: %d", code)
		}
		if code, body := s.adminDo("GET", "/sessions/"+active, nil); code != http.StatusOK {
			t.Fatalf("the active session: %d %s", code, body)
		}
		alice.send(active, "and on")
		code, metrics := request(t, "GET", s.url+"/metrics", s.admin, nil)
		if code != http.StatusOK || !strings.Contains(string(metrics), "aspd_retention_purged_sessions_total 1\n") ||
			!strings.Contains(string(metrics), "aspd_retention_purged_events_total 6\n") {
			t.Fatalf("metrics: %d\n%s", code, grepLines(string(metrics), "aspd_retention"))
		}
		if !strings.Contains(s.logs(), "retention: purged a session") {
			t.Fatalf("no log line of the purge")
		}
	})
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestClusterRedactionForgetsRings: a redaction made through one node
// reaches the ring of another, which holds the message because an agent
// connected there received it live: an agent that connects to that node
// afterwards replays the tombstone. Without the cluster's Forget, that ring
// would serve the content until it is evicted (minutes). Each probe is a
// participant whose cursor is inside n1's ring, just before the message.
func TestClusterRedactionForgetsRings(t *testing.T) {
	nodes := startCluster(t, 2, clusterFast...)
	n0, n1 := nodes[0], nodes[1]
	alice := n0.provision("@alice.credact", "open")
	carol := n0.provision("@carol.credact", "open").on(n1)
	const probes = 20
	var waiting []*agent
	invite := []string{carol.handle}
	for i := 0; i < probes; i++ {
		p := n0.provision("@probe"+itoa(int64(i))+".credact", "open")
		waiting = append(waiting, p.on(n1))
		invite = append(invite, p.handle)
	}
	sid := alice.createSession(map[string]any{"invite": invite})
	carol.join(sid)
	for _, p := range waiting {
		p.join(sid)
	}
	ws := carol.connect() // on n1: n1's ring follows the session from here
	warm := alice.send(sid, "warming up")
	for e := ws.next(); e.Sequence != warm; e = ws.next() {
	}
	// Each probe reads up to the warm-up message on n1 and leaves: its
	// cursor is then inside n1's ring, so its next replay reads the ring.
	for _, p := range waiting {
		st := p.connect()
		for e := st.next(); e.SessionID != sid || e.Sequence < warm; e = st.next() {
		}
		st.close()
	}
	const secret = "cluster-secret-wombat"
	seq := alice.send(sid, "psst "+secret)
	for e := ws.next(); e.Sequence != seq; e = ws.next() {
	}
	if code, body := n0.adminDo("POST", "/sessions/"+sid+"/events/"+itoa(seq)+"/redact", map[string]any{"reason": "secret"}); code != http.StatusOK {
		t.Fatalf("redact on n0: %d %s", code, body)
	}
	next := 0
	waitFor(t, "n1 replays the tombstone", func() bool {
		if next == probes {
			t.Fatalf("all %d probes on n1 replayed the content", probes)
		}
		st := waiting[next].connect()
		next++
		defer st.close()
		for {
			e := st.next()
			if e.SessionID == sid && e.Sequence == seq {
				return !strings.Contains(string(e.Raw), secret)
			}
		}
	})
}
