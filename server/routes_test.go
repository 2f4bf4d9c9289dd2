package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// findRoute is the route table's entry for method and path, or nil.
func findRoute(method, path string) *route {
	for i := range routeTable {
		if routeTable[i].method == method && routeTable[i].path == path {
			return &routeTable[i]
		}
	}
	return nil
}

const routesTestAdminToken = "routes-test-admin-token"

// newRoutesTestServer runs a server on a fresh database at url. This
// package's own tests cannot import internal/daemon (it imports server), so
// the server is built here over an application without the Chorus worker,
// which these tests do not need; tune adjusts the application's
// configuration.
func newRoutesTestServer(t *testing.T, url string, tune func(*app.Config)) (*Server, *httptest.Server) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	cfg := app.Config{Limits: protocol.DefaultLimits(), GraceWindow: time.Minute, Hub: replay.DefaultConfig(), Frames: app.DefaultFramesConfig()}
	if tune != nil {
		tune(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := app.New(cfg, st, log)
	s := New(Config{MaxBodyBytes: 1 << 20, AdminTokenHash: HashToken(routesTestAdminToken), PingInterval: time.Minute,
		WSReadLimit: 1 << 16, StreamKeepalive: 15 * time.Second}, a, prometheus.NewRegistry(), log)
	if err := a.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		a.Close()
		st.Close()
	})
	return s, hs
}

// TestRouteTableIsTheRouter: the routes echo serves are exactly the route
// table's, so a route registered without an entry (or an entry that is not
// registered) fails here.
func TestRouteTableIsTheRouter(t *testing.T) {
	s, _ := newRoutesTestServer(t, dbtest.SQLite(t), nil)
	registered := map[string]int{}
	for _, r := range s.echo.Routes() {
		registered[r.Method+" "+r.Path]++
	}
	table := map[string]int{}
	for _, rt := range routeTable {
		table[rt.method+" "+rt.path]++
	}
	for k, n := range registered {
		if n != 1 {
			t.Errorf("%s is registered %d times", k, n)
		}
		if table[k] == 0 {
			t.Errorf("%s is registered but not in the route table (routes.go)", k)
		}
	}
	for k, n := range table {
		if n != 1 {
			t.Errorf("%s is in the route table %d times", k, n)
		}
		if registered[k] == 0 {
			t.Errorf("%s is in the route table but not registered", k)
		}
	}
}

