// Package openapicheck is a test helper: an http.RoundTripper that checks
// every answer an aspd sends a test against the OpenAPI description
// (docs/openapi.json, GET /openapi.json), so that the description cannot
// drift from what the server answers. The integration suite installs it as
// http.DefaultTransport, so every client built on it (http.Get,
// http.DefaultClient, the MCP SDK's clients, the WebSocket dialer) is
// covered without any test opting in; the server package's harness wraps
// its httptest client with it.
//
// Only answers are checked: tests send malformed requests on purpose, and
// those must still be answered as described (an error body). Only answers
// of a server a test has claimed (Own) are checked, and a mismatch fails
// that test with t.Errorf: the call itself goes on unchanged, so a test that
// expects the answer still sees it. kin-openapi's openapi3filter does the
// validating (ValidateResponse, on the route its router finds).
package openapicheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Transport is the response-validating http.RoundTripper.
type Transport struct {
	next   http.RoundTripper
	router routers.Router

	mu     sync.Mutex
	owners map[string]testing.TB // host:port of an aspd -> the test that started it

	// Bodies are validated by schemas compiled once from the description
	// (kin-openapi's VisitJSON compiles the schema anew on every call,
	// which made the integration suite markedly slower).
	schemaMu sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema // JSON pointer -> schema
}

// descriptionURL names the description for the schema compiler (never
// fetched).
const descriptionURL = "https://aspd.invalid/openapi.json"

// registerTextDecoders teaches kin-openapi to read the console's pages and
// assets as the strings the description says they are (it reads JSON and
// text/plain only). Once, from the first New (which test harnesses call
// before their tests run): the registry is a global map.
var registerTextDecoders = sync.OnceFunc(func() {
	for _, mt := range []string{"text/html", "text/javascript", "text/css"} {
		openapi3filter.RegisterBodyDecoder(mt, openapi3filter.PlainBodyDecoder)
	}
})

// New is a Transport that sends requests through next and checks the
// answers against description (an OpenAPI 3.1 document, JSON).
func New(description []byte, next http.RoundTripper) (*Transport, error) {
	registerTextDecoders()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(description)
	if err != nil {
		return nil, fmt.Errorf("openapi: load: %w", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: router: %w", err)
	}
	if doc.Components.Schemas["ErrorBody"] == nil {
		return nil, errors.New("openapi: no ErrorBody component")
	}
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(description))
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	// The whole description is one resource: a schema in it is compiled
	// by its JSON pointer, and its $refs (#/components/schemas/...)
	// resolve in the document, as OpenAPI 3.1 says they do.
	compiler := jsonschema.NewCompiler()
	compiler.DefaultDraft(jsonschema.Draft2020)
	compiler.AssertFormat()
	if err := compiler.AddResource(descriptionURL, raw); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return &Transport{next: next, router: router, owners: map[string]testing.TB{},
		compiler: compiler, compiled: map[string]*jsonschema.Schema{}}, nil
}

// schemaAt is the schema at a JSON pointer of the description, compiled
// once.
func (c *Transport) schemaAt(ptr string) (*jsonschema.Schema, error) {
	c.schemaMu.Lock()
	defer c.schemaMu.Unlock()
	if s, ok := c.compiled[ptr]; ok {
		return s, nil
	}
	s, err := c.compiler.Compile(descriptionURL + "#" + ptr)
	if err != nil {
		return nil, err
	}
	c.compiled[ptr] = s
	return s, nil
}

