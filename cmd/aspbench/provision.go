package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/aspclient"
	"github.com/aspd/aspd/protocol"
)

// agent is an ASP agent the benchmark acts as.
type agent struct {
	handle string
	token  string
	node   string            // base URL of its aspd node (nodes.go)
	api    *aspclient.Client // REST calls as this agent, to its node
	ws     *aspclient.Client // WS /connect as this agent, to its node
}

// bench is one run: its clients, agents, sessions, connections, checks and
// report.
type bench struct {
	o        *options
	scenario string
	stderr   io.Writer
	runID    string
	base     time.Time // the run's clock: every time below is time.Since(base)
	http     *http.Client
	wsHTTP   *http.Client
	admin    *aspclient.Admin // the operator API of the first node
	rep      *Report

	agents      []*agent
	provisioned []*agent // created through the operator API; deleted at cleanup

	mu       sync.Mutex
	sessions []*session
	conns    []*wsConn

	// Delivery counters, updated by every connection's reader.
	events    atomic.Int64 // every event received
	winEvents atomic.Int64 // events received inside the measured window
	winStart  atomic.Int64 // measured window, in ns since base (MaxInt64 until set)
	winEnd    atomic.Int64
	spread    atomic.Int64 // idle: loopback source addresses to spread connections over

	check   checker
	errs    errTally
	cleaned bool
	logMu   sync.Mutex
}

func newBench(o *options, scenario string, stderr io.Writer) *bench {
	tr := &http.Transport{
		Proxy:               nil, // loopback only: never through a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	b := &bench{
		o:        o,
		scenario: scenario,
		stderr:   stderr,
		runID:    newRunID(),
		base:     time.Now(),
		http:     &http.Client{Transport: tr, Timeout: 60 * time.Second},
	}
	if o.requestIDs {
		b.http.Transport = requestIDTransport{tr}
	}
	b.wsHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: b.dialWS}}
	b.winStart.Store(math.MaxInt64)
	b.winEnd.Store(math.MaxInt64)
	b.rep = newReport(scenario, b)
	return b
}

// newRunID returns 6 random lower-case base-36 characters; handles of
// provisioned agents and the markers in messages carry it.
func newRunID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var raw [6]byte
	if _, err := rand.Read(raw[:]); err != nil {
		panic(err)
	}
	out := make([]byte, len(raw))
	for i, c := range raw {
		out[i] = alphabet[int(c)%len(alphabet)]
	}
	return string(out)
}

// now is the time on the run's monotonic clock.
func (b *bench) now() time.Duration { return time.Since(b.base) }

func (b *bench) logf(format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	fmt.Fprintf(b.stderr, "aspbench %7.2fs %s\n", b.now().Seconds(), fmt.Sprintf(format, args...))
}

// phase runs fn and records its duration under name.
func (b *bench) phase(name string, fn func() error) error {
	start := b.now()
	b.logf("%s ...", name)
	err := fn()
	d := b.now() - start
	b.rep.Phases.set(name, round3(d.Seconds()))
	if err == nil {
		b.logf("%s done in %s", name, d.Round(time.Millisecond))
	}
	return err
}

// execute provisions the agents and runs the scenario.
func (b *bench) execute(ctx context.Context, sc scenario) error {
	if b.o.pid > 0 {
		if _, err := readProc(b.o.pid); err != nil {
			return usagef("--pid %d: %v", b.o.pid, err)
		}
	}
	if err := raiseNoFile(sc.connectionsNeeded()); err != nil {
		return err
	}
	if err := b.phase("provision", func() error { return b.provision(ctx, sc.agentsNeeded()) }); err != nil {
		return err
	}
	if err := b.spreadAgents(); err != nil {
		return err
	}
	return sc.run(ctx, b)
}

// ---- REST ----

// errKind is an error's tally key: the operation and the status/code, or
// "transport error".
func errKind(op string, err error) string {
	var ae *aspclient.Error
	if errors.As(err, &ae) {
		return fmt.Sprintf("%s: %d %s", op, ae.Status, ae.Code)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return op + ": timed out"
	}
	return op + ": transport error"
}

