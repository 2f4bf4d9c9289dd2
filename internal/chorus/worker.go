// Package chorus delivers ASP session events to webhook agents by the
// Chorus channel protocol (docs/chorus.md): a durable outbox in the store,
// worked by a Worker that renders each event as a Chorus payload, signs it
// by Standard Webhooks, POSTs it through an SSRF-guarded client and retries
// on a backoff schedule. Registration, callbacks and the credentials a
// delivery hands out are rules of the application layer (internal/app,
// chorus.go); this package calls them.
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

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/store"
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
	app    *app.App
	st     *store.Store
	log    *slog.Logger
	client *http.Client
	node   string // this node's name, the prefix of its leases
	m      *metrics
	claims uint64 // claims made (the loop's only): makes lease names unique

	kick chan struct{}
	sem  chan struct{}

	mu       sync.Mutex
	inflight map[string]map[uint64]context.CancelFunc // handle -> attempt -> cancel
	next     uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

// New builds the worker; Start runs it.
func New(cfg Config, a *app.App, log *slog.Logger) *Worker {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	w := &Worker{cfg: cfg, app: a, st: a.Store(), log: log, client: newClient(cfg), node: hex.EncodeToString(b),
		kick: make(chan struct{}, 1), sem: make(chan struct{}, max(cfg.Concurrency, 1)),
		inflight: map[string]map[uint64]context.CancelFunc{}, stop: make(chan struct{})}
	w.m = newMetrics(w)
	a.SetChorusHooks(w.cancel, w.m.signal)
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
		return
	case <-time.After(closeGrace):
	}
	w.mu.Lock()
	for _, m := range w.inflight {
		for _, cancel := range m {
			cancel()
		}
	}
	w.mu.Unlock()
	<-done
}

// closeGrace is how long Close waits for attempts in flight.
const closeGrace = 3 * time.Second

// cancel aborts this node's attempts to handle's endpoint.
func (w *Worker) cancel(handle string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.inflight[handle] {
		c()
	}
}

