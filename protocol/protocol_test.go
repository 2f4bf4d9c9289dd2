package protocol

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestValidHandle(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"@nick.assistant", true},
		{"@acme.support", true},
		{"@a-b_c.d-e_9", true},
		{"@acme", false},
		{"acme.support", false},
		{"@Acme.support", false},
		{"@acme.sup.port", false},
		{"@.support", false},
		{"@acme.", false},
		{"@acme.*", false},
		{"@acme.supp ort", false},
		{"@" + strings.Repeat("a", 30) + "." + strings.Repeat("b", 32), true},  // 64 bytes
		{"@" + strings.Repeat("a", 30) + "." + strings.Repeat("b", 33), false}, // 65 bytes
	}
	for _, tt := range tests {
		if got := ValidHandle(tt.in); got != tt.want {
			t.Errorf("ValidHandle(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestValidAllowlistEntry(t *testing.T) {
	for in, want := range map[string]bool{
		"@acme.support": true, "@acme.*": true, "@*.*": false, "@acme.su*": false, "acme.*": false, "@.*": false, "@acme": false,
	} {
		if got := ValidAllowlistEntry(in); got != want {
			t.Errorf("ValidAllowlistEntry(%q) = %v, want %v", in, got, want)
		}
	}
	if Owner("@acme.support") != "acme" {
		t.Error("Owner")
	}
}

func TestIDs(t *testing.T) {
	id := NewSessionID()
	if !ValidSessionID(id) || !strings.HasPrefix(NewMessageID(), "msg_") || !strings.HasPrefix(NewEventID(), "evt_") {
		t.Fatalf("ids: %s", id)
	}
	for _, bad := range []string{"sess_", "sess_abc", "msg_01ABC", "sess_01AB-C", "x"} {
		if ValidSessionID(bad) {
			t.Errorf("ValidSessionID(%q) = true", bad)
		}
	}
	if a, b := NewSessionID(), NewSessionID(); a >= b {
		t.Errorf("session ids do not sort by creation: %s then %s", a, b)
	}
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		body, code, msg string
	}{
		{`{"content":"x"}`, "", ""},
		{``, "", ""}, // an empty body is {}
		{`{"content":"x"`, CodeMalformedJSON, "unexpected end"},
		{`{"content":"x"} {}`, CodeMalformedJSON, "exactly one JSON value"},
		{`[1]`, CodeMalformedJSON, "must be a JSON object"},
		{`{"content":"x","sender":"@evil.x"}`, CodeInvalidRequest, `unknown field "sender"`},
		{`{"idempotency_key":5}`, CodeInvalidRequest, `"idempotency_key" must be a string`},
		{`{"content":"x",}`, CodeMalformedJSON, "malformed JSON"},
		{`{"content":"x","content":"y"}`, CodeInvalidRequest, `duplicate key "content" in the body`},
		{`{"content":[{"type":"data","data":{"a":1},"data":{"b":2}}]}`, CodeInvalidRequest, `duplicate key "data" in content[0]`},
		{`{"content":[{"type":"data","data":{"x":{"k":1,"k":2}}}]}`, CodeInvalidRequest, `duplicate key "k" in content[0].data.x`},
		{`{"content":"x","metadata":{"k":1,"\u006b":2}}`, CodeInvalidRequest, `duplicate key "k" in metadata`},
		// Text is checked on the raw bytes, before encoding/json turns bad
		// bytes and unpaired surrogates into U+FFFD.
		{"{\"content\":\"\xff\"}", CodeInvalidRequest, "content is not valid UTF-8"},
		{`{"content":"\u0000"}`, CodeInvalidRequest, "content contains U+0000"},
		{`{"content":"x","idempotency_key":"k\ud800"}`, CodeInvalidRequest, "idempotency_key contains an unpaired UTF-16 surrogate"},
		{`{"content":"x","metadata":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, CodeInvalidRequest, "JSON nesting exceeds the limit of 64 levels at metadata" + strings.Repeat("[0]", 62)},
		// Beyond encoding/json's own bound the answer is the same.
		{`{"content":"x","metadata":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, CodeInvalidRequest, "JSON nesting exceeds the limit of 64 levels"},
	}
	for _, tt := range tests {
		var req SendMessageRequest
		err := DecodeStrict([]byte(tt.body), &req)
		body := abbreviate(tt.body)
		if tt.code == "" {
			if err != nil {
				t.Errorf("%s: %v", body, err)
			}
			continue
		}
		if err == nil || err.Code != tt.code || err.Status != http.StatusBadRequest || !strings.Contains(err.Message, tt.msg) {
			t.Errorf("%s: got %+v, want %s containing %q", body, err, tt.code, tt.msg)
		}
	}
}

func TestValidateContent(t *testing.T) {
	l := DefaultLimits()
	l.MaxParts = 3
	l.MaxContentBytes = 200
	tests := []struct {
		content string
		code    string // "" = valid
		data    int    // data parts returned
	}{
		{`"hello"`, "", 0},
		{`""`, CodeInvalidContent, 0},
		{`[]`, CodeInvalidContent, 0},
		{`[{"type":"text","text":""}]`, CodeInvalidContent, 0},
		{`[{"type":"text","text":"a"},{"type":"data","data":{"k":1}}]`, "", 1},
		{`[{"type":"text"}]`, CodeInvalidContent, 0},
		{`[{"type":"text","text":"a","extra":1}]`, CodeInvalidContent, 0},
		{`[{"type":"video","url":"https://x"}]`, CodeInvalidContent, 0},
		{`[{"type":"image"}]`, CodeInvalidContent, 0},
		{`[{"type":"image","url":"https://x/y.png"}]`, "", 0},
		{`[{"type":"image","data_uri":"data:image/png;base64,AA=="}]`, "", 0},
		{`[{"type":"image","data_uri":"image/png"}]`, CodeInvalidContent, 0},
		{`[{"type":"file","url":"relative/path"}]`, CodeInvalidContent, 0},
		{`[{"type":"file","url":"https://x/f.pdf","size":-1}]`, CodeInvalidContent, 0},
		{`[{"type":"file","url":"https://x/f.pdf","size":"big"}]`, CodeInvalidContent, 0},
		{`[{"type":"data","data":[1]}]`, CodeInvalidContent, 0},
		{`42`, CodeInvalidContent, 0},
		{`[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"},{"type":"text","text":"d"}]`, CodeContentTooLarge, 0},
		{`"` + strings.Repeat("x", 250) + `"`, CodeContentTooLarge, 0},
	}
	for _, tt := range tests {
		c, err := l.ValidateContent(json.RawMessage(tt.content))
		switch {
		case tt.code == "" && err != nil:
			t.Errorf("%s: %v", tt.content, err)
		case tt.code == "" && len(c.DataParts) != tt.data:
			t.Errorf("%s: %d data parts, want %d", tt.content, len(c.DataParts), tt.data)
		case tt.code != "" && (err == nil || err.Code != tt.code):
			t.Errorf("%s: got %v, want %s", tt.content, err, tt.code)
		}
	}
}

func TestValidateInvitees(t *testing.T) {
	l := DefaultLimits()
	l.MaxInvitees = 2
	got, err := l.ValidateInvitees("@a.me", []string{"@b.x", "@b.x", "@c.y"})
	if err == nil || err.Code != CodeInvalidRequest {
		t.Fatalf("3 handles over a limit of 2: %v %v", got, err)
	}
	got, err = l.ValidateInvitees("@a.me", []string{"@b.x", "@b.x"})
	if err != nil || len(got) != 1 {
		t.Fatalf("duplicates: %v %v", got, err)
	}
	if _, err := l.ValidateInvitees("@a.me", []string{"@a.me"}); err == nil {
		t.Fatal("self-invitation accepted")
	}
	if _, err := l.ValidateInvitees("@a.me", []string{"B.x"}); err == nil {
		t.Fatal("invalid handle accepted")
	}
	long := strings.Repeat("é", 255)
	if err := ValidateIdempotencyKey(&long); err != nil {
		t.Fatalf("255 characters (510 bytes) refused: %v", err)
	}
	longer := long + "x"
	empty := ""
	if ValidateIdempotencyKey(&longer) == nil || ValidateIdempotencyKey(&empty) == nil || ValidateIdempotencyKey(nil) != nil {
		t.Fatal("idempotency key bounds")
	}
}
