// Package frame validates agent-channel frames, the structured messages of
// the Internet-Draft "Agent-Channel Fan-Out", and parses the draft's
// recipient scopes and subscribe filters. It performs no I/O: each function is
// a pure function of its input, so the server, the tests and any other
// component share one definition of a valid frame.
//
// Validate decodes a frame (raw JSON bytes) and checks it against the draft:
// envelope_version "1.0" only; frame_id and every correlation id (lease_id,
// query_id, diagnostic_id) a version-4 UUID; kind from the closed catalogue of
// fifteen (Kinds); the handle, attribution, timestamp, ttl_ms and flat
// provenance_* fields; and the payload against the one shape of its kind,
// with every octet bound, enumeration and required member enforced. For
// agent_binding_moment the payload is the eight-slot envelope of the
// companion draft "Binding-Moment Envelope"; ValidateBindingMoment checks
// that envelope alone (a binding_moment carried in a session message) with
// the same shape. Failures are *Error values
// carrying a section 10 code and a JSON path to the offending field.
//
// ParseScope parses the recipient-scope grammar (draft section 7) and
// ParseFilter the subscribe-filter grammar (section 9); Filter.Match applies a
// filter to a validated Frame. Authentication (sender-identity-mismatch),
// scope authorisation (scope-unauthorised), scope expansion and
// scope-unimplemented are the server's: this package only exports their codes.
//
// # Readings of the draft
//
// Where the draft is silent or loose, this package reads it as follows.
//
//   - Section numbers are the draft's headings (frame 4, catalogue 5,
//     payloads 6, scopes 7, filters 9, errors 10); its cross-references run
//     one lower.
//   - Principal handles (sender_handle, recipient_handle, the scope handle
//     forms, the sender filter) are ASP handles @owner.agent, not the draft's
//     ~handle: aspd authenticates sessions by ASP handle, and the draft defers
//     the canonical form to a naming memo. acted_by and drafted_with keep the
//     draft's ~name form. Organisations in org: and accord: are ASP owners.
//   - Objects are closed everywhere. A stray member is field-unknown, except
//     inside a payload when its name is one the catalogue uses in some
//     payload shape (advisory_text in an agent_broadcast, options flattened
//     out of a binding-moment question): then the payload has the wrong shape
//     for its kind, payload-kind-mismatch.
//   - Every payload may carry an optional, non-empty content_type string. The
//     draft lists no such member, but its content_type filter axis matches
//     "frames whose payload carries a content-type field".
//   - The draft has no generic "malformed" code. Input that is not exactly
//     one JSON object with one meaning (bad syntax, invalid UTF-8, an unpaired
//     surrogate escape, a duplicate member, trailing data, nesting deeper than
//     any legal frame) is field-invalid, with the member's path where known.
//   - null is a value of the wrong type, not an absent member.
//   - Integers must be written as integers (no fraction, no exponent) and lie
//     within ±(2^53-1), the range every JSON reader holds exactly.
//   - Octet bounds are enforced exactly where the draft states them. Where it
//     states none, prose is unbounded and may be empty, while identifiers,
//     references and tags (convergence_class, the *_ref members, reference
//     list elements, provenance tags) must be non-empty.
//   - ttl_ms in the envelope is a non-negative integer (the draft sets no
//     bound); intent_declare's ttl likewise.
//   - Binding-moment hatches: each of the two booleans defaults to true when
//     absent, and so does an absent hatches object (both open); both false
//     is field-invalid. recommended_idx must index one of the 2 to 4 options.
//   - Scope parts the draft gives no grammar (instrument, prefix, session id,
//     role, grant scope) are 1 to 128 octets of [A-Za-z0-9._-].
//   - The tool and org filter clauses parse but match no frame: section 9
//     makes them forward-compatibility axes, and no frame member names a tool
//     class, so Frame has no Tool field.
//   - created_at must fall within Options' plausibility window; the other
//     timestamps (declared_at, withdrawn_at, executed_at) need only be RFC
//     3339 date-times with a zone.
//
// Validate does not bound the size of a frame: the server caps the request
// body before calling it.
package frame
