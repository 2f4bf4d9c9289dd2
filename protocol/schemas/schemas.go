// Package schemas holds the ASP wire schemas (JSON Schema 2020-12), copied
// unchanged from the ASP specification (see README.md and LICENSE here).
// They are canonical for wire shapes: the integration tests validate real
// answers against them, and the server's OpenAPI description
// (server/openapi.go) embeds them as its component schemas.
package schemas

import "embed"

// FS holds common.json, events.json and http.json.
//
//go:embed *.json
var FS embed.FS

// Files are the schema files, in the order they refer to each other.
var Files = []string{"common.json", "events.json", "http.json"}
