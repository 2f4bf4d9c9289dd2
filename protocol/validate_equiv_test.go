package protocol

import (
	"encoding/json"
	"testing"
)

var contentSeeds = []string{
	`"hi"`, `""`, `"a\u0000"`, `"unterminated`, `  "x"  `, `"a" "b"`, `[]`, `[ ]`, `[1]`, `[null]`, `["x"]`, `[[]]`, `{}`, `12`, `true`, `null`, `[`, `[{"type":"text","text":"a"},]`,
	`[{"type":"text","text":"hi"}]`, `[{"type":"text","text":""}]`, `[{"type":"text"}]`, `[{"type":"text","text":1}]`,
	`[{"type":"text","text":"a","extra":1}]`, `[{"type":"text","text":"a","extra":1,"more":"x"}]`, `[{"type":null,"text":"a"}]`, `[{"type":"","text":"a"}]`,
	`[{"type":5}]`, `[{"text":"a"}]`, `[{"type":"video"}]`, `[{"type":"t\u0065xt","te\u0078t":"a"}]`, `[{"type":"text","text":"a","text":""}]`,
	`[{"type":"text","type":"data","data":{}}]`, `[{"type":"image","url":"https://x.com/a.png"}]`, `[{"type":"image","url":"nope"}]`,
	`[{"type":"image","data_uri":"data:image/png;base64,AA"}]`, `[{"type":"image","data_uri":"http://x"}]`, `[{"type":"image"}]`,
	`[{"type":"image","data_uri":"d\u0061ta:x"}]`, `[{"type":"file","url":"https://x.com/f","size":10}]`, `[{"type":"file","url":"https://x.com/f","size":-1}]`,
	`[{"type":"file","url":"https://x.com/f","size":1.5}]`, `[{"type":"file","url":"https://x.com/f","size":1e3}]`, `[{"type":"file"}]`, `[{"type":"file","url":""}]`,
	`[{"type":"data","data":{"a":[1,{"b":"}"}],"c":"\"]"}}]`, `[{"type":"data","data":[]}]`, `[{"type":"data"}]`, `[{"type":"data","data":{"envelope_version":"1.0"}}]`,
	`[{"type":"data","data":{"envel\u006fpe_version":"1.0"}}]`, `[{"type":"data","data":{"x":{"envelope_version":"1.0"}}}]`,
	"[ {\"type\" : \"text\" ,\n\t\"text\" : \"a<b>&\u2028\" } , {\"type\":\"data\",\"data\":{ \"k\" : [ 1 , 2 ] }} ]",
	"[{\"type\":\"te\xffxt\",\"text\":\"a\"}]", "[{\"type\":\"text\",\"text\":\"a\",\"\xff\":1}]", `[{"type":"text","text":"a","\ud800":1}]`,
	`[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"}]`,
}

func TestValidateContentAnswersAsBefore(t *testing.T) {
	l := DefaultLimits()
	small := l
	small.MaxParts = 2
	for _, s := range contentSeeds {
		for _, lim := range []Limits{l, small} {
			if why, ok := sameAnswer(lim, json.RawMessage(s)); !ok {
				t.Errorf("%s: %s", s, why)
			}
		}
	}
}

func FuzzValidateContentAnswersAsBefore(f *testing.F) {
	for _, s := range contentSeeds {
		f.Add([]byte(s))
	}
	l := DefaultLimits()
	l.MaxParts = 4
	f.Fuzz(func(t *testing.T, raw []byte) {
		if why, ok := sameAnswer(l, raw); !ok {
			t.Errorf("%q: %s", raw, why)
		}
	})
}

func TestSendMessageRequestAppendJSON(t *testing.T) {
	key, odd := "k-1", "k<&>\u2028\xff\"\\"
	for _, body := range []string{
		`{"content":"hi"}`,
		`{"content":"hi","idempotency_key":"k-1"}`,
		"{\"content\" : [ {\"type\":\"text\", \"text\":\"a <b> & \u2028 \u2029 \\\" \\\\ \\u0041\"} ],\n \"metadata\" : { \"a\" : [ 1 , true , null ] } }",
		`{"content":"x","metadata":{"k":"</script>"}}`,
	} {
		var req SendMessageRequest
		if err := DecodeStrict([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		for _, k := range []*string{nil, &key, &odd} {
			req.IdempotencyKey = k
			want, err := json.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := req.AppendJSON(nil); string(got) != string(want) {
				t.Errorf("%s:\n got %s\nwant %s", body, got, want)
			}
		}
	}
}

func FuzzSendMessageRequestAppendJSON(f *testing.F) {
	for _, s := range contentSeeds {
		f.Add([]byte(s), []byte(`{"a":"<\u2028>"}`))
	}
	f.Fuzz(func(t *testing.T, content, metadata []byte) {
		if !json.Valid(content) || !json.Valid(metadata) {
			return
		}
		req := SendMessageRequest{Content: content, Metadata: metadata}
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := req.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("got %s, want %s", got, want)
		}
	})
}