// TestRouteTableEntries: every entry is complete and consistent with its
// auth class.
func TestRouteTableEntries(t *testing.T) {
	strict := map[authClass]bool{authAgent: true, authOperator: true, authChorusCallback: true}
	for _, rt := range routeTable {
		name := rt.method + " " + rt.path
		if !strings.HasPrefix(rt.path, "/") || rt.summary == "" || rt.status == 0 {
			t.Errorf("%s: path, summary and status are required", name)
		}
		if (rt.handler == nil) == (rt.mount == nil) {
			t.Errorf("%s: give exactly one of handler and mount", name)
		}
		if rt.admit != 0 && rt.auth != authAgent {
			t.Errorf("%s: admission is per agent: only an agent route takes it", name)
		}
		if len(rt.query.params) > 0 && !strict[rt.auth] {
			t.Errorf("%s: a query rule on a route that does not run strictQuery", name)
		}
		for _, p := range rt.query.params {
			if countOf(rt.query.params, p) != 1 {
				t.Errorf("%s: query parameter %s listed twice", name, p)
			}
		}
		if rt.method == http.MethodGet && rt.request != nil {
			t.Errorf("%s: a GET takes no body", name)
		}
		if rt.produces == "" && rt.handler != nil && rt.status >= 200 && rt.status < 300 && rt.status != http.StatusNoContent && rt.response == nil {
			t.Errorf("%s: a JSON answer needs its response type", name)
		}
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// TestRoutesReadingQueryHaveRules: a handler that reads the query string
// (query, c.QueryParam...) runs behind strictQuery, so the route table's
// rule is what it may read; and a route whose rule takes parameters has a
// handler (or authentication) that reads the query string, or the rule is
// stale. Found from the package's source: the functions each handler
// calls, transitively.
func TestRoutesReadingQueryHaveRules(t *testing.T) {
	reads := queryReaders(t)
	strict := map[authClass]bool{authAgent: true, authOperator: true, authChorusCallback: true}
	for _, rt := range routeTable {
		name := rt.method + " " + rt.path
		var h any = rt.handler
		if rt.mount != nil {
			h = rt.mount
		}
		hname := funcName(h)
		if _, ok := reads[hname]; !ok {
			t.Errorf("%s: handler %s not found in the package's source", name, hname)
			continue
		}
		if reads[hname] && !strict[rt.auth] {
			t.Errorf("%s: %s reads the query string, but the route has no strict query check", name, hname)
		}
		if len(rt.query.params) > 0 {
			read := reads[hname]
			switch rt.auth {
			case authAgent:
				read = read || reads["agentAuth"]
			case authOperator:
				read = read || reads["operatorAuth"]
			}
			if !read {
				t.Errorf("%s: takes %v, but nothing reads the query string", name, rt.query.params)
			}
		}
	}
	if !reads["agentAuth"] {
		t.Error("agentAuth reads ?token= on /connect, but the source scan did not see it")
	}
}

// funcName is the name of the method (or function) f refers to.
func funcName(f any) string {
	full := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	full = strings.TrimSuffix(full, "-fm")
	return full[strings.LastIndex(full, ".")+1:]
}

// queryReaders maps each function and method of the package (by name) to
// whether it reads the request's query string, directly or through the
// package's functions and the methods it calls on its receiver.
func queryReaders(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := gotoken.NewFileSet()
	calls := map[string][]string{}
	direct := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			recv := ""
			if fd.Recv != nil && len(fd.Recv.List[0].Names) > 0 {
				recv = fd.Recv.List[0].Names[0].Name
			}
			if _, ok := calls[name]; !ok {
				calls[name] = nil // present, even if it calls nothing
			}
			var inspect func(n ast.Node) bool
			inspect = func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					switch n.Sel.Name {
					case "QueryParam", "QueryParams", "QueryString", "RawQuery":
						direct[name] = true
					}
					// Follow a method only on the receiver (s.sessionRequest),
					// not every method of that name (s.app.Search).
					if id, ok := n.X.(*ast.Ident); ok && recv != "" && id.Name == recv {
						calls[name] = append(calls[name], n.Sel.Name)
					}
					ast.Inspect(n.X, inspect)
					return false
				case *ast.Ident:
					// A package function, called or passed as a value.
					calls[name] = append(calls[name], n.Name)
				}
				return true
			}
			ast.Inspect(fd.Body, inspect)
		}
	}
	reads := map[string]bool{}
	var visit func(name string, seen map[string]bool) bool
	visit = func(name string, seen map[string]bool) bool {
		if direct[name] {
			return true
		}
		if seen[name] {
			return false
		}
		seen[name] = true
		for _, c := range calls[name] {
			if _, ours := calls[c]; ours && visit(c, seen) {
				return true
			}
		}
		return false
	}
	for name := range calls {
		reads[name] = visit(name, map[string]bool{})
	}
	return reads
}

