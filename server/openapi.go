package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/schemas"
)

// The OpenAPI 3.1 description of aspd's HTTP API, generated from the route
// table (routes.go), served at GET /openapi.json and committed as
// docs/openapi.json (openapi_test.go keeps the file current; refresh it
// with `go test ./server -run TestOpenAPIFile -update`).
//
// Component schemas: the ASP wire schemas (protocol/schemas) are copied in
// unchanged but for their $refs, which are rewritten to point at the
// components; every other body type is derived from its Go type by
// reflection (jsonSchema), so a field added to a type is described without
// anyone retyping it.

// aspTypes are the Go types whose wire shape is an ASP schema: they are
// described by that schema, not by reflection (openapi_test.go checks that
// both name the same fields).
var aspTypes = map[reflect.Type]string{
	reflect.TypeFor[protocol.Event]():                 "SessionEvent",
	reflect.TypeFor[protocol.Message]():               "Message",
	reflect.TypeFor[protocol.Participant]():           "Participant",
	reflect.TypeFor[protocol.CreateSessionRequest]():  "PostSessionsRequest",
	reflect.TypeFor[protocol.CreateSessionResponse](): "PostSessionsResponse",
	reflect.TypeFor[protocol.InviteRequest]():         "PostSessionsInviteRequest",
	reflect.TypeFor[protocol.InviteResponse]():        "PostSessionsInviteResponse",
	reflect.TypeFor[protocol.SendMessageRequest]():    "PostSessionsMessagesRequest",
	reflect.TypeFor[protocol.SendMessageResponse]():   "PostSessionsMessagesResponse",
	reflect.TypeFor[protocol.ReopenRequest]():         "PostSessionsReopenRequest",
	reflect.TypeFor[protocol.Session]():               "GetSessionResponse",
	reflect.TypeFor[protocol.EventsPage]():            "GetSessionEventsResponse",
}

// aspRoutes name the ASP schemas of the ASP routes whose Go types are
// generic (struct{}{}, protocol.OK): {request, response}.
var aspRoutes = map[string][2]string{
	"POST /sessions/:id/join":   {"PostSessionsJoinRequest", "PostSessionsJoinResponse"},
	"POST /sessions/:id/leave":  {"PostSessionsLeaveRequest", "PostSessionsLeaveResponse"},
	"POST /sessions/:id/end":    {"PostSessionsEndRequest", "PostSessionsEndResponse"},
	"POST /sessions/:id/reopen": {"", "PostSessionsReopenResponse"},
}

// aspRootSchemas name the schema a file's root is, for the files whose root
// is one (events.json: any session event).
var aspRootSchemas = map[string]string{"events.json": "SessionEvent"}

// extraMedia are the media types a route answers with besides its
// produces: the console's assets (internal/console/assets) are scripts and
// style sheets as well as pages.
var extraMedia = map[string][]string{"GET /console/*": {"text/javascript", "text/css"}}

// integerParams are the query parameters whose value is an integer; every
// other one is a string.
var integerParams = map[string]bool{"limit": true, "after_sequence": true, "timeout_seconds": true}

// openAPIDocument is the description as served and committed (generated
// once: it depends only on the route table and the types). Set in init, as
// routeTable refers to the handler that reads it.
var openAPIDocument func() ([]byte, error)

func init() {
	openAPIDocument = sync.OnceValues(func() ([]byte, error) { return generateOpenAPI(routeTable) })
}

