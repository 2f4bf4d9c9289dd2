package server

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/aspd/aspd/internal/dbtest"
)

var updateOpenAPI = flag.Bool("update", false, "rewrite docs/openapi.json from the route table")

var openAPIFile = filepath.Join("..", "docs", "openapi.json")

// TestOpenAPIFile: docs/openapi.json is the generated description. Refresh
// it with `go test ./server -run TestOpenAPIFile -update`.
func TestOpenAPIFile(t *testing.T) {
	doc, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	if *updateOpenAPI {
		if err := os.WriteFile(openAPIFile, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, doc) {
		t.Fatalf("%s is not the generated description; refresh it: go test ./server -run TestOpenAPIFile -update", openAPIFile)
	}
}

// TestOpenAPIValidates: the description is a valid OpenAPI 3.1 document,
// every $ref resolving.
func TestOpenAPIValidates(t *testing.T) {
	doc, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	spec, err := loader.LoadFromData(doc)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if !spec.IsOpenAPI31OrLater() || spec.IsOpenAPI32OrLater() {
		t.Fatalf("openapi %q, want 3.1", spec.OpenAPI)
	}
	if err := spec.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

// TestOpenAPIValidatorRejects: the validator above can fail (a description
// that breaks the specification is reported).
func TestOpenAPIValidatorRejects(t *testing.T) {
	for name, bad := range map[string]string{
		"dangling ref":   `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/x":{"get":{"responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"#/components/schemas/Nope"}}}}}}}}}`,
		"path parameter": `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/x/{id}":{"get":{"responses":{"200":{"description":"ok"}}}}}}`,
	} {
		spec, err := openapi3.NewLoader().LoadFromData([]byte(bad))
		if err == nil {
			err = spec.Validate(context.Background())
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestOpenAPIIsTheRouter: every route the router serves is described, and
// every described operation is served (so a route added to the table
// without a description, or a description without a route, fails here);
// and GET /openapi.json serves the generated description.
func TestOpenAPIIsTheRouter(t *testing.T) {
	doc, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for p, ops := range d.Paths {
		for m := range ops {
			described[strings.ToUpper(m)+" "+p] = true
		}
	}
	s, hs := newRoutesTestServer(t, dbtest.SQLite(t), nil)
	served := map[string]bool{}
	for _, r := range s.echo.Routes() {
		p, _ := openAPIPath(r.Path)
		served[r.Method+" "+p] = true
	}
	if len(served) != len(routeTable) {
		t.Errorf("%d routes served, %d in the table", len(served), len(routeTable))
	}
	for k := range served {
		if !described[k] {
			t.Errorf("%s is served but not described", k)
		}
	}
	for k := range described {
		if !served[k] {
			t.Errorf("%s is described but not served", k)
		}
	}

	resp, err := hs.Client().Get(hs.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !bytes.Equal(body, doc) {
		t.Fatalf("GET /openapi.json: %d %s, %d bytes, not the generated description", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
}

// TestOpenAPIOperations: each operation says what the route table says:
// its security, its parameters, its success status and its error answer.
func TestOpenAPIOperations(t *testing.T) {
	doc, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	type op struct {
		Security   []map[string][]string `json:"security"`
		Parameters []struct {
			Name     string `json:"name"`
			In       string `json:"in"`
			Required bool   `json:"required"`
		} `json:"parameters"`
		RequestBody *json.RawMessage           `json:"requestBody"`
		Responses   map[string]json.RawMessage `json:"responses"`
	}
	var d struct {
		Paths map[string]map[string]op `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	scheme := map[authClass]string{authAgent: "agentToken", authMCP: "agentToken", authOperator: "operatorToken"}
	for _, rt := range routeTable {
		name := rt.method + " " + rt.path
		p, pathParams := openAPIPath(rt.path)
		o, ok := d.Paths[p][strings.ToLower(rt.method)]
		if !ok {
			t.Errorf("%s: not described", name)
			continue
		}
		if want := scheme[rt.auth]; want == "" {
			if len(o.Security) != 0 {
				t.Errorf("%s: security %v, want none", name, o.Security)
			}
		} else if len(o.Security) == 0 || o.Security[0][want] == nil {
			t.Errorf("%s: security %v, want %s", name, o.Security, want)
		}
		var query, path []string
		for _, prm := range o.Parameters {
			switch prm.In {
			case "query":
				query = append(query, prm.Name)
				if prm.Required {
					t.Errorf("%s: query parameter %s is required; none is", name, prm.Name)
				}
			case "path":
				path = append(path, prm.Name)
			}
		}
		if !slices.Equal(query, rt.query.params) || !slices.Equal(path, pathParams) {
			t.Errorf("%s: parameters query %v path %v, want %v %v", name, query, path, rt.query.params, pathParams)
		}
		if (o.RequestBody != nil) != (rt.request != nil || (rt.auth == authMCP && rt.method == http.MethodPost)) {
			t.Errorf("%s: request body described: %v", name, o.RequestBody != nil)
		}
		var codes []string
		for c := range o.Responses {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		want := []string{strconv.Itoa(rt.status), "4XX", "5XX"}
		sort.Strings(want)
		if !slices.Equal(codes, want) {
			t.Errorf("%s: responses %v, want %v", name, codes, want)
		}
	}
	if !bytes.Contains(doc, []byte(`"ErrorBody": {`)) {
		t.Error("no ErrorBody component")
	}
}

// TestOpenAPIASPTypes: a Go type described by an ASP schema has the
// schema's fields, required where the schema requires them, so that the
// description (which shows the ASP schema) is the type's wire shape.
func TestOpenAPIASPTypes(t *testing.T) {
	doc, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	for typ, name := range aspTypes {
		var extra []string
		if name == "SessionEvent" {
			// A oneOf of the events, each the envelope and its (required)
			// payload.
			name, extra = "SessionEventEnvelope", []string{"payload"}
		}
		asp, ok := d.Components.Schemas[name]
		if !ok {
			t.Errorf("%s: no component %s", typ, name)
			continue
		}
		g := &schemaGen{components: map[string]any{}, names: map[reflect.Type]string{}}
		s, err := g.structSchema(typ)
		if err != nil {
			t.Fatal(err)
		}
		var fields []string
		for f := range s["properties"].(map[string]any) {
			fields = append(fields, f)
		}
		aspFields := slices.Clone(extra)
		for f := range asp.Properties {
			aspFields = append(aspFields, f)
		}
		sort.Strings(fields)
		sort.Strings(aspFields)
		required := slices.Clone(s["required"].([]string))
		sort.Strings(required)
		aspRequired := append(slices.Clone(asp.Required), extra...)
		sort.Strings(aspRequired)
		if !slices.Equal(fields, aspFields) {
			t.Errorf("%s has fields %v, %s %v", typ, fields, name, aspFields)
		}
		// A type may require what the schema leaves optional (it always
		// writes it), never the reverse.
		for _, f := range aspRequired {
			if !slices.Contains(required, f) {
				t.Errorf("%s: %s requires %s, the type may leave it out", typ, name, f)
			}
		}
	}
}

// TestOpenAPIReflection: a Go type's schema follows encoding/json: tag
// names, "-" and unexported fields left out, omitempty optional, embedded
// fields promoted, a nil-able slice or map null unless omitted when empty,
// a named struct a component, json.RawMessage any value.
func TestOpenAPIReflection(t *testing.T) {
	type inner struct {
		N int `json:"n"`
	}
	type Embedded struct {
		E string `json:"e"`
	}
	type sample struct {
		Embedded
		A      string            `json:"a"`
		B      string            `json:"b,omitempty"`
		C      []string          `json:"c"`
		D      []string          `json:"d,omitempty"`
		M      map[string]int    `json:"m"`
		P      *inner            `json:"p,omitempty"`
		R      json.RawMessage   `json:"r"`
		S      int64             `json:"s,string"`
		Skip   string            `json:"-"`
		hidden string            // unexported: not encoded
		Bytes  []byte            `json:"bytes,omitempty"`
		List   []inner           `json:"list"`
		Any    map[string]any    `json:"any,omitempty"`
		Named  Embedded          `json:"named"`
		Deep   map[string][]bool `json:"deep,omitempty"`
	}
	_ = sample{}.hidden
	g := &schemaGen{components: map[string]any{}, names: map[reflect.Type]string{}}
	s, err := g.structSchema(reflect.TypeFor[sample]())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s)
	want := `{"additionalProperties":false,"properties":{` +
		`"a":{"type":"string"},"any":{"additionalProperties":{},"type":"object"},"b":{"type":"string"},` +
		`"bytes":{"contentEncoding":"base64","type":"string"},"c":{"items":{"type":"string"},"type":["array","null"]},` +
		`"d":{"items":{"type":"string"},"type":"array"},"deep":{"additionalProperties":{"items":{"type":"boolean"},"type":["array","null"]},"type":"object"},` +
		`"e":{"type":"string"},"list":{"items":{"$ref":"#/components/schemas/Inner"},"type":["array","null"]},` +
		`"m":{"additionalProperties":{"type":"integer"},"type":["object","null"]},"named":{"$ref":"#/components/schemas/Embedded"},` +
		`"p":{"$ref":"#/components/schemas/Inner"},"r":{},"s":{"type":"string"}},` +
		`"required":["e","a","c","m","r","s","list","named"],"type":"object"}`
	if string(got) != want {
		t.Errorf("schema\n got %s\nwant %s", got, want)
	}
	if _, ok := g.components["Inner"]; !ok {
		t.Errorf("components %v: no Inner", g.components)
	}
	// A second type of the same name is an error, not a silent overwrite.
	type Inner struct{}
	if _, err := g.schema(reflect.TypeFor[Inner]()); err == nil {
		t.Error("two types named Inner: no error")
	}
}
