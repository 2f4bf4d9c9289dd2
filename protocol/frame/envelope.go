package frame

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// The closed kind catalogue of draft section 5. For envelope_version "1.0"
// it is exhaustive: a sixteenth value is kind-unknown, not an extension.
const (
	KindAgentAdvisory          = "agent_advisory"
	KindAgentBroadcast         = "agent_broadcast"
	KindAgentHandover          = "agent_handover"
	KindAgentLockRequest       = "agent_lock_request"
	KindAgentLockRelease       = "agent_lock_release"
	KindAgentLeaseExtend       = "agent_lease_extend"
	KindAgentQuery             = "agent_query"
	KindAgentResponse          = "agent_response"
	KindAgentReturnEvent       = "agent_return_event"
	KindAgentBindingMoment     = "agent_binding_moment"
	KindPeerDiagnosticRequest  = "peer_diagnostic_request"
	KindPeerDiagnosticResponse = "peer_diagnostic_response"
	KindIntentDeclare          = "intent_declare"
	KindIntentWithdraw         = "intent_withdraw"
	KindFlushExecuted          = "flush_executed"
)

var catalogue = []string{
	KindAgentAdvisory, KindAgentBroadcast, KindAgentHandover,
	KindAgentLockRequest, KindAgentLockRelease, KindAgentLeaseExtend,
	KindAgentQuery, KindAgentResponse, KindAgentReturnEvent,
	KindAgentBindingMoment,
	KindPeerDiagnosticRequest, KindPeerDiagnosticResponse,
	KindIntentDeclare, KindIntentWithdraw, KindFlushExecuted,
}

// Kinds returns the closed 15-kind catalogue in the draft's order. The slice
// is the caller's to keep.
func Kinds() []string { return slices.Clone(catalogue) }

func isKind(s string) bool { return slices.Contains(catalogue, s) }

// EnvelopeVersion is the only wire-contract version this package implements.
const EnvelopeVersion = "1.0"

// Options configures validation; the zero value is not valid, use
// DefaultOptions().
type Options struct {
	Now           func() time.Time // clock for the created_at plausibility window
	MaxSkewPast   time.Duration    // how far in the past created_at may be (default 24h)
	MaxSkewFuture time.Duration    // how far in the future created_at may be (default 5m)
}

// DefaultOptions returns the wall clock, a 24h window into the past and a 5m
// window into the future (room for clock skew between hosts).
func DefaultOptions() Options {
	return Options{Now: time.Now, MaxSkewPast: 24 * time.Hour, MaxSkewFuture: 5 * time.Minute}
}

// Frame is a validated agent-channel frame. The typed fields are the ones the
// server routes and filters on; Payload is the payload object exactly as the
// sender wrote it, already validated against the shape of Kind.
type Frame struct {
	EnvelopeVersion string
	// FrameID is lower-cased, so that de-duplication by frame_id is a plain
	// string comparison (UUIDs are case-insensitive on input).
	FrameID         string
	Kind            string
	SenderHandle    string // ASP handle, @owner.agent
	RecipientHandle string // ASP handle, @owner.agent
	ActedBy         string // Sovereign-tier attribution handle, ~name
	DraftedWith     string // Instrument-tier attribution handle, ~name
	CreatedAt       time.Time
	TTLms           *int64 // nil when the frame carries no ttl_ms
	Provenance      Provenance
	// ContentType is payload.content_type, "" when absent; the content_type
	// filter axis matches on it.
	ContentType string
	Payload     json.RawMessage
}

// Provenance is the flat provenance block of draft section 4.3.
type Provenance struct {
	ComputeLocation string   // server-active, server-aggregate or local-only
	Method          []string // at least one tag
	ReturnRef       string   // "" when absent
	ContextCheck    string   // passed or skipped
	Basis           string
}

// The draft defines no frame member for the tool filter axis, so Frame has no
// Tool field; see Filter.Match.

// envelope is the frame object itself (sections 4.1 to 4.3). Fields are
// checked in this order after envelope_version and kind, payload last, so an
// envelope error is reported before a payload error.
var envelope = &object{envelope: true, fields: []field{
	versionField,
	req("frame_id", uuid4),
	kindField,
	req("sender_handle", handle),
	req("recipient_handle", handle),
	req("created_at", createdAtRule),
	opt("ttl_ms", integer(0, maxSafeInteger)), // the draft sets no bound; a negative lifetime means nothing
	req("acted_by", attribution),
	req("drafted_with", attribution),
	req("provenance_compute_location", enum("server-active", "server-aggregate", "local-only")),
	req("provenance_method", list(name, 1, unbounded)),
	opt("provenance_return_ref", name),
	req("provenance_context_check", enum("passed", "skipped")),
	req("provenance_basis", name),
	req("payload", payloadRule),
}}

