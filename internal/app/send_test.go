package app

import (
	"testing"

	"github.com/aspd/aspd/protocol"
)

// BenchmarkSendPath is the per-request work of POST /sessions/{id}/messages
// before the store, without the store: strict decode and body scan, content
// and metadata validation, frame detection and validation, the idempotency
// key and the request hash.
func BenchmarkSendPath(b *testing.B) {
	a := &App{cfg: Config{Limits: protocol.DefaultLimits(), Frames: DefaultFramesConfig()}}
	fr := frameFor(b, "@acme.alice", "@acme.bob")
	bodies := map[string][]byte{
		"text":  []byte(`{"content":"Looking into it","idempotency_key":"m-0001"}`),
		"parts": []byte(`{"content":[{"type":"text","text":"Here's the report you asked for."},{"type":"file","url":"https://example.com/q3.pdf","name":"q3.pdf","mime_type":"application/pdf"},{"type":"data","data":{"action":"review_complete","doc_id":"abc123"}}],"idempotency_key":"01HW7AB12CDEF","metadata":{"trace":"x"}}`),
		"frame": []byte(`{"content":[{"type":"text","text":"advisory"},{"type":"data","data":` + string(fr) + `}],"idempotency_key":"f-0001"}`),
	}
	for _, name := range []string{"text", "parts", "frame"} {
		body := bodies[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var req protocol.SendMessageRequest
				if err := protocol.DecodeStrict(body, &req); err != nil {
					b.Fatal(err)
				}
				if _, _, _, err := a.checkMessage("@acme.alice", req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCheckMessageFrames: every data part that a decode would see carrying
// envelope_version is validated as a frame, however the key is written;
// nested keys and other data parts are not frames.
func TestCheckMessageFrames(t *testing.T) {
	a := &App{cfg: Config{Limits: protocol.DefaultLimits(), Frames: DefaultFramesConfig()}}
	fr := string(frameFor(t, "@acme.alice", "@acme.bob"))
	for _, tt := range []struct {
		data       string
		recipients int
		bad        bool
	}{
		{`{"envelope_version":"1.0"}`, 0, true},
		{`{"envel\u006fpe_version":"1.0"}`, 0, true},
		{`{"a":1,"\u0065nvelope_version":null}`, 0, true},
		{`{"x":{"envelope_version":"1.0"}}`, 0, false},
		{`{"x":"envelope_version"}`, 0, false},
		{`{"x":"\u0041"}`, 0, false},
		{fr, 1, false},
	} {
		body := `{"content":[{"type":"data","data":` + tt.data + `}]}`
		var req protocol.SendMessageRequest
		if err := protocol.DecodeStrict([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		recipients, _, _, err := a.checkMessage("@acme.alice", req)
		if (err != nil) != tt.bad || len(recipients) != tt.recipients {
			t.Errorf("%s: recipients %v, err %v", tt.data, recipients, err)
		}
	}
}
