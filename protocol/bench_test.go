package protocol

import (
	"encoding/json"
	"testing"
)

var benchBody = []byte(`{"content":[{"type":"text","text":"Here's the report you asked for."},{"type":"file","url":"https://example.com/q3.pdf","name":"q3.pdf","mime_type":"application/pdf"},{"type":"data","data":{"action":"review_complete","doc_id":"abc123"}}],"idempotency_key":"01HW7AB12CDEF","metadata":{"trace":"x"}}`)

// BenchmarkDecodeAndValidateMessage is the per-request work of
// POST /sessions/{id}/messages before the store: strict decode, content,
// metadata and idempotency key validation.
func BenchmarkDecodeAndValidateMessage(b *testing.B) {
	l := DefaultLimits()
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		var req SendMessageRequest
		if err := DecodeStrict(benchBody, &req); err != nil {
			b.Fatal(err)
		}
		if _, err := l.ValidateContent(req.Content); err != nil {
			b.Fatal(err)
		}
		if err := l.ValidateMetadata(req.Metadata); err != nil {
			b.Fatal(err)
		}
		if err := ValidateIdempotencyKey(req.IdempotencyKey); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeEvent is the one encoding of a session.message event; the
// same bytes are then stored and written to every connection.
func BenchmarkEncodeEvent(b *testing.B) {
	m := Message{ID: NewMessageID(), SessionID: NewSessionID(), Sender: "@nick.assistant", Sequence: 42,
		Content: json.RawMessage(`"Got it, on it now."`), CreatedAt: 1717000000000}
	b.ReportAllocs()
	for b.Loop() {
		p, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(Event{Type: EventMessage, SessionID: m.SessionID, EventID: NewEventID(), Sequence: 42, CreatedAt: m.CreatedAt, Payload: p}); err != nil {
			b.Fatal(err)
		}
	}
}
