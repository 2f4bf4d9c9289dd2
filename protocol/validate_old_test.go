package protocol

// The content validation before it read content in place, kept to check
// that the one-pass version answers exactly as it did.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

func (l Limits) oldValidateContent(raw json.RawMessage) (*Content, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, contentErr("content is required")
	}
	if len(raw) > l.MaxContentBytes {
		return nil, Errorf(http.StatusRequestEntityTooLarge, CodeContentTooLarge,
			"content is %d bytes; the limit is %d", len(raw), l.MaxContentBytes)
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, contentErr("content is not a valid JSON string")
		}
		if s == "" {
			return nil, contentErr("content must not be empty")
		}
		return &Content{Raw: raw}, nil
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, contentErr("content must be a string or an array of content parts")
		}
		if len(parts) == 0 {
			return nil, contentErr("content must not be an empty array")
		}
		if len(parts) > l.MaxParts {
			return nil, Errorf(http.StatusRequestEntityTooLarge, CodeContentTooLarge,
				"content has %d parts; the limit is %d", len(parts), l.MaxParts)
		}
		c := &Content{Raw: raw}
		for i, p := range parts {
			data, err := oldValidatePart(i, p)
			if err != nil {
				return nil, err
			}
			if data != nil {
				c.DataParts = append(c.DataParts, data)
			}
		}
		return c, nil
	default:
		return nil, contentErr("content must be a non-empty string or a non-empty array of content parts")
	}
}

func oldValidatePart(i int, raw json.RawMessage) (json.RawMessage, *Error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, contentErr("content[%d] must be an object", i)
	}
	var typ string
	if err := json.Unmarshal(obj["type"], &typ); err != nil || typ == "" {
		return nil, contentErr("content[%d].type must be one of text, image, file, data", i)
	}
	fields, ok := partFields[typ]
	if !ok {
		return nil, contentErr("content[%d].type %q is not one of text, image, file, data", i, typ)
	}
	for name, v := range obj {
		kind, ok := fields[name]
		if !ok {
			return nil, contentErr("content[%d]: unknown field %q for a %s part", i, name, typ)
		}
		if !hasKind(v, kind) {
			return nil, contentErr("content[%d].%s must be %s", i, name, kindName(kind))
		}
	}
	for _, name := range partRequired[typ] {
		if _, ok := obj[name]; !ok {
			return nil, contentErr("content[%d].%s is required for a %s part", i, name, typ)
		}
	}
	switch typ {
	case "text":
		if string(obj["text"]) == `""` {
			return nil, contentErr("content[%d].text must not be empty", i)
		}
	case "image":
		_, hasURL := obj["url"]
		_, hasData := obj["data_uri"]
		if !hasURL && !hasData {
			return nil, contentErr("content[%d]: an image part needs url or data_uri", i)
		}
		if hasURL && !oldValidURI(obj["url"]) {
			return nil, contentErr("content[%d].url must be an absolute URI", i)
		}
		if hasData {
			var s string
			_ = json.Unmarshal(obj["data_uri"], &s)
			if !strings.HasPrefix(s, "data:") {
				return nil, contentErr("content[%d].data_uri must start with data:", i)
			}
		}
	case "file":
		if !oldValidURI(obj["url"]) {
			return nil, contentErr("content[%d].url must be an absolute URI", i)
		}
		if sz, ok := obj["size"]; ok {
			var n int64
			if err := json.Unmarshal(sz, &n); err != nil || n < 0 {
				return nil, contentErr("content[%d].size must be a non-negative integer", i)
			}
		}
	case "data":
		return obj["data"], nil
	}
	return nil, nil
}

func oldValidURI(raw json.RawMessage) bool {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && (u.Host != "" || u.Opaque != "" || u.Path != "")
}

// sameAnswer reports whether the one-pass validation answers raw as the old
// one did. The old one read a part's fields in map order, so with several
// bad fields its message varied: any of its answers will do.
func sameAnswer(l Limits, raw json.RawMessage) (string, bool) {
	c, err := l.ValidateContent(raw)
	for range 50 {
		oc, oerr := l.oldValidateContent(raw)
		switch {
		case (err == nil) != (oerr == nil):
		case err != nil:
			if *err == *oerr {
				return "", true
			}
			continue
		case !bytes.Equal(c.Raw, oc.Raw) || len(c.DataParts) != len(oc.DataParts):
		default:
			for i := range c.DataParts {
				if !bytes.Equal(c.DataParts[i], oc.DataParts[i]) {
					return "data part differs", false
				}
				var m map[string]json.RawMessage
				_ = json.Unmarshal(oc.DataParts[i], &m)
				for _, name := range []string{"envelope_version", "kind", "x"} {
					_, want := m[name]
					if c.HasMember(i, name) != want {
						return "HasMember(" + name + ") differs", false
					}
				}
			}
			return "", true
		}
		if err == nil || oerr == nil {
			return "one accepted, the other refused", false
		}
	}
	return "error differs: " + err.Error(), false
}