// validateJSON validates a JSON body against the schema at ptr.
func (c *Transport) validateJSON(ptr string, body []byte) string {
	s, err := c.schemaAt(ptr)
	if err != nil {
		return fmt.Sprintf("the description's schema at %s: %v", ptr, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Sprintf("not JSON: %v\n%s", err, excerpt(body))
	}
	if err := s.Validate(v); err != nil {
		return fmt.Sprintf("the body does not match %s: %v\n%s", ptr, err, excerpt(body))
	}
	return ""
}

// pointerToken escapes a JSON pointer's reference token (RFC 6901).
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// Own makes t the test whose aspd listens at the URL's host:port, until t
// ends. Restarting on the same address keeps the owner.
func (c *Transport) Own(t testing.TB, rawURL string) {
	if c == nil {
		return
	}
	host := strings.TrimPrefix(rawURL, "http://")
	c.mu.Lock()
	c.owners[host] = t
	c.mu.Unlock()
	t.Cleanup(func() {
		c.mu.Lock()
		if c.owners[host] == t {
			delete(c.owners, host)
		}
		c.mu.Unlock()
	})
}

// report fails the owner of host, if it still runs. It holds the lock while
// it reports, so that the owner cannot end (its cleanup takes the lock)
// between the lookup and the report: reporting to an ended test panics.
func (c *Transport) report(host, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.owners[host]; t != nil {
		t.Errorf("%s", msg)
	}
}

func (c *Transport) owned(host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owners[host] != nil
}

// maxChecked bounds the body the check reads into memory; no answer of the
// API that the suite reads whole is near it.
const maxChecked = 64 << 20

func (c *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || !c.owned(req.URL.Host) {
		return resp, err
	}
	if problem := c.check(req, resp); problem != "" {
		c.report(req.URL.Host, fmt.Sprintf("openapi: %s %s: %d %s: %s",
			req.Method, req.URL.RequestURI(), resp.StatusCode, resp.Header.Get("Content-Type"), problem))
	}
	return resp, nil
}

// streamed reports whether a response's body is a stream the client reads
// as it comes (it cannot be read whole here without changing the test):
// a WebSocket, server-sent events, NDJSON.
func streamed(resp *http.Response) bool {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return true
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream" || mt == "application/x-ndjson"
}

// check validates resp (whose body it may read and replace with a copy)
// and says what is wrong with it, or "".
func (c *Transport) check(req *http.Request, resp *http.Response) string {
	var body []byte
	if !streamed(resp) {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxChecked))
		resp.Body.Close()
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), errReader{err}))
		if err != nil {
			// The test gave up on the call (a client timeout, a
			// cancelled context): it sees the error, there is nothing
			// whole to check.
			return ""
		}
		body = b
	}

	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case req.Method == http.MethodOptions && resp.StatusCode == http.StatusNoContent && len(body) == 0:
		// echo answers OPTIONS on every path it routes by itself (204,
		// Allow): the router's answer, not an operation of the API.
		return ""
	case resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge && mt == "text/plain":
		// net/http refuses oversized headers itself, before any handler
		// of aspd's sees the request.
		return ""
	}

	route, params, err := c.findRoute(req)
	if err != nil {
		// Not a described operation (a probe of an unknown path or
		// method): the answer is an error, described as such.
		if resp.StatusCode < 400 {
			return fmt.Sprintf("no described operation (%v), and the answer is not an error", err)
		}
		return c.checkError(resp, body)
	}
	// kin-openapi checks the status (an undescribed one is an error) and
	// the described headers; the media type and the body are checked
	// below, with schemas compiled once.
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		return fmt.Sprintf("%v\n%s", err, excerpt(body))
	}
	if req.Method == http.MethodHead {
		return "" // no body (kin-openapi does not check HEAD either)
	}
	key, ref := describedResponse(route.Operation.Responses, resp.StatusCode)
	if ref == nil || ref.Value == nil || len(ref.Value.Content) == 0 {
		return "" // no body described (a redirect, a WebSocket upgrade)
	}
	media := mediaKey(ref.Value.Content, resp.Header.Get("Content-Type"))
	if media == "" {
		return "media type not described"
	}
	if body == nil || mt != "application/json" {
		return "" // a stream, read by the test as it comes; text (a string)
	}
	base := "/paths/" + pointerToken(route.Path) + "/" + strings.ToLower(route.Method) + "/responses/" + key
	if ref.Ref != "" {
		base = strings.TrimPrefix(ref.Ref, "#") // a shared answer: #/components/responses/Error
	}
	return c.validateJSON(base+"/content/"+pointerToken(media)+"/schema", body)
}

// findRoute is the described operation req calls. Echo's catch-all
// (/console/*) matches an empty rest too (/console/), which an OpenAPI path
// parameter cannot be: a path ending in "/" is first looked up as the
// catch-all's.
func (c *Transport) findRoute(req *http.Request) (*routers.Route, map[string]string, error) {
	if p := req.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
		r := req.Clone(context.Background())
		r.URL.Path += "index"
		if route, params, err := c.router.FindRoute(r); err == nil && strings.HasSuffix(route.Path, "/{path}") {
			params["path"] = ""
			return route, params, nil
		}
	}
	return c.router.FindRoute(req)
}

// checkError validates an error answer against ErrorBody.
func (c *Transport) checkError(resp *http.Response, body []byte) string {
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return "an error answer that is not JSON"
	}
	if p := c.validateJSON("/components/schemas/ErrorBody", body); p != "" {
		return "error answer: " + p
	}
	return ""
}

// describedResponse is the key ("200", "4XX", "default") and the answer
// the description gives for status, or nil.
func describedResponse(rs *openapi3.Responses, status int) (string, *openapi3.ResponseRef) {
	for _, key := range []string{strconv.Itoa(status), strconv.Itoa(status/100) + "XX", "default"} {
		if r := rs.Value(key); r != nil {
			return key, r
		}
	}
	return "", nil
}

// mediaKey is the key of the content entry that describes the media type
// ct (as kin-openapi matches it: exact, without parameters, type/*, */*),
// or "".
func mediaKey(content openapi3.Content, ct string) string {
	m := content.Get(ct)
	if m == nil {
		return ""
	}
	for k, v := range content {
		if v == m {
			return k
		}
	}
	return ""
}

// excerpt is the start of a body, for a report.
func excerpt(b []byte) string {
	const n = 2000
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// errReader returns err (io.EOF if nil) once the copied body is read.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) {
	if r.err == nil {
		return 0, io.EOF
	}
	return 0, r.err
}