// envelope_version and kind are also checked ahead of the rest (Validate).
var (
	versionField = req("envelope_version", versionRule)
	kindField    = req("kind", kindRule)
)

func versionRule(_ *checker, v *value, path string) *Error {
	if v.kind != kindString {
		return typeError(v, path, "a string")
	}
	if v.text != EnvelopeVersion {
		return newError(CodeEnvelopeVersionUnsupported, path, "envelope_version %s is not implemented; only %q is", quote(v.text), EnvelopeVersion)
	}
	return nil
}

func kindRule(_ *checker, v *value, path string) *Error {
	if v.kind != kindString {
		return typeError(v, path, "a string")
	}
	if !isKind(v.text) {
		return newError(CodeKindUnknown, path, "kind %s is outside the catalogue", quote(v.text))
	}
	return nil
}

func createdAtRule(c *checker, v *value, path string) *Error {
	if err := timestamp(c, v, path); err != nil {
		return err
	}
	t, _ := parseTimestamp(v.text)
	now := c.opts.Now()
	if t.Before(now.Add(-c.opts.MaxSkewPast)) {
		return invalid(path, "lies more than %v in the past", c.opts.MaxSkewPast)
	}
	if t.After(now.Add(c.opts.MaxSkewFuture)) {
		return invalid(path, "lies more than %v in the future", c.opts.MaxSkewFuture)
	}
	return nil
}

func payloadRule(c *checker, v *value, path string) *Error {
	return payloadSchemas[c.kind].check(c, v, path)
}

// Validate decodes raw as one agent-channel frame and checks it against
// sections 4 to 6 of the draft. It returns the frame, or the first failure.
//
// Failures are reported in a fixed order: input that is not one unambiguous
// JSON object; envelope_version (a version this package does not implement is
// refused before anything else is read, as section 4.1 requires); kind; a
// stray envelope member; the envelope fields in section order; the payload.
//
// Validate panics if opts.Now is nil or a skew is negative: that is a
// programming error, not a property of the frame.
func Validate(raw []byte, opts Options) (*Frame, *Error) {
	if opts.Now == nil || opts.MaxSkewPast < 0 || opts.MaxSkewFuture < 0 {
		panic("frame: invalid Options; start from DefaultOptions()")
	}
	root, err := decode(raw)
	if err != nil {
		return nil, err
	}
	c := &checker{opts: opts}
	// envelope_version, then kind, come before everything else: the version
	// decides how to read the rest, the kind decides the payload shape.
	for _, f := range [...]field{versionField, kindField} {
		v := root.get(f.name)
		if v == nil {
			return nil, newError(CodeFieldMissing, f.name, "required field is absent")
		}
		if err := f.rule(c, v, f.name); err != nil {
			return nil, err
		}
	}
	c.kind = root.get("kind").text
	if err := envelope.check(c, root, ""); err != nil {
		return nil, err
	}
	return build(raw, root), nil
}

// build extracts the typed fields of a frame that passed validation.
func build(raw []byte, root *value) *Frame {
	str := func(v *value, name string) string {
		if m := v.get(name); m != nil {
			return m.text
		}
		return ""
	}
	fr := &Frame{
		EnvelopeVersion: str(root, "envelope_version"),
		FrameID:         strings.ToLower(str(root, "frame_id")),
		Kind:            str(root, "kind"),
		SenderHandle:    str(root, "sender_handle"),
		RecipientHandle: str(root, "recipient_handle"),
		ActedBy:         str(root, "acted_by"),
		DraftedWith:     str(root, "drafted_with"),
		Provenance: Provenance{
			ComputeLocation: str(root, "provenance_compute_location"),
			ReturnRef:       str(root, "provenance_return_ref"),
			ContextCheck:    str(root, "provenance_context_check"),
			Basis:           str(root, "provenance_basis"),
		},
	}
	fr.CreatedAt, _ = parseTimestamp(str(root, "created_at"))
	if v := root.get("ttl_ms"); v != nil {
		n, _ := parseInteger(v.text)
		fr.TTLms = &n
	}
	for _, m := range root.get("provenance_method").elems {
		fr.Provenance.Method = append(fr.Provenance.Method, m.text)
	}
	p := root.get("payload")
	fr.ContentType = str(p, "content_type")
	// Copied, so the frame does not pin or alias the caller's buffer.
	fr.Payload = slices.Clone(json.RawMessage(raw[p.start:p.end]))
	return fr
}