// call sends one REST request as agent a (to its node) with aspclient and
// decodes a 2xx JSON answer into out (if not nil); op names it in errors.
func (b *bench) call(ctx context.Context, op string, a *agent, path string, body, out any) error {
	if err := a.api.Do(ctx, http.MethodPost, path, nil, body, out); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// adminClient is the operator API client of the first node.
func (b *bench) adminClient() (*aspclient.Admin, error) {
	if b.admin == nil {
		ad, err := aspclient.NewAdmin(strings.TrimSuffix(b.o.server, "/"), b.o.adminToken, aspclient.WithHTTPClient(b.http), aspclient.WithTimeout(0))
		if err != nil {
			return nil, usagef("--server, --admin-token: %v", err)
		}
		b.admin = ad
	}
	return b.admin, nil
}

// statusOf is the HTTP status of an error answer, 0 for other errors.
func statusOf(err error) int {
	var ae *aspclient.Error
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// parallel runs fn(ctx, i) for i in [0, n) on up to conc goroutines. The
// first error cancels the rest and is returned.
func parallel(ctx context.Context, n, conc int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for w := 0; w < min(conc, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return firstErr
}

// ---- provisioning ----

// provision gets n agents: from the seed file (its first n handles, in file
// order) or through the operator API.
func (b *bench) provision(ctx context.Context, n int) error {
	if b.o.seedFile != "" {
		raw, err := os.ReadFile(b.o.seedFile)
		if err != nil {
			return usagef("--seed: %v", err)
		}
		all, err := parseSeed(raw)
		if err != nil {
			return usagef("--seed %s: %v", b.o.seedFile, err)
		}
		if len(all) < n {
			return usagef("--seed %s holds %d agents; the %s scenario with these flags needs %d", b.o.seedFile, len(all), b.scenario, n)
		}
		b.agents = all[:n]
		b.rep.Provisioning = "seed"
		b.logf("using the first %d of %d agents of %s", n, len(all), b.o.seedFile)
		return nil
	}
	b.rep.Provisioning = "admin"
	admin, err := b.adminClient()
	if err != nil {
		return err
	}
	b.agents = make([]*agent, n)
	var mu sync.Mutex
	err = parallel(ctx, n, b.o.setupConc, func(ctx context.Context, i int) error {
		h := fmt.Sprintf("@bench%s.a%05d", b.runID, i+1)
		r, err := admin.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: h, InboundPolicy: "open", Allowlist: []string{}})
		if err != nil {
			err = fmt.Errorf("POST /admin/v1/agents: %w", err)
			if statusOf(err) == http.StatusUnauthorized {
				return usagef("%v (is --admin-token the operator token of this server?)", err)
			}
			return err
		}
		if r.Token == "" {
			return fmt.Errorf("POST /admin/v1/agents %s: no token in the answer", h)
		}
		a := &agent{handle: h, token: r.Token}
		b.agents[i] = a
		mu.Lock()
		b.provisioned = append(b.provisioned, a)
		mu.Unlock()
		return nil
	})
	if err == nil {
		b.logf("provisioned %d agents @bench%s.*", n, b.runID)
	}
	return err
}

// parseSeed reads a seed file in the aspd --seed shape, keeping file order:
// {"@a.b": {"token": "...", ...}, "@c.d": "token"}.
func parseSeed(raw []byte) ([]*agent, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object of handles")
	}
	var out []*agent
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		h, _ := tok.(string)
		if !strings.HasPrefix(h, "@") || !strings.Contains(h, ".") {
			return nil, fmt.Errorf("%q is not a handle", h)
		}
		if seen[h] {
			return nil, fmt.Errorf("%s appears twice", h)
		}
		seen[h] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %v", h, err)
		}
		a := &agent{handle: h}
		v = bytes.TrimSpace(v)
		if len(v) > 0 && v[0] == '"' {
			if err := json.Unmarshal(v, &a.token); err != nil {
				return nil, fmt.Errorf("%s: %v", h, err)
			}
		} else {
			var obj struct {
				Token string `json:"token"`
			}
			if err := json.Unmarshal(v, &obj); err != nil {
				return nil, fmt.Errorf("%s: want a token string or an object with a token: %v", h, err)
			}
			a.token = obj.Token
		}
		if a.token == "" {
			return nil, fmt.Errorf("%s: token is required", h)
		}
		out = append(out, a)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the object")
	}
	return out, nil
}

// ---- sessions ----

// session is one ASP session of the run.
type session struct {
	idx     int
	id      string
	creator *agent
	members []*agent // the creator first; all joined once set up
	tally   msgTally // every message accepted (201) in it
}

// msgTally summarises the messages accepted in a session so that each
// participant's stream can be checked against it in O(1) memory: their
// count, an order-independent hash of (sequence, id), and the highest
// sequence.
type msgTally struct {
	count  atomic.Int64
	hash   atomic.Uint64
	maxSeq atomic.Int64
}

