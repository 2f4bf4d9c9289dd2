package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The operator routes the console's actions and lists use (issue 22), over
// HTTP on both stores: end a session, remove a participant, download a
// transcript, the overview, and the richer agent and session listings.

// requestHeaders is request for a GET whose answer's headers matter.
func requestHeaders(t testing.TB, method, url, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, body
}

// agentRow is an agent as GET /admin/v1/agents lists it, with its presence.
type agentRow struct {
	Handle      string   `json:"handle"`
	Online      bool     `json:"online"`
	LastSeenAt  int64    `json:"last_seen_at"`
	Connections int      `json:"connections"`
	Doors       []string `json:"doors"`
}

// adminAgents is GET /admin/v1/agents by handle.
func adminAgents(t testing.TB, s *server) map[string]agentRow {
	t.Helper()
	code, body := s.adminDo("GET", "/agents", nil)
	if code != http.StatusOK {
		t.Fatalf("agents: %d %s", code, body)
	}
	var list struct {
		Agents []agentRow `json:"agents"`
	}
	mustUnmarshal(t, body, &list)
	out := make(map[string]agentRow, len(list.Agents))
	for _, a := range list.Agents {
		out[a.Handle] = a
	}
	return out
}

func TestConsoleOperatorActionsAPI(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@oa.alice", "open")
		bob := s.provision("@oa.bob", "open")
		carol := s.provision("@oa.carol", "open")
		sid := alice.createSession(map[string]any{"invite": []string{bob.handle, carol.handle}, "topic": "ops",
			"initial_message": map[string]any{"content": "hello"}})
		bob.join(sid)
		alice.send(sid, "second")
		ws := bob.connect()
		defer ws.close()
		// until skips bob's replay up to the next event of type typ.
		until := func(typ string) event {
			t.Helper()
			for {
				if e := ws.next(); e.Type == typ {
					return e
				}
			}
		}

		t.Run("listings", func(t *testing.T) {
			code, body := s.adminDo("GET", "/sessions?participant=@oa.alice", nil)
			if code != http.StatusOK {
				t.Fatalf("list: %d %s", code, body)
			}
			var list struct {
				Sessions []struct {
					ID             string `json:"id"`
					MessageCount   int64  `json:"message_count"`
					LastSequence   int64  `json:"last_sequence"`
					LastActivityAt int64  `json:"last_activity_at"`
					CreatedAt      int64  `json:"created_at"`
				} `json:"sessions"`
			}
			mustUnmarshal(t, body, &list)
			if len(list.Sessions) != 1 || list.Sessions[0].ID != sid {
				t.Fatalf("list: %s", body)
			}
			r := list.Sessions[0]
			evs := alice.events(sid)
			if r.MessageCount != 2 || r.LastSequence != evs[len(evs)-1].Sequence || r.LastActivityAt < r.CreatedAt {
				t.Fatalf("activity of %s: %+v (log of %d events)", sid, r, len(evs))
			}

			// Presence is written just after the WebSocket attaches: wait for it.
			var rows map[string]agentRow
			waitFor(t, "bob online in the agent list", func() bool {
				rows = adminAgents(t, s)
				return rows[bob.handle].Online
			})
			if a := rows[bob.handle]; a.Connections != 1 || len(a.Doors) != 1 || a.Doors[0] != "websocket" || a.LastSeenAt != 0 {
				t.Fatalf("bob, connected: %+v", a)
			}
			if a, ok := rows[carol.handle]; !ok || a.Online || a.Connections != 0 || len(a.Doors) != 0 || a.LastSeenAt != 0 {
				t.Fatalf("carol, never connected: %+v", a)
			}
		})

		t.Run("transcript", func(t *testing.T) {
			code, hdr, body := requestHeaders(t, "GET", s.url+"/admin/v1/sessions/"+sid+"/transcript", s.admin)
			if code != http.StatusOK || hdr.Get("Content-Type") != "application/x-ndjson" ||
				hdr.Get("Content-Disposition") != `attachment; filename="`+sid+`.jsonl"` {
				t.Fatalf("transcript: %d %v", code, hdr)
			}
			lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
			evs := alice.events(sid)
			if len(lines) != len(evs) {
				t.Fatalf("transcript has %d lines, the log %d events", len(lines), len(evs))
			}
			for i, l := range lines {
				if e := decodeEvent(t, []byte(l)); e.Sequence != int64(i+1) || e.SessionID != sid {
					t.Fatalf("line %d: %s", i+1, l)
				}
			}
			code, body = s.adminDo("GET", "/sessions/sess_NOSUCH/transcript", nil)
			wantError(t, "transcript of an unknown session", code, body, http.StatusNotFound, "not_found")
			code, body = s.adminDo("GET", "/sessions/"+sid+"/transcript?x=1", nil)
			if code != http.StatusBadRequest {
				t.Fatalf("transcript with an unknown parameter: %d %s", code, body)
			}
		})

		t.Run("remove participant", func(t *testing.T) {
			code, body := s.adminDo("DELETE", "/sessions/"+sid+"/participants/@oa.nobody", nil)
			wantError(t, "remove a non-participant", code, body, http.StatusNotFound, "not_found")
			code, body = s.adminDo("DELETE", "/sessions/"+sid+"/participants/"+carol.handle, nil)
			if code != http.StatusOK || !strings.Contains(string(body), `{"handle":"@oa.carol","status":"left"`) {
				t.Fatalf("remove carol: %d %s", code, body)
			}
			// The removal is an ordinary session.left, seen live by the others.
			if e := until("session.left"); e.field("agent") != carol.handle {
				t.Fatalf("bob saw %s", e.Raw)
			}
			code, body = s.adminDo("DELETE", "/sessions/"+sid+"/participants/"+carol.handle, nil)
			wantError(t, "remove carol twice", code, body, http.StatusNotFound, "not_found")
		})

		t.Run("end session", func(t *testing.T) {
			code, body := s.adminDo("POST", "/sessions/"+sid+"/end", map[string]any{"x": 1})
			if code != http.StatusBadRequest || alice.getSession(sid).State != "active" {
				t.Fatalf("end with an unknown field: %d %s", code, body)
			}
			code, body = s.adminDo("POST", "/sessions/"+sid+"/end", nil)
			if code != http.StatusOK || !strings.Contains(string(body), `"state":"ended"`) {
				t.Fatalf("end: %d %s", code, body)
			}
			if e := until("session.ended"); e.field("ended_by") != "" {
				t.Fatalf("bob saw %s", e.Raw)
			}
			code, body = s.adminDo("POST", "/sessions/"+sid+"/end", nil)
			wantError(t, "end twice", code, body, http.StatusConflict, "session_ended")
			code, body = s.adminDo("DELETE", "/sessions/"+sid+"/participants/"+bob.handle, nil)
			wantError(t, "remove from an ended session", code, body, http.StatusConflict, "session_ended")
			code, body = s.adminDo("POST", "/sessions/sess_NOSUCH/end", nil)
			wantError(t, "end an unknown session", code, body, http.StatusNotFound, "not_found")
		})

		t.Run("overview", func(t *testing.T) {
			code, body := s.adminDo("GET", "/overview", nil)
			if code != http.StatusOK {
				t.Fatalf("overview: %d %s", code, body)
			}
			var o struct {
				Version       string `json:"version"`
				UptimeSeconds *int64 `json:"uptime_seconds"`
				Store         string `json:"store"`
				Nodes         []struct {
					ID          string `json:"id"`
					Self        bool   `json:"self"`
					Connections int    `json:"connections"`
				} `json:"nodes"`
				Series map[string]json.RawMessage `json:"series"`
			}
			mustUnmarshal(t, body, &o)
			wantStore := "sqlite"
			if strings.HasPrefix(dbURL, "postgres") {
				wantStore = "postgres"
			}
			if o.Version == "" || o.UptimeSeconds == nil || o.Store != wantStore || len(o.Nodes) != 1 || !o.Nodes[0].Self || o.Nodes[0].Connections != 1 {
				t.Fatalf("overview: %s", body)
			}
			// The daemon takes a sample at start: every column has it, and
			// all have the same length.
			var n int
			for _, k := range []string{"t", "events_per_second", "connections", "deliver_p99_ms", "chorus_backlog", "http_5xx_per_second"} {
				var col []json.RawMessage
				mustUnmarshal(t, o.Series[k], &col)
				if k == "t" {
					n = len(col)
				}
				if len(col) == 0 || len(col) != n {
					t.Fatalf("series %s has %d points, t has %d: %s", k, len(col), n, body)
				}
			}
			code, body = s.adminDo("GET", "/overview?x=1", nil)
			if code != http.StatusBadRequest {
				t.Fatalf("overview with an unknown parameter: %d %s", code, body)
			}
		})
	})
}