// openAPI serves the description (GET /openapi.json). Like the health
// checks it takes no query and ignores one.
func (s *Server) openAPI(c echo.Context) error {
	doc, err := openAPIDocument()
	if err != nil {
		return fmt.Errorf("openapi: %w", err)
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
}

const componentSchemas = "#/components/schemas/"

// generateOpenAPI builds the description of table, as indented JSON.
func generateOpenAPI(table []route) ([]byte, error) {
	g := &schemaGen{components: map[string]any{}, names: map[reflect.Type]string{}}
	if err := g.addASPSchemas(); err != nil {
		return nil, err
	}
	errorSchema, err := g.schema(reflect.TypeFor[protocol.ErrorBody]())
	if err != nil {
		return nil, err
	}
	paths := map[string]map[string]any{}
	for i := range table {
		rt := &table[i]
		p, op, err := g.operation(rt)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", rt.method, rt.path, err)
		}
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		paths[p][strings.ToLower(rt.method)] = op
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "aspd",
			"version": "1",
			"description": "aspd, an Agent Session Protocol (ASP) server: the agent API, MCP, the operator API (/admin/v1), " +
				"Chorus callbacks and the console. Generated from the server's route table; see docs/api.md.",
			"license": map[string]any{"name": "Apache-2.0", "identifier": "Apache-2.0"},
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": g.components,
			"responses": map[string]any{
				"Error": map[string]any{
					"description": "An error: a machine-readable code (docs/errors.md), a message, and the offending field if any.",
					"content":     map[string]any{echo.MIMEApplicationJSON: map[string]any{"schema": errorSchema}},
				},
				// aspd answers authentication, body limits and store
				// outages on /mcp with its error body; the MCP SDK answers
				// a request its transport refuses (a wrong Accept or
				// Content-Type, an unsupported protocol version) with a
				// JSON-RPC error or a line of text.
				"MCPError": map[string]any{
					"description": "An error: aspd's error body (docs/errors.md), a JSON-RPC 2.0 error response, or the MCP SDK's text.",
					"content": map[string]any{
						echo.MIMEApplicationJSON: map[string]any{"schema": map[string]any{"anyOf": []any{errorSchema,
							map[string]any{"type": "object", "required": []string{"jsonrpc", "error"},
								"description": "A JSON-RPC 2.0 error response."}}}},
						echo.MIMETextPlain: map[string]any{"schema": map[string]any{"type": "string"}},
					},
				},
			},
			"securitySchemes": map[string]any{
				"agentToken": map[string]any{"type": "http", "scheme": "bearer",
					"description": "An agent's token (issued by POST /admin/v1/agents)."},
				"agentTokenQuery": map[string]any{"type": "apiKey", "in": "query", "name": "token",
					"description": "An agent's token as ?token=, for WebSocket clients that cannot set headers (GET /connect only)."},
				"operatorToken": map[string]any{"type": "http", "scheme": "bearer",
					"description": "The operator (admin) token."},
			},
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("openapi: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// echoParam is an echo path parameter (":name").
var echoParam = regexp.MustCompile(`:([A-Za-z_][A-Za-z0-9_]*)`)

// openAPIPath is rt's path in OpenAPI's syntax and its path parameters.
// Echo's catch-all "*" (the console's pages) becomes the parameter {path}.
func openAPIPath(echoPath string) (string, []string) {
	var params []string
	p := echoParam.ReplaceAllStringFunc(echoPath, func(m string) string {
		params = append(params, m[1:])
		return "{" + m[1:] + "}"
	})
	if strings.HasSuffix(p, "/*") {
		p = strings.TrimSuffix(p, "*") + "{path}"
		params = append(params, "path")
	}
	return p, params
}

// operation is rt's path (OpenAPI syntax) and its Operation Object.
func (g *schemaGen) operation(rt *route) (string, map[string]any, error) {
	path, pathParams := openAPIPath(rt.path)
	op := map[string]any{
		"operationId": operationID(rt.method, rt.path),
		"summary":     rt.summary,
		"tags":        []string{routeTag(rt)},
	}
	var params []any
	for _, name := range pathParams {
		params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
	}
	for _, name := range rt.query.params {
		typ := "string"
		if integerParams[name] {
			typ = "integer"
		}
		param := map[string]any{"name": name, "in": "query", "required": false, "schema": map[string]any{"type": typ}}
		if d := queryParamNote(rt.query, name); d != "" {
			param["description"] = d
		}
		params = append(params, param)
	}
	if params != nil {
		op["parameters"] = params
	}

	switch rt.auth {
	case authAgent:
		sec := []any{map[string]any{"agentToken": []string{}}}
		if rt.query.has("token") {
			sec = append(sec, map[string]any{"agentTokenQuery": []string{}})
		}
		op["security"] = sec
	case authMCP:
		op["security"] = []any{map[string]any{"agentToken": []string{}}}
	case authOperator:
		op["security"] = []any{map[string]any{"operatorToken": []string{}}}
	case authChorusCallback:
		op["security"] = []any{}
		op["description"] = "Authenticated by the callback token in the path (issued per delivery); an unknown or expired token is 404."
	default:
		op["security"] = []any{}
	}

	asp := aspRoutes[rt.method+" "+rt.path]
	// The request body.
	switch {
	case asp[0] != "":
		op["requestBody"] = jsonBody(map[string]any{"$ref": componentSchemas + asp[0]}, false)
	case rt.request != nil:
		s, err := g.schema(reflect.TypeOf(rt.request))
		if err != nil {
			return "", nil, err
		}
		// struct{}{}: the body, if any, is {}.
		op["requestBody"] = jsonBody(s, reflect.TypeOf(rt.request).NumField() > 0)
	case rt.auth == authMCP && rt.method == http.MethodPost:
		op["requestBody"] = jsonBody(map[string]any{"type": "object",
			"description": "A JSON-RPC 2.0 message (MCP Streamable HTTP transport)."}, true)
	}

	// The success answer.
	success := map[string]any{"description": http.StatusText(rt.status)}
	media := rt.produces
	if media == "" {
		media = echo.MIMEApplicationJSON
	}
	switch {
	case asp[1] != "":
		success["content"] = map[string]any{media: map[string]any{"schema": map[string]any{"$ref": componentSchemas + asp[1]}}}
	case rt.produces == mediaNDJSON:
		// OpenAPI 3.1 has no schema for a stream's items: name it.
		item, err := g.schema(reflect.TypeOf(rt.response))
		if err != nil {
			return "", nil, err
		}
		success["description"] = "One JSON value per line, each an item as described by x-item-schema."
		success["content"] = map[string]any{media: map[string]any{"schema": map[string]any{"type": "string"}}}
		success["x-item-schema"] = item
	case rt.response != nil && rt.produces == "":
		s, err := g.schema(reflect.TypeOf(rt.response))
		if err != nil {
			return "", nil, err
		}
		success["content"] = map[string]any{media: map[string]any{"schema": s}}
	case rt.auth == authMCP:
		success["content"] = map[string]any{
			echo.MIMEApplicationJSON: map[string]any{"schema": map[string]any{"type": "object", "description": "A JSON-RPC 2.0 message."}},
			mediaSSE:                 map[string]any{"schema": map[string]any{"type": "string"}},
		}
	case rt.status == http.StatusSwitchingProtocols:
		success["description"] = "Switching Protocols: a WebSocket carrying session events (events.json), one per text message."
	case rt.status == http.StatusNoContent:
		// No body.
	case rt.status >= 300 && rt.status < 400:
		success["headers"] = map[string]any{"Location": map[string]any{"schema": map[string]any{"type": "string"}}}
	default:
		content := map[string]any{media: map[string]any{"schema": map[string]any{"type": "string"}}}
		for _, m := range extraMedia[rt.method+" "+rt.path] {
			content[m] = map[string]any{"schema": map[string]any{"type": "string"}}
		}
		success["content"] = content
	}
	errorAnswer := map[string]any{"$ref": "#/components/responses/Error"}
	if rt.auth == authMCP {
		errorAnswer = map[string]any{"$ref": "#/components/responses/MCPError"}
	}
	op["responses"] = map[string]any{strconv.Itoa(rt.status): success, "4XX": errorAnswer, "5XX": errorAnswer}
	return path, op, nil
}

func jsonBody(schema any, required bool) map[string]any {
	return map[string]any{
		"required": required,
		"content":  map[string]any{echo.MIMEApplicationJSON: map[string]any{"schema": schema}},
	}
}

// operationID is a unique name of method and path: get_admin_v1_agents_handle.
func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.Split(path, "/") {
		seg = strings.Trim(seg, ":")
		if seg == "" {
			continue
		}
		if seg == "*" {
			seg = "path"
		}
		b.WriteByte('_')
		for _, r := range seg {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// routeTag groups the operations by API.
func routeTag(rt *route) string {
	switch {
	case rt.auth == authMCP:
		return "mcp"
	case rt.auth == authAgent:
		return "agent"
	case rt.auth == authChorusCallback || strings.Contains(rt.path, "/chorus"):
		return "chorus"
	case rt.auth == authOperator:
		return "operator"
	case strings.HasPrefix(rt.path, "/console"):
		return "console"
	default:
		return "meta"
	}
}

// queryParamNote describes what rule says of the parameter besides its name.
func queryParamNote(rule queryRule, name string) string {
	var notes []string
	for _, pair := range rule.aliases {
		if pair[0] == name {
			notes = append(notes, "Another name of "+pair[1]+": give at most one of them.")
		}
		if pair[1] == name {
			notes = append(notes, "Another name of "+pair[0]+": give at most one of them.")
		}
	}
	if need, ok := rule.needs[name]; ok {
		notes = append(notes, "Only together with "+need+".")
	}
	if rule.alone == name {
		notes = append(notes, "Cannot be combined with any other parameter.")
	}
	return strings.Join(notes, " ")
}

// has reports whether the rule takes the parameter.
func (q queryRule) has(name string) bool {
	for _, p := range q.params {
		if p == name {
			return true
		}
	}
	return false
}

// schemaGen collects the component schemas.
type schemaGen struct {
	components map[string]any          // name -> schema
	names      map[reflect.Type]string // reflected types -> their component
}

// addASPSchemas copies every $def of the ASP schema files (and a file's
// root, where it is a schema) into the components, rewriting $refs
// ("common.json#/$defs/Handle", "#/$defs/Handle", "events.json#") to
// "#/components/schemas/Handle". A name defined twice is an error.
func (g *schemaGen) addASPSchemas() error {
	for _, file := range schemas.Files {
		raw, err := schemas.FS.ReadFile(file)
		if err != nil {
			return fmt.Errorf("openapi: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			return fmt.Errorf("openapi: %s: %w", file, err)
		}
		defs, _ := doc["$defs"].(map[string]any)
		add := func(name string, s any) error {
			if _, dup := g.components[name]; dup {
				return fmt.Errorf("openapi: %s: schema %s is defined twice", file, name)
			}
			r, err := rewriteRefs(s, file)
			if err != nil {
				return fmt.Errorf("openapi: %s: %s: %w", file, name, err)
			}
			g.components[name] = r
			return nil
		}
		for name, s := range defs {
			if err := add(name, s); err != nil {
				return err
			}
		}
		if root, ok := aspRootSchemas[file]; ok {
			s := map[string]any{}
			for k, v := range doc {
				switch k {
				case "$schema", "$id", "$defs":
				default:
					s[k] = v
				}
			}
			if err := add(root, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// rewriteRefs is v with its $refs pointed at the components.
func rewriteRefs(v any, file string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if ref, ok := e.(string); ok && k == "$ref" {
				r, err := componentRef(ref, file)
				if err != nil {
					return nil, err
				}
				out[k] = r
				continue
			}
			r, err := rewriteRefs(e, file)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			r, err := rewriteRefs(e, file)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	default:
		return v, nil
	}
}

// componentRef is the component a file-relative $ref of file points at.
func componentRef(ref, file string) (string, error) {
	target, frag, _ := strings.Cut(ref, "#")
	if target == "" {
		target = file
	}
	if name, ok := strings.CutPrefix(frag, "/$defs/"); ok && !strings.Contains(name, "/") {
		return componentSchemas + name, nil
	}
	if root, ok := aspRootSchemas[target]; ok && frag == "" {
		return componentSchemas + root, nil
	}
	return "", fmt.Errorf("$ref %q: not a schema definition", ref)
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	timeType       = reflect.TypeFor[time.Time]()
)

// schema is the JSON Schema of t's JSON encoding (encoding/json): a named
// struct is a component (referred to), anything else is inline. A pointer
// is its element (aspd sets every pointer field without omitempty); a slice
// or map without omitempty may be null (a nil one encodes so).
func (g *schemaGen) schema(t reflect.Type) (map[string]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if name, ok := aspTypes[t]; ok {
		return map[string]any{"$ref": componentSchemas + name}, nil
	}
	switch t {
	case rawMessageType:
		return map[string]any{}, nil // any JSON value
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}, nil
		}
		items, err := g.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		// A slice of pointers to scalars holds nulls on purpose (a chart's
		// unknown points: Overview's series); a pointer to a struct in a
		// slice is never nil.
		if e := t.Elem(); e.Kind() == reflect.Pointer && e.Elem().Kind() != reflect.Struct {
			if ty, ok := items["type"].(string); ok {
				items["type"] = []string{ty, "null"}
			}
		}
		return map[string]any{"type": []string{"array", "null"}, "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("openapi: %s: map keys must be strings", t)
		}
		values, err := g.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": []string{"object", "null"}, "additionalProperties": values}, nil
	case reflect.Struct:
		if t.Name() == "" {
			return g.structSchema(t)
		}
		name := componentName(t)
		if have, ok := g.names[t]; ok {
			return map[string]any{"$ref": componentSchemas + have}, nil
		}
		if _, taken := g.components[name]; taken {
			return nil, fmt.Errorf("openapi: %s: component %s is already another type's", t, name)
		}
		g.names[t] = name
		g.components[name] = nil // taken, while its fields are described
		s, err := g.structSchema(t)
		if err != nil {
			return nil, err
		}
		g.components[name] = s
		return map[string]any{"$ref": componentSchemas + name}, nil
	}
	return nil, fmt.Errorf("openapi: %s: no JSON Schema for kind %s", t, t.Kind())
}

// structSchema is the closed object schema of a struct's exported fields,
// as encoding/json names them; a field with omitempty or omitzero is
// optional. Embedded structs without a name contribute their fields.
func (g *schemaGen) structSchema(t reflect.Type) (map[string]any, error) {
	props := map[string]any{}
	required := []string{}
	if err := g.fields(t, props, &required); err != nil {
		return nil, err
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	}, nil
}

func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := g.fields(ft, props, required); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s, err := g.schema(f.Type)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t, f.Name, err)
		}
		optional := false
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty", "omitzero":
				optional = true
			case "string":
				s = map[string]any{"type": "string"}
			}
		}
		if optional {
			// Present only when not empty: a slice or map is not null then.
			if ty, ok := s["type"].([]string); ok && len(ty) == 2 && ty[1] == "null" {
				s["type"] = ty[0]
			}
		} else {
			*required = append(*required, name)
		}
		props[name] = s
	}
	return nil
}

// componentName is a named type's component name, capitalized; an instance
// of a generic type is named after its arguments too (SessionList[Session]
// is SessionList_Session), as component names cannot hold brackets.
func componentName(t reflect.Type) string {
	name := t.Name()
	// Unexported answer types (routes.go) are capitalized like the rest.
	name = strings.ToUpper(name[:1]) + name[1:]
	base, args, ok := strings.Cut(name, "[")
	if !ok {
		return name
	}
	var parts []string
	for _, a := range strings.Split(strings.TrimSuffix(args, "]"), ",") {
		a = strings.TrimLeft(a, "*")
		parts = append(parts, a[strings.LastIndex(a, ".")+1:])
	}
	return base + "_" + strings.Join(parts, "_")
}
