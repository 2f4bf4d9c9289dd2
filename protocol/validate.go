package protocol

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// Limits are the explicit bounds on what a request may carry. Every one is a
// flag of aspd (see `aspd --help`) and is documented in docs/configuration.md.
type Limits struct {
	MaxContentBytes  int // encoded size of one message's content
	MaxParts         int // content parts per message
	MaxInvitees      int // handles per invite list
	MaxTopicBytes    int // topic length in bytes
	MaxMetadataBytes int // encoded size of one message's metadata
}

// DefaultLimits are the limits aspd runs with unless configured otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxContentBytes:  256 << 10,
		MaxParts:         64,
		MaxInvitees:      100,
		MaxTopicBytes:    512,
		MaxMetadataBytes: 16 << 10,
	}
}

// MaxIdempotencyKeyLen is common.json#/$defs/IdempotencyKey's maxLength.
const MaxIdempotencyKeyLen = 255

// Content is validated message content. DataParts holds the `data` object of
// every data part, in order, so callers can apply further rules (agent-channel
// frames) without decoding the content again. Both are slices of the bytes
// ValidateContent was given, not copies.
type Content struct {
	Raw       json.RawMessage
	DataParts []json.RawMessage
}

// ValidateContent checks raw against common.json#/$defs/Content: a non-empty
// string, or a non-empty array of closed text/image/file/data parts.
func (l Limits) ValidateContent(raw json.RawMessage) (*Content, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, contentErr("content is required")
	}
	if len(raw) > l.MaxContentBytes {
		return nil, Errorf(http.StatusRequestEntityTooLarge, CodeContentTooLarge,
			"content is %d bytes; the limit is %d", len(raw), l.MaxContentBytes)
	}
	// One validity check, then the content is read in place: json.Valid
	// accepts exactly what the decodes it replaces accepted.
	switch raw[0] {
	case '"':
		if !json.Valid(raw) {
			return nil, contentErr("content is not a valid JSON string")
		}
		if string(raw) == `""` {
			return nil, contentErr("content must not be empty")
		}
		return &Content{Raw: raw}, nil
	case '[':
		if !json.Valid(raw) {
			return nil, contentErr("content must be a string or an array of content parts")
		}
		var small [16][]byte
		parts := small[:0]
		Elements(raw, func(v []byte) { parts = append(parts, v) })
		if len(parts) == 0 {
			return nil, contentErr("content must not be an empty array")
		}
		if len(parts) > l.MaxParts {
			return nil, Errorf(http.StatusRequestEntityTooLarge, CodeContentTooLarge,
				"content has %d parts; the limit is %d", len(parts), l.MaxParts)
		}
		c := &Content{Raw: raw}
		for i, p := range parts {
			data, err := validatePart(i, p)
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

// partFields lists, per part type, each allowed field and its JSON kind.
var partFields = map[string]map[string]byte{
	"text":  {"type": '"', "text": '"'},
	"image": {"type": '"', "url": '"', "data_uri": '"', "mime_type": '"', "name": '"'},
	"file":  {"type": '"', "url": '"', "name": '"', "mime_type": '"', "size": '0'},
	"data":  {"type": '"', "data": '{'},
}

var partRequired = map[string][]string{
	"text": {"text"},
	"file": {"url"},
	"data": {"data"},
}

// part is a content part's members, as a decode into a map would hold them:
// a repeated name keeps its last value (the HTTP body scan refuses repeats
// before this, but other callers' content may hold them).
type part struct {
	names  [][]byte
	values [][]byte
}

func (p *part) get(name string) (json.RawMessage, bool) {
	for i, n := range p.names {
		if string(n) == name {
			return p.values[i], true
		}
	}
	return nil, false
}

// validatePart validates the content part raw, which is valid JSON (an
// element of content that json.Valid accepted).
func validatePart(i int, raw json.RawMessage) (json.RawMessage, *Error) {
	if raw[0] != '{' {
		return nil, contentErr("content[%d] must be an object", i)
	}
	var names, values [8][]byte
	obj := part{names: names[:0], values: values[:0]}
	Members(raw, func(name, v []byte) {
		for j, n := range obj.names {
			if string(n) == string(name) {
				obj.values[j] = v
				return
			}
		}
		obj.names = append(obj.names, name)
		obj.values = append(obj.values, v)
	})
	typ, ok := stringValue(obj.get("type"))
	if !ok || typ == "" {
		return nil, contentErr("content[%d].type must be one of text, image, file, data", i)
	}
	fields, ok := partFields[typ]
	if !ok {
		return nil, contentErr("content[%d].type %q is not one of text, image, file, data", i, typ)
	}
	for j, name := range obj.names {
		kind, ok := fields[string(name)]
		if !ok {
			return nil, contentErr("content[%d]: unknown field %q for a %s part", i, name, typ)
		}
		if !hasKind(obj.values[j], kind) {
			return nil, contentErr("content[%d].%s must be %s", i, name, kindName(kind))
		}
	}
	for _, name := range partRequired[typ] {
		if _, ok := obj.get(name); !ok {
			return nil, contentErr("content[%d].%s is required for a %s part", i, name, typ)
		}
	}
	switch typ {
	case "text":
		if text, _ := obj.get("text"); string(text) == `""` {
			return nil, contentErr("content[%d].text must not be empty", i)
		}
	case "image":
		u, hasURL := obj.get("url")
		d, hasData := obj.get("data_uri")
		if !hasURL && !hasData {
			return nil, contentErr("content[%d]: an image part needs url or data_uri", i)
		}
		if hasURL && !validURI(u) {
			return nil, contentErr("content[%d].url must be an absolute URI", i)
		}
		if hasData {
			s, _ := stringValue(d, true)
			if !strings.HasPrefix(s, "data:") {
				return nil, contentErr("content[%d].data_uri must start with data:", i)
			}
		}
	case "file":
		if u, _ := obj.get("url"); !validURI(u) {
			return nil, contentErr("content[%d].url must be an absolute URI", i)
		}
		if sz, ok := obj.get("size"); ok {
			var n int64
			if err := json.Unmarshal(sz, &n); err != nil || n < 0 {
				return nil, contentErr("content[%d].size must be a non-negative integer", i)
			}
		}
	case "data":
		data, _ := obj.get("data")
		return data, nil
	}
	return nil, nil
}

// stringValue decodes a JSON string value as json.Unmarshal into a string
// would (null leaves it empty); ok is false where that decode fails, as it
// does for a missing value and for any other kind.
func stringValue(raw json.RawMessage, present bool) (s string, ok bool) {
	if !present {
		return "", false
	}
	if len(raw) >= 2 && raw[0] == '"' && plainName(raw[1:len(raw)-1]) {
		return string(raw[1 : len(raw)-1]), true
	}
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

func validURI(raw json.RawMessage) bool {
	s, ok := stringValue(raw, raw != nil)
	if !ok {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && (u.Host != "" || u.Opaque != "" || u.Path != "")
}

// hasKind reports whether v is a JSON value of the kind written as its first
// byte: '"' string, '{' object, '0' number.
func hasKind(v json.RawMessage, kind byte) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	switch kind {
	case '0':
		return v[0] == '-' || v[0] >= '0' && v[0] <= '9'
	default:
		return v[0] == kind
	}
}

func kindName(kind byte) string {
	switch kind {
	case '"':
		return "a string"
	case '{':
		return "an object"
	default:
		return "a number"
	}
}

func contentErr(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeInvalidContent, format, args...)
}

// ValidateMetadata checks that metadata, when present, is a JSON object
// within MaxMetadataBytes.
func (l Limits) ValidateMetadata(raw json.RawMessage) *Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	if raw[0] != '{' {
		return Invalid("metadata must be an object")
	}
	if len(raw) > l.MaxMetadataBytes {
		return Errorf(http.StatusRequestEntityTooLarge, CodeContentTooLarge,
			"metadata is %d bytes; the limit is %d", len(raw), l.MaxMetadataBytes)
	}
	return nil
}

// ValidateInvitees checks an invite list: valid handles, within MaxInvitees,
// not naming the caller. Duplicates are removed; order is kept.
func (l Limits) ValidateInvitees(caller string, invite []string) ([]string, *Error) {
	if len(invite) > l.MaxInvitees {
		return nil, Invalid("invite lists %d handles; the limit is %d", len(invite), l.MaxInvitees)
	}
	seen := make(map[string]bool, len(invite))
	out := make([]string, 0, len(invite))
	for i, h := range invite {
		if !ValidHandle(h) {
			return nil, Invalid("invite[%d] %q is not a handle (@owner.agent, lower-case a-z 0-9 _ -, at most %d bytes)", i, h, MaxHandleLen)
		}
		if h == caller {
			return nil, Invalid("invite[%d]: an agent cannot invite itself", i)
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out, nil
}

// ValidateIdempotencyKey checks an optional key against
// common.json#/$defs/IdempotencyKey.
func ValidateIdempotencyKey(k *string) *Error {
	if k != nil && (len(*k) == 0 || utf8.RuneCountInString(*k) > MaxIdempotencyKeyLen) {
		return Invalid("idempotency_key must be 1 to %d characters", MaxIdempotencyKeyLen)
	}
	return nil
}

// ValidateTopic checks a topic's length.
func (l Limits) ValidateTopic(topic string) *Error {
	if len(topic) > l.MaxTopicBytes {
		return Invalid("topic is %d bytes; the limit is %d", len(topic), l.MaxTopicBytes)
	}
	return nil
}
