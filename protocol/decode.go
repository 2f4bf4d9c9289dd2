package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// DecodeStrict decodes exactly one JSON object from body into v, rejecting
// unknown fields, wrong types and trailing data with a precise 400, and then
// checks the raw body with checkBody: every string valid UTF-8 without
// U+0000 or unpaired surrogate escapes, at most MaxDepth levels of nesting,
// no repeated member names. An empty body decodes as `{}` (join, leave and
// end take no body).
func DecodeStrict(body []byte, v any) *Error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	trimmed := bytes.TrimSpace(body)
	if trimmed[0] != '{' {
		return Errorf(http.StatusBadRequest, CodeMalformedJSON, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Errorf(http.StatusBadRequest, CodeMalformedJSON, "request body must hold exactly one JSON value")
	}
	// Only now is the body known to be JSON, which the scanner relies on.
	// It reads the raw bytes, not v: encoding/json has replaced bad text.
	return checkBody(body)
}

func decodeError(err error) *Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn) && strings.HasSuffix(syn.Error(), "exceeded max depth"):
		// encoding/json's own bound (10,000) is far above MaxDepth.
		return Invalid("JSON nesting exceeds the limit of %d levels", MaxDepth)
	case errors.As(err, &syn):
		return Errorf(http.StatusBadRequest, CodeMalformedJSON, "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, CodeMalformedJSON, "malformed JSON: unexpected end of body")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(body)"
		}
		return Invalid("field %q must be %s, got %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return Invalid("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return Errorf(http.StatusBadRequest, CodeMalformedJSON, "malformed JSON: %v", err)
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	default:
		return fmt.Sprintf("of type %s", goKind)
	}
}
