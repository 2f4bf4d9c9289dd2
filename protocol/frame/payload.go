package frame

import (
	"slices"
	"strconv"
	"strings"
)

// This file holds the validation rules and, in payloadSchemas, the payload
// shape of each kind (draft section 6; the binding-moment envelope of the
// companion draft for agent_binding_moment). A shape is data: a list of
// fields, each required or optional, each with a rule for its value.

// A rule checks one JSON value found at path.
type rule func(c *checker, v *value, path string) *Error

// checker carries what a rule may need beyond the value itself.
type checker struct {
	opts Options
	kind string // the frame's kind, once it is known to be valid
}

type field struct {
	name     string
	required bool
	rule     rule
	nested   *object // the object shape inside, so member names can be listed
	repeated bool    // nested is the shape of each element of an array
}

func req(name string, r rule) field { return field{name: name, required: true, rule: r} }
func opt(name string, r rule) field { return field{name: name, rule: r} }

// reqObj and optObj are members holding an object of shape o.
func reqObj(name string, o *object) field {
	return field{name: name, required: true, rule: o.check, nested: o}
}

func optObj(name string, o *object) field { return field{name: name, rule: o.check, nested: o} }

// reqList is a required array of min to max objects of shape o.
func reqList(name string, o *object, min, max int) field {
	return field{name: name, required: true, rule: list(o.check, min, max), nested: o, repeated: true}
}

// object is a closed object shape: members outside fields are refused.
type object struct {
	fields []field
	// cross checks constraints between members, after each member passed.
	cross func(v *value, path string) *Error
	// envelope marks the frame object itself, where a stray member is always
	// field-unknown (see unknownMember).
	envelope bool
}

func obj(fields ...field) *object { return &object{fields: fields} }

func (o *object) has(name string) bool {
	for i := range o.fields {
		if o.fields[i].name == name {
			return true
		}
	}
	return false
}

// check reports, in this order: a value that is not an object, the first
// stray member in document order, then each declared field in declaration
// order (missing, or failing its rule), then the cross-member constraints.
// A fixed order gives every malformed frame one well-defined error.
func (o *object) check(c *checker, v *value, path string) *Error {
	if v.kind != kindObject {
		return typeError(v, path, "an object")
	}
	for _, m := range v.members {
		if !o.has(m.name) {
			return o.unknownMember(m.name, join(path, m.name))
		}
	}
	for _, f := range o.fields {
		mv := v.get(f.name)
		if mv == nil {
			if f.required {
				return newError(CodeFieldMissing, join(path, f.name), "required field is absent")
			}
			continue
		}
		if err := f.rule(c, mv, join(path, f.name)); err != nil {
			return err
		}
	}
	if o.cross != nil {
		return o.cross(v, path)
	}
	return nil
}

// unknownMember classifies a stray member. Inside a payload, a name that the
// catalogue uses elsewhere in some payload shape (an agent_advisory's
// advisory_text in an agent_broadcast, a question's options flattened into
// the binding-moment payload) means the payload has the wrong shape for the
// kind: payload-kind-mismatch. Any other stray name is field-unknown.
func (o *object) unknownMember(name, path string) *Error {
	if where, ok := payloadNames[name]; ok && !o.envelope {
		return newError(CodePayloadKindMismatch, path,
			"payload shape does not match the kind: %s belongs at %s", quote(name), where)
	}
	return newError(CodeFieldUnknown, path, "unknown field %s", quote(name))
}

func typeError(v *value, path, want string) *Error {
	return invalid(path, "must be %s, not %s", want, v.kind)
}

// unbounded is the "no upper bound" argument of text and list.
const unbounded = -1

// text accepts a string of min to max octets. Lengths are in UTF-8 octets,
// as the draft states them, not in characters.
func text(min, max int) rule {
	return func(_ *checker, v *value, path string) *Error {
		if v.kind != kindString {
			return typeError(v, path, "a string")
		}
		n := len(v.text)
		switch {
		case n < min && min == 1:
			return invalid(path, "must not be empty")
		case n < min || max != unbounded && n > max:
			return invalid(path, "must be %s octets of UTF-8, is %d", span(min, max), n)
		}
		return nil
	}
}

func span(min, max int) string {
	if max == unbounded {
		return "at least " + strconv.Itoa(min)
	}
	if min == 0 {
		return "at most " + strconv.Itoa(max)
	}
	return strconv.Itoa(min) + " to " + strconv.Itoa(max)
}

// prose is free text the draft gives no bound for. name is an identifier,
// reference or tag the draft gives no bound for: it must not be empty, since
// an empty name names nothing and reads like an absent one.
var (
	prose = text(0, unbounded)
	name  = text(1, unbounded)
)

func enum(values ...string) rule {
	return func(_ *checker, v *value, path string) *Error {
		if v.kind != kindString {
			return typeError(v, path, "a string")
		}
		if !slices.Contains(values, v.text) {
			return invalid(path, "must be one of %s", strings.Join(values, ", "))
		}
		return nil
	}
}

