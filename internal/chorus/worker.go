// Package chorus delivers ASP session events to webhook agents by the
// Chorus channel protocol (docs/chorus.md): a durable outbox in the store,
// worked by a Worker that renders each event as a Chorus payload, signs it
// by Standard Webhooks, POSTs it through an SSRF-guarded client and retries
// on a backoff schedule. The worker reaches the rest of aspd through one
// door, the App interface (door.go), which *app.App satisfies: the rules
// (what is queued for whom, registration, callbacks, the credentials a
// delivery hands out, presence) and the store are the application
// layer's (internal/app, chorus.go and chorus_outbox.go).
package chorus

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/aspd/aspd/protocol"
)

// Config configures delivery.
type Config struct {
	// AllowLoopback lets deliveries reach 127.0.0.0/8 and ::1 (local
	// development and tests); every other internal address stays refused.
	AllowLoopback bool
	// Schedule is the delay before each retry; a delivery that fails once
	// more after the last one is dead-lettered (state failed).
	Schedule []time.Duration
	// FailingAfter: an endpoint whose deliveries have failed for this long
	// without a success is marked failing, and its agent counts as offline.
	FailingAfter     time.Duration
	Timeout          time.Duration // one attempt, connection to response headers
	ConnectTimeout   time.Duration // TCP connect and TLS handshake
	MaxResponseBytes int64         // response body read (and discarded) at most
	PollInterval     time.Duration // outbox poll when nothing wakes the worker
	BatchSize        int           // candidates examined and deliveries claimed per round
	Concurrency      int           // attempts in flight on this node
	Retention        time.Duration // finished delivery records kept this long
	ServiceName      string        // channel.service
}

// DefaultSchedule is Svix's: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// DefaultConfig is what aspd runs with unless configured otherwise.
func DefaultConfig() Config {
	return Config{Schedule: DefaultSchedule, FailingAfter: 10 * time.Minute, Timeout: 15 * time.Second, ConnectTimeout: 5 * time.Second,
		MaxResponseBytes: 64 << 10, PollInterval: time.Second, BatchSize: 256, Concurrency: 32, Retention: 7 * 24 * time.Hour,
		ServiceName: "aspd (Agent Session Protocol)"}
}

