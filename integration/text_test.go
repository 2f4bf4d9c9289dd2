package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestBadTextRefusedAtTheEdge: every string a request body carries, at any
// depth, member names included, must be valid UTF-8 without U+0000 and
// without unpaired UTF-16 surrogate escapes, and bodies nest at most 64
// levels. Anything else is 400 invalid_request naming the member by its JSON
// path, with the same body on both stores, and nothing is written. Before
// the check, SQLite stored such messages (encoding/json had quietly turned
// bad bytes into U+FFFD for validation while the raw bytes were stored) and
// PostgreSQL failed them, and every message batched with them, with 500.
func TestBadTextRefusedAtTheEdge(t *testing.T) {
	type tcase struct {
		name, method, path string
		admin              bool
		body               string
		want               string // in the message
	}
	answers := map[string]map[string]string{} // backend -> case -> response body
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@text.alice", "open")
		bob := s.provision("@text.bob", "open")
		sid := alice.createSession(map[string]any{"invite": []string{"@text.bob"}, "topic": "caf\u00e9 \U0001F600"})
		bob.join(sid)
		alice.send(sid, "hello")
		msgs := "/sessions/" + sid + "/messages"

		// A valid frame to alice's own stream, with a placeholder for the bad text.
		fr := frNew(t, "@text.alice", "@text.alice", "agent_advisory", "")
		fr["payload"].(map[string]any)["advisory_text"] = "PLACEHOLDER"
		frameJSON, err := json.Marshal(map[string]any{"scope": "@text.alice", "frame": fr})
		if err != nil {
			t.Fatal(err)
		}
		frameWith := func(bad string) string {
			return string(bytes.Replace(frameJSON, []byte("PLACEHOLDER"), []byte(bad), 1))
		}
		// A valid frame is accepted, so the refusals below are about the text.
		if code, _, out := frPost(t, alice, json.RawMessage(frameWith("fine"))); code != http.StatusOK {
			t.Fatalf("valid frame: %d %s", code, out)
		}

		cases := []tcase{
			{"raw 0xff as content", "POST", msgs, false, "{\"content\":\"\xff\"}", "content is not valid UTF-8"},
			{"\\u0000 in content", "POST", msgs, false, `{"content":"a\u0000b"}`, "content contains U+0000"},
			{"lone surrogate in a text part", "POST", msgs, false,
				`{"content":[{"type":"text","text":"ok"},{"type":"text","text":"bad \ud800 half"}]}`,
				"content[1].text contains an unpaired UTF-16 surrogate escape"},
			{"reversed surrogates", "POST", msgs, false, `{"content":"\udc00\ud800"}`, "content contains an unpaired UTF-16 surrogate escape"},
			{"truncated UTF-8 deep in a data part", "POST", msgs, false,
				"{\"content\":[{\"type\":\"data\",\"data\":{\"items\":[{\"name\":\"x\"},{\"name\":\"\xc3(\"}]}}]}",
				"content[0].data.items[1].name is not valid UTF-8"},
			{"UTF-8-encoded surrogate in a data part", "POST", msgs, false,
				"{\"content\":[{\"type\":\"data\",\"data\":{\"s\":\"\xed\xa0\x80\"}}]}", "content[0].data.s is not valid UTF-8"},
			{"\\u0000 as a member name in a data part", "POST", msgs, false,
				`{"content":[{"type":"data","data":{"ok":1,"\u0000":2}}]}`, `member name "\x00" in content[0].data contains U+0000`},
			{"\\u0000 in metadata", "POST", msgs, false, `{"content":"hi","metadata":{"trace":{"id":"\u0000"}}}`,
				"metadata.trace.id contains U+0000"},
			{"raw 0xff in a metadata member name", "POST", msgs, false, "{\"content\":\"hi\",\"metadata\":{\"tr\xffce\":1}}",
				"in metadata is not valid UTF-8"},
			{"\\u0000 in an idempotency key", "POST", msgs, false, `{"content":"hi","idempotency_key":"key\u0000"}`,
				"idempotency_key contains U+0000"},
			{"surrogate in an idempotency key", "POST", msgs, false, `{"content":"hi","idempotency_key":"\udfff"}`,
				"idempotency_key contains an unpaired UTF-16 surrogate escape"},
			{"too deep", "POST", msgs, false,
				`{"content":[{"type":"data","data":{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}]}`,
				"JSON nesting exceeds the limit of 64 levels at content[0].data.a"},
			{"Latin-1 topic", "POST", "/sessions", false, "{\"topic\":\"caf\xe9\"}", "topic is not valid UTF-8"},
			{"\\u0000 in an invitee handle", "POST", "/sessions", false, `{"invite":["@text.bob\u0000"]}`, "invite[0] contains U+0000"},
			{"surrogate in an initial message", "POST", "/sessions", false,
				`{"invite":["@text.bob"],"initial_message":{"content":"\ud83d"}}`,
				"initial_message.content contains an unpaired UTF-16 surrogate escape"},
			{"\\u0000 in a handle on /invite", "POST", "/sessions/" + sid + "/invite", false, `{"invite":["@text.carol","\u0000"]}`,
				"invite[1] contains U+0000"},
			{"raw 0xff in reopen metadata", "POST", "/sessions/" + sid + "/reopen", false,
				"{\"initial_message\":{\"content\":\"x\",\"metadata\":{\"k\":\"\xff\"}}}", "initial_message.metadata.k is not valid UTF-8"},
			{"\\u0000 in a frame field", "POST", "/frames", false, frameWith(`a\u0000b`), "frame.payload.advisory_text contains U+0000"},
			{"raw 0xff in a frame field", "POST", "/frames", false, frameWith("\xff"), "frame.payload.advisory_text is not valid UTF-8"},
			{"\\u0000 in the frame scope", "POST", "/frames", false,
				strings.Replace(frameWith("fine"), `"scope":"@text.alice"`, `"scope":"@text.alice\u0000"`, 1), "scope contains U+0000"},
			{"raw 0xff in an admin handle", "POST", "/admin/v1/agents", true, "{\"handle\":\"@text.\xff\",\"inbound_policy\":\"open\"}",
				"handle is not valid UTF-8"},
			{"\\u0000 in admin roles", "PUT", "/admin/v1/agents/@text.alice/roles", true, `{"roles":["ok","r\u0000"]}`,
				"roles[1] contains U+0000"},
			{"surrogate in an admin allowlist", "PUT", "/admin/v1/agents/@text.alice/allowlist", true, `{"entries":["@text.\ud800"]}`,
				"entries[0] contains an unpaired UTF-16 surrogate escape"},
		}

		before := alice.rawEvents(sid)
		sessionsBefore := len(alice.mySessions())
		got := map[string]string{}
		for _, c := range cases {
			var code int
			var out []byte
			if c.admin {
				code, out = s.adminDo(c.method, strings.TrimPrefix(c.path, "/admin/v1"), c.body)
			} else {
				code, out = alice.do(c.method, c.path, c.body)
			}
			wantError(t, c.name, code, out, http.StatusBadRequest, "invalid_request")
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			mustUnmarshal(t, out, &e)
			if !strings.Contains(e.Error.Message, c.want) {
				t.Errorf("%s: message %q does not name the problem %q", c.name, e.Error.Message, c.want)
			}
			got[c.name] = string(out)
		}
		answers[dbURL[:min(len(dbURL), 8)]] = got

		// Nothing was written: the log, alice's sessions and her agent record.
		after := alice.rawEvents(sid)
		if len(after) != len(before) {
			t.Fatalf("the session log went from %d to %d events", len(before), len(after))
		}
		for i := range before {
			if !bytes.Equal(before[i], after[i]) {
				t.Fatalf("event %d changed:\n%s\n%s", i+1, before[i], after[i])
			}
		}
		if n := len(alice.mySessions()); n != sessionsBefore {
			t.Fatalf("alice has %d sessions, had %d", n, sessionsBefore)
		}
		code, out := s.adminDo("GET", "/agents/@text.alice", nil)
		if code != http.StatusOK || !strings.Contains(string(out), `"roles":[]`) || !strings.Contains(string(out), `"allowlist":[]`) {
			t.Fatalf("alice's agent record changed: %d %s", code, out)
		}
		// Good text still goes through: accents, emoji, escaped pairs.
		alice.send(sid, "caf\u00e9 \U0001F600")
		alice.must(http.StatusCreated, "POST", msgs, `{"content":"pair \ud83d\ude00, escaped backslash \\ud800"}`, "PostSessionsMessagesResponse")
	})
	// Identical answers on both stores.
	var prev map[string]string
	for _, got := range answers {
		if prev != nil {
			for name, body := range got {
				if prev[name] != body {
					t.Errorf("%s: the stores answer differently:\n%s\n%s", name, prev[name], body)
				}
			}
		}
		prev = got
	}
}
