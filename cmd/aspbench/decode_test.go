package main

import (
	"fmt"
	"reflect"
	"testing"
)

// aspdMessage is a session.message as aspd writes it (events.json's
// envelope), carrying aspbench's marker after a text part.
const aspdMessage = `{"type":"session.message","event_id":"evt_01JD3Q8W6X9K2M4N5P7R8S9T0V","session_id":"sess_01JD3Q8W6X9K2M4N5P7R8S9T0W","sequence":42,"created_at":"2026-11-28T15:00:00.123Z","payload":{"id":"msg_01JD3Q8W6X9K2M4N5P7R8S9T0X","sender":"@benchab12cd.a7","content":[{"type":"text","text":"hello"},{"type":"data","data":{"bench":{"run":"ab12cd","id":1234,"t":987654321}}}]}}`

var decodeCases = []string{
	aspdMessage,
	`{"type":"session.joined","session_id":"s1","sequence":3,"payload":{"agent":"@a.b"}}`,
	`{"type":"session.invited","session_id":"s1","sequence":2,"payload":{"invitee":"@c.d","inviter":"@a.b"}}`,
	`  {"type":"session.message","session_id":"s1","sequence":1,"payload":{"sender":"@a.b","content":"plain text"}}  `,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"sender":"@a.b","content":[{"type":"data","data":{"bench":{"run":"r","id":-1,"t":0}}}]}}`,
	// Two markers: the first data part's wins.
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":{"run":"a","id":1,"t":1}}},{"type":"data","data":{"bench":{"run":"b","id":2,"t":2}}}]}}`,
	// A marker in a part that is not a data part, then one that is.
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"text","data":{"bench":{"run":"a","id":1,"t":1}}},{"type":"data","data":{"bench":{"run":"b","id":2,"t":2}}}]}}`,
	// The marker outside session.message is not read.
	`{"type":"session.left","session_id":"s1","sequence":1,"payload":{"agent":"@a.b","content":[{"type":"data","data":{"bench":{"run":"a","id":1,"t":1}}}]}}`,
	// Escapes and non-ASCII: encoding/json decides.
	`{"type":"session.message","session_id":"s\u0031","sequence":1,"payload":{"sender":"@a.b","content":[{"type":"data","data":{"bench":{"run":"r\"x","id":1,"t":1}}}]}}`,
	`{"typ\u0065":"session.joined","session_id":"s1","sequence":1,"payload":{"agent":"@é.b"}}`,
	`{"type":"session.joined","session_id":"s1","sequence":1,"payload":{"agent":"@a.b\ud800"}}`,
	// Names in another case, and the Kelvin sign and the long s.
	`{"TYPE":"session.joined","Session_ID":"s1","sequence":1,"payload":{"agent":"@a.b"}}`,
	`{"type":"session.joined","ſession_id":"s1","sequence":1,"payload":{"agent":"@a.b"}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"Type":"data","DATA":{"Bench":{"RUN":"r","Id":1,"T":1}}}]}}`,
	// Repeated members: the last scalar wins, a repeated object is merged.
	`{"type":"a","type":"session.joined","session_id":"s1","sequence":1,"sequence":2,"payload":{"agent":"@a.b"}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"sender":"@a.b"},"payload":{"content":[{"type":"data","data":{"bench":{"run":"r","id":1,"t":1}}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":{"run":"r","id":1},"bench":{"t":5}}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":{"run":"r","id":1}},"data":{"bench":{"t":5}}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":{"run":"r","run":"q","id":1,"t":1}}}]}}`,
	// Values of other kinds.
	`{"type":"session.joined","session_id":"s1","sequence":"1","payload":{"agent":"@a.b"}}`,
	`{"type":"session.joined","session_id":"s1","sequence":1.5,"payload":{"agent":"@a.b"}}`,
	`{"type":"session.joined","session_id":"s1","sequence":1e2,"payload":{"agent":"@a.b"}}`,
	`{"type":"session.joined","session_id":"s1","sequence":99999999999999999999,"payload":{"agent":"@a.b"}}`,
	`{"type":"session.joined","session_id":"s1","sequence":-0,"payload":{"agent":"@a.b"}}`,
	`{"type":7,"session_id":"s1","sequence":1}`,
	`{"type":"session.joined","session_id":null,"sequence":null,"payload":null}`,
	`{"type":"session.joined","session_id":"s1","sequence":1,"payload":[]}`,
	`{"type":"session.joined","session_id":"s1","sequence":1,"payload":{"agent":true}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":null}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[null,{"type":"data","data":{"bench":{"run":"r","id":1,"t":1}}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":["bench",{"type":"data","data":{"bench":{"run":"r","id":1,"t":1}}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":"bench"}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":null},{"type":"data","data":{"bench":null}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":{"run":"r","id":1.5,"t":1}}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":{"run":"r","id":1,"t":1}}},{"type":5}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":[1]}}]}}`,
	`{"type":"session.message","session_id":"s1","sequence":1,"payload":{"content":[{"type":"data","data":{"bench":{"run":null,"id":null,"t":null}}}]}}`,
	// Not an event.
	`[1,2]`, `null`, `7`, `"x"`, `{}`, `{"type":`, ``, `{"a":1}{"b":2}`,
}

// decodeEvent must answer what json.Unmarshal and parseMark answered
// (decodeEventSlow) for every frame, and take its own path for aspd's.
func TestDecodeEventMatchesUnmarshal(t *testing.T) {
	for _, raw := range decodeCases {
		checkDecode(t, []byte(raw))
	}
	if _, _, fast := decodeEventFast([]byte(aspdMessage)); !fast {
		t.Error("aspd's session.message went to encoding/json: the fast path is never taken")
	}
	ev, mark, ok := decodeEvent([]byte(aspdMessage))
	if !ok || ev.Type != "session.message" || ev.Sequence != 42 || ev.Payload.Sender != "@benchab12cd.a7" ||
		mark == nil || *mark != (benchMark{Run: "ab12cd", ID: 1234, T: 987654321}) {
		t.Errorf("aspd's session.message read as %+v, marker %+v, ok %v", ev, mark, ok)
	}
}

func checkDecode(t *testing.T, raw []byte) {
	t.Helper()
	ev, mark, ok := decodeEvent(raw)
	wev, wmark, wok := decodeEventSlow(raw)
	if ok != wok || !reflect.DeepEqual(comparable(ev), comparable(wev)) || !reflect.DeepEqual(mark, wmark) {
		t.Errorf("decodeEvent(%s)\n = %s, ok %v\nwant %s, ok %v", raw, show(ev, mark), ok, show(wev, wmark), wok)
	}
}

// comparable is ev with its raw content compared as bytes (nil and empty
// alike).
func comparable(ev wireEvent) wireEvent {
	if len(ev.Payload.Content) == 0 {
		ev.Payload.Content = nil
	}
	return ev
}

func show(ev wireEvent, m *benchMark) string {
	s := fmt.Sprintf("%+v", ev)
	if m != nil {
		s += fmt.Sprintf(" marker %+v", *m)
	}
	return s
}

func FuzzDecodeEvent(f *testing.F) {
	for _, raw := range decodeCases {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkDecode(t, raw)
	})
}

// BenchmarkDecodeEvent is the load generator's cost of reading one received
// session.message: decodeEvent against the two json.Unmarshal calls it
// replaced.
func BenchmarkDecodeEvent(b *testing.B) {
	raw := []byte(aspdMessage)
	for _, c := range []struct {
		name string
		fn   func([]byte) (wireEvent, *benchMark, bool)
	}{{"inPlace", decodeEvent}, {"unmarshal", decodeEventSlow}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, m, ok := c.fn(raw); !ok || m == nil {
					b.Fatal("not decoded")
				}
			}
		})
	}
}
