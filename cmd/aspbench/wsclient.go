package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/aspclient"
)

// wireEvent is the part of an ASP event (events.json) the benchmark reads.
type wireEvent struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Sequence  int64  `json:"sequence"`
	Payload   struct {
		Agent   string          `json:"agent"`   // joined, left, disconnected, reconnected
		Invitee string          `json:"invitee"` // invited
		Sender  string          `json:"sender"`  // message
		Content json.RawMessage `json:"content"` // message
	} `json:"payload"`
}

// subject is the agent an event is about.
func (e *wireEvent) subject() string {
	if e.Type == "session.invited" {
		return e.Payload.Invitee
	}
	return e.Payload.Agent
}

// benchMark is the data a benchmark message carries.
type benchMark struct {
	Run string `json:"run"`
	ID  int64  `json:"id"`
	T   int64  `json:"t"` // send (or scheduled) time, ns on the run's clock
}

// parseMark returns the benchmark marker of a session.message's content,
// or nil.
func parseMark(content json.RawMessage) *benchMark {
	content = bytes.TrimSpace(content)
	if len(content) == 0 || content[0] != '[' || !bytes.Contains(content, []byte(`"bench"`)) {
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Data struct {
			Bench *benchMark `json:"bench"`
		} `json:"data"`
	}
	if json.Unmarshal(content, &parts) != nil {
		return nil
	}
	for _, p := range parts {
		if p.Type == "data" && p.Data.Bench != nil {
			return p.Data.Bench
		}
	}
	return nil
}

// sessTrack is what one connection knows about one session's stream. Its
// observe method is the ordering check.
type sessTrack struct {
	expectFrom int64 // first sequence this connection must deliver; 0 = not a session of this run (checked from its first event on)
	started    bool
	last       int64 // last sequence in stream order
	maxSeen    int64 // highest sequence seen (or expectFrom-1): events above it are fresh
	joinedSeen bool  // own session.joined seen on this connection (since the last own invitation)
	restarts   int
	events     int64
	benchN     int64
	benchH     uint64
	target     int64 // a sequence a scenario waits for
	reachedAt  time.Duration
	ownRecon   bool // own session.reconnected seen
}

// maxRestarts bounds the join restarts tolerated per session and connection.
const maxRestarts = 2

// Check outcomes of sessTrack.observe besides the violation kinds.
const (
	outcomeOK          = ""
	outcomeRestart     = "restart"
	outcomeRedelivered = "redelivered"
)

// observe checks one event's sequence against the stream so far. It
// returns whether the event is fresh (not seen before on this connection,
// nor delivered to an earlier one) and an outcome: "" (in order), a
// violation kind (kindGap, kindReorder, kindDuplicate) with a detail, or an
// informational outcome: a join restart, or an at-least-once redelivery of
// an event an earlier connection already had.
//
// The join restart is the documented one: when a stream reaches the
// agent's own session.joined it starts the session over at sequence 1 (the
// transcript up to the join), before delivering that session.joined. So a
// drop back to sequence 1 is accepted while this connection has not yet
// delivered the agent's own session.joined, at most maxRestarts times.
func (st *sessTrack) observe(seq int64, typ, subject, self string) (fresh bool, outcome, detail string) {
	switch {
	case !st.started:
		st.started = true
		st.last = seq
		if st.expectFrom > 0 {
			if seq > st.expectFrom {
				outcome, detail = kindGap, fmt.Sprintf("the stream starts at sequence %d; expected %d (events %d..%d missing)", seq, st.expectFrom, st.expectFrom, seq-1)
			} else if seq < st.expectFrom {
				outcome = outcomeRedelivered
			}
		}
	case seq == 1 && !st.joinedSeen && st.restarts < maxRestarts:
		st.last = seq
		st.restarts++
		outcome = outcomeRestart
	case seq == st.last+1:
		st.last = seq
		if st.expectFrom > 0 && seq < st.expectFrom {
			outcome = outcomeRedelivered
		}
	case seq == st.last:
		outcome, detail = kindDuplicate, fmt.Sprintf("sequence %d delivered twice in a row", seq)
	case seq < st.last:
		outcome, detail = kindReorder, fmt.Sprintf("sequence %d after %d", seq, st.last)
	default:
		outcome, detail = kindGap, fmt.Sprintf("sequence %d after %d (events %d..%d missing)", seq, st.last, st.last+1, seq-1)
		st.last = seq
	}
	if seq > st.maxSeen {
		st.maxSeen = seq
		fresh = true
	}
	if subject == self {
		switch typ {
		case "session.invited":
			st.joinedSeen = false
		case "session.joined":
			st.joinedSeen = true
		}
	}
	st.events++
	return fresh, outcome, detail
}

