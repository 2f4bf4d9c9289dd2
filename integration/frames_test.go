package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Agent-channel frames (Internet-Draft "Agent-Channel Fan-Out", sections
// 7-10 and 16) through the HTTP API: POST /frames scope expansion, GET
// /stream SSE with filters and Last-Event-ID, the roster, the abuse limits,
// and frames carried durably inside session messages.

// frQuiet is how long a stream must stay silent to count as having received
// nothing more.
const frQuiet = 400 * time.Millisecond

// frUUID4 returns a random version-4 UUID.
func frUUID4(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// frNew builds a valid frame: fresh UUIDv4 frame_id, created_at now (UTC,
// RFC 3339), the attribution pair and the provenance block. A nil payload is
// a minimal valid one for agent_advisory and agent_broadcast; contentType,
// when set, is added to the payload.
func frNew(t testing.TB, sender, recipient, kind, contentType string) map[string]any {
	t.Helper()
	var p map[string]any
	switch kind {
	case "agent_advisory":
		p = map[string]any{"advisory_text": "Editing server/frames.go", "file_refs": []any{"server/frames.go"}, "branch": "main"}
	case "agent_broadcast":
		p = map[string]any{"broadcast_text": "feat/frames merged", "event_class": "merged", "refs": []any{"feat/frames"}}
	default:
		t.Fatalf("frNew: no default payload for %s", kind)
	}
	if contentType != "" {
		p["content_type"] = contentType
	}
	return map[string]any{
		"envelope_version":            "1.0",
		"frame_id":                    frUUID4(t),
		"kind":                        kind,
		"sender_handle":               sender,
		"recipient_handle":            recipient,
		"created_at":                  time.Now().UTC().Format(time.RFC3339),
		"ttl_ms":                      60000,
		"acted_by":                    "~alice",
		"drafted_with":                "~cc-example-model",
		"provenance_compute_location": "local-only",
		"provenance_method":           []any{"session-context-snapshot"},
		"provenance_context_check":    "passed",
		"provenance_basis":            "agent-channel",
		"payload":                     p,
	}
}

func frID(fr map[string]any) string { return fr["frame_id"].(string) }

// frPost sends POST /frames and returns status, headers and body.
func frPost(t testing.TB, a *agent, body any) (int, http.Header, []byte) {
	t.Helper()
	enc, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", a.s.url+"/frames", bytes.NewReader(enc))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := frHTTPClient.Do(req)
	if err != nil {
		t.Fatalf("POST /frames: %v", err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out.Bytes()
}

var frHTTPClient = &http.Client{Timeout: 15 * time.Second}

// frSubmit submits a frame that must be accepted and returns the reported
// count. The body must be exactly {"subscriptions": n, "exact": bool}.
func frSubmit(t testing.TB, a *agent, scope string, fr map[string]any) (int, bool) {
	t.Helper()
	code, _, out := frPost(t, a, map[string]any{"scope": scope, "frame": fr})
	if code != http.StatusOK {
		t.Fatalf("%s POST /frames scope %s: status %d: %s", a.handle, scope, code, out)
	}
	var r struct {
		Subscriptions *int  `json:"subscriptions"`
		Exact         *bool `json:"exact"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || r.Subscriptions == nil || r.Exact == nil {
		t.Fatalf("POST /frames: body %s is not {subscriptions, exact}", out)
	}
	return *r.Subscriptions, *r.Exact
}

// frWantCount submits and checks the reported count.
func frWantCount(t testing.TB, a *agent, scope string, fr map[string]any, n int, exact bool) {
	t.Helper()
	gotN, gotExact := frSubmit(t, a, scope, fr)
	if gotN != n || gotExact != exact {
		t.Fatalf("%s POST /frames scope %s (%s): got {subscriptions:%d exact:%v}, want {subscriptions:%d exact:%v}",
			a.handle, scope, fr["kind"], gotN, gotExact, n, exact)
	}
}

// frWantError checks a frame error: status, and a body of exactly
// {"error":{"code","field","message"}} (no field member when field is "").
func frWantError(t testing.TB, what string, gotStatus int, body []byte, status int, code, field string) {
	t.Helper()
	if gotStatus != status {
		t.Fatalf("%s: status %d, want %d: %s", what, gotStatus, status, body)
	}
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(body, &outer); err != nil || len(outer) != 1 || outer["error"] == nil {
		t.Fatalf("%s: body is not {\"error\":{...}}: %s", what, body)
	}
	var inner map[string]any
	mustUnmarshal(t, outer["error"], &inner)
	want := 2
	if field != "" {
		want = 3
		if inner["field"] != field {
			t.Fatalf("%s: field %v, want %q: %s", what, inner["field"], field, body)
		}
	}
	if len(inner) != want {
		t.Fatalf("%s: error members %v, want code, message%s: %s", what, inner, map[bool]string{true: ", field"}[field != ""], body)
	}
	if inner["code"] != code {
		t.Fatalf("%s: code %v, want %q: %s", what, inner["code"], code, body)
	}
	if m, _ := inner["message"].(string); m == "" {
		t.Fatalf("%s: empty message: %s", what, body)
	}
}

// frRejected submits and checks the error.
func frRejected(t testing.TB, a *agent, scope string, fr any, status int, code, field string) []byte {
	t.Helper()
	got, _, out := frPost(t, a, map[string]any{"scope": scope, "frame": fr})
	frWantError(t, a.handle+" POST /frames scope "+scope, got, out, status, code, field)
	return out
}

var sseIDRE = regexp.MustCompile(`^[0-9a-z]+-[1-9][0-9]*$`)

// frCollect reads frame events until the one whose frame_id is sentinel and
// returns those before it. Each event must carry an id of the form
// <epoch>-<n>, event = the frame's kind and data = the compact frame exactly
// as sent (sent maps frame_id to its JSON); ids must increase.
func frCollect(t testing.TB, name string, c *sseClient, sentinel string, sent map[string][]byte) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	lastN := int64(-1)
	epoch := ""
	for {
		it := c.next()
		if it.Event == "stream-gap" {
			t.Fatalf("%s: unexpected stream-gap: %s", name, it.Data)
		}
		var fr map[string]any
		if err := json.Unmarshal([]byte(it.Data), &fr); err != nil {
			t.Fatalf("%s: data is not JSON: %+v", name, it)
		}
		id, _ := fr["frame_id"].(string)
		if want, ok := sent[id]; !ok || it.Data != string(want) {
			t.Fatalf("%s: data %s is not a frame as sent (%s)", name, it.Data, want)
		}
		if it.Event != fr["kind"] {
			t.Fatalf("%s: event %q for a frame of kind %v", name, it.Event, fr["kind"])
		}
		if !sseIDRE.MatchString(it.ID) {
			t.Fatalf("%s: SSE id %q is not <epoch>-<n>", name, it.ID)
		}
		ep, num, _ := strings.Cut(it.ID, "-")
		var n int64
		fmt.Sscan(num, &n)
		if epoch != "" && ep != epoch || n <= lastN {
			t.Fatalf("%s: SSE id %q does not follow %s-%d", name, it.ID, epoch, lastN)
		}
		epoch, lastN = ep, n
		if seen[id] {
			t.Fatalf("%s: frame %s received twice", name, id)
		}
		seen[id] = true
		if id == sentinel {
			return ids
		}
		ids = append(ids, id)
	}
}

// frSent records frames as the server will emit them (compact JSON, the
// form json.Marshal produces for the request).
type frSent map[string][]byte

func (s frSent) add(t testing.TB, fr map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(fr)
	if err != nil {
		t.Fatal(err)
	}
	s[frID(fr)] = b
	return fr
}

// frAllQuiet asserts that none of the streams receives an event (comments
// are fine) within frQuiet, waiting once for all of them.
func frAllQuiet(t testing.TB, cs ...*sseClient) {
	t.Helper()
	time.Sleep(frQuiet)
	for i, c := range cs {
		for drained := false; !drained; {
			select {
			case it, ok := <-c.items:
				if ok && !it.IsComment {
					t.Fatalf("stream %d: unexpected SSE event: %+v", i, it)
				}
				drained = !ok
			default:
				drained = true
			}
		}
	}
}

func frWantIDs(t testing.TB, name string, got []string, want ...map[string]any) {
	t.Helper()
	var w []string
	for _, fr := range want {
		w = append(w, frID(fr))
	}
	if fmt.Sprint(got) != fmt.Sprint(w) {
		t.Fatalf("%s received frames %v, want %v", name, got, w)
	}
}

// TestFrameFanOut: several streams of one agent, with different instruments,
// sessions and filters, receive exactly the frames that the submission scope
// (@h, @h/*, @h/<prefix>*, @h/<instrument>@<session>) and their filter
// (kind:, sender:, content_type:) admit, each once, in order, with the
// reported counts exact for the agent's own scopes and coarsened for another
// agent's.
func TestFrameFanOut(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@alice.cc", "open")
		bob := s.provision("@bob.cc", "open")

		s1 := sseOpen(t, s, alice.token, "/stream?instrument=cc-1", nil)
		s2 := sseOpen(t, s, alice.token, "/stream?instrument=cc-2&session=s2&filter=kind:agent_broadcast", nil)
		s3 := sseOpen(t, s, alice.token, "/stream?instrument=cx-1&filter="+url.QueryEscape("sender:@alice.cc"), nil)
		s4 := sseOpen(t, s, alice.token, "/stream?instrument=cc-3&filter="+url.QueryEscape("content_type:text/markdown"), nil)
		s5 := sseOpen(t, s, alice.token, "/stream?instrument=cc-1&session=sess-a", nil)
		// bob's own stream must see nothing of alice's traffic.
		b1 := sseOpen(t, s, bob.token, "/stream?instrument=cc-1&session=sess-a", nil)

		sent := frSent{}
		adv := func(ct string) map[string]any {
			return sent.add(t, frNew(t, "@alice.cc", "@alice.cc", "agent_advisory", ct))
		}
		bc := func(ct string) map[string]any {
			return sent.add(t, frNew(t, "@alice.cc", "@alice.cc", "agent_broadcast", ct))
		}

		f1 := adv("")
		frWantCount(t, alice, "@alice.cc", f1, 3, true) // s1, s3, s5
		f2 := bc("")
		frWantCount(t, alice, "@alice.cc/*", f2, 4, true) // s1, s2, s3, s5
		f3 := adv("text/markdown")
		frWantCount(t, alice, "@alice.cc/cc-*", f3, 3, true) // s1, s4, s5 (s3 is cx-1, s2 kind)
		f4 := adv("")
		frWantCount(t, alice, "@alice.cc/cc-1@sess-a", f4, 1, true) // s5 only, not s1 (no session)
		f5 := sent.add(t, frNew(t, "@bob.cc", "@alice.cc", "agent_broadcast", ""))
		frWantCount(t, bob, "@alice.cc/*", f5, 1, false) // s1, s2, s5: another agent's count is coarsened
		f6 := adv("text/plain")
		frWantCount(t, alice, "@alice.cc/cx*", f6, 1, true) // s3
		f7 := adv("")
		frWantCount(t, alice, "@alice.cc/zz*", f7, 0, true) // nobody
		f8 := bc("")
		frWantCount(t, alice, "@alice.cc/cc-2@s2", f8, 1, true) // s2
		f9 := adv("")
		frWantCount(t, alice, "@alice.cc/cc-2@other", f9, 0, true) // s2 is session s2: nobody
		f10 := sent.add(t, frNew(t, "@bob.cc", "@alice.cc", "agent_advisory", "text/markdown"))
		frWantCount(t, bob, "@alice.cc/nomatch*", f10, 0, false)

		// The sentinel passes every filter and scope: a broadcast from
		// alice carrying content_type text/markdown, to @alice.cc/*.
		end := bc("text/markdown")
		frWantCount(t, alice, "@alice.cc/*", end, 5, true)
		endB := sent.add(t, frNew(t, "@bob.cc", "@bob.cc", "agent_advisory", ""))
		frWantCount(t, bob, "@bob.cc", endB, 1, true)

		frWantIDs(t, "s1 cc-1", frCollect(t, "s1", s1, frID(end), sent), f1, f2, f3, f5)
		frWantIDs(t, "s2 cc-2@s2 kind:agent_broadcast", frCollect(t, "s2", s2, frID(end), sent), f2, f5, f8)
		frWantIDs(t, "s3 cx-1 sender:@alice.cc", frCollect(t, "s3", s3, frID(end), sent), f1, f2, f6)
		frWantIDs(t, "s4 cc-3 content_type:text/markdown", frCollect(t, "s4", s4, frID(end), sent), f3)
		frWantIDs(t, "s5 cc-1@sess-a", frCollect(t, "s5", s5, frID(end), sent), f1, f2, f3, f4, f5)
		frWantIDs(t, "bob b1", frCollect(t, "b1", b1, frID(endB), sent))
		frAllQuiet(t, s1, s2, s3, s4, s5, b1)
	})
}

// TestFrameOrgScopes: org:<owner>/members/* reaches every stream of the
// owner's agents, org:<owner>/members/<role>/* only those of agents holding
// the role the operator assigned; the org filter admits only org-scoped
// frames of that owner; another owner's agent is refused with 403
// scope-unauthorised and reaches nobody.
func TestFrameOrgScopes(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@acme.a", "allowlist", "@acme.*")
		b := s.provision("@acme.b", "allowlist", "@acme.*")
		c := s.provision("@acme.c", "allowlist", "@acme.*")
		x := s.provision("@other.x", "open")
		for h, roles := range map[string][]string{"@acme.a": {"ops"}, "@acme.b": {"ops", "dev"}} {
			if code, out := s.adminDo("PUT", "/agents/"+h+"/roles", map[string]any{"roles": roles}); code != http.StatusOK {
				t.Fatalf("PUT roles %s: %d %s", h, code, out)
			}
		}

		a1 := sseOpen(t, s, a.token, "/stream?instrument=i1", nil)
		b1 := sseOpen(t, s, b.token, "/stream?instrument=i1", nil)
		b2 := sseOpen(t, s, b.token, "/stream?instrument=i2&filter=org:acme", nil)
		b3 := sseOpen(t, s, b.token, "/stream?instrument=i3&filter=org:other", nil)
		c1 := sseOpen(t, s, c.token, "/stream?instrument=i1", nil)
		x1 := sseOpen(t, s, x.token, "/stream?instrument=i1", nil)

		sent := frSent{}
		g1 := sent.add(t, frNew(t, "@acme.a", "@acme.a", "agent_broadcast", ""))
		frWantCount(t, a, "org:acme/members/*", g1, 1, false) // a1, b1, b2, c1
		g2 := sent.add(t, frNew(t, "@acme.a", "@acme.b", "agent_advisory", ""))
		frWantCount(t, a, "org:acme/members/ops/*", g2, 1, false) // a1, b1, b2
		g3 := sent.add(t, frNew(t, "@acme.c", "@acme.c", "agent_advisory", ""))
		frWantCount(t, c, "org:acme/members/dev/*", g3, 1, false) // b1, b2 (c holds no role, may still address)
		g4 := sent.add(t, frNew(t, "@acme.a", "@acme.a", "agent_advisory", ""))
		frWantCount(t, a, "org:acme/members/nobody/*", g4, 0, false)
		g5 := sent.add(t, frNew(t, "@acme.b", "@acme.b", "agent_advisory", ""))
		frWantCount(t, b, "@acme.b/*", g5, 1, true) // b1 only: b2 and b3 filter on org, and this frame is not org-scoped

		// Refusals: nothing below reaches any stream.
		frRejected(t, x, "org:acme/members/*", frNew(t, "@other.x", "@other.x", "agent_advisory", ""), http.StatusForbidden, "scope-unauthorised", "scope")
		frRejected(t, x, "org:acme/members/*", frNew(t, "@other.x", "@acme.a", "agent_advisory", ""), http.StatusForbidden, "scope-unauthorised", "scope")
		frRejected(t, x, "org:acme/members/ops/*", frNew(t, "@other.x", "@acme.a", "agent_advisory", ""), http.StatusForbidden, "scope-unauthorised", "scope")
		// An acme agent may not name a foreign recipient in its org scope,
		// nor address another owner's org.
		frRejected(t, a, "org:acme/members/*", frNew(t, "@acme.a", "@other.x", "agent_advisory", ""), http.StatusForbidden, "scope-unauthorised", "scope")
		frRejected(t, a, "org:other/members/*", frNew(t, "@acme.a", "@other.x", "agent_advisory", ""), http.StatusForbidden, "scope-unauthorised", "scope")

		end := sent.add(t, frNew(t, "@acme.a", "@acme.a", "agent_advisory", ""))
		frWantCount(t, a, "org:acme/members/*", end, 1, false)
		endX := sent.add(t, frNew(t, "@other.x", "@other.x", "agent_advisory", ""))
		frWantCount(t, x, "@other.x", endX, 1, true)

		frWantIDs(t, "a1", frCollect(t, "a1", a1, frID(end), sent), g1, g2)
		frWantIDs(t, "b1", frCollect(t, "b1", b1, frID(end), sent), g1, g2, g3, g5)
		frWantIDs(t, "b2 org:acme", frCollect(t, "b2", b2, frID(end), sent), g1, g2, g3)
		frWantIDs(t, "c1", frCollect(t, "c1", c1, frID(end), sent), g1)
		frWantIDs(t, "x1", frCollect(t, "x1", x1, frID(endX), sent))
		frAllQuiet(t, a1, b1, b2, b3, c1, x1)
	})
}

// TestFrameTrust: addressing another agent is a contact attempt under ASP
// trust. A refusal (allowlist without the sender, a block) is a 404
// byte-identical to addressing a handle that does not exist, whatever the
// scope form, and reaches nobody; an admitted recipient's count is
// coarsened to 0 or 1 (exact false), while the recipient's own count is
// exact.
func TestFrameTrust(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		dan := s.provision("@dan.priv", "allowlist") // admits nobody
		eve := s.provision("@eve.x", "open")
		olga := s.provision("@olga.open", "open")

		d1 := sseOpen(t, s, dan.token, "/stream?instrument=cc-1&session=s", nil)
		e1 := sseOpen(t, s, eve.token, "/stream?instrument=cc-1", nil)

		// The reference: a recipient that does not exist.
		code, _, ref := frPost(t, eve, map[string]any{"scope": "@ghost.none", "frame": frNew(t, "@eve.x", "@ghost.none", "agent_advisory", "")})
		wantError(t, "frame to a missing handle", code, ref, http.StatusNotFound, "not_found")
		if want := `{"error":{"code":"not_found","message":"not found"}}`; strings.TrimSpace(string(ref)) != want {
			t.Fatalf("404 body %s, want %s", ref, want)
		}
		// ... the same body as an invitation of that missing handle.
		if code, out := eve.do("POST", "/sessions", map[string]any{"invite": []string{"@ghost.none"}}); code != http.StatusNotFound || !bytes.Equal(out, ref) {
			t.Fatalf("POST /sessions inviting a missing handle: %d %s, want the frames 404 %s", code, out, ref)
		}
		deny := func(from *agent, to, scope string) {
			t.Helper()
			code, _, out := frPost(t, from, map[string]any{"scope": scope, "frame": frNew(t, from.handle, to, "agent_advisory", "")})
			if code != http.StatusNotFound || !bytes.Equal(out, ref) {
				t.Fatalf("%s -> %s: %d %s, want the missing-handle 404 %s", from.handle, scope, code, out, ref)
			}
		}
		for _, scope := range []string{"@dan.priv", "@dan.priv/*", "@dan.priv/cc-*", "@dan.priv/cc-1@s"} {
			deny(eve, "@dan.priv", scope)
			deny(olga, "@dan.priv", scope)
		}
		// dan's allowlist admits nobody, so dan cannot address eve either.
		deny(dan, "@eve.x", "@eve.x/*")

		// A block in either direction refuses contact the same way.
		if code, out := s.adminDo("POST", "/agents/@olga.open/blocks", map[string]any{"handle": "@eve.x"}); code/100 != 2 {
			t.Fatalf("block: %d %s", code, out)
		}
		deny(eve, "@olga.open", "@olga.open/*")
		deny(olga, "@eve.x", "@eve.x")
		if code, out := s.adminDo("DELETE", "/agents/@olga.open/blocks/@eve.x", nil); code/100 != 2 {
			t.Fatalf("unblock: %d %s", code, out)
		}

		// Open recipient: the count is coarsened to 0 or 1.
		sent := frSent{}
		frWantCount(t, eve, "@olga.open/*", sent.add(t, frNew(t, "@eve.x", "@olga.open", "agent_advisory", "")), 0, false)
		o1 := sseOpen(t, s, olga.token, "/stream?instrument=cc-1", nil)
		o2 := sseOpen(t, s, olga.token, "/stream?instrument=cc-2", nil)
		o3 := sseOpen(t, s, olga.token, "/stream?instrument=zz-1&filter=kind:agent_broadcast", nil)
		h1 := sent.add(t, frNew(t, "@eve.x", "@olga.open", "agent_advisory", ""))
		frWantCount(t, eve, "@olga.open/*", h1, 1, false) // reaches o1 and o2: reported as 1
		h2 := sent.add(t, frNew(t, "@eve.x", "@olga.open", "agent_advisory", ""))
		frWantCount(t, eve, "@olga.open/zz*", h2, 0, false) // o3 filters on kind
		h3 := sent.add(t, frNew(t, "@olga.open", "@olga.open", "agent_advisory", ""))
		frWantCount(t, olga, "@olga.open/*", h3, 2, true) // the owner of the streams sees the exact count

		// Once dan lists eve, eve may address dan (eve is open).
		if code, out := s.adminDo("PUT", "/agents/@dan.priv/allowlist", map[string]any{"entries": []string{"@eve.x"}}); code != http.StatusOK {
			t.Fatalf("PUT allowlist: %d %s", code, out)
		}
		k1 := sent.add(t, frNew(t, "@eve.x", "@dan.priv", "agent_advisory", ""))
		frWantCount(t, eve, "@dan.priv/cc-1@s", k1, 1, false)
		deny(olga, "@dan.priv", "@dan.priv") // still not olga

		endD := sent.add(t, frNew(t, "@dan.priv", "@dan.priv", "agent_broadcast", ""))
		frWantCount(t, dan, "@dan.priv", endD, 1, true)
		endE := sent.add(t, frNew(t, "@eve.x", "@eve.x", "agent_broadcast", ""))
		frWantCount(t, eve, "@eve.x", endE, 1, true)
		endO := sent.add(t, frNew(t, "@olga.open", "@olga.open", "agent_broadcast", ""))
		frWantCount(t, olga, "@olga.open", endO, 3, true)
		frWantIDs(t, "d1", frCollect(t, "d1", d1, frID(endD), sent), k1)
		frWantIDs(t, "e1", frCollect(t, "e1", e1, frID(endE), sent))
		frWantIDs(t, "o1", frCollect(t, "o1", o1, frID(endO), sent), h1, h3)
		frWantIDs(t, "o2", frCollect(t, "o2", o2, frID(endO), sent), h1, h3)
		frWantIDs(t, "o3", frCollect(t, "o3", o3, frID(endO), sent))
	})
}

// TestFrameSubmitErrors: every refusal of POST /frames carries its draft
// code, status and field, and a refused frame reaches no stream.
func TestFrameSubmitErrors(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		eve := s.provision("@eve.x", "open")
		s.provision("@olga.open", "open")
		e1 := sseOpen(t, s, eve.token, "/stream", nil)
		own := func() map[string]any { return frNew(t, "@eve.x", "@eve.x", "agent_advisory", "") }
		with := func(path string, v any) map[string]any {
			fr := own()
			if p, ok := strings.CutPrefix(path, "payload."); ok {
				pl := fr["payload"].(map[string]any)
				if v == nil {
					delete(pl, p)
				} else {
					pl[p] = v
				}
			} else if v == nil {
				delete(fr, path)
			} else {
				fr[path] = v
			}
			return fr
		}

		// Validation (400, draft section 10 codes, field = JSON path).
		frRejected(t, eve, "@eve.x", with("envelope_version", "2.0"), 400, "envelope-version-unsupported", "envelope_version")
		frRejected(t, eve, "@eve.x", with("kind", "agent_gossip"), 400, "kind-unknown", "kind")
		frRejected(t, eve, "@eve.x", with("payload.advisory_text", nil), 400, "field-missing", "payload.advisory_text")
		frRejected(t, eve, "@eve.x", with("payload.broadcast_text", "x"), 400, "payload-kind-mismatch", "payload.broadcast_text")
		frRejected(t, eve, "@eve.x", with("frame_id", "6f1c2d3e-4b5a-1c6d-9e8f-0a1b2c3d4e5f"), 400, "field-invalid", "frame_id")
		frRejected(t, eve, "@eve.x", with("colour", "blue"), 400, "field-unknown", "colour")
		frRejected(t, eve, "@eve.x", with("acted_by", nil), 400, "field-missing", "acted_by")
		frRejected(t, eve, "@eve.x", with("created_at", time.Now().Add(-48*time.Hour).UTC().Format(time.RFC3339)), 400, "field-invalid", "created_at")
		frRejected(t, eve, "@eve.x", "not an object", 400, "field-invalid", "")
		got, _, out := frPost(t, eve, map[string]any{"scope": "@eve.x"})
		frWantError(t, "no frame", got, out, 400, "field-missing", "frame")
		got, _, out = frPost(t, eve, map[string]any{"frame": own()})
		frWantError(t, "no scope", got, out, 400, "field-missing", "scope")
		got, _, out = frPost(t, eve, map[string]any{"scope": "@eve.x", "frame": own(), "extra": 1})
		wantError(t, "unknown submission member", got, out, 400, "invalid_request")

		// Authentication and authorisation.
		frRejected(t, eve, "@olga.open", frNew(t, "@olga.open", "@olga.open", "agent_advisory", ""), 403, "sender-identity-mismatch", "sender_handle")
		frRejected(t, eve, "@olga.open", own(), 403, "scope-unauthorised", "scope") // scope names another handle than recipient_handle
		frRejected(t, eve, "@eve.x/*", frNew(t, "@eve.x", "@olga.open", "agent_advisory", ""), 403, "scope-unauthorised", "scope")
		frRejected(t, eve, "accord:acme/grant:deploys", own(), 501, "scope-unimplemented", "scope")
		for _, bad := range []string{"eve.x", "~eve", "@eve.x/", "@eve.x/a/b", "@eve.x/cc-1@", "@Eve.x", "org:acme", "org:acme/members/", "org:acme/members/ops", "accord:acme", "@eve.x/*x"} {
			frRejected(t, eve, bad, own(), 400, "field-invalid", "scope")
		}

		// Nothing above reached eve's stream.
		sent := frSent{}
		end := sent.add(t, own())
		frWantCount(t, eve, "@eve.x", end, 1, true)
		frWantIDs(t, "e1", frCollect(t, "e1", e1, frID(end), sent))
	})
}

// frJSONEqual reports whether two JSON documents are equal as values.
func frJSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	for _, p := range []struct {
		raw []byte
		v   *any
	}{{a, &x}, {b, &y}} {
		d := json.NewDecoder(bytes.NewReader(p.raw))
		d.UseNumber()
		if err := d.Decode(p.v); err != nil {
			t.Fatalf("not JSON: %v: %s", err, p.raw)
		}
	}
	return reflect.DeepEqual(x, y)
}

// TestFrameSessionMessages: frames ride durably in session messages as data
// parts. One malformed frame rejects the whole message (400 with code and
// field), a wrong sender is sender-identity-mismatch and a recipient outside
// the session field-invalid on recipient_handle; nothing is stored or
// delivered. A valid frame arrives on WebSocket inside session.message with
// the content unchanged, and the same holds for an initial message.
func TestFrameSessionMessages(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@alice.cc", "open")
		bob := s.provision("@bob.cc", "open")
		s.provision("@carol.cc", "open")

		sid := alice.createSession(map[string]any{"invite": []string{"@bob.cc"}, "topic": "frames"})
		bob.join(sid)
		in := newInbox(bob.connect())
		in.expect("session.invited", "session.joined")
		before := len(alice.events(sid))
		if before != 2 {
			t.Fatalf("session starts with %d events, want 2", before)
		}

		valid := frNew(t, "@alice.cc", "@bob.cc", "agent_advisory", "text/plain")
		malformed := frNew(t, "@alice.cc", "@bob.cc", "agent_advisory", "")
		delete(malformed["payload"].(map[string]any), "advisory_text")
		reject := func(what string, content []any, code, field string) {
			t.Helper()
			got, out := alice.do("POST", "/sessions/"+sid+"/messages", map[string]any{"content": content})
			frWantError(t, what, got, out, http.StatusBadRequest, code, field)
		}
		text := map[string]any{"type": "text", "text": "see the frames"}
		data := func(fr map[string]any) map[string]any { return map[string]any{"type": "data", "data": fr} }
		reject("valid + malformed frame", []any{text, data(valid), data(malformed)}, "field-missing", "payload.advisory_text")
		reject("malformed + valid frame", []any{data(malformed), data(valid)}, "field-missing", "payload.advisory_text")
		reject("wrong sender", []any{data(valid), data(frNew(t, "@bob.cc", "@bob.cc", "agent_advisory", ""))}, "sender-identity-mismatch", "sender_handle")
		reject("recipient outside the session", []any{data(valid), data(frNew(t, "@alice.cc", "@carol.cc", "agent_advisory", ""))}, "field-invalid", "recipient_handle")
		reject("unknown recipient", []any{data(frNew(t, "@alice.cc", "@ghost.none", "agent_advisory", ""))}, "field-invalid", "recipient_handle")
		reject("bad version", []any{data(map[string]any{"envelope_version": "9"})}, "envelope-version-unsupported", "envelope_version")
		if evs := alice.events(sid); len(evs) != before {
			t.Fatalf("a rejected message wrote events: %v", types(evs))
		}
		in.quiet(frQuiet)

		// A data part without envelope_version is not a frame.
		plain := []any{data(map[string]any{"colour": "blue"})}
		alice.send(sid, plain)
		in.expect("session.message")
		// A valid frame is stored and delivered inside the content unchanged.
		content := []any{text, data(valid)}
		seq := alice.send(sid, content)
		e := in.expect("session.message")[0]
		wantEvent(t, e, "session.message", sid, seq)
		var p struct {
			Sender  string          `json:"sender"`
			Content json.RawMessage `json:"content"`
		}
		mustUnmarshal(t, e.Payload, &p)
		sentContent, _ := json.Marshal(content)
		if p.Sender != "@alice.cc" || !frJSONEqual(t, p.Content, sentContent) {
			t.Fatalf("session.message content %s, want %s", p.Content, sentContent)
		}
		var parts []struct {
			Data json.RawMessage `json:"data"`
		}
		mustUnmarshal(t, p.Content, &parts)
		frameJSON, _ := json.Marshal(valid)
		if !bytes.Equal(parts[1].Data, frameJSON) {
			t.Fatalf("frame in session.message %s, want byte-identical %s", parts[1].Data, frameJSON)
		}
		// The read API returns the same event.
		evs := alice.events(sid)
		if last := evs[len(evs)-1]; last.Sequence != seq || !frJSONEqual(t, last.Payload, e.Payload) {
			t.Fatalf("GET events last %s, want %s", last.Raw, e.Raw)
		}
		// A frame to oneself inside a session is fine too; bob may answer.
		bob.send(sid, []any{data(frNew(t, "@bob.cc", "@alice.cc", "agent_broadcast", ""))})
		in.expect("session.message")

		// Frames in an initial message: the recipient may be an invitee; a
		// recipient outside the invite list rejects the create, and no
		// session is written.
		nBefore := len(alice.mySessions())
		got, out := alice.do("POST", "/sessions", map[string]any{"invite": []string{"@bob.cc"},
			"initial_message": map[string]any{"content": []any{data(frNew(t, "@alice.cc", "@carol.cc", "agent_advisory", ""))}}})
		frWantError(t, "initial message to a non-participant", got, out, 400, "field-invalid", "recipient_handle")
		if n := len(alice.mySessions()); n != nBefore {
			t.Fatalf("a rejected create wrote a session: %d sessions, want %d", n, nBefore)
		}
		init := frNew(t, "@alice.cc", "@bob.cc", "agent_advisory", "")
		sid2 := alice.createSession(map[string]any{"invite": []string{"@bob.cc"},
			"initial_message": map[string]any{"content": []any{data(init)}}})
		in.expect("session.invited") // invitees see no content before joining
		bob.join(sid2)
		evs2 := in.expect("session.message", "session.joined")
		var p2 struct {
			Content []struct {
				Data json.RawMessage `json:"data"`
			} `json:"content"`
		}
		mustUnmarshal(t, evs2[0].Payload, &p2)
		initJSON, _ := json.Marshal(init)
		if len(p2.Content) != 1 || !bytes.Equal(p2.Content[0].Data, initJSON) {
			t.Fatalf("initial message frame %s, want %s", evs2[0].Payload, initJSON)
		}
	})
}

// TestFrameResume: Last-Event-ID inside retention resumes with exactly the
// missed frames and no gap event; beyond retention (--frame-retain-count 2)
// or with an unknown id, a stream-gap event {"code":"resume-gap"} comes
// first, then the retained frames, then live ones.
func TestFrameResume(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		t.Run("within", func(t *testing.T) {
			s := startServer(t, dbURL)
			alice := s.provision("@alice.cc", "open")
			sent := frSent{}
			adv := func() map[string]any { return sent.add(t, frNew(t, "@alice.cc", "@alice.cc", "agent_advisory", "")) }
			st := sseOpen(t, s, alice.token, "/stream?instrument=cc-1", nil)
			f1, f2 := adv(), adv()
			frWantCount(t, alice, "@alice.cc", f1, 1, true)
			frWantCount(t, alice, "@alice.cc", f2, 1, true)
			st.next()
			last := st.next()
			if !strings.Contains(last.Data, frID(f2)) {
				t.Fatalf("second event %+v is not f2", last)
			}
			st.close()
			frWaitStreams(t, alice, 0)
			f3, other, noSession, f4 := adv(), adv(), adv(), adv()
			frWantCount(t, alice, "@alice.cc", f3, 0, true)
			frWantCount(t, alice, "@alice.cc/zz*", other, 0, true)        // retained, but not for a cc-1 stream
			frWantCount(t, alice, "@alice.cc/cc-1@x", noSession, 0, true) // nor for cc-1 without that session
			frWantCount(t, alice, "@alice.cc/cc-*", f4, 0, true)

			re := sseOpen(t, s, alice.token, "/stream?instrument=cc-1", map[string]string{"Last-Event-ID": last.ID})
			f5 := adv()
			frWantCount(t, alice, "@alice.cc", f5, 1, true)
			frWantIDs(t, "resumed", frCollect(t, "resumed", re, frID(f5), sent), f3, f4)
			re.quiet(frQuiet)

			// Resuming from the newest id: nothing is replayed, no gap.
			re.close()
			frWaitStreams(t, alice, 0)
			cur := sseOpen(t, s, alice.token, "/stream?instrument=cc-1", map[string]string{"Last-Event-ID": frLastID(t, s, alice, sent)})
			f7 := adv()
			frWantCount(t, alice, "@alice.cc", f7, 1, true)
			frWantIDs(t, "current", frCollect(t, "current", cur, frID(f7), sent))
		})
		t.Run("aged", func(t *testing.T) {
			s := startServer(t, dbURL, "--frame-retain-age", "300ms")
			alice := s.provision("@old.cc", "open")
			sent := frSent{}
			adv := func() map[string]any { return sent.add(t, frNew(t, "@old.cc", "@old.cc", "agent_advisory", "")) }
			st := sseOpen(t, s, alice.token, "/stream", nil)
			f1 := adv()
			frWantCount(t, alice, "@old.cc", f1, 1, true)
			first := st.next()
			st.close()
			frWaitStreams(t, alice, 0)
			frWantCount(t, alice, "@old.cc", adv(), 0, true)
			time.Sleep(600 * time.Millisecond) // the missed frame ages out of retention
			re := sseOpen(t, s, alice.token, "/stream", map[string]string{"Last-Event-ID": first.ID})
			if gap := re.next(); gap.Event != "stream-gap" || !strings.Contains(gap.Data, `"code":"resume-gap"`) {
				t.Fatalf("first event %+v, want stream-gap", gap)
			}
			live := adv()
			frWantCount(t, alice, "@old.cc", live, 1, true)
			frWantIDs(t, "after an aged-out id", frCollect(t, "aged", re, frID(live), sent))
		})
		t.Run("beyond", func(t *testing.T) {
			s := startServer(t, dbURL, "--frame-retain-count", "2")
			alice := s.provision("@ann.cc", "open")
			sent := frSent{}
			adv := func() map[string]any { return sent.add(t, frNew(t, "@ann.cc", "@ann.cc", "agent_advisory", "")) }
			st := sseOpen(t, s, alice.token, "/stream?instrument=cc-1", nil)
			f1 := adv()
			frWantCount(t, alice, "@ann.cc", f1, 1, true)
			first := st.next()
			st.close()
			frWaitStreams(t, alice, 0)
			f2, f3, f4 := adv(), adv(), adv()
			for _, fr := range []map[string]any{f2, f3, f4} {
				frWantCount(t, alice, "@ann.cc", fr, 0, true)
			}
			for _, lastID := range []string{first.ID, "nonsense", "0-1"} {
				re := sseOpen(t, s, alice.token, "/stream?instrument=cc-1", map[string]string{"Last-Event-ID": lastID})
				gap := re.next()
				if gap.Event != "stream-gap" || gap.ID != "" {
					t.Fatalf("Last-Event-ID %q: first event %+v, want stream-gap", lastID, gap)
				}
				var g map[string]any
				mustUnmarshal(t, []byte(gap.Data), &g)
				if g["code"] != "resume-gap" || g["last_event_id"] != lastID {
					t.Fatalf("stream-gap data %s", gap.Data)
				}
				live := adv()
				frWantCount(t, alice, "@ann.cc/cc-1*", live, 1, true)
				frWantIDs(t, "after gap "+lastID, frCollect(t, "after gap", re, frID(live), sent), f3, f4)
				re.close()
				frWaitStreams(t, alice, 0)
				// The live frame is now retained too: shift the window.
				f3, f4 = f4, live
			}
		})
	})
}

// frLastID opens a short-lived stream, sends itself a frame and returns the
// SSE id it was delivered under (the newest id of the handle).
func frLastID(t testing.TB, s *server, a *agent, sent frSent) string {
	t.Helper()
	st := sseOpen(t, s, a.token, "/stream?instrument=probe", nil)
	fr := sent.add(t, frNew(t, a.handle, a.handle, "agent_advisory", ""))
	frWantCount(t, a, a.handle+"/probe@x", fr, 0, true) // reaches nobody, still takes an id
	fr2 := sent.add(t, frNew(t, a.handle, a.handle, "agent_advisory", ""))
	frWantCount(t, a, a.handle+"/probe*", fr2, 1, true)
	it := st.next()
	if !strings.Contains(it.Data, frID(fr2)) {
		t.Fatalf("probe got %+v", it)
	}
	st.close()
	frWaitStreams(t, a, 0)
	return it.ID
}

// TestFrameResumeRechecksTrust: frames retained for Last-Event-ID are
// replayed only if their sender may still contact the stream's owner at
// replay time, by the trust decision POST /frames makes. A frame from a
// sender the owner has since blocked, or removed from its allowlist, is not
// replayed (not even after a stream-gap); frames from senders still allowed,
// and the owner's own, still are, in order and without a gap.
func TestFrameResumeRechecksTrust(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@alice.x", "open")
		carol := s.provision("@carol.y", "open")
		bob := s.provision("@bob.z", "open")
		dan := s.provision("@dan.w", "allowlist", "@alice.x", "@carol.y")
		sent := frSent{}
		adv := func(from *agent, to string) map[string]any {
			return sent.add(t, frNew(t, from.handle, to, "agent_advisory", ""))
		}
		admin := func(method, path string, body any) {
			t.Helper()
			if code, out := s.adminDo(method, path, body); code/100 != 2 {
				t.Fatalf("%s %s: %d %s", method, path, code, out)
			}
		}
		// lastID opens a stream of owner, has alice send it a frame (alice
		// may contact every owner here at this point) and returns its id.
		lastID := func(owner *agent) string {
			t.Helper()
			st := sseOpen(t, s, owner.token, "/stream?instrument=cc-1", nil)
			f := adv(alice, owner.handle)
			frWantCount(t, alice, owner.handle+"/*", f, 1, false)
			it := st.next()
			if !strings.Contains(it.Data, frID(f)) {
				t.Fatalf("%s got %+v", owner.handle, it)
			}
			st.close()
			frWaitStreams(t, owner, 0)
			return it.ID
		}

		t.Run("block", func(t *testing.T) {
			last := lastID(bob)
			a1 := adv(alice, "@bob.z")
			frWantCount(t, alice, "@bob.z/*", a1, 0, false)
			c1 := adv(carol, "@bob.z")
			frWantCount(t, carol, "@bob.z/*", c1, 0, false)
			own := adv(bob, "@bob.z")
			frWantCount(t, bob, "@bob.z/*", own, 0, true)
			a2 := adv(alice, "@bob.z")
			frWantCount(t, alice, "@bob.z/*", a2, 0, false)

			// bob blocks alice while his stream is down.
			admin("POST", "/agents/@bob.z/blocks", map[string]any{"handle": "@alice.x"})
			re := sseOpen(t, s, bob.token, "/stream?instrument=cc-1", map[string]string{"Last-Event-ID": last})
			end := adv(bob, "@bob.z")
			frWantCount(t, bob, "@bob.z", end, 1, true)
			frWantIDs(t, "resumed after the block", frCollect(t, "resumed", re, frID(end), sent), c1, own)
			re.close()
			frWaitStreams(t, bob, 0)

			// A resumption that cannot be clean (unknown id) replays every
			// retained frame after a stream-gap: still none of alice's.
			gapped := sseOpen(t, s, bob.token, "/stream?instrument=cc-1", map[string]string{"Last-Event-ID": "nonsense"})
			if gap := gapped.next(); gap.Event != "stream-gap" {
				t.Fatalf("first event %+v, want stream-gap", gap)
			}
			end2 := adv(bob, "@bob.z")
			frWantCount(t, bob, "@bob.z", end2, 1, true)
			frWantIDs(t, "after a gap", frCollect(t, "after a gap", gapped, frID(end2), sent), c1, own, end)
			gapped.close()
			frWaitStreams(t, bob, 0)

			// Once unblocked, alice's retained frames replay again: the
			// check is made at replay time, nothing was discarded.
			admin("DELETE", "/agents/@bob.z/blocks/@alice.x", nil)
			again := sseOpen(t, s, bob.token, "/stream?instrument=cc-1", map[string]string{"Last-Event-ID": last})
			end3 := adv(bob, "@bob.z")
			frWantCount(t, bob, "@bob.z", end3, 1, true)
			frWantIDs(t, "after the unblock", frCollect(t, "after the unblock", again, frID(end3), sent), a1, c1, own, a2, end, end2)
		})

		t.Run("allowlist", func(t *testing.T) {
			last := lastID(dan)
			a1 := adv(alice, "@dan.w")
			frWantCount(t, alice, "@dan.w/*", a1, 0, false)
			c1 := adv(carol, "@dan.w")
			frWantCount(t, carol, "@dan.w/*", c1, 0, false)

			// dan's allowlist no longer admits alice.
			admin("DELETE", "/agents/@dan.w/allowlist", map[string]any{"entries": []string{"@alice.x"}})
			re := sseOpen(t, s, dan.token, "/stream?instrument=cc-1", map[string]string{"Last-Event-ID": last})
			end := adv(dan, "@dan.w")
			frWantCount(t, dan, "@dan.w", end, 1, true)
			frWantIDs(t, "resumed after the allowlist change", frCollect(t, "resumed", re, frID(end), sent), c1)
		})
	})
}

// frRoster returns GET /stream/roster, decoded strictly.
type frRosterEntry struct {
	Instrument string `json:"instrument"`
	Session    string `json:"session"`
	Since      int64  `json:"since"`
}

func frRoster(t testing.TB, a *agent) []frRosterEntry {
	t.Helper()
	out := a.must(http.StatusOK, "GET", "/stream/roster", nil, "")
	var r struct {
		Streams []frRosterEntry `json:"streams"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || r.Streams == nil {
		t.Fatalf("roster %s: %v", out, err)
	}
	// session is omitted, not empty, when the stream has none.
	var raw struct {
		Streams []map[string]json.RawMessage `json:"streams"`
	}
	mustUnmarshal(t, out, &raw)
	for i, e := range raw.Streams {
		if s, ok := e["session"]; ok && string(s) == `""` {
			t.Fatalf("roster entry %d has an empty session: %s", i, out)
		}
	}
	return r.Streams
}

// frWaitStreams waits (bounded) until the agent's roster lists n streams:
// the server notices a closed stream asynchronously.
func frWaitStreams(t testing.TB, a *agent, n int) []frRosterEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := frRoster(t, a)
		if len(r) == n {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s roster has %d streams, want %d: %+v", a.handle, len(r), n, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFrameRoster: GET /stream/roster lists the caller's own open streams
// (instrument, session when set, since) and nobody else's; closed streams
// drop out. Keepalive comments arrive every --frame-keepalive.
func TestFrameRoster(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--frame-keepalive", "150ms")
		alice := s.provision("@alice.cc", "open")
		bob := s.provision("@bob.cc", "open")
		carol := s.provision("@carol.cc", "open")
		t0 := time.Now().Add(-time.Second).UnixMilli()
		a1 := sseOpen(t, s, alice.token, "/stream?instrument=cc-1&session=sess-a", nil)
		a2 := sseOpen(t, s, alice.token, "/stream?instrument=cc-2&filter=kind:agent_advisory", nil)
		b1 := sseOpen(t, s, bob.token, "/stream", nil)
		t1 := time.Now().Add(time.Second).UnixMilli()

		ra := frRoster(t, alice)
		if len(ra) != 2 {
			t.Fatalf("alice roster %+v, want 2 streams", ra)
		}
		got := map[string]bool{}
		for _, e := range ra {
			if e.Since < t0 || e.Since > t1 {
				t.Fatalf("roster since %d outside [%d, %d]", e.Since, t0, t1)
			}
			got[e.Instrument+"@"+e.Session] = true
		}
		if !got["cc-1@sess-a"] || !got["cc-2@"] {
			t.Fatalf("alice roster %+v, want cc-1@sess-a and cc-2", ra)
		}
		if rb := frRoster(t, bob); len(rb) != 1 || rb[0].Instrument != "default" || rb[0].Session != "" {
			t.Fatalf("bob roster %+v, want one stream of instrument default", rb)
		}
		if rc := frRoster(t, carol); len(rc) != 0 {
			t.Fatalf("carol roster %+v, want none", rc)
		}

		// Keepalive comments on an idle stream.
		for i := 0; i < 2; i++ {
			if it := a2.nextItem(); !it.IsComment || it.Comment != "keepalive" {
				t.Fatalf("idle stream item %+v, want a keepalive comment", it)
			}
		}

		a1.close()
		if r := frWaitStreams(t, alice, 1); r[0].Instrument != "cc-2" {
			t.Fatalf("after close: %+v", r)
		}
		if rb := frRoster(t, bob); len(rb) != 1 {
			t.Fatalf("bob roster %+v after alice closed a stream", rb)
		}
		b1.close()
		frWaitStreams(t, bob, 0)
	})
}

// TestFrameLimits: per-sender token bucket (--frame-rate 1 --frame-burst 2:
// the third immediate submission is 429 rate_limited with Retry-After, and
// another sender is unaffected); --frame-max-streams (429 on one stream too
// many); --frame-max-reach (429 when a submission would reach more streams,
// and nothing is delivered).
func TestFrameLimits(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		t.Run("rate", func(t *testing.T) {
			s := startServer(t, dbURL, "--frame-rate", "1", "--frame-burst", "2")
			alice := s.provision("@alice.cc", "open")
			bob := s.provision("@bob.cc", "open")
			frSubmit(t, alice, "@alice.cc", frNew(t, "@alice.cc", "@alice.cc", "agent_advisory", ""))
			frSubmit(t, alice, "@alice.cc", frNew(t, "@alice.cc", "@alice.cc", "agent_advisory", ""))
			code, h, out := frPost(t, alice, map[string]any{"scope": "@alice.cc", "frame": frNew(t, "@alice.cc", "@alice.cc", "agent_advisory", "")})
			wantError(t, "third submission", code, out, http.StatusTooManyRequests, "rate_limited")
			if ra := h.Get("Retry-After"); ra != "1" {
				t.Fatalf("Retry-After %q, want 1", ra)
			}
			// Invalid submissions are counted too: the limit is on the sender.
			code, _, out = frPost(t, alice, map[string]any{"scope": "@alice.cc", "frame": "x"})
			wantError(t, "fourth submission", code, out, http.StatusTooManyRequests, "rate_limited")
			frSubmit(t, bob, "@bob.cc", frNew(t, "@bob.cc", "@bob.cc", "agent_advisory", ""))
			// The bucket refills at 1 per second.
			time.Sleep(1100 * time.Millisecond)
			frSubmit(t, alice, "@alice.cc", frNew(t, "@alice.cc", "@alice.cc", "agent_advisory", ""))
		})
		t.Run("streams-and-reach", func(t *testing.T) {
			// --frame-max-reach may not be below --frame-max-streams (a 429
			// would reveal another agent's stream count), so the reach cap is
			// exercised by an org scope over several agents' streams.
			s := startServer(t, dbURL, "--frame-max-streams", "3", "--frame-max-reach", "3")
			alice := s.provision("@amy.cc", "open")
			bob := s.provision("@ben.cc", "open")
			amy2 := s.provision("@amy.ide", "open")
			st := []*sseClient{
				sseOpen(t, s, alice.token, "/stream?instrument=cc-1", nil),
				sseOpen(t, s, alice.token, "/stream?instrument=cc-2", nil),
				sseOpen(t, s, alice.token, "/stream?instrument=cx-1", nil),
			}
			c, code, out := sseDial(t, s, alice.token, "/stream?instrument=cc-4", nil)
			if c != nil {
				t.Fatalf("fourth stream opened")
			}
			wantError(t, "fourth stream", code, out, http.StatusTooManyRequests, "rate_limited")
			sseOpen(t, s, bob.token, "/stream", nil) // per agent
			ide := sseOpen(t, s, amy2.token, "/stream?instrument=ide", nil)

			sent := frSent{}
			over := sent.add(t, frNew(t, "@amy.cc", "@amy.cc", "agent_advisory", ""))
			got, _, out := frPost(t, alice, map[string]any{"scope": "org:amy/members/*", "frame": over})
			wantError(t, "org reach 4 > 3", got, out, http.StatusTooManyRequests, "rate_limited")
			ide.quiet(frQuiet)
			ok := sent.add(t, frNew(t, "@amy.cc", "@amy.cc", "agent_advisory", ""))
			frWantCount(t, alice, "@amy.cc/cc-*", ok, 2, true)
			frWantIDs(t, "cc-1", frCollect(t, "cc-1", st[0], frID(ok), sent))
			frWantIDs(t, "cc-2", frCollect(t, "cc-2", st[1], frID(ok), sent))
			st[2].quiet(frQuiet)

			// Closing a stream frees a slot.
			st[2].close()
			frWaitStreams(t, alice, 2)
			sseOpen(t, s, alice.token, "/stream?instrument=cc-4", nil)
		})
	})
}

// TestFrameFilterErrors: a bad filter, instrument or session refuses the
// stream at open with 400 and the draft's code; nothing is registered.
func TestFrameFilterErrors(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@alice.cc", "open")
		cases := []struct {
			query, code, field string
		}{
			{"filter=colour:blue", "filter-axis-unknown", "filter"},
			{"filter=" + url.QueryEscape("kind:agent_advisory,,"), "filter-axis-unknown", "filter"},
			{"filter=kinds", "filter-axis-unknown", "filter"},
			{"filter=kind", "filter-value-invalid", "filter"},
			{"filter=kind:agent_gossip", "filter-value-invalid", "filter"},
			{"filter=" + url.QueryEscape("kind:agent_advisory, sender:@bob.cc"), "filter-axis-unknown", "filter"},
			{"filter=" + url.QueryEscape("sender:~bob"), "filter-value-invalid", "filter"},
			{"filter=" + url.QueryEscape("sender:bob.cc"), "filter-value-invalid", "filter"},
			{"filter=content_type:", "filter-value-invalid", "filter"},
			{"filter=" + url.QueryEscape("org:Acme Corp"), "filter-value-invalid", "filter"},
			{"filter=" + url.QueryEscape("tool:a/b"), "filter-value-invalid", "filter"},
			{"instrument=" + url.QueryEscape("cc/1"), "field-invalid", "instrument"},
			{"instrument=" + strings.Repeat("x", 129), "field-invalid", "instrument"},
			{"session=" + url.QueryEscape("a@b"), "field-invalid", "session"},
		}
		for _, c := range cases {
			st, code, out := sseDial(t, s, alice.token, "/stream?"+c.query, nil)
			if st != nil {
				t.Fatalf("GET /stream?%s opened", c.query)
			}
			frWantError(t, "GET /stream?"+c.query, code, out, http.StatusBadRequest, c.code, c.field)
		}
		if r := frRoster(t, alice); len(r) != 0 {
			t.Fatalf("refused opens left streams: %+v", r)
		}
		// Forward-compatible axes parse: tool and org open fine.
		sseOpen(t, s, alice.token, "/stream?filter="+url.QueryEscape("tool:cc,org:acme,kind:agent_advisory,content_type:text/x;a=b"), nil)
		// Unauthenticated: 401.
		st, code, out := sseDial(t, s, "nope", "/stream", nil)
		if st != nil {
			t.Fatal("opened without a valid token")
		}
		wantError(t, "GET /stream with a bad token", code, out, http.StatusUnauthorized, "unauthorized")
	})
}

