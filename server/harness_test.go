package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/chorus"
	"github.com/aspd/aspd/internal/daemon"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/openapicheck"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/server"
	"github.com/aspd/aspd/store"
)

const adminToken = "test-admin-token"

// env is one in-process aspd: the HTTP handler on a fresh database, served
// by httptest.
type env struct {
	t   *testing.T
	srv *httptest.Server
}

// testConfig is the configuration of an in-process aspd in these tests.
func testConfig() daemon.Config {
	return daemon.Config{
		App: app.Config{
			Limits:      protocol.DefaultLimits(),
			GraceWindow: time.Minute,
			Hub:         replay.DefaultConfig(),
			Frames:      app.DefaultFramesConfig(),
		},
		HTTP: server.Config{
			MaxBodyBytes:    1 << 20,
			AdminTokenHash:  server.HashToken(adminToken),
			PingInterval:    time.Minute,
			WSReadLimit:     1 << 16,
			StreamKeepalive: 15 * time.Second,
		},
		Chorus: chorus.DefaultConfig(),
	}
}

// newEnv starts an in-process aspd on the database at url; tune adjusts
// the configuration before it is built.
func newEnv(t *testing.T, url string, tune func(*daemon.Config)) *env {
	t.Helper()
	cfg := testConfig()
	if tune != nil {
		tune(&cfg)
	}
	return startEnv(t, url, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
}

// startEnv runs the whole graph (internal/daemon) on a fresh store at url,
// served by httptest; prepare, when set, adjusts the store first.
func startEnv(t *testing.T, url string, cfg daemon.Config, log *slog.Logger, prepare func(*store.Store)) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	if prepare != nil {
		prepare(st)
	}
	d := daemon.New(cfg, st, log)
	if err := d.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	hs := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		hs.Close()
		d.Close()
		st.Close()
	})
	// Every answer the test's client receives must be as described.
	check := responseCheck(t)
	hs.Client().Transport = check
	check.Own(t, hs.URL)
	return &env{t: t, srv: hs}
}

var (
	checkOnce sync.Once
	check     *openapicheck.Transport
	checkErr  error
)

// responseCheck is the transport that checks answers against the
// committed description (docs/openapi.json, which TestOpenAPIFile keeps
// equal to the generated one): shared by every test's server, each test
// the owner of its own (internal/openapicheck).
func responseCheck(t *testing.T) *openapicheck.Transport {
	t.Helper()
	checkOnce.Do(func() {
		doc, err := os.ReadFile(filepath.Join("..", "docs", "openapi.json"))
		if err != nil {
			checkErr = err
			return
		}
		check, checkErr = openapicheck.New(doc, http.DefaultTransport.(*http.Transport).Clone())
	})
	if checkErr != nil {
		t.Fatalf("the OpenAPI response check: %v", checkErr)
	}
	return check
}

// forEachBackend runs fn on a fresh in-process server per backend.
func forEachBackend(t *testing.T, tune func(*daemon.Config), fn func(t *testing.T, e *env)) {
	dbtest.ForEach(t, func(t *testing.T, url string) { fn(t, newEnv(t, url, tune)) })
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// code is the error code of an error answer ("" when there is none).
func (r response) code() string {
	var b protocol.ErrorBody
	if json.Unmarshal(r.Body, &b) != nil || b.Error == nil {
		return ""
	}
	return b.Error.Code
}

func (e *env) do(method, path, token string, body any) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// must does a request and fails the test unless it is answered with status;
// it decodes the answer into out when out is not nil.
func (e *env) must(status int, method, path, token string, body, out any) response {
	e.t.Helper()
	r := e.do(method, path, token, body)
	if r.Status != status {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.Status, status, r.Body)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			e.t.Fatalf("%s %s: decoding %s: %v", method, path, r.Body, err)
		}
	}
	return r
}

// agent creates an open-policy agent and returns its token.
func (e *env) agent(handle string) string {
	e.t.Helper()
	var a struct {
		Handle string `json:"handle"`
		Token  string `json:"token"`
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/agents", adminToken, map[string]any{"handle": handle, "inbound_policy": "open"}, &a)
	if a.Handle != handle || a.Token == "" {
		e.t.Fatalf("created agent %+v", a)
	}
	return a.Token
}

// wantError fails the test unless r is an error answer with status and code.
func wantError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.Status != status || r.code() != code {
		t.Fatalf("status %d code %q, want %d %q: %s", r.Status, r.code(), status, code, r.Body)
	}
}

// raw does a body-less request and returns the response unread.
func (e *env) raw(method, path, token string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}