func (w *Worker) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

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
			if err := w.app.ReloadChorusHandles(rctx); err != nil {
				app.LogFailure(w.log, "chorus: reading the registered agents failed", err)
			}
			rcancel()
		}
		lastRound = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := w.enqueue(ctx); err != nil {
			app.LogFailure(w.log, "chorus: enqueue failed", err)
		}
		full, err := w.dispatch(ctx)
		if err != nil {
			app.LogFailure(w.log, "chorus: claiming deliveries failed", err)
		}
		if time.Since(lastPrune) > time.Minute {
			lastPrune = time.Now()
			if err := w.st.PruneChorus(ctx, time.Now().Add(-w.cfg.Retention).UnixMilli()); err != nil {
				app.LogFailure(w.log, "chorus: prune failed", err)
			}
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

// enqueue examines the (agent, session) pairs with events past their
// Chorus cursor and no delivery pending, and queues each one's next
// eligible event: the walk of WebSocket delivery (visibility.Walk: the
// agent's view, the pass restarted at 1 by the agent's own join so that the
// transcript reaches a joiner), minus the events the agent caused
// itself (SelfCaused). One read for the batch of candidates, one write
// transaction for the outcome.
func (w *Worker) enqueue(ctx context.Context) error {
	cands, err := w.st.ChorusCandidates(ctx, w.cfg.BatchSize)
	if err != nil || len(cands) == 0 {
		return err
	}
	out := make([]store.ChorusEnqueue, 0, len(cands))
	for _, c := range cands {
		e, err := w.examine(ctx, c)
		if err != nil {
			return err
		}
		out = append(out, e)
	}
	return w.st.ChorusEnqueueBatch(ctx, out)
}

func (w *Worker) examine(ctx context.Context, c store.ChorusCandidate) (store.ChorusEnqueue, error) {
	h := c.View.Handle
	res := store.ChorusEnqueue{Handle: h, SessionID: c.SessionID, Cursor: c.Cursor, ResetAt: c.ResetAt}
	walk := visibility.NewWalk(c.View, c.Cursor, c.ResetAt)
	var seen map[int64]bool // rows that exist, in a pass restarted by a join
	for res.Cursor < c.LastSeq {
		if res.Cursor < walk.ResetAt && seen == nil {
			var err error
			if seen, err = w.st.ChorusDeliveredSeqs(ctx, h, c.SessionID, 0, walk.ResetAt); err != nil {
				return res, err
			}
		}
		batch, err := w.st.EventsAfter(ctx, c.SessionID, res.Cursor, 64)
		if err != nil {
			return res, err
		}
		if len(batch) == 0 {
			break
		}
		restarted := false
		for i := range batch {
			e := &batch[i]
			if e.Sequence > c.LastSeq {
				return res, nil
			}
			m := e.Meta()
			step := walk.Step(&m)
			res.ResetAt = walk.ResetAt // stored with the cursor: a later pass resumed below it does not restart
			if step == visibility.Restart {
				// The join makes the transcript visible: start again at 1.
				res.Cursor, restarted = 0, true
				break
			}
			if step == visibility.Show && !seen[e.Sequence] && !SelfCaused(e.Body, h) {
				res.Next = &store.ChorusDelivery{ID: DeliveryID(h, c.SessionID, e.Sequence), Handle: h, SessionID: c.SessionID,
					Sequence: e.Sequence, EventType: e.Type}
				return res, nil
			}
			res.Cursor = e.Sequence
		}
		if restarted {
			seen = nil
			continue
		}
		if batch[len(batch)-1].Sequence >= c.LastSeq {
			break
		}
	}
	return res, nil
}

// dispatch claims due deliveries, as many as there are free attempt slots,
// and starts them. It reports whether the claim was full (more may be due).
func (w *Worker) dispatch(ctx context.Context) (bool, error) {
	free := cap(w.sem) - len(w.sem)
	if free <= 0 {
		return false, nil
	}
	limit := min(free, w.cfg.BatchSize)
	if due, err := w.st.ChorusDue(ctx); err != nil || !due {
		return false, err
	}
	lease := time.Now().Add(w.cfg.Timeout + 30*time.Second).UnixMilli()
	w.claims++
	ds, err := w.st.ClaimChorusDeliveries(ctx, w.node+"/"+strconv.FormatUint(w.claims, 10), lease, limit)
	if err != nil {
		return false, err
	}
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
	return len(ds) == limit, nil
}

// attempt makes one delivery attempt and records its outcome.
func (w *Worker) attempt(d store.ChorusDelivery) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.mu.Lock()
	w.next++
	id := w.next
	if w.inflight[d.Handle] == nil {
		w.inflight[d.Handle] = map[uint64]context.CancelFunc{}
	}
	w.inflight[d.Handle][id] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.inflight[d.Handle], id)
		if len(w.inflight[d.Handle]) == 0 {
			delete(w.inflight, d.Handle)
		}
		w.mu.Unlock()
	}()

	out, skip := w.try(ctx, d)
	if skip {
		return
	}
	if ctx.Err() != nil {
		// Aborted by a rotation or removal, whose transaction already made
		// the row due again for the new endpoint, or by shutdown: nothing
		// to record, but a shutdown releases the lease.
		select {
		case <-w.stop:
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			if err := w.st.ReleaseChorusLease(rctx, d); err != nil {
				app.LogFailure(w.log, "chorus: releasing a lease failed", err, "delivery", d.ID)
			}
		default:
		}
		return
	}
	w.m.outcome(out.State)
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	failingSince, wasFailing, ok, err := w.st.ChorusAttempted(rctx, d, out)
	if err != nil {
		app.LogFailure(w.log, "chorus: recording an attempt failed", err, "agent", d.Handle, "delivery", d.ID)
		return
	}
	if !ok {
		return
	}
	switch {
	case out.State == store.ChorusDelivered:
		if wasFailing {
			w.app.ChorusRecovered(rctx, d.Handle)
		}
	default:
		w.log.Warn("chorus delivery failed", "agent", d.Handle, "delivery", d.ID, "session", d.SessionID, "sequence", d.Sequence,
			"attempt", d.Attempts+1, "status", out.Status, "error", out.Error, "state", out.State)
		if !wasFailing && failingSince > 0 && time.Since(time.UnixMilli(failingSince)) >= w.cfg.FailingAfter {
			w.app.ChorusFailing(rctx, d.Handle)
		}
	}
}

