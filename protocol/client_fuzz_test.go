package protocol

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeClientMessage feeds WS /connect's one client message decoder
// arbitrary bytes: it must never panic, and whatever it accepts as an ack
// must be one a well-formed client could have sent (a session id, a
// positive sequence) that survives re-encoding unchanged.
func FuzzDecodeClientMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"ack","session_id":"sess_01HW7AB12CDEFGHJKMNPQRSTVW","sequence":3}`,
		`{"type":"ack","session_id":"sess_01HW7AB12CDEFGHJKMNPQRSTVW","sequence":0}`,
		`{"type":"ack","session_id":"x","sequence":1,"extra":1}`,
		`{"type":"ack","type":"ack"}`, `{"type":"hello"}`, `[]`, `"ack"`, "\xff\xfe", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeClientMessage(b)
		if a == nil {
			return
		}
		if err != nil {
			t.Fatalf("both an ack and an error for %q", b)
		}
		if a.Type != ClientMessageAck || !ValidSessionID(a.SessionID) || a.Sequence < 1 {
			t.Fatalf("accepted an invalid ack %+v from %q", a, b)
		}
		again, _ := json.Marshal(a)
		b2, err := DecodeClientMessage(again)
		if err != nil || b2 == nil || *b2 != *a {
			t.Fatalf("ack %+v does not survive re-encoding: %+v, %v", a, b2, err)
		}
	})
}