func (t *msgTally) add(seq, id int64) {
	t.count.Add(1)
	t.hash.Add(mix(seq, id))
	for {
		cur := t.maxSeq.Load()
		if seq <= cur || t.maxSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// mix is splitmix64 of a (sequence, id) pair.
func mix(seq, id int64) uint64 {
	z := uint64(seq)*0x9E3779B97F4A7C15 ^ uint64(id)
	z += 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// setupSession creates the session with its creator, invites every other
// member (in batches of --invite-batch) and has each of them join, with up
// to joinConc joins at once.
func (b *bench) setupSession(ctx context.Context, s *session, joinConc int) error {
	var invitees []string
	for _, m := range s.members {
		if m != s.creator {
			invitees = append(invitees, m.handle)
		}
	}
	first := invitees[:min(len(invitees), b.o.inviteBatch)]
	body := map[string]any{"invite": first, "topic": fmt.Sprintf("aspbench %s %s %d", b.runID, b.scenario, s.idx)}
	var r struct {
		SessionID string `json:"session_id"`
	}
	if err := b.call(ctx, "POST /sessions", s.creator, "/sessions", body, &r); err != nil {
		if statusOf(err) == http.StatusNotFound {
			return fmt.Errorf("%v: the operator refused an invitation (trust is all-or-nothing: every agent must accept contact from the others, e.g. inbound_policy open)", err)
		}
		return err
	}
	if r.SessionID == "" {
		return errors.New("POST /sessions: no session_id in the answer")
	}
	s.id = r.SessionID
	b.mu.Lock()
	b.sessions = append(b.sessions, s)
	b.mu.Unlock()
	for rest := invitees[len(first):]; len(rest) > 0; {
		batch := rest[:min(len(rest), b.o.inviteBatch)]
		rest = rest[len(batch):]
		body := map[string]any{"invite": batch}
		if err := b.call(ctx, "POST /sessions/{id}/invite", s.creator, "/sessions/"+s.id+"/invite", body, nil); err != nil {
			return err
		}
	}
	joiners := make([]*agent, 0, len(s.members)-1)
	for _, m := range s.members {
		if m != s.creator {
			joiners = append(joiners, m)
		}
	}
	return parallel(ctx, len(joiners), joinConc, func(ctx context.Context, i int) error {
		return b.call(ctx, "POST /sessions/{id}/join", joiners[i], "/sessions/"+s.id+"/join", json.RawMessage("{}"), nil)
	})
}

// setupSessions sets up many sessions, --setup-concurrency at a time.
func (b *bench) setupSessions(ctx context.Context, ss []*session) error {
	return parallel(ctx, len(ss), b.o.setupConc, func(ctx context.Context, i int) error {
		return b.setupSession(ctx, ss[i], 1)
	})
}

// post sends one benchmark message: a data part {"bench": {"run", "id",
// "t"}} where t is the send (or scheduled) time on the run's clock, in ns.
// A 201 is added to the session's tally.
func (b *bench) post(ctx context.Context, s *session, sender *agent, id int64, t time.Duration) error {
	body := make([]byte, 0, 128)
	body = append(body, `{"content":[{"type":"data","data":{"bench":{"run":"`...)
	body = append(body, b.runID...)
	body = append(body, `","id":`...)
	body = strconv.AppendInt(body, id, 10)
	body = append(body, `,"t":`...)
	body = strconv.AppendInt(body, int64(t), 10)
	body = append(body, `}}}]}`...)
	var r struct {
		MessageID string `json:"message_id"`
		Sequence  int64  `json:"sequence"`
	}
	if err := b.call(b.withRequestID(ctx, id), "POST /sessions/{id}/messages", sender, "/sessions/"+s.id+"/messages", json.RawMessage(body), &r); err != nil {
		return err
	}
	if r.Sequence <= 0 {
		return fmt.Errorf("POST /sessions/{id}/messages: answer has no sequence")
	}
	s.tally.add(r.Sequence, id)
	return nil
}

// connectSynced posts one sync message per session from its creator
// (negative ids mark them), then connects the agents in waves of
// --connect-wave: each wave must have received its sessions' events up to
// the sync message (the set-up events) before the next wave dials. The
// initial replay is load too; thousands of simultaneous replays on a small
// machine measure the load generator's scheduler as much as the server.
func (b *bench) connectSynced(ctx context.Context, ss []*session, agents []*agent, hook eventHook, prepare func(c *wsConn)) (map[*agent]*wsConn, error) {
	conns := map[*agent]*wsConn{}
	err := parallel(ctx, len(ss), b.o.setupConc, func(ctx context.Context, i int) error {
		return b.post(ctx, ss[i], ss[i].creator, -int64(ss[i].idx)-1, b.now())
	})
	if err != nil {
		return conns, err
	}
	for start := 0; start < len(agents); start += b.o.connectWave {
		wave := agents[start:min(start+b.o.connectWave, len(agents))]
		cs, err := b.connectAll(ctx, wave, hook, prepare)
		waveConns := map[*agent]*wsConn{}
		for _, c := range cs {
			conns[c.ag] = c
			waveConns[c.ag] = c
		}
		if err != nil {
			return conns, err
		}
		if err := b.waitCaughtUp(ctx, ss, waveConns, b.o.drainTimeout, "the set-up events"); err != nil {
			return conns, err
		}
	}
	return conns, nil
}

// waitCaughtUp waits until every member's connection has received each
// session's events up to its highest accepted message, or fails after d.
func (b *bench) waitCaughtUp(ctx context.Context, ss []*session, conns map[*agent]*wsConn, d time.Duration, what string) error {
	deadline := time.Now().Add(d)
	for {
		behind, example := 0, ""
		for _, s := range ss {
			want := s.tally.maxSeq.Load()
			for _, m := range s.members {
				c := conns[m]
				if c == nil {
					continue // not connected now
				}
				if got := c.last(s.id); got < want {
					if behind == 0 {
						example = fmt.Sprintf("%s in session %s is at sequence %d of %d", m.handle, s.id, got, want)
					}
					behind++
				}
			}
		}
		if behind == 0 {
			return nil
		}
		if err := b.closedConnsError(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d participant streams did not receive %s within %s (e.g. %s)", behind, what, d, example)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (e.g. %s)", what, ctx.Err(), example)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// verifySessions checks, for every session and member, that the member's
// connection received exactly the accepted messages: same count and same
// (sequence, id) hash. Order and gaps are checked as events arrive.
func (b *bench) verifySessions(ss []*session, conns map[*agent]*wsConn) {
	for _, s := range ss {
		wantN, wantH := s.tally.count.Load(), s.tally.hash.Load()
		for _, m := range s.members {
			c := conns[m]
			if c == nil {
				continue // checked separately
			}
			gotN, gotH := c.benchTally(s.id)
			switch {
			case gotN < wantN:
				b.check.violate(kindMissing, wantN-gotN, "%s in session %s received %d of the %d accepted messages", m.handle, s.id, gotN, wantN)
			case gotN > wantN:
				b.check.violate(kindMismatch, gotN-wantN, "%s in session %s received %d benchmark messages but only %d were accepted", m.handle, s.id, gotN, wantN)
			case gotH != wantH:
				b.check.violate(kindMismatch, 1, "%s in session %s received %d messages, but not the accepted ones (sequence/id mismatch)", m.handle, s.id, gotN)
			}
		}
	}
}

// ---- cleanup ----

// cleanup closes the connections, ends the run's sessions and deletes the
// agents it provisioned, bounded by --cleanup-timeout. Its failures are
// reported, not fatal.
func (b *bench) cleanup() {
	if b.cleaned {
		return
	}
	b.cleaned = true
	ctx, cancel := context.WithTimeout(context.Background(), b.o.cleanupTimeout)
	defer cancel()
	start := b.now()
	b.mu.Lock()
	conns, sessions := b.conns, b.sessions
	b.mu.Unlock()
	_ = parallel(ctx, len(conns), 256, func(ctx context.Context, i int) error {
		conns[i].close()
		return nil
	})
	var failed atomic.Int64
	var example atomic.Value
	note := func(err error) {
		if failed.Add(1) == 1 {
			example.Store(err.Error())
		}
	}
	_ = parallel(ctx, len(sessions), b.o.setupConc, func(ctx context.Context, i int) error {
		s := sessions[i]
		err := b.call(ctx, "POST /sessions/{id}/end", s.creator, "/sessions/"+s.id+"/end", json.RawMessage("{}"), nil)
		if err != nil && statusOf(err) != http.StatusConflict {
			note(err)
		}
		return nil
	})
	deleted := 0
	if !b.o.keepAgents && len(b.provisioned) > 0 {
		admin, _ := b.adminClient() // made by provision
		_ = parallel(ctx, len(b.provisioned), b.o.setupConc, func(ctx context.Context, i int) error {
			h := b.provisioned[i].handle
			if err := admin.DeleteAgent(ctx, h); err != nil {
				note(fmt.Errorf("DELETE /admin/v1/agents/{handle}: %w", err))
			}
			return nil
		})
		deleted = len(b.provisioned)
	}
	d := b.now() - start
	b.rep.Phases.set("cleanup", round3(d.Seconds()))
	msg := fmt.Sprintf("closed %d connections, ended %d sessions, deleted %d agents in %s", len(conns), len(sessions), deleted, d.Round(time.Millisecond))
	if n := failed.Load(); n > 0 {
		msg += fmt.Sprintf("; %d cleanup requests failed, e.g. %v", n, example.Load())
		b.rep.Notes = append(b.rep.Notes, "cleanup: "+msg)
	}
	if ctx.Err() != nil {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("cleanup did not finish within --cleanup-timeout %s", b.o.cleanupTimeout))
	}
	b.logf("cleanup: %s", msg)
}