// TestRouteTableAnswers: real answers match the table: each scripted
// request is answered with its route's success status, and its JSON body
// decodes strictly (no unknown field) into the route's response type.
func TestRouteTableAnswers(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		_, hs := newRoutesTestServer(t, url, func(cfg *app.Config) {
			cfg.Chorus.Key = key
			cfg.Chorus.PublicURL = "http://aspd.invalid"
		})
		c := opClient{t: t, hs: hs} // operator_test.go
		do := func(method, path, tok string, body any) (int, []byte) {
			t.Helper()
			a := c.do(method, path, tok, "", body)
			return a.status, a.body
		}
		checked := map[string]bool{}
		// check does the request and checks its answer against the route
		// (method, pattern); it returns the body.
		check := func(method, pattern, path, tok string, body any) []byte {
			t.Helper()
			rt := findRoute(method, pattern)
			if rt == nil {
				t.Fatalf("%s %s is not in the route table", method, pattern)
			}
			status, b := do(method, path, tok, body)
			if status != rt.status {
				t.Fatalf("%s %s: status %d, the table says %d: %s", method, path, status, rt.status, b)
			}
			if rt.response != nil {
				lines := [][]byte{b}
				if rt.produces == mediaNDJSON {
					lines = bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
				}
				for _, line := range lines {
					v := reflect.New(reflect.TypeOf(rt.response)).Interface()
					dec := json.NewDecoder(bytes.NewReader(line))
					dec.DisallowUnknownFields()
					if err := dec.Decode(v); err != nil {
						t.Errorf("%s %s: the answer does not decode into %T: %v: %s", method, pattern, rt.response, err, line)
					}
				}
			}
			checked[method+" "+pattern] = true
			return b
		}
		newAgent := func(handle string) string {
			var a protocol.AgentWithToken
			b := check("POST", "/admin/v1/agents", "/admin/v1/agents", routesTestAdminToken, map[string]any{"handle": handle, "inbound_policy": "open"})
			if err := json.Unmarshal(b, &a); err != nil || a.Token == "" {
				t.Fatalf("created agent: %v %s", err, b)
			}
			return a.Token
		}
		admin := routesTestAdminToken
		alice, bob := newAgent("@acme.alice"), newAgent("@acme.bob")
		newAgent("@acme.carol")

		check("GET", "/healthz", "/healthz", "", nil)
		check("GET", "/readyz", "/readyz", "", nil)

		var created protocol.CreateSessionResponse
		if err := json.Unmarshal(check("POST", "/sessions", "/sessions", alice, map[string]any{"invite": []string{"@acme.bob"}, "topic": "t"}), &created); err != nil {
			t.Fatal(err)
		}
		sp := "/sessions/" + created.SessionID
		check("POST", "/sessions/:id/join", sp+"/join", bob, nil)
		check("POST", "/sessions/:id/messages", sp+"/messages", bob, map[string]any{"content": "hi"})
		check("POST", "/sessions/:id/invite", sp+"/invite", alice, map[string]any{"invite": []string{"@acme.carol"}})
		check("GET", "/sessions", "/sessions", alice, nil)
		check("GET", "/sessions/:id", sp, alice, nil)
		check("GET", "/sessions/:id/events", sp+"/events", alice, nil)
		check("GET", "/decisions/pending", "/decisions/pending", alice, nil)

		// A frame stream, so that the roster lists one.
		req, _ := http.NewRequest("GET", hs.URL+"/stream?instrument=cc", nil)
		req.Header.Set("Authorization", "Bearer "+bob)
		stream, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Body.Close()
		if rt := findRoute("GET", "/stream"); stream.StatusCode != rt.status || stream.Header.Get("Content-Type") != rt.produces {
			t.Fatalf("stream: %d %s", stream.StatusCode, stream.Header.Get("Content-Type"))
		}
		if _, err := bufio.NewReader(stream.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if b := check("GET", "/stream/roster", "/stream/roster", bob, nil); !bytes.Contains(b, []byte(`"instrument":"cc"`)) {
			t.Fatalf("roster: %s", b)
		}
		check("POST", "/frames", "/frames", alice, map[string]any{"scope": "@acme.bob", "frame": routesTestFrame("@acme.alice", "@acme.bob")})

		check("POST", "/sessions/:id/leave", sp+"/leave", bob, nil)
		check("POST", "/sessions/:id/end", sp+"/end", alice, nil)
		check("POST", "/sessions/:id/reopen", sp+"/reopen", alice, map[string]any{})

		const ap = "/admin/v1/agents/@acme.carol"
		check("GET", "/admin/v1/agents", "/admin/v1/agents", admin, nil)
		check("GET", "/admin/v1/agents/:handle", ap, admin, nil)
		check("PUT", "/admin/v1/agents/:handle/policy", ap+"/policy", admin, map[string]any{"inbound_policy": "allowlist"})
		check("PUT", "/admin/v1/agents/:handle/allowlist", ap+"/allowlist", admin, map[string]any{"entries": []string{"@acme.alice"}})
		check("POST", "/admin/v1/agents/:handle/allowlist", ap+"/allowlist", admin, map[string]any{"entries": []string{"@acme.bob"}})
		check("DELETE", "/admin/v1/agents/:handle/allowlist", ap+"/allowlist", admin, map[string]any{"entries": []string{"@acme.bob"}})
		check("PUT", "/admin/v1/agents/:handle/roles", ap+"/roles", admin, map[string]any{"roles": []string{"reviewer"}})
		check("POST", "/admin/v1/agents/:handle/blocks", ap+"/blocks", admin, map[string]any{"handle": "@acme.bob"})
		check("DELETE", "/admin/v1/agents/:handle/blocks/:blocked", ap+"/blocks/@acme.bob", admin, nil)
		check("PUT", "/admin/v1/agents/:handle/chorus", ap+"/chorus", admin, map[string]any{"connection_string": "https://hook.example.com/aspd"})
		check("GET", "/admin/v1/agents/:handle/chorus", ap+"/chorus", admin, nil)
		check("GET", "/admin/v1/agents/:handle/chorus/deliveries", ap+"/chorus/deliveries", admin, nil)
		check("DELETE", "/admin/v1/agents/:handle/chorus", ap+"/chorus", admin, nil)
		check("POST", "/admin/v1/agents/:handle/token", ap+"/token", admin, nil)
		check("DELETE", "/admin/v1/agents/:handle/token", ap+"/token", admin, nil)
		check("GET", "/admin/v1/sessions", "/admin/v1/sessions", admin, nil)
		check("GET", "/admin/v1/sessions/:id", "/admin/v1"+sp, admin, nil)
		check("GET", "/admin/v1/sessions/:id/events", "/admin/v1"+sp+"/events", admin, nil)
		check("GET", "/admin/v1/health", "/admin/v1/health", admin, nil)
		check("GET", "/admin/v1/export", "/admin/v1/export", admin, nil)
		check("GET", "/admin/v1/search", "/admin/v1/search?q=hi", admin, nil)
		check("DELETE", "/admin/v1/agents/:handle", ap, admin, nil)

		// Every route with a response type named for an ad-hoc map
		// (routes.go) is among those checked.
		for _, rt := range routeTable {
			switch rt.response.(type) {
			case healthzBody, readyzBody, agentList, streamList, chorusDeliveryList:
				if !checked[rt.method+" "+rt.path] {
					t.Errorf("%s %s: its answer's shape is not checked", rt.method, rt.path)
				}
			}
		}
	})
}