// eventHook is called, outside any lock, for every event a connection
// receives: mark is the benchmark marker of this run's messages (nil
// otherwise), fresh is false for an event the connection (or an earlier
// one of the same agent in this run) already had, at is the arrival time.
type eventHook func(c *wsConn, ev *wireEvent, mark *benchMark, fresh bool, at time.Duration)

// wsConn is one WS /connect stream of an agent, with its checks.
type wsConn struct {
	b      *bench
	ag     *agent
	hook   eventHook
	conn   *aspclient.Conn // no de-duplication: every frame is checked
	cancel context.CancelFunc
	done   chan struct{}

	closing   atomic.Bool
	closeOnce sync.Once

	handshake time.Duration
	firstAt   atomic.Int64 // arrival of the first event, ns since base (0 = none)
	lastAt    atomic.Int64
	events    atomic.Int64

	mu   sync.Mutex
	sess map[string]*sessTrack
}

// newConn prepares a connection; call expect for the run's sessions, then
// start.
func (b *bench) newConn(ag *agent, hook eventHook) *wsConn {
	return &wsConn{b: b, ag: ag, hook: hook, done: make(chan struct{}), sess: map[string]*sessTrack{}}
}

// expect declares a session of the run and the first sequence this
// connection must deliver for it (1 for a fresh session; the previous
// connection's last + 1 on a reconnect).
func (c *wsConn) expect(sessionID string, from int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sess[sessionID] = &sessTrack{expectFrom: from, maxSeen: from - 1}
}

// start dials WS /connect and starts the reader.
func (c *wsConn) start(ctx context.Context) error {
	t0 := time.Now()
	conn, err := c.ag.ws.Dial(ctx) // bounded by the client's 30s timeout
	if err != nil {
		took := time.Since(t0).Round(time.Millisecond)
		var ae *aspclient.Error
		if errors.As(err, &ae) {
			return fmt.Errorf("WS /connect as %s: HTTP %d after %s: %w", c.ag.handle, ae.Status, took, err)
		}
		return fmt.Errorf("WS /connect as %s: failed after %s: %w", c.ag.handle, took, err)
	}
	c.handshake = time.Since(t0)
	c.conn = conn
	rctx, rcancel := context.WithCancel(context.Background())
	c.cancel = rcancel
	c.b.mu.Lock()
	c.b.conns = append(c.b.conns, c)
	c.b.mu.Unlock()
	go c.read(rctx)
	return nil
}

func (c *wsConn) read(ctx context.Context) {
	defer close(c.done)
	for {
		raw, err := c.conn.Next(ctx)
		if err != nil {
			if !c.closing.Load() {
				status, reason := -1, ""
				var ce *aspclient.CloseError
				if errors.As(err, &ce) {
					status, reason = ce.Code, ce.Reason
				}
				c.b.check.violate(kindClosed, 1, "%s: connection closed by the server or the network: status %d %q: %v", c.ag.handle, status, reason, err)
			}
			return
		}
		c.receive(raw, c.b.now())
	}
}

// receive checks and counts one event.
func (c *wsConn) receive(raw []byte, at time.Duration) {
	b := c.b
	ev, m, ok := decodeEvent(raw)
	if !ok || ev.Type == "" || ev.SessionID == "" || ev.Sequence <= 0 {
		b.check.violate(kindMalformed, 1, "%s: not an ASP event (%d bytes, starting % x): %.200q", c.ag.handle, len(raw), raw[:min(len(raw), 16)], raw)
		return
	}
	b.events.Add(1)
	if int64(at) >= b.winStart.Load() && int64(at) < b.winEnd.Load() {
		b.winEvents.Add(1)
	}
	c.events.Add(1)
	c.firstAt.CompareAndSwap(0, int64(at))
	c.lastAt.Store(int64(at))
	var mark *benchMark
	if m != nil && m.Run == b.runID {
		mark = m
	}

	c.mu.Lock()
	st := c.sess[ev.SessionID]
	if st == nil {
		st = &sessTrack{}
		c.sess[ev.SessionID] = st
	}
	fresh, outcome, detail := st.observe(ev.Sequence, ev.Type, ev.subject(), c.ag.handle)
	if mark != nil && fresh {
		st.benchN++
		st.benchH += mix(ev.Sequence, mark.ID)
	}
	if ev.Type == "session.reconnected" && ev.Payload.Agent == c.ag.handle {
		st.ownRecon = true
	}
	if st.target > 0 && st.reachedAt == 0 && st.last >= st.target {
		st.reachedAt = at
	}
	c.mu.Unlock()

	b.check.events.Add(1)
	switch outcome {
	case outcomeOK:
	case outcomeRestart:
		b.check.restarts.Add(1)
	case outcomeRedelivered:
		b.check.redelivered.Add(1)
	default:
		b.check.violate(outcome, 1, "%s, session %s: %s", c.ag.handle, ev.SessionID, detail)
	}
	if c.hook != nil {
		c.hook(c, &ev, mark, fresh, at)
	}
}