// maxSafeInteger is 2^53-1, the largest integer every JSON implementation
// holds exactly (RFC 7493 section 2.2). Larger values mean different things to
// different receivers, so they are refused even where the draft sets no bound.
const maxSafeInteger = 1<<53 - 1

// integer accepts an integer literal (no fraction, no exponent) in
// [min, max].
func integer(min, max int64) rule {
	return func(_ *checker, v *value, path string) *Error {
		if v.kind != kindNumber {
			return typeError(v, path, "an integer")
		}
		n, ok := parseInteger(v.text)
		if !ok {
			return invalid(path, "must be an integer written without fraction or exponent")
		}
		if n < min || n > max {
			return invalid(path, "must be between %d and %d", min, max)
		}
		return nil
	}
}

func parseInteger(lit string) (int64, bool) {
	if strings.ContainsAny(lit, ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil || n > maxSafeInteger || n < -maxSafeInteger {
		return 0, false
	}
	return n, true
}

func boolean(_ *checker, v *value, path string) *Error {
	if v.kind != kindBool {
		return typeError(v, path, "a boolean")
	}
	return nil
}

// list accepts an array of min to max elements, each satisfying elem.
func list(elem rule, min, max int) rule {
	return func(c *checker, v *value, path string) *Error {
		if v.kind != kindArray {
			return typeError(v, path, "an array")
		}
		if n := len(v.elems); n < min || max != unbounded && n > max {
			return invalid(path, "must have %s elements, has %d", span(min, max), n)
		}
		for i, e := range v.elems {
			if err := elem(c, e, index(path, i)); err != nil {
				return err
			}
		}
		return nil
	}
}

// Rules with a grammar of their own.
var (
	uuid4 rule = func(_ *checker, v *value, path string) *Error {
		if v.kind != kindString {
			return typeError(v, path, "a string")
		}
		return checkUUID4(v.text, path)
	}
	timestamp rule = func(_ *checker, v *value, path string) *Error {
		if v.kind != kindString {
			return typeError(v, path, "a string")
		}
		if _, ok := parseTimestamp(v.text); !ok {
			return invalid(path, "must be an RFC 3339 date-time with a time zone")
		}
		return nil
	}
	handle rule = func(_ *checker, v *value, path string) *Error {
		if v.kind != kindString {
			return typeError(v, path, "a string")
		}
		if !validHandle(v.text) {
			return invalid(path, "must be an ASP handle @owner.agent")
		}
		return nil
	}
	attribution rule = func(_ *checker, v *value, path string) *Error {
		if v.kind != kindString {
			return typeError(v, path, "a string")
		}
		if !validAttribution(v.text) {
			return invalid(path, "must be an attribution handle ~name")
		}
		return nil
	}
	// scope is a recipient scope (section 7), as agent_query's response_scope.
	scope rule = func(c *checker, v *value, path string) *Error {
		if err := text(1, 512)(c, v, path); err != nil {
			return err
		}
		if _, err := ParseScope(v.text); err != nil {
			err.Field = path
			return err
		}
		return nil
	}
)

// refs is the optional reference list several payloads carry.
var refs = list(name, 0, unbounded)

// The binding-moment envelope (companion draft sections 4 and 5). Its prose
// slots carry no octet bounds in either draft, so none are invented; what is
// machine-checkable is the shape, 2 to 4 options, a recommended_idx inside
// them, and hatches that leave at least one way out.
var (
	bmOption = obj(
		req("label", prose),
		req("reasoning", prose),
	)
	bmHatches = &object{
		// Both members default to true (binding-moment draft 5.8, "SHALL
		// default to true"; agent-channel draft 6.10, "each defaulting to
		// true"). The draft also calls them REQUIRED, but a default only
		// means something for a member that may be absent.
		fields: []field{opt("free_text", boolean), opt("dialogue", boolean)},
		cross: func(v *value, path string) *Error {
			ft, dl := v.get("free_text"), v.get("dialogue")
			if ft != nil && !ft.boolean && dl != nil && !dl.boolean {
				return invalid(path, "free_text and dialogue must not both be false: the recipient must keep a way out of the option set")
			}
			return nil
		},
	}
	bmQuestion = &object{
		fields: []field{
			req("stem", prose),
			reqList("options", bmOption, 2, 4),
			req("recommended_idx", integer(0, maxSafeInteger)),
			// An absent hatches object is both hatches absent: both open.
			// Requiring the object while defaulting its members would refuse
			// the one envelope the default is for.
			optObj("hatches", bmHatches),
		},
		cross: func(v *value, path string) *Error {
			idx, _ := parseInteger(v.get("recommended_idx").text)
			if n := len(v.get("options").elems); idx >= int64(n) {
				return invalid(join(path, "recommended_idx"), "must index one of the %d options (0 to %d)", n, n-1)
			}
			return nil
		},
	}
	bmMeta = obj(
		opt("decision_class", prose),
		opt("calibration_note", prose),
	)
	// bmEnvelope is the bare envelope (companion draft section 4): the
	// agent_binding_moment payload is this shape plus content_type, and
	// ValidateBindingMoment checks it alone (a binding_moment in a session).
	bmEnvelope = obj(
		req("synopsis", prose),
		req("findings", list(prose, 0, unbounded)),
		req("recommendations", list(prose, 0, unbounded)),
		req("offer", prose),
		reqObj("question", bmQuestion),
		optObj("meta", bmMeta),
	)
)

// maxLease is the 3 600 000 ms bound of sections 6.4 and 6.6.
const maxLease = 3_600_000

// payloadSchemas maps each kind of the catalogue to its payload shape. Every
// payload also admits content_type (see payload()).
var payloadSchemas = map[string]*object{
	KindAgentAdvisory: payload( // 6.1
		req("advisory_text", text(1, 2048)),
		opt("file_refs", refs),
		opt("worktree", text(0, 512)),
		opt("branch", text(0, 256)),
	),
	KindAgentBroadcast: payload( // 6.2
		req("broadcast_text", text(1, 2048)),
		req("event_class", enum("merged", "stale", "released", "other")),
		opt("refs", refs),
	),
	KindAgentHandover: payload( // 6.3
		req("previous_session_id", text(1, 128)),
		opt("next_session_id", text(0, 128)),
		req("handover_body", prose),
		opt("pointer_refs", refs),
	),
	KindAgentLockRequest: payload( // 6.4
		req("resource", text(1, 512)),
		req("lease_id", uuid4),
		req("ttl_ms", integer(1, maxLease)),
		opt("intent", text(0, 2048)),
	),
	KindAgentLockRelease: payload( // 6.5
		req("lease_id", uuid4),
		req("resource", text(1, 512)),
	),
	KindAgentLeaseExtend: payload( // 6.6
		req("lease_id", uuid4),
		req("additional_ttl_ms", integer(1, maxLease)),
	),
	KindAgentQuery: payload( // 6.7
		req("query_text", text(1, 2048)),
		req("query_id", uuid4),
		req("response_scope", scope),
		req("timeout_ms", integer(1, maxSafeInteger)),
	),
	KindAgentResponse: payload( // 6.8
		req("query_id", uuid4),
		req("response_text", text(1, 2048)),
		req("responder", text(1, 128)),
	),
	KindAgentReturnEvent: payload( // 6.9
		req("return_event_ref", text(1, 256)),
		opt("query_id", uuid4),
		req("summary", text(1, 2048)),
	),
	KindAgentBindingMoment: payload(bmEnvelope.fields...), // 6.10 and the companion draft
	KindPeerDiagnosticRequest: payload( // 6.11
		req("symptom", text(1, 2048)),
		req("diagnostic_id", uuid4),
		opt("substrate_refs", refs),
		req("severity", enum("info", "degraded", "blocked")),
	),
	KindPeerDiagnosticResponse: payload( // 6.12
		req("diagnostic_id", uuid4),
		req("finding", text(1, 2048)),
		opt("remediation", text(0, 2048)),
	),
	// 6.13 gives the convergence kinds in prose, without bounds: every member
	// it lists is required except urgency and batch_refs, which it marks
	// OPTIONAL. The timestamps carry no plausibility window; that is a
	// property of created_at alone.
	KindIntentDeclare: payload(
		req("convergence_class", name),
		req("payload_ref", name),
		req("acted_by", attribution),
		req("drafted_with", attribution),
		req("declared_at", timestamp),
		req("ttl", integer(0, maxSafeInteger)),
		req("withdrawable", boolean),
		opt("urgency", enum("normal", "urgent")),
	),
	KindIntentWithdraw: payload(
		req("convergence_class", name),
		req("intent_ref", name),
		req("withdrawn_at", timestamp),
	),
	KindFlushExecuted: payload(
		req("convergence_class", name),
		req("result_ref", name),
		opt("batch_refs", refs),
		req("executed_at", timestamp),
	),
}

// payload builds a payload shape. Each one also admits an optional
// content_type: section 9's content_type filter axis matches "frames whose
// payload carries a content-type field", which only makes sense if a payload
// may carry one.
func payload(fields ...field) *object {
	return obj(append(fields, opt("content_type", name))...)
}

// payloadNames maps every member name used anywhere in a payload shape to
// where the catalogue first places it ("payload.question.options of
// agent_binding_moment"); see unknownMember. It is filled by init, because
// the shapes' own check methods consult it.
var payloadNames map[string]string

func init() { payloadNames = collectPayloadNames() }

func collectPayloadNames() map[string]string {
	names := map[string]string{}
	var walk func(o *object, path, kind string)
	walk = func(o *object, path, kind string) {
		for _, f := range o.fields {
			p := join(path, f.name)
			if _, ok := names[f.name]; !ok && f.name != "content_type" {
				names[f.name] = p + " of " + kind
			}
			if f.repeated {
				p += "[]"
			}
			if f.nested != nil {
				walk(f.nested, p, kind)
			}
		}
	}
	for _, k := range catalogue {
		walk(payloadSchemas[k], "payload", k)
	}
	return names
}
