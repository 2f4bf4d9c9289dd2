package chorus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/aspd/aspd/protocol"
)

// fakeApp is the application as the worker sees it: the door (App) and
// nothing behind it but what a test sets.
type fakeApp struct {
	wake    chan struct{}
	attempt Attempt

	mu       sync.Mutex
	due      []Delivery
	steps    []string
	recorded chan Outcome
	released chan Delivery
}

func newFakeApp(target string) *fakeApp {
	return &fakeApp{wake: make(chan struct{}, 1), recorded: make(chan Outcome, 8), released: make(chan Delivery, 8),
		attempt: Attempt{Target: Target{URL: target, Secret: "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
			Event: []byte(`{"type":"session.message","session_id":"sess_1","event_id":"evt_2","sequence":2,"created_at":1,` +
				`"payload":{"id":"msg_2","session_id":"sess_1","sender":"@a.x","sequence":2,"content":"hello","created_at":1}}`),
			Session:  &protocol.Session{ID: "sess_1", Topic: "weather", State: "active"},
			Callback: "http://aspd.test/chorus/callback/tok", MCPURL: "http://aspd.test/mcp", MCPToken: "aspm_x"}}
}

func (f *fakeApp) step(s string) {
	f.mu.Lock()
	f.steps = append(f.steps, s)
	f.mu.Unlock()
}

func (f *fakeApp) ChorusWake() <-chan struct{}            { return f.wake }
func (f *fakeApp) ReloadChorusHandles(context.Context)    {}
func (f *fakeApp) QueueChorus(context.Context, int)       { f.step("queue") }
func (f *fakeApp) PruneChorus(context.Context, time.Time) {}
func (f *fakeApp) ChorusSignals() Signals                 { return Signals{Status: 3} }
func (f *fakeApp) ChorusBacklog(context.Context) (int64, int64, error) {
	return 0, 0, nil
}

func (f *fakeApp) ClaimChorus(_ context.Context, lease string, _ time.Time, limit int) []Delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.due[:min(limit, len(f.due))]
	f.due = f.due[len(out):]
	for i := range out {
		out[i].Lease = lease
		f.steps = append(f.steps, "claim "+out[i].ID)
	}
	return out
}

func (f *fakeApp) PrepareChorus(_ context.Context, d Delivery) (Attempt, error) {
	f.step("prepare " + d.ID)
	return f.attempt, nil
}

func (f *fakeApp) RecordChorus(_ context.Context, d Delivery, o Outcome, _ time.Duration) {
	f.step("record " + d.ID)
	f.recorded <- o
}

func (f *fakeApp) ReleaseChorus(_ context.Context, d Delivery) {
	f.step("release " + d.ID)
	f.released <- d
}

func (f *fakeApp) queue(d Delivery) {
	f.mu.Lock()
	f.due = append(f.due, d)
	f.mu.Unlock()
	f.wake <- struct{}{}
}

func testWorker(t *testing.T, f *fakeApp) *Worker {
	cfg := DefaultConfig()
	cfg.AllowLoopback, cfg.Timeout, cfg.PollInterval = true, 20*time.Second, time.Hour
	return New(cfg, f, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestWorkerThroughTheDoor: a delivery walks claim, prepare, send, record,
// each step one call into App, and what is sent is the signed payload of
// the prepared attempt.
func TestWorkerThroughTheDoor(t *testing.T) {
	got := make(chan *http.Request, 1)
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		got <- r
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	f := newFakeApp(srv.URL + "/in/sk_1")
	w := testWorker(t, f)
	w.Start()
	defer w.Close()
	f.queue(Delivery{ID: "msg_1", Handle: "@b.x", SessionID: "sess_1", Sequence: 2})

	r := <-got
	if o := <-f.recorded; o.State != protocol.ChorusDelivered || o.Status != http.StatusNoContent {
		t.Fatalf("recorded %+v", o)
	}
	wh, _ := standardwebhooks.NewWebhook(f.attempt.Target.Secret)
	if err := wh.Verify(body, r.Header); err != nil || r.Header.Get("webhook-id") != "msg_1" || r.URL.Path != "/in/sk_1" {
		t.Fatalf("request %s %v: %v", r.URL.Path, r.Header, err)
	}
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Channel.ID != "sess_1" || p.Channel.Name != "weather" || !strings.Contains(p.Channel.Context, "You are @b.x") || p.Message.Content != "hello" ||
		p.Callback != f.attempt.Callback || p.MCP.URL != f.attempt.MCPURL || p.MCP.Headers["Authorization"] != "Bearer aspm_x" {
		t.Fatalf("payload %s", body)
	}
	f.mu.Lock()
	steps := strings.Join(f.steps, ", ")
	f.mu.Unlock()
	if !strings.Contains(steps, "queue, claim msg_1, prepare msg_1, record msg_1") {
		t.Fatalf("steps %s", steps)
	}
}

// TestWorkerRevokedAndShutdown: closing the attempt's Revoked aborts the
// request in flight and records nothing; an attempt Close cuts short
// releases its lease.
func TestWorkerRevokedAndShutdown(t *testing.T) {
	arrived := make(chan struct{}, 2)
	gone := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices the client going away only past the body
		arrived <- struct{}{}
		<-r.Context().Done() // never answers: only the worker ends it
		gone <- struct{}{}
	}))
	defer srv.Close()
	f := newFakeApp(srv.URL)
	revoked := make(chan struct{})
	f.attempt.Revoked = revoked
	w := testWorker(t, f)
	w.Start()

	f.queue(Delivery{ID: "msg_1", Handle: "@b.x", SessionID: "sess_1", Sequence: 2})
	<-arrived
	close(revoked)
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("closing Revoked did not abort the attempt in flight")
	}
	f.attempt.Revoked = nil // the next attempt watches nothing
	f.queue(Delivery{ID: "msg_2", Handle: "@b.x", SessionID: "sess_1", Sequence: 3})
	<-arrived
	start := time.Now()
	w.Close()
	if d := <-f.released; d.ID != "msg_2" || !strings.HasPrefix(d.Lease, w.node+"/") {
		t.Fatalf("released %+v", d)
	}
	if since := time.Since(start); since < closeGrace || since > closeGrace+5*time.Second {
		t.Fatalf("Close took %v", since)
	}
	select {
	case o := <-f.recorded:
		t.Fatalf("an aborted attempt was recorded: %+v", o)
	default:
	}
	if len(f.released) != 0 {
		t.Fatal("the revoked attempt released its lease: a rotation already re-queued it")
	}
}

// TestWorkerSignalsMetric: the agents' signals are read from App at scrape
// time; a type never received has no series.
func TestWorkerSignalsMetric(t *testing.T) {
	w := testWorker(t, newFakeApp("http://127.0.0.1:9/"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, mf := range mfs {
		if mf.GetName() != "aspd_chorus_agent_signals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			series = append(series, fmt.Sprintf("%s=%g", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue()))
		}
	}
	if len(series) != 1 || series[0] != "status=3" {
		t.Fatalf("signal series %v", series)
	}
}