// routesTestFrame is an agent_advisory frame from sender to recipient.
func routesTestFrame(sender, recipient string) map[string]any {
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

// TestOperatorChangesAreAudited: every operator route that changes
// something (not GET or HEAD) names its audit action, dotted
// resource.verb, one action per route; only operator routes have one; and
// a route that names an action needs the admin scope.
func TestOperatorChangesAreAudited(t *testing.T) {
	seen := map[string]string{}
	for i := range routeTable {
		rt := &routeTable[i]
		name := rt.method + " " + rt.path
		if rt.auth != authOperator {
			if rt.action != "" || rt.scope != "" {
				t.Errorf("%s: action and scope are for operator routes", name)
			}
			continue
		}
		if rt.method != http.MethodGet && rt.method != http.MethodHead && rt.action == "" {
			t.Errorf("%s changes something but names no audit action", name)
		}
		if rt.action == "" {
			continue
		}
		if !auditActionRe.MatchString(rt.action) {
			t.Errorf("%s: action %q is not dotted resource.verb (a-z _)", name, rt.action)
		}
		if prev, ok := seen[rt.action]; ok {
			t.Errorf("%s: action %q is also %s's", name, rt.action, prev)
		}
		seen[rt.action] = name
		if routeScope(rt) != protocol.ScopeAdmin {
			t.Errorf("%s: an audited change must need the admin scope", name)
		}
	}
}

var auditActionRe = regexp.MustCompile(`^[a-z_]+(\.[a-z_]+)+$`)