// last is the last sequence received in a session (0 if none).
func (c *wsConn) last(sessionID string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.sess[sessionID]; st != nil {
		return st.last
	}
	return 0
}

// benchTally is the count and hash of this run's messages received fresh
// in a session.
func (c *wsConn) benchTally(sessionID string) (int64, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.sess[sessionID]; st != nil {
		return st.benchN, st.benchH
	}
	return 0, 0
}

// setTarget records a sequence to wait for in a session; reached reports
// when the stream got there.
func (c *wsConn) setTarget(sessionID string, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.sess[sessionID]
	if st == nil {
		st = &sessTrack{}
		c.sess[sessionID] = st
	}
	st.target = seq
	if st.reachedAt == 0 && st.last >= seq {
		st.reachedAt = c.b.now()
	}
}

func (c *wsConn) reached(sessionID string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.sess[sessionID]
	if st == nil || st.reachedAt == 0 {
		return 0, false
	}
	return st.reachedAt, true
}

func (c *wsConn) sawOwnReconnected(sessionID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.sess[sessionID]
	return st != nil && st.ownRecon
}

// close closes the connection normally (1000) and waits for the reader.
func (c *wsConn) close() {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		if c.conn == nil {
			return
		}
		c.ackAll()
		_ = c.conn.Close("aspbench done")
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = c.conn.CloseNow()
			<-c.done
		}
		c.cancel()
	})
}

// ackAll acknowledges, before a normal close, the last event received in
// each session (docs/delivery.md, "Confirmation"): the server reads the acks
// before the close, so the agent's cursors are exactly where this
// connection stopped, and the next connection is not sent again what
// arrived while the last confirmation ping was unanswered.
func (c *wsConn) ackAll() {
	c.mu.Lock()
	last := make(map[string]int64, len(c.sess))
	for sid, st := range c.sess {
		if st.last > 0 {
			last[sid] = st.last
		}
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for sid, seq := range last {
		if c.conn.Ack(ctx, sid, seq) != nil {
			return
		}
	}
}

// ping checks the connection is alive end to end.
func (c *wsConn) ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return c.conn.Ping(pctx)
}

// connectAll opens one connection per agent, --setup-concurrency at a
// time; prepare (if not nil) runs on each connection before it dials.
func (b *bench) connectAll(ctx context.Context, agents []*agent, hook eventHook, prepare func(c *wsConn)) ([]*wsConn, error) {
	conns := make([]*wsConn, len(agents))
	for i, a := range agents {
		conns[i] = b.newConn(a, hook)
		if prepare != nil {
			prepare(conns[i])
		}
	}
	err := parallel(ctx, len(conns), b.o.setupConc, func(ctx context.Context, i int) error {
		return conns[i].start(ctx)
	})
	return conns, err
}

// closedConnsError fails a wait early once a connection closed unexpectedly.
func (b *bench) closedConnsError() error {
	if n := b.check.count(kindClosed); n > 0 {
		return fmt.Errorf("%d connections closed unexpectedly (%s)", n, b.check.firstExample(kindClosed))
	}
	return nil
}

// ---- source addresses ----

// sourceIPs, when > 1, spreads WebSocket connections to an IPv4 loopback
// server over that many source addresses 127.0.0.1.. (the whole 127/8 is
// loopback), so tens of thousands of connections do not exhaust one
// address's ephemeral ports.
var wsDialCounter atomic.Uint64

func (b *bench) dialWS(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if n := b.sourceIPs(); n > 1 {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err == nil && ip != nil && ip.To4() != nil && ip.IsLoopback() {
			k := wsDialCounter.Add(1) % uint64(n)
			d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+k))}
		}
	}
	return d.DialContext(ctx, network, addr)
}

// sourceIPs is how many loopback source addresses the idle scenario spreads
// its connections over.
func (b *bench) sourceIPs() int {
	if b.scenario != "idle" {
		return 1
	}
	return int(b.spread.Load())
}