// frWantEnded waits (bounded) for the server to end a stream.
func frWantEnded(t testing.TB, name string, c *sseClient) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case it, ok := <-c.items:
			if !ok {
				return
			}
			if !it.IsComment {
				t.Fatalf("%s: unexpected event while waiting for the end: %+v", name, it)
			}
		case <-deadline:
			t.Fatalf("%s: stream still open after 10s", name)
		}
	}
}

// TestFrameStreamCredentials: rotating or revoking an agent's token, or
// deleting the agent, ends its open streams at once (as WebSocket closes
// with 4001), so a dead credential receives no further frame; other agents'
// streams are untouched.
func TestFrameStreamCredentials(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		keep := s.provision("@keep.cc", "open")
		kst := sseOpen(t, s, keep.token, "/stream", nil)
		for i, act := range []struct{ method, path string }{
			{"DELETE", "/token"}, // revoke
			{"POST", "/token"},   // rotate
			{"DELETE", ""},       // delete the agent
		} {
			a := s.provision(fmt.Sprintf("@gone%d.cc", i), "open")
			st1 := sseOpen(t, s, a.token, "/stream?instrument=cc-1", nil)
			st2 := sseOpen(t, s, a.token, "/stream?instrument=cc-2", nil)
			if code, out := s.adminDo(act.method, "/agents/"+a.handle+act.path, nil); code != http.StatusOK {
				t.Fatalf("%s %s: %d %s", act.method, act.path, code, out)
			}
			frWantEnded(t, a.handle+" cc-1", st1)
			frWantEnded(t, a.handle+" cc-2", st2)
			c, code, out := sseDial(t, s, a.token, "/stream", nil)
			if c != nil {
				t.Fatalf("%s: stream reopened with a dead token", a.handle)
			}
			wantError(t, "reopen with a dead token", code, out, http.StatusUnauthorized, "unauthorized")
		}
		sent := frSent{}
		end := sent.add(t, frNew(t, "@keep.cc", "@keep.cc", "agent_advisory", ""))
		frWantCount(t, keep, "@keep.cc", end, 1, true)
		frWantIDs(t, "keep", frCollect(t, "keep", kst, frID(end), sent))
	})
}

