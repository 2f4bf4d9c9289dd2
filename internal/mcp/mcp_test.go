package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/dbtest"
	aspmcp "github.com/aspd/aspd/internal/mcp"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// ---- harness ----

// newApp builds an App on a fresh database at url; tune adjusts its
// configuration first (as internal/app's tests do).
func newApp(t *testing.T, url string, tune func(*app.Config)) *app.App {
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
	a := app.New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := a.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		a.Close()
		st.Close()
	})
	return a
}

// forEach runs fn on a fresh App per store (sqlite, postgres).
func forEach(t *testing.T, tune func(*app.Config), fn func(t *testing.T, a *app.App)) {
	dbtest.ForEach(t, func(t *testing.T, url string) { fn(t, newApp(t, url, tune)) })
}

// mkAgent creates an open agent and returns its token.
func mkAgent(t *testing.T, a *app.App, handle string) string {
	t.Helper()
	ag, err := a.CreateAgent(context.Background(), protocol.CreateAgentRequest{Handle: handle, InboundPolicy: protocol.PolicyOpen})
	if err != nil {
		t.Fatalf("CreateAgent %s: %v", handle, err)
	}
	return ag.Token
}

// asCaller stands in for the HTTP path's bearer middleware, which the
// in-memory transport does not have: on HTTP, auth.RequireBearerToken puts
// the verified token's TokenInfo (UserID = handle) in the request context
// and the Streamable HTTP handler copies it to req.Extra.TokenInfo. Here a
// receiving middleware sets the same field, on the test's own server
// instance, so production code is unchanged. The real verifier is tested
// over HTTP (TestHTTPBearer).
func asCaller(handle string) mcp.Middleware {
	return withExtra(func() *mcp.RequestExtra { return &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: handle}} })
}

// withExtra sets every tool call's RequestExtra to a fresh extra().
func withExtra(extra func() *mcp.RequestExtra) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if r, ok := req.(*mcp.CallToolRequest); ok {
				r.Extra = extra()
			}
			return next(ctx, method, req)
		}
	}
}

// client is one MCP client session, acting as handle ("" = no caller).
type client struct {
	t      *testing.T
	handle string
	cs     *mcp.ClientSession
}

// connect connects a client to a fresh NewServer(a) over the SDK's
// in-memory transport, acting as handle.
func connect(t *testing.T, a *app.App, handle string) *client {
	t.Helper()
	ctx := context.Background()
	srv := aspmcp.NewServer(a)
	if handle != "" {
		srv.AddReceivingMiddleware(asCaller(handle))
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "aspd-test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return &client{t: t, handle: handle, cs: cs}
}

// call calls a tool; a protocol-level (JSON-RPC) error fails the test.
func (c *client) call(name string, args map[string]any) *mcp.CallToolResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		c.t.Fatalf("%s: %s: %v", c.handle, name, err)
	}
	return res
}

// ok calls a tool that must succeed, checks that its text copy is the same
// JSON as its structured content, and decodes that into out (if non-nil).
func (c *client) ok(name string, args map[string]any, out any) {
	c.t.Helper()
	c.check(name, args, c.call(name, args), out)
}

// start calls a tool on another goroutine; receive its answer with
// c.check(name, args, <-ch, out) on the test's goroutine.
func (c *client) start(name string, args map[string]any) <-chan *mcp.CallToolResult {
	ch := make(chan *mcp.CallToolResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
		}
		ch <- res
	}()
	return ch
}

// check is ok's verdict on a result.
func (c *client) check(name string, args map[string]any, res *mcp.CallToolResult, out any) {
	c.t.Helper()
	if res.IsError {
		c.t.Fatalf("%s: %s %v: error %s", c.handle, name, args, text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		c.t.Fatal(err)
	}
	var fromText, fromStructured any
	unmarshal(c.t, []byte(text(res)), &fromText)
	unmarshal(c.t, b, &fromStructured)
	if !reflect.DeepEqual(fromText, fromStructured) {
		c.t.Fatalf("%s: text copy %s differs from structured content %s", name, text(res), b)
	}
	if out != nil {
		// Decode into a zero value: members absent from this result must not
		// keep a previous call's values.
		reflect.ValueOf(out).Elem().SetZero()
		unmarshal(c.t, b, out)
	}
}

// toolErr is the text of a refused call: the REST error body, plus
// retry_after_seconds on a rate limit.
type toolErr struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
	RetryAfter *int `json:"retry_after_seconds"`
}