// try renders, signs and POSTs one delivery. skip is true when there is
// nothing to attempt any more (the endpoint was removed).
func (w *Worker) try(ctx context.Context, d store.ChorusDelivery) (out store.ChorusOutcome, skip bool) {
	target, err := w.app.ChorusTarget(ctx, d.Handle)
	if errors.Is(err, store.ErrNotFound) {
		return out, true
	}
	if err != nil {
		return w.retry(d, 0, "cannot read the endpoint: "+err.Error(), 0), false
	}
	body, err := w.payload(ctx, d)
	if err != nil {
		if errors.Is(err, errGone) {
			return store.ChorusOutcome{State: store.ChorusFailed, Error: err.Error()}, false
		}
		return w.retry(d, 0, err.Error(), 0), false
	}
	wh, err := standardwebhooks.NewWebhook(target.Secret)
	if err != nil {
		return store.ChorusOutcome{State: store.ChorusFailed, Error: "signing secret unusable"}, false
	}
	now := time.Now()
	sig, err := wh.Sign(d.ID, now, body)
	if err != nil {
		return store.ChorusOutcome{State: store.ChorusFailed, Error: "signing failed"}, false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.URL, bytes.NewReader(body))
	if err != nil {
		return store.ChorusOutcome{State: store.ChorusFailed, Error: "the connection string is not a usable URL"}, false
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
			return store.ChorusOutcome{State: store.ChorusFailed, Error: "refused by the SSRF guard: " + err.Error()}, false
		}
		return w.retry(d, 0, "request failed: "+err.Error(), 0), false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, w.cfg.MaxResponseBytes))
	resp.Body.Close()
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return store.ChorusOutcome{State: store.ChorusDelivered, Status: code}, false
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return w.retry(d, code, "HTTP "+strconv.Itoa(code), retryAfter(resp.Header.Get("Retry-After"))), false
	case code >= 300 && code < 400:
		return store.ChorusOutcome{State: store.ChorusFailed, Status: code, Error: "HTTP " + strconv.Itoa(code) + ": redirects are not followed"}, false
	default:
		return store.ChorusOutcome{State: store.ChorusFailed, Status: code, Error: "HTTP " + strconv.Itoa(code) + ": permanent failure"}, false
	}
}

// retry schedules the next attempt, or dead-letters the delivery once the
// schedule is spent. The delay is the schedule's, with ±20% jitter so
// endpoints that failed together do not retry together, or the endpoint's
// Retry-After (capped at a day) when it gave one.
func (w *Worker) retry(d store.ChorusDelivery, status int, why string, after time.Duration) store.ChorusOutcome {
	if d.Attempts >= len(w.cfg.Schedule) {
		return store.ChorusOutcome{State: store.ChorusFailed, Status: status, Error: why + " (retries exhausted)"}
	}
	delay := w.cfg.Schedule[d.Attempts]
	delay = time.Duration(float64(delay) * (0.8 + 0.4*mrand.Float64()))
	if after > 0 {
		delay = min(after, 24*time.Hour)
	}
	return store.ChorusOutcome{State: store.ChorusPending, Status: status, Error: why, NextAttempt: time.Now().Add(delay).UnixMilli()}
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

var errGone = errors.New("the event is no longer in the store")

// payload renders delivery d: the session as channel, the event as
// message, a fresh callback URL and the MCP configuration.
func (w *Worker) payload(ctx context.Context, d store.ChorusDelivery) ([]byte, error) {
	evs, err := w.st.EventsAfter(ctx, d.SessionID, d.Sequence-1, 1)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 || evs[0].Sequence != d.Sequence {
		return nil, errGone
	}
	msg, err := render(evs[0].Body, d.Handle)
	if err != nil {
		return nil, err
	}
	ch := Channel{ID: d.SessionID, Service: w.cfg.ServiceName}
	if s, err := w.st.GetSession(ctx, d.SessionID, d.Handle); err == nil {
		ch.Name = s.Topic
		ch.Context = channelContext(s, d.Handle)
	}
	cb, err := w.app.IssueChorusCallback(ctx, d.Handle, d.SessionID, d.ID)
	if err != nil {
		return nil, err
	}
	mcpURL, tok, err := w.app.ChorusMCP(ctx, d.Handle)
	if err != nil {
		return nil, err
	}
	return json.Marshal(Payload{Channel: ch, Message: msg, Callback: cb,
		MCP: &MCPInfo{URL: mcpURL, Headers: map[string]string{"Authorization": "Bearer " + tok}}})
}