// TestFrameBindingMomentHatchesDefault: an agent_binding_moment frame whose
// question has no hatches object is accepted (both hatches default to true,
// draft 6.10 and the binding-moment draft 5.8), on POST /frames and inside a
// session message, and delivered exactly as sent.
func TestFrameBindingMomentHatchesDefault(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@alice.cc", "open")
		bob := s.provision("@bob.cc", "open")
		st := sseOpen(t, s, alice.token, "/stream?instrument=cc-1", nil)

		bm := func(recipient string) map[string]any {
			fr := frNew(t, "@alice.cc", recipient, "agent_advisory", "")
			fr["kind"] = "agent_binding_moment"
			env := testEnvelope("frame")
			delete(env["question"].(map[string]any), "hatches")
			fr["payload"] = env
			return fr
		}
		sent := frSent{}
		f := sent.add(t, bm("@alice.cc"))
		frWantCount(t, alice, "@alice.cc", f, 1, true)
		end := sent.add(t, frNew(t, "@alice.cc", "@alice.cc", "agent_advisory", ""))
		frWantCount(t, alice, "@alice.cc", end, 1, true)
		frWantIDs(t, "cc-1", frCollect(t, "cc-1", st, frID(end), sent), f)

		sid := alice.createSession(map[string]any{"invite": []string{bob.handle}, "topic": "hatches"})
		bob.join(sid)
		alice.send(sid, []any{map[string]any{"type": "data", "data": bm(bob.handle)}})
	})
}