// fail calls a tool that must be refused with code, and returns the body.
func (c *client) fail(code, name string, args map[string]any) toolErr {
	c.t.Helper()
	res := c.call(name, args)
	if !res.IsError {
		c.t.Fatalf("%s: %s %v succeeded, want %s", c.handle, name, args, code)
	}
	var body toolErr
	unmarshal(c.t, []byte(text(res)), &body)
	if body.Error.Code != code || body.Error.Message == "" {
		c.t.Fatalf("%s: %s: error %s, want code %s with a message", c.handle, name, text(res), code)
	}
	return body
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func unmarshal(t *testing.T, b []byte, out any) {
	t.Helper()
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// ---- tool schemas ----

// docTools reads the tool tables of docs/mcp.md and docs/decisions.md (the
// tables whose header is "| Tool | Arguments | ..."): tool name -> its
// arguments, true for a required one (documented without a trailing "?").
// A row naming several tools defers to another table and is skipped.
func docTools(t *testing.T) map[string]map[string]bool {
	t.Helper()
	tick := regexp.MustCompile("`([^`]+)`")
	out := map[string]map[string]bool{}
	for _, path := range []string{"../../docs/mcp.md", "../../docs/decisions.md"} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		in := false
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "| Tool | Arguments |") {
				in = true
				continue
			}
			if !in || strings.HasPrefix(line, "|---") {
				continue
			}
			if !strings.HasPrefix(line, "|") {
				in = false
				continue
			}
			cells := strings.Split(line, "|")
			names := tick.FindAllStringSubmatch(cells[1], -1)
			if len(names) != 1 {
				continue
			}
			name := names[0][1]
			if _, dup := out[name]; dup {
				t.Fatalf("%s: tool %s documented twice", path, name)
			}
			args := map[string]bool{}
			for _, m := range tick.FindAllStringSubmatch(cells[2], -1) {
				arg, optional := strings.CutSuffix(m[1], "?")
				args[arg] = !optional
			}
			if len(args) == 0 && strings.TrimSpace(cells[2]) != "none" {
				t.Fatalf("%s: cannot read the arguments of %s: %q", path, name, cells[2])
			}
			out[name] = args
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// argTypes is each tool argument's JSON type in the input schema ("any":
// no type constraint, for the free-form content, message, frame and
// envelope). It is kept here, beside the docs' list, so a changed type is
// a deliberate change to both.
var argTypes = map[string]map[string]string{
	"create_session":    {"invite": "array", "topic": "string", "message": "any", "end_after_send": "boolean", "idempotency_key": "string"},
	"invite_to_session": {"session_id": "string", "invite": "array"},
	"join_session":      {"session_id": "string"},
	"leave_session":     {"session_id": "string"},
	"end_session":       {"session_id": "string"},
	"reopen_session":    {"session_id": "string", "invite": "array", "message": "any"},
	"send_message":      {"session_id": "string", "content": "any", "idempotency_key": "string", "metadata": "any"},
	"get_session":       {"session_id": "string"},
	"list_sessions":     {"state": "string", "status": "string", "cursor": "string", "limit": "integer", "since": "string", "until": "string"},
	"read_events":       {"session_id": "string", "after_sequence": "integer", "limit": "integer"},
	"wait_for_events":   {"timeout_seconds": "integer", "max_events": "integer"},
	"post_frame":        {"scope": "string", "frame": "any"},
	"get_roster":        {},
	"request_decision":  {"session_id": "string", "binding_moment": "any", "resolver": "string"},
	"await_decision":    {"moment_id": "string", "timeout_seconds": "integer"},
	"pending_decisions": {},
	"resolve_decision":  {"moment_id": "string", "outcome": "string", "option_idx": "integer", "answer": "string", "objection": "string"},
}

// schemaType is a property's type, "null" aside (optional pointer fields
// are nullable), or "any" when it has none.
func schemaType(p map[string]any) string {
	var types []string
	switch v := p["type"].(type) {
	case string:
		types = []string{v}
	case []any:
		for _, x := range v {
			if s, _ := x.(string); s != "null" {
				types = append(types, s)
			}
		}
	}
	ts, _ := p["types"].([]any)
	for _, x := range ts {
		if s, _ := x.(string); s != "null" {
			types = append(types, s)
		}
	}
	switch len(types) {
	case 0:
		return "any"
	case 1:
		return types[0]
	}
	return strings.Join(types, "|")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestToolSchemas: tools/list offers exactly the documented tools, each
// with an input schema whose properties, required ones and types are the
// documented arguments, closed to unknown ones, and an output schema.
func TestToolSchemas(t *testing.T) {
	docs := docTools(t)
	if !slices.Equal(sortedKeys(docs), sortedKeys(argTypes)) {
		t.Fatalf("documented tools %v, typed here %v", sortedKeys(docs), sortedKeys(argTypes))
	}
	a := newApp(t, dbtest.SQLite(t), nil)
	res, err := connect(t, a, "").cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		listed[tl.Name] = tl
	}
	if !slices.Equal(sortedKeys(listed), sortedKeys(docs)) {
		t.Fatalf("tools/list offers %v, the docs document %v", sortedKeys(listed), sortedKeys(docs))
	}
	for name, tl := range listed {
		var schema struct {
			Type       string                    `json:"type"`
			Properties map[string]map[string]any `json:"properties"`
			Required   []string                  `json:"required"`
			Additional any                       `json:"additionalProperties"`
		}
		b, _ := json.Marshal(tl.InputSchema)
		unmarshal(t, b, &schema)
		if schema.Type != "object" || schema.Additional != false {
			t.Errorf("%s: input schema %s: want a closed object", name, b)
		}
		var wantRequired []string
		for arg, req := range docs[name] {
			if req {
				wantRequired = append(wantRequired, arg)
			}
		}
		sort.Strings(wantRequired)
		required := slices.Clone(schema.Required)
		sort.Strings(required)
		if !slices.Equal(required, wantRequired) {
			t.Errorf("%s: required %v, documented %v", name, required, wantRequired)
		}
		if !slices.Equal(sortedKeys(schema.Properties), sortedKeys(docs[name])) {
			t.Errorf("%s: properties %v, documented %v", name, sortedKeys(schema.Properties), sortedKeys(docs[name]))
		}
		for arg, p := range schema.Properties {
			if got, want := schemaType(p), argTypes[name][arg]; got != want {
				t.Errorf("%s.%s: type %s, want %s", name, arg, got, want)
			}
			if desc, _ := p["description"].(string); desc == "" {
				t.Errorf("%s.%s: no description for the model", name, arg)
			}
		}
		if tl.OutputSchema == nil {
			t.Errorf("%s: no output schema", name)
		}
		if tl.Description == "" || tl.Annotations == nil {
			t.Errorf("%s: no description or annotations", name)
		}
	}

	// Annotations as docs/mcp.md states them; the read tools are also
	// idempotent.
	for _, name := range []string{"get_session", "list_sessions", "read_events", "get_roster"} {
		if an := listed[name].Annotations; !an.ReadOnlyHint || !an.IdempotentHint {
			t.Errorf("%s: annotations %+v, want read-only and idempotent", name, an)
		}
	}
	for name, tl := range listed {
		destructive := tl.Annotations.DestructiveHint != nil && *tl.Annotations.DestructiveHint
		if want := name == "leave_session" || name == "end_session"; destructive != want {
			t.Errorf("%s: destructiveHint %v, want %v", name, destructive, want)
		}
		// emits_binding_moment in _meta on exactly the four tools of
		// docs/decisions.md.
		emits := tl.Meta["emits_binding_moment"] == true
		want := slices.Contains([]string{"request_decision", "pending_decisions", "read_events", "wait_for_events"}, name)
		if emits != want {
			t.Errorf("%s: _meta %v, want emits_binding_moment %v", name, tl.Meta, want)
		}
	}
	for _, name := range []string{"join_session", "invite_to_session"} {
		if an := listed[name].Annotations; !an.IdempotentHint || an.ReadOnlyHint {
			t.Errorf("%s: annotations %+v, want idempotent, not read-only", name, an)
		}
	}
}

// ---- error mapping ----

// TestUnauthenticated: a call without a caller (no TokenInfo: on HTTP the
// bearer middleware refuses it first) is the unauthorized tool error, and
// reaches no application method.
func TestUnauthenticated(t *testing.T) {
	a := newApp(t, dbtest.SQLite(t), nil)
	mkAgent(t, a, "@acme.alice")
	c := connect(t, a, "") // no RequestExtra at all
	c.fail(protocol.CodeUnauthorized, "create_session", map[string]any{"topic": "x"})
	c.fail(protocol.CodeUnauthorized, "get_roster", nil)

	// Transport extras without token info, or token info naming no agent,
	// are no caller either.
	for _, extra := range []func() *mcp.RequestExtra{
		func() *mcp.RequestExtra { return &mcp.RequestExtra{} },
		func() *mcp.RequestExtra { return &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{}} },
	} {
		srv := aspmcp.NewServer(a)
		srv.AddReceivingMiddleware(withExtra(extra))
		st, ct := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(context.Background(), st, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "aspd-test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		(&client{t: t, cs: cs}).fail(protocol.CodeUnauthorized, "create_session", map[string]any{"topic": "x"})
		cs.Close()
		ss.Wait()
	}
	list, err := a.Sessions(context.Background(), "@acme.alice", app.SessionFilter{Limit: 10})
	if err != nil || len(list.Sessions) != 0 {
		t.Fatalf("sessions after refused calls: %+v, %v", list, err)
	}
}

// TestErrorMapping: refusals are isError results whose text is the REST
// error body with the application's code.
func TestErrorMapping(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *app.App) {
		mkAgent(t, a, "@acme.alice")
		mkAgent(t, a, "@acme.bob")
		alice := connect(t, a, "@acme.alice")
		bob := connect(t, a, "@acme.bob")

		var s protocol.CreateSessionResponse
		alice.ok("create_session", map[string]any{"topic": "t"}, &s)

		missing := "sess_00000000000000000000000000"
		for _, c := range []struct {
			who       *client
			code      string
			tool      string
			args      map[string]any
			wantField string
		}{
			{alice, protocol.CodeNotFound, "get_session", map[string]any{"session_id": missing}, ""},
			{alice, protocol.CodeNotFound, "get_session", map[string]any{"session_id": "nope"}, ""},
			{alice, protocol.CodeNotFound, "send_message", map[string]any{"session_id": missing, "content": "hi"}, ""},
			// Bob is no participant: the session is invisible to him.
			{bob, protocol.CodeNotFound, "read_events", map[string]any{"session_id": s.SessionID}, ""},
			{bob, protocol.CodeNotFound, "create_session", map[string]any{"invite": []string{"@acme.nobody"}}, ""},
			{alice, protocol.CodeInvalidRequest, "send_message", map[string]any{"session_id": s.SessionID, "content": nil}, ""},
			{alice, protocol.CodeInvalidContent, "send_message", map[string]any{"session_id": s.SessionID, "content": ""}, ""},
			{alice, protocol.CodeInvalidContent, "send_message", map[string]any{"session_id": s.SessionID, "content": []any{}}, ""},
			{alice, protocol.CodeInvalidRequest, "create_session", map[string]any{"end_after_send": true}, ""},
			{alice, protocol.CodeInvalidRequest, "invite_to_session", map[string]any{"session_id": s.SessionID, "invite": []string{}}, ""},
			{alice, protocol.CodeInvalidRequest, "wait_for_events", map[string]any{"timeout_seconds": 61}, ""},
			{alice, protocol.CodeInvalidRequest, "wait_for_events", map[string]any{"max_events": 501}, ""},
			{alice, protocol.CodeInvalidRequest, "read_events", map[string]any{"session_id": s.SessionID, "limit": 0}, ""},
			{alice, protocol.CodeInvalidRequest, "list_sessions", map[string]any{"state": "bogus"}, ""},
			{alice, protocol.CodeSessionActive, "reopen_session", map[string]any{"session_id": s.SessionID}, ""},
			{bob, protocol.CodeNotFound, "join_session", map[string]any{"session_id": s.SessionID}, ""},
		} {
			body := c.who.fail(c.code, c.tool, c.args)
			if body.RetryAfter != nil {
				t.Errorf("%s %v: retry_after_seconds on a %s", c.tool, c.args, c.code)
			}
		}

		// Arguments against the input schema are refused by the SDK, also
		// as isError results, before aspd sees them.
		for _, args := range []map[string]any{
			{"session_id": 7}, // wrong type
			{"session_id": s.SessionID, "surprise": true}, // unknown argument
			{}, // missing required
		} {
			if res := alice.call("get_session", args); !res.IsError {
				t.Errorf("get_session %v accepted: %s", args, text(res))
			}
		}

		// The error does not leak across: the same calls succeed when valid.
		alice.ok("send_message", map[string]any{"session_id": s.SessionID, "content": "hi"}, nil)
	})
}

// TestRateLimited: a refusal by a per-agent rate carries
// retry_after_seconds, REST's Retry-After.
func TestRateLimited(t *testing.T) {
	tune := func(c *app.Config) { c.MessageRate, c.MessageBurst = 0.01, 1 } // one message per 100 s
	forEach(t, tune, func(t *testing.T, a *app.App) {
		mkAgent(t, a, "@acme.alice")
		alice := connect(t, a, "@acme.alice")
		var s protocol.CreateSessionResponse
		alice.ok("create_session", map[string]any{}, &s)
		alice.ok("send_message", map[string]any{"session_id": s.SessionID, "content": "one"}, nil)
		body := alice.fail(protocol.CodeRateLimited, "send_message", map[string]any{"session_id": s.SessionID, "content": "two"})
		if body.RetryAfter == nil || *body.RetryAfter < 90 || *body.RetryAfter > 100 {
			t.Fatalf("retry_after_seconds %v, want about 100", body.RetryAfter)
		}
	})
}
