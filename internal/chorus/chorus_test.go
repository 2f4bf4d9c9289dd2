package chorus

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
)

func TestRenderContent(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{`"plain text"`, "plain text"},
		{`[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, "a\n\nb"},
		{`[{"type":"image","url":"https://x/i.png"}]`, "[image: https://x/i.png]"},
		{`[{"type":"image","name":"chart","data_uri":"data:image/png;base64,AA"}]`, "[image: chart]"},
		{`[{"type":"file","url":"https://x/r.pdf","name":"report","mime_type":"application/pdf"}]`, "[file: report (application/pdf) https://x/r.pdf]"},
		{`[{"type":"data","data":{ "k" : [1, 2] }}]`, `[data: {"k":[1,2]}]`},
	} {
		if got := RenderContent(json.RawMessage(c.raw)); got != c.want {
			t.Errorf("RenderContent(%s) = %q, want %q", c.raw, got, c.want)
		}
	}
}

func TestRenderEvents(t *testing.T) {
	inv := `{"type":"session.invited","session_id":"sess_1","event_id":"evt_1","sequence":1,"created_at":1,
		"payload":{"invitee":"@b.x","by":"@a.x","topic":"weather","initial_message":{"id":"msg_9","session_id":"sess_1","sender":"@a.x","sequence":2,"content":"hi","created_at":1}}}`
	m, err := render([]byte(inv), "@b.x")
	if err != nil {
		t.Fatal(err)
	}
	if m.Sender != "@a.x" || m.Type != "session.invited" || m.ID != "evt_1" || !strings.Contains(m.Content, "invited you (@b.x)") ||
		!strings.Contains(m.Content, "join_session") || !strings.Contains(m.Content, "hi") || !strings.Contains(m.Content, `"weather"`) {
		t.Fatalf("invitation rendered as %+v", m)
	}
	msg := `{"type":"session.message","session_id":"sess_1","event_id":"evt_2","sequence":2,"created_at":1,
		"payload":{"id":"msg_2","session_id":"sess_1","sender":"@a.x","sequence":2,"content":[{"type":"text","text":"see"},{"type":"data","data":{"n":1}}],"created_at":1}}`
	m, err = render([]byte(msg), "@b.x")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "msg_2" || m.Sender != "@a.x" || m.Content != "see\n\n[data: {\"n\":1}]" || !strings.Contains(string(m.Event), `"data":{"n":1}`) {
		t.Fatalf("message rendered as %+v", m)
	}
	if !SelfCaused([]byte(msg), "@a.x") || SelfCaused([]byte(msg), "@b.x") || SelfCaused([]byte(inv), "@b.x") {
		t.Fatalf("SelfCaused")
	}
	left := `{"type":"session.left","session_id":"sess_1","event_id":"evt_3","sequence":3,"created_at":1,"payload":{"agent":"@c.x","reason":"grace_expired"}}`
	if m, _ := render([]byte(left), "@b.x"); m.Content != "@c.x left the session (grace expired)." || m.Sender != "@c.x" {
		t.Fatalf("left rendered as %+v", m)
	}
	ended := `{"type":"session.ended","session_id":"sess_1","event_id":"evt_4","sequence":4,"created_at":1,"payload":{}}`
	if m, _ := render([]byte(ended), "@b.x"); m.Sender != "aspd" || !strings.Contains(m.Content, "every participant left") {
		t.Fatalf("ended rendered as %+v", m)
	}
}

func TestScheduleAndRetry(t *testing.T) {
	s, err := ParseSchedule("5s, 5m,30m")
	if err != nil || len(s) != 3 || s[1] != 5*time.Minute {
		t.Fatalf("ParseSchedule: %v %v", s, err)
	}
	for _, bad := range []string{"5x", "-1s", "0s"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q) accepted", bad)
		}
	}
	w := &Worker{cfg: Config{Schedule: []time.Duration{10 * time.Second, time.Hour}}}
	before := time.Now()
	o := w.retry(Delivery{Attempts: 0}, 500, "HTTP 500", 0)
	next := time.UnixMilli(o.NextAttempt)
	if o.State != protocol.ChorusPending || next.Before(before.Add(8*time.Second)) || next.After(time.Now().Add(12*time.Second)) {
		t.Fatalf("first retry %+v (in %v)", o, next.Sub(before))
	}
	o = w.retry(Delivery{Attempts: 1}, 429, "HTTP 429", 3*time.Second)
	if next := time.UnixMilli(o.NextAttempt); next.After(time.Now().Add(4 * time.Second)) {
		t.Fatalf("Retry-After not honoured: %+v", o)
	}
	if o = w.retry(Delivery{Attempts: 2}, 500, "HTTP 500", 0); o.State != protocol.ChorusFailed || !strings.Contains(o.Error, "exhausted") {
		t.Fatalf("spent schedule: %+v", o)
	}
	if retryAfter("7") != 7*time.Second || retryAfter("soon") != 0 || retryAfter("") != 0 {
		t.Fatalf("retryAfter")
	}
	if d := retryAfter(time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)); d < 50*time.Second || d > time.Minute {
		t.Fatalf("retryAfter of a date: %v", d)
	}
}

func TestDeliveryIDStable(t *testing.T) {
	a, b := DeliveryID("@b.x", "sess_1", 4), DeliveryID("@b.x", "sess_1", 4)
	if a != b || !strings.HasPrefix(a, "msg_") || a == DeliveryID("@b.x", "sess_1", 5) || a == DeliveryID("@c.x", "sess_1", 4) {
		t.Fatalf("DeliveryID: %s %s", a, b)
	}
}

// TestClientGuard: internal addresses are refused at dial time, loopback
// only with AllowLoopback, and redirects are not followed.
func TestClientGuard(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Timeout, cfg.ConnectTimeout = 2*time.Second, time.Second
	post := func(c *http.Client, url string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader("{}"))
		return c.Do(req)
	}
	guarded := newClient(cfg)
	for _, u := range []string{srv.URL, "http://10.1.2.3/", "http://169.254.169.254/latest/meta-data", "http://192.168.0.1:8080/", "http://[::1]:9/"} {
		resp, err := post(guarded, u)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s was reached without AllowLoopback", u)
		}
		if !refused(err) {
			t.Fatalf("%s: %v, want a refusal by the guard", u, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the server was hit %d times", hits.Load())
	}
	cfg.AllowLoopback = true
	loop := newClient(cfg)
	resp, err := post(loop, srv.URL)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("loopback with AllowLoopback: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := post(loop, "http://169.254.169.254/"); err == nil || !refused(err) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatalf("metadata address with AllowLoopback: %v", err)
	}
	resp, err = post(loop, srv.URL+"/redirect")
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("redirect: %v %v", resp, err)
	}
	resp.Body.Close()
	if hits.Load() != 2 {
		t.Fatalf("the redirect was followed (hits %d)", hits.Load())
	}
}