// ParseSchedule reads a comma-separated list of durations ("5s,5m,30m").
func ParseSchedule(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range bytes.Split([]byte(s), []byte(",")) {
		f = bytes.TrimSpace(f)
		if len(f) == 0 {
			continue
		}
		d, err := time.ParseDuration(string(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("retry schedule: %q is not a positive duration", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// Worker works the outbox of one node.
type Worker struct {
	cfg    Config
	app    App
	log    *slog.Logger
	client *http.Client
	node   string // this node's name, the prefix of its leases
	m      *metrics
	claims uint64 // claims made (the loop's only): makes lease names unique

	kick chan struct{}
	sem  chan struct{}

	// abort cuts short every attempt in flight: Close, once its grace
	// period is over.
	aborted context.Context
	abort   context.CancelFunc

	stop chan struct{}
	wg   sync.WaitGroup
}

// New builds the worker over the application a; Start runs it.
func New(cfg Config, a App, log *slog.Logger) *Worker {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	w := &Worker{cfg: cfg, app: a, log: log, client: newClient(cfg), node: hex.EncodeToString(b),
		kick: make(chan struct{}, 1), sem: make(chan struct{}, max(cfg.Concurrency, 1)), stop: make(chan struct{})}
	w.aborted, w.abort = context.WithCancel(context.Background())
	w.m = newMetrics(w)
	return w
}

// Start runs the worker in the background.
func (w *Worker) Start() {
	w.wg.Add(1)
	go w.loop()
}

// Close stops the worker. Attempts in flight get a few seconds to finish
// and be recorded; the rest are cut short and their leases released, so
// the next start (or another node) retries them at once.
func (w *Worker) Close() {
	close(w.stop)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeGrace):
		w.abort()
		<-done
	}
	w.abort() // releases the context
}

// closeGrace is how long Close waits for attempts in flight.
const closeGrace = 3 * time.Second

func (w *Worker) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// loop runs rounds: queue what became eligible, claim what is due and
// start it, and now and then prune. A round starts when a commit wakes the
// worker, when an attempt finishes (it may free a session's next event),
// and at every poll.
func (w *Worker) loop() {
	defer w.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	lastPrune, lastRound := time.Time{}, time.Time{}
	for {
		select {
		case <-w.stop:
			return
		case <-w.app.ChorusWake():
			// Commits wake the worker; under a stream of them, rounds are
			// spaced so that its reads stay a bounded cost. A finished
			// attempt (kick) is not delayed: it may free a session's next
			// event.
			if gap := minRoundGap - time.Since(lastRound); gap > 0 {
				select {
				case <-w.stop:
					return
				case <-time.After(gap):
				}
			}
		case <-w.kick:
		case <-t.C:
			// The poll also refreshes which agents have endpoints (the
			// set that decides which commits wake this worker), for
			// registrations made through other nodes.
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			w.app.ReloadChorusHandles(rctx)
			rcancel()
		}
		lastRound = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		w.app.QueueChorus(ctx, w.cfg.BatchSize)
		full := w.dispatch(ctx)
		if time.Since(lastPrune) > time.Minute {
			lastPrune = time.Now()
			w.app.PruneChorus(ctx, time.Now().Add(-w.cfg.Retention))
		}
		cancel()
		if full {
			w.poke() // more may be due right away
		}
		t.Reset(w.cfg.PollInterval)
	}
}

// minRoundGap bounds the rounds that commits cause to 50 a second,
// however many commits wake the worker.
const minRoundGap = 20 * time.Millisecond

// DeliveryID is the stable webhook-id of an event's delivery to an agent:
// the same for every attempt and every redelivery.
func DeliveryID(handle, sessionID string, seq int64) string {
	h := sha256.Sum256([]byte(handle + "\x00" + sessionID + "\x00" + strconv.FormatInt(seq, 10)))
	return "msg_" + hex.EncodeToString(h[:16])
}

// dispatch claims due deliveries, as many as there are free attempt slots,
// and starts them. It reports whether the claim was full (more may be due).
func (w *Worker) dispatch(ctx context.Context) bool {
	free := cap(w.sem) - len(w.sem)
	if free <= 0 {
		return false
	}
	limit := min(free, w.cfg.BatchSize)
	w.claims++
	ds := w.app.ClaimChorus(ctx, w.node+"/"+strconv.FormatUint(w.claims, 10), time.Now().Add(w.cfg.Timeout+30*time.Second), limit)
	for _, d := range ds {
		w.sem <- struct{}{}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer func() { <-w.sem }()
			w.attempt(d)
			w.poke() // the session's next event may be ready
		}()
	}
	return len(ds) == limit
}

// attempt makes one delivery attempt and records its outcome: prepare
// (the application), send (here), record (the application).
func (w *Worker) attempt(d Delivery) {
	ctx, cancel := context.WithCancel(w.aborted)
	defer cancel()
	var out Outcome
	a, err := w.app.PrepareChorus(ctx, d)
	switch {
	case errors.Is(err, ErrNoEndpoint):
		return // removed: nothing to attempt, nothing to record
	case errors.Is(err, ErrGone):
		out = Outcome{State: protocol.ChorusFailed, Error: err.Error()}
	case err != nil:
		out = w.retry(d, 0, err.Error(), 0)
	default:
		go func() {
			select {
			case <-a.Revoked:
				cancel() // rotated or removed: the old URL gets nothing more
			case <-ctx.Done():
			}
		}()
		out = w.send(ctx, d, a)
	}
	if ctx.Err() != nil {
		// Aborted by a rotation or removal, whose transaction already made
		// the row due again for the new endpoint, or by shutdown: nothing
		// to record, but a shutdown releases the lease.
		select {
		case <-w.stop:
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			w.app.ReleaseChorus(rctx, d)
		default:
		}
		return
	}
	w.m.outcome(out.State)
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	w.app.RecordChorus(rctx, d, out, w.cfg.FailingAfter)
}

// send renders, signs and POSTs one attempt of d.
func (w *Worker) send(ctx context.Context, d Delivery, a Attempt) Outcome {
	body, err := w.payload(d, a)
	if err != nil {
		return w.retry(d, 0, err.Error(), 0)
	}
	wh, err := standardwebhooks.NewWebhook(a.Target.Secret)
	if err != nil {
		return Outcome{State: protocol.ChorusFailed, Error: "signing secret unusable"}
	}
	now := time.Now()
	sig, err := wh.Sign(d.ID, now, body)
	if err != nil {
		return Outcome{State: protocol.ChorusFailed, Error: "signing failed"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.Target.URL, bytes.NewReader(body))
	if err != nil {
		return Outcome{State: protocol.ChorusFailed, Error: "the connection string is not a usable URL"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "aspd-chorus/1")
	req.Header.Set("webhook-id", d.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	w.m.attempts.Inc()
	resp, err := w.client.Do(req)
	w.m.latency.Observe(time.Since(now).Seconds())
	if err != nil {
		// A *url.Error quotes the URL, which holds the connection string's
		// secret: only its cause is kept.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if refused(err) {
			return Outcome{State: protocol.ChorusFailed, Error: "refused by the SSRF guard: " + err.Error()}
		}
		return w.retry(d, 0, "request failed: "+err.Error(), 0)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, w.cfg.MaxResponseBytes))
	resp.Body.Close()
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return Outcome{State: protocol.ChorusDelivered, Status: code}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return w.retry(d, code, "HTTP "+strconv.Itoa(code), retryAfter(resp.Header.Get("Retry-After")))
	case code >= 300 && code < 400:
		return Outcome{State: protocol.ChorusFailed, Status: code, Error: "HTTP " + strconv.Itoa(code) + ": redirects are not followed"}
	default:
		return Outcome{State: protocol.ChorusFailed, Status: code, Error: "HTTP " + strconv.Itoa(code) + ": permanent failure"}
	}
}

// retry schedules the next attempt, or dead-letters the delivery once the
// schedule is spent. The delay is the schedule's, with ±20% jitter so
// endpoints that failed together do not retry together, or the endpoint's
// Retry-After (capped at a day) when it gave one.
func (w *Worker) retry(d Delivery, status int, why string, after time.Duration) Outcome {
	if d.Attempts >= len(w.cfg.Schedule) {
		return Outcome{State: protocol.ChorusFailed, Status: status, Error: why + " (retries exhausted)"}
	}
	delay := w.cfg.Schedule[d.Attempts]
	delay = time.Duration(float64(delay) * (0.8 + 0.4*mrand.Float64()))
	if after > 0 {
		delay = min(after, 24*time.Hour)
	}
	return Outcome{State: protocol.ChorusPending, Status: status, Error: why, NextAttempt: time.Now().Add(delay).UnixMilli()}
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// payload renders one attempt of d: the session as channel, the event as
// message, the attempt's callback URL and the MCP configuration.
func (w *Worker) payload(d Delivery, a Attempt) ([]byte, error) {
	msg, err := render(a.Event, d.Handle)
	if err != nil {
		return nil, err
	}
	ch := Channel{ID: d.SessionID, Service: w.cfg.ServiceName}
	if s := a.Session; s != nil {
		ch.Name = s.Topic
		ch.Context = channelContext(s, d.Handle)
	}
	return json.Marshal(Payload{Channel: ch, Message: msg, Callback: a.Callback,
		MCP: &MCPInfo{URL: a.MCPURL, Headers: map[string]string{"Authorization": "Bearer " + a.MCPToken}}})
}