// EnvelopeVersionKey is the member whose presence makes a data object an
// agent-channel frame.
const EnvelopeVersionKey = "envelope_version"

// IsFrame reports whether a decoded `data` object is an agent-channel frame:
// it carries the key "envelope_version". Whether it is a valid one is
// Validate's question.
func IsFrame(data map[string]json.RawMessage) bool {
	_, ok := data[EnvelopeVersionKey]
	return ok
}

// checkUUID4 accepts the canonical 8-4-4-4-12 form of a version-4 UUID:
// version nibble 4, variant nibble 8, 9, a or b; hex digits in either case.
func checkUUID4(s, path string) *Error {
	if len(s) != 36 {
		return invalid(path, "must be a UUID in 8-4-4-4-12 form")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return invalid(path, "must be a UUID in 8-4-4-4-12 form")
			}
		} else if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return invalid(path, "must be a UUID in 8-4-4-4-12 form")
		}
	}
	if s[14] != '4' || !strings.ContainsRune("89abAB", rune(s[19])) {
		return invalid(path, "must be a version-4 UUID (version nibble 4, variant 8-b)")
	}
	return nil
}

// maxHandleLen mirrors protocol.MaxHandleLen. This package does not import
// protocol, so that protocol can import it; keep the two in step.
const maxHandleLen = 64

// validHandle reports whether s is an ASP handle, ^@[a-z0-9_-]+\.[a-z0-9_-]+$,
// of at most maxHandleLen bytes.
//
// The draft writes principal handles as ~handle, the form of its companion
// naming memo. aspd addresses principals by ASP handle, so sender_handle,
// recipient_handle, the scope grammar and the sender filter take the ASP form.
// This is the one place this package follows the project brief over the
// draft's literal text; acted_by and drafted_with keep the draft's ~name.
func validHandle(s string) bool {
	if len(s) > maxHandleLen || len(s) < 4 || s[0] != '@' {
		return false
	}
	owner, agent, ok := strings.Cut(s[1:], ".")
	return ok && validPart(owner) && validPart(agent)
}

// validAttribution reports whether s is an attribution handle in the draft's
// ~name form (~alice, ~cc-example-model). The naming memo that defines the
// form is not at hand; its examples are lower-case words joined by hyphens,
// so the name takes an ASP handle part's alphabet and length bound. The
// Sovereign/Instrument tier is not checked: the ~cc- prefix of Instrument
// handles is a convention, not a rule.
func validAttribution(s string) bool {
	return len(s) >= 2 && len(s) <= maxHandleLen && s[0] == '~' && validPart(s[1:])
}

func validPart(p string) bool {
	if p == "" {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// parseTimestamp parses an RFC 3339 date-time with a time zone:
// YYYY-MM-DDThh:mm:ss[.fraction](Z|+hh:mm|-hh:mm), T and Z in either case
// (RFC 3339 section 5.6). The shape is checked here because time.Parse is
// laxer (it takes a comma before the fraction and offsets such as +24:00);
// time.Parse then checks the ranges of the date and time. Leap seconds (:60)
// are refused, as time.Parse refuses them. 64 bytes leave room for 35
// fraction digits and bound the work on hostile input.
func parseTimestamp(s string) (time.Time, bool) {
	if len(s) < 20 || len(s) > 64 {
		return time.Time{}, false
	}
	b := []byte(s)
	for i, c := range b[:19] {
		var ok bool
		switch i {
		case 4, 7:
			ok = c == '-'
		case 10:
			ok = c == 'T' || c == 't'
		case 13, 16:
			ok = c == ':'
		default:
			ok = isDigit(c)
		}
		if !ok {
			return time.Time{}, false
		}
	}
	b[10] = 'T'
	i := 19
	if b[i] == '.' {
		i++
		j := i
		for i < len(b) && isDigit(b[i]) {
			i++
		}
		if i == j {
			return time.Time{}, false
		}
	}
	switch zone := b[i:]; {
	case len(zone) == 1 && (zone[0] == 'Z' || zone[0] == 'z'):
		zone[0] = 'Z'
	case len(zone) == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':' &&
		isDigit(zone[1]) && isDigit(zone[2]) && isDigit(zone[4]) && isDigit(zone[5]) &&
		(zone[1]-'0')*10+zone[2]-'0' <= 23 && zone[4] <= '5':
	default:
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	return t, err == nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
