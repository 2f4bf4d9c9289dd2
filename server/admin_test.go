package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aspd/aspd/protocol"
)

// TestOperatorAPI drives the operator routes through the HTTP layer.
func TestOperatorAPI(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		alice, bob := e.agent("@acme.alice"), e.agent("@acme.bob")
		e.agent("@other.carol")
		_ = bob
		var agents struct {
			Agents []struct {
				Handle string `json:"handle"`
			} `json:"agents"`
		}
		e.must(http.StatusOK, "GET", "/admin/v1/agents?owner=acme", adminToken, nil, &agents)
		if len(agents.Agents) != 2 {
			t.Fatalf("acme's agents: %+v", agents)
		}
		wantError(t, e.do("GET", "/admin/v1/agents?owner=@acme", adminToken, nil), http.StatusBadRequest, "invalid_request")

		type agentRec struct {
			Handle        string   `json:"handle"`
			InboundPolicy string   `json:"inbound_policy"`
			Allowlist     []string `json:"allowlist"`
			Roles         []string `json:"roles"`
			Blocked       []string `json:"blocked"`
			Token         string   `json:"token"`
		}
		var rec agentRec
		base := "/admin/v1/agents/@acme.alice"
		e.must(http.StatusOK, "PUT", base+"/policy", adminToken, map[string]any{"inbound_policy": "allowlist"}, &rec)
		if rec.InboundPolicy != "allowlist" {
			t.Fatalf("policy: %+v", rec)
		}
		e.must(http.StatusOK, "PUT", base+"/allowlist", adminToken, map[string]any{"entries": []string{"@acme.*"}}, &rec)
		e.must(http.StatusOK, "POST", base+"/allowlist", adminToken, map[string]any{"entries": []string{"@other.carol"}}, &rec)
		if len(rec.Allowlist) != 2 {
			t.Fatalf("allowlist after add: %+v", rec)
		}
		e.must(http.StatusOK, "DELETE", base+"/allowlist", adminToken, map[string]any{"entries": []string{"@other.carol"}}, &rec)
		if len(rec.Allowlist) != 1 {
			t.Fatalf("allowlist after remove: %+v", rec)
		}
		wantError(t, e.do("PUT", base+"/allowlist", adminToken, map[string]any{}), http.StatusBadRequest, "invalid_request")
		e.must(http.StatusOK, "PUT", base+"/roles", adminToken, map[string]any{"roles": []string{"ops"}}, &rec)
		if len(rec.Roles) != 1 {
			t.Fatalf("roles: %+v", rec)
		}
		e.must(http.StatusOK, "POST", base+"/blocks", adminToken, map[string]any{"handle": "@other.carol"}, &rec)
		e.must(http.StatusOK, "DELETE", base+"/blocks/@other.carol", adminToken, nil, &rec)
		e.must(http.StatusOK, "GET", base, adminToken, nil, &rec)
		if rec.Handle != "@acme.alice" || rec.Token != "" {
			t.Fatalf("agent record: %+v", rec)
		}
		wantError(t, e.do("GET", "/admin/v1/agents/nope", adminToken, nil), http.StatusNotFound, "not_found")

		// Sessions as the operator sees them.
		var created protocol.CreateSessionResponse
		e.must(http.StatusCreated, "POST", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"},
			"initial_message": map[string]any{"content": "hello"}}, &created)
		var list struct {
			Sessions   []protocol.Session `json:"sessions"`
			NextCursor string             `json:"next_cursor"`
		}
		e.must(http.StatusOK, "GET", "/admin/v1/sessions?participant=@acme.bob&status=invited&limit=1", adminToken, nil, &list)
		if len(list.Sessions) != 1 || list.Sessions[0].ID != created.SessionID || list.NextCursor != created.SessionID {
			t.Fatalf("operator listing: %+v", list)
		}
		e.must(http.StatusOK, "GET", "/admin/v1/sessions?cursor="+list.NextCursor, adminToken, nil, &list)
		if len(list.Sessions) != 0 {
			t.Fatalf("second page: %+v", list)
		}
		e.must(http.StatusOK, "GET", "/admin/v1/sessions/"+created.SessionID, adminToken, nil, nil)
		var page protocol.EventsPage
		e.must(http.StatusOK, "GET", "/admin/v1/sessions/"+created.SessionID+"/events?limit=1", adminToken, nil, &page)
		if len(page.Events) != 1 || page.NextCursor != "1" {
			t.Fatalf("operator events: %+v", page)
		}

		// Export: JSON Lines with trailers saying it is complete.
		resp := e.raw("GET", "/admin/v1/export?session="+created.SessionID, adminToken)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("export: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		lines := 0
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Fatalf("export line %q", sc.Text())
			}
			lines++
		}
		if lines != 2 || resp.Trailer.Get("Aspd-Export-Status") != "complete" || resp.Trailer.Get("Aspd-Export-Events") != "2" {
			t.Fatalf("export: %d lines, trailers %v", lines, resp.Trailer)
		}
		wantError(t, e.do("GET", "/admin/v1/export?session=nope", adminToken, nil), http.StatusBadRequest, "invalid_request")
		wantError(t, e.do("GET", "/admin/v1/export?session=sess_00000000000000000000000000", adminToken, nil), http.StatusNotFound, "not_found")

		// Deleting an agent stops its token at once.
		e.must(http.StatusOK, "DELETE", "/admin/v1/agents/@acme.alice", adminToken, nil, nil)
		wantError(t, e.do("GET", "/sessions", alice, nil), http.StatusUnauthorized, "unauthorized")
	})
}

// TestHealthAndMetrics: the unauthenticated health checks and the
// operator's metrics.
func TestHealthAndMetrics(t *testing.T) {
	forEachBackend(t, nil, func(t *testing.T, e *env) {
		e.must(http.StatusOK, "GET", "/healthz", "", nil, nil)
		var ready struct {
			Status string `json:"status"`
			Store  string `json:"store"`
		}
		e.must(http.StatusOK, "GET", "/readyz", "", nil, &ready)
		if ready.Status != "ready" || ready.Store == "" {
			t.Fatalf("readyz: %+v", ready)
		}
		r := e.must(http.StatusOK, "GET", "/metrics", adminToken, nil, nil)
		for _, m := range []string{"aspd_connections ", "aspd_events_published_total ", "go_goroutines "} {
			if !strings.Contains(string(r.Body), m) {
				t.Errorf("metrics lack %q", m)
			}
		}
		// Request ids: a sane client id is echoed, anything else replaced.
		req, _ := http.NewRequest("GET", e.srv.URL+"/healthz", nil)
		req.Header.Set("X-Request-Id", "abc-123")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Request-Id") != "abc-123" {
			t.Fatalf("request id %q", resp.Header.Get("X-Request-Id"))
		}
		req.Header.Set("X-Request-Id", "has space")
		resp, err = e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if id := resp.Header.Get("X-Request-Id"); len(id) != 32 {
			t.Fatalf("replacement request id %q", id)
		}
	})
}
