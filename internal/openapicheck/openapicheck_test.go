package openapicheck_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aspd/aspd/internal/openapicheck"
)

// recordingTB records what is reported to it instead of failing.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) reported() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errors...)
}

// TestResponseCheck: the check reports an answer that the description
// does not allow (a body of the wrong shape, a status or media type not
// described, an error that is not the error body, an unknown path answered
// with anything but an error body) to the test that owns the server,
// accepts one it allows (and the router's and net/http's own answers), and
// leaves the body readable.
func TestResponseCheck(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := openapicheck.New(doc, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	const js = "application/json"
	answers := map[string]struct {
		status   int
		ct, body string
		bad      bool // the check must report it
	}{
		"GET /sessions/ses_1":     {http.StatusOK, js, `{"nope":1}`, true},
		"GET /sessions/ses_2":     {http.StatusNotFound, js, `{"error":{"code":"not_found","message":"no such session"}}`, false},
		"GET /sessions/ses_3":     {http.StatusNotFound, "text/plain; charset=utf-8", "404 page not found\n", true},
		"POST /sessions":          {http.StatusOK, js, `{"session_id":"ses_1"}`, true},
		"GET /no/such/path":       {http.StatusOK, js, `{}`, true},
		"GET /no/such/path/2":     {http.StatusNotFound, js, `{"error":"not found"}`, true},
		"GET /no/such/path/3":     {http.StatusNotFound, js, `{"error":{"code":"not_found","message":"Not Found"}}`, false},
		"DELETE /openapi.json":    {http.StatusMethodNotAllowed, js, `{"error":{"code":"method_not_allowed","message":"Method Not Allowed"}}`, false},
		"GET /console/":           {http.StatusOK, "text/html; charset=utf-8", "<!doctype html>", false},
		"GET /console/app.js":     {http.StatusOK, "text/javascript; charset=utf-8", "export {}", false},
		"GET /console/logo.png":   {http.StatusOK, "image/png", "png", true},
		"OPTIONS /sessions":       {http.StatusNoContent, "", "", false},
		"GET /healthz":            {http.StatusRequestHeaderFieldsTooLarge, "text/plain; charset=utf-8", "431 Request Header Fields Too Large", false},
		"GET /readyz":             {http.StatusBadRequest, "text/plain; charset=utf-8", "400 Bad Request", true},
		"POST /mcp":               {http.StatusBadRequest, "text/plain; charset=utf-8", "Accept must contain both 'application/json' and 'text/event-stream'", false},
		"DELETE /mcp":             {http.StatusUnauthorized, js, `{"error":{"code":"unauthorized","message":"missing or invalid bearer token"}}`, false},
		"GET /admin/v1/agents/@x": {http.StatusUnauthorized, "text/plain", "unauthorized", true},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.Method+" "+r.URL.Path]
		if a.ct != "" {
			w.Header().Set("Content-Type", a.ct)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	defer srv.Close()
	fake := srv.URL
	client := &http.Client{Transport: c}
	for call, a := range answers {
		rec := &recordingTB{TB: t}
		c.Own(rec, fake)
		method, path, _ := strings.Cut(call, " ")
		req, err := http.NewRequest(method, fake+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != a.body {
			t.Errorf("%s: the caller read %q, %v; want %q", call, body, err, a.body)
		}
		got := rec.reported()
		t.Logf("%s: %q", call, got)
		if (len(got) > 0) != a.bad {
			t.Errorf("%s: reported %q, want a report: %v", call, got, a.bad)
		}
	}
}

// BenchmarkCheck: what the check adds to a call, against a local server:
// "plain" is the transport alone, "checked" the same call through the
// check, for a small answer (GET /healthz), an error answer and a page of
// 50 session.message events (GET /sessions/{id}/events).
func BenchmarkCheck(b *testing.B) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
	if err != nil {
		b.Fatal(err)
	}
	var page strings.Builder
	page.WriteString(`{"events":[`)
	for i := 1; i <= 50; i++ {
		if i > 1 {
			page.WriteByte(',')
		}
		fmt.Fprintf(&page, `{"type":"session.message","session_id":"sess_01ABC","event_id":"evt_%02d","sequence":%d,"created_at":1795735316825,`+
			`"payload":{"id":"msg_%02d","session_id":"sess_01ABC","sender":"@acme.alice","sequence":%d,"content":"message number %d, of some ordinary length for a chat","created_at":1795735316825}}`,
			i, i, i, i, i)
	}
	page.WriteString(`],"next_cursor":"50"}`)
	answers := map[string]struct {
		status int
		body   string
	}{
		"/healthz":                    {http.StatusOK, `{"status":"ok"}`},
		"/sessions/sess_01ABC":        {http.StatusNotFound, `{"error":{"code":"not_found","message":"no such session"}}`},
		"/sessions/sess_01ABC/events": {http.StatusOK, page.String()},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.URL.Path]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	defer srv.Close()
	plain := http.DefaultTransport.(*http.Transport).Clone()
	checked, err := openapicheck.New(doc, plain)
	if err != nil {
		b.Fatal(err)
	}
	rec := &recordingTB{TB: b}
	checked.Own(rec, srv.URL)
	for _, name := range []string{"healthz", "error", "events"} {
		path := map[string]string{"healthz": "/healthz", "error": "/sessions/sess_01ABC", "events": "/sessions/sess_01ABC/events"}[name]
		for _, via := range []struct {
			name string
			rt   http.RoundTripper
		}{{"plain", plain}, {"checked", checked}} {
			b.Run(name+"/"+via.name, func(b *testing.B) {
				client := &http.Client{Transport: via.rt}
				for b.Loop() {
					resp, err := client.Get(srv.URL + path)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	if got := rec.reported(); len(got) > 0 {
		b.Fatalf("the benchmark's answers do not match the description: %q", got)
	}
}
