// Package cluster lets several aspd processes (nodes) serve one network on
// one PostgreSQL database (docs/cluster.md).
//
// PostgreSQL stays the source of truth; this package only wakes nodes up.
// After a node commits, the notifier sends the session ids and sequence
// ranges (never events) on the aspd_events channel, coalesced: one NOTIFY
// per batch of commits, from its own connection, outside every write
// transaction. Each node LISTENs on one dedicated connection. (With
// Config.NATSURL the same payloads travel on NATS subjects instead: bus.go,
// nats.go.) On a wake-up for a session it reads the new events from the store once
// and hands them to its hub, which delivers them to local connections like
// a local commit. A catch-up, run when the listening connection
// (re)connects and every poll interval, compares the heads of the sessions
// its connected agents take part in with what it has announced, so a
// missed notification delays delivery by at most the poll interval and
// never loses it. Token rotation, revocation and agent deletion travel on
// aspd_control, so every node closes the handle's streams.
//
// Nodes register in the nodes table with a random id and heartbeat it;
// presence and the sweepers are in the store and internal/app.
//
// A node that finds no other node registered (one aspd on PostgreSQL, the
// common case) sends no event wake-ups and skips the periodic catch-up:
// nobody listens, and no other node commits. It learns of a new node from
// the hello the newcomer sends on aspd_control when it starts, and at every
// heartbeat from the nodes table; until then the newcomer's own catch-up
// (every poll interval) brings it this node's commits, late by at most the
// poll interval, never lost.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aspd/aspd/store"
)

// Channel names.
const (
	EventsChannel  = "aspd_events"
	ControlChannel = "aspd_control"
)

// maxPayload keeps every NOTIFY payload under PostgreSQL's 8000-byte limit.
const maxPayload = 7900

// Config configures a node.
type Config struct {
	DatabaseURL string        // the PostgreSQL URL; the node opens two connections of its own
	Addr        string        // the node's advertised address, recorded for operators
	Heartbeat   time.Duration // how often the node marks itself alive
	NodeExpiry  time.Duration // a node silent this long is dead
	Poll        time.Duration // catch-up interval: bound on the delay a missed NOTIFY causes
	RingSize    int           // most events read per session per wake-up (the hub's ring)
	// NATSURL, when set, carries the wake-ups on NATS instead of NOTIFY
	// (nats.go); every node of a network must use the same bus and subject.
	NATSURL     string
	NATSSubject string // subject prefix on NATS; one per network sharing a NATS server
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Heartbeat: 3 * time.Second, NodeExpiry: 15 * time.Second, Poll: time.Second, RingSize: 256, NATSSubject: "aspd"}
}

// Local is what a node does on its own process: the hub and the auth cache.
type Local interface {
	// Handles lists the agents with a live connection on this node.
	Handles() []string
	// PublishRemote hands events committed elsewhere (possibly none: only
	// the head is known) to the local connections of handles.
	PublishRemote(sessionID string, events []store.StoredEvent, head int64, handles []string)
	// CutOff ends a handle's streams and cached authentications here.
	CutOff(handle, reason string)
	// Forget drops what this process holds in memory of a session's events
	// (its ring): another node rewrote (redacted) or purged some of them.
	Forget(sessionID string)
	// ResetAuth drops every cached authentication (control messages may
	// have been missed while the listener was down).
	ResetAuth()
	// NodeLost records again the presence of every agent connected here:
	// the other nodes declared this one dead and recorded its agents
	// offline (they get session.reconnected). The node is registered again
	// first.
	NodeLost()
}

// Stats are a node's counters, for /metrics and tests.
type Stats struct {
	NotifySent     atomic.Int64 // NOTIFY statements sent
	NotifyReceived atomic.Int64 // notifications from other nodes
	RemoteEvents   atomic.Int64 // events read after a wake-up and handed to the hub
	CatchUps       atomic.Int64 // catch-up passes
	CatchUpWakes   atomic.Int64 // sessions a catch-up found ahead of what this node announced
	ListenerResets atomic.Int64 // (re)connections of the listening connection
	NotifySkipped  atomic.Int64 // commits not announced: no other node was registered
}

// Node is this process in the cluster.
type Node struct {
	id    string
	cfg   Config
	st    *store.Store
	local Local
	log   *slog.Logger
	stats Stats

	mu      sync.Mutex
	out     map[string]span // commits to announce to the other nodes
	control []string        // control payloads to send
	wakeOut chan struct{}

	inMu     sync.Mutex
	in       map[string]span // wake-ups received, not processed yet
	catchUp  bool            // a full catch-up is owed
	wakeIn   chan struct{}
	announce map[string]int64 // worker only: highest head announced to local connections per session

	// peers counts the other registered nodes (refreshPeers); while it is
	// 0 the node announces nothing and skips the periodic catch-up.
	// aloneLastPass is the worker's: the previous poll found no peer.
	peers         atomic.Int64
	peersChanged  chan struct{}
	aloneLastPass bool

	// The liveness connection holds the node's lock (store.NodeLockSQL).
	liveUp    atomic.Bool  // the lock is held now
	relocking atomic.Int64 // unix ns when the lock was last re-taken after a loss (0: never lost)

	bus bus // carries wake-ups: NOTIFY, or NATS

	stop chan struct{}
	wg   sync.WaitGroup
}

// span is a run of sequences (First..Last) of one session.
type span struct{ First, Last int64 }

func (s span) merge(o span) span {
	if s.Last == 0 {
		return o
	}
	return span{First: min(s.First, o.First), Last: max(s.Last, o.Last)}
}

// New creates a node with a fresh random id. Start registers it.
func New(cfg Config, st *store.Store, local Local, log *slog.Logger) *Node {
	def := DefaultConfig()
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = def.Heartbeat
	}
	if cfg.NodeExpiry <= 0 {
		cfg.NodeExpiry = def.NodeExpiry
	}
	if cfg.Poll <= 0 {
		cfg.Poll = def.Poll
	}
	if cfg.RingSize <= 0 {
		cfg.RingSize = def.RingSize
	}
	if cfg.NATSSubject == "" {
		cfg.NATSSubject = def.NATSSubject
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	n := &Node{id: "n" + hex.EncodeToString(b), cfg: cfg, st: st, local: local, log: log.With("node", "n"+hex.EncodeToString(b)),
		out: map[string]span{}, wakeOut: make(chan struct{}, 1), in: map[string]span{}, wakeIn: make(chan struct{}, 1),
		announce: map[string]int64{}, stop: make(chan struct{}), peersChanged: make(chan struct{}, 1)}
	n.bus = &pgBus{n: n}
	return n
}

// ID is the node's id, fresh at every process start.
func (n *Node) ID() string { return n.id }

// Config returns the node's effective configuration.
func (n *Node) Config() Config { return n.cfg }

// Stats returns the node's counters.
func (n *Node) Stats() *Stats { return &n.stats }

// Start registers the node and starts its heartbeat, notifier, listener
// and wake-up worker.
func (n *Node) Start(ctx context.Context) error {
	if n.cfg.NATSURL != "" {
		nb, err := dialNATS(n.cfg.NATSURL, n.cfg.NATSSubject, n.id, n.subscribed)
		if err != nil {
			return err
		}
		n.bus = nb
	}
	// The lock before the row: a node whose row exists and whose lock is
	// free is dead.
	live, err := n.lockLiveness(ctx)
	if err != nil {
		n.bus.close()
		return err
	}
	if err := n.st.RegisterNode(ctx, n.id, n.cfg.Addr); err != nil {
		live.Close(context.Background())
		n.bus.close()
		return err
	}
	n.refreshPeers(ctx)
	// Tell the running nodes that there is one more to wake up.
	n.mu.Lock()
	n.control = append(n.control, n.id+" "+helloMark)
	n.mu.Unlock()
	select {
	case n.wakeOut <- struct{}{}:
	default:
	}
	n.wg.Add(5)
	go n.liveness(live)
	go n.heartbeat()
	go n.notifier()
	go n.listener()
	go n.worker()
	n.log.Info("cluster node started", "bus", n.bus.name(), "heartbeat", n.cfg.Heartbeat, "node_expiry", n.cfg.NodeExpiry, "poll", n.cfg.Poll)
	return nil
}

// Close stops the node and retires it, so the next dead-node sweep (on
// another node, or this node's successor) expires its presence at once.
func (n *Node) Close() {
	close(n.stop)
	n.wg.Wait()
	n.bus.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.st.RetireNode(ctx, n.id); err != nil {
		n.log.Warn("retiring the node failed; the others expire it after the node expiry", "err", err)
	}
}

// Peers is the number of other registered nodes this node knows of.
func (n *Node) Peers() int64 { return n.peers.Load() }

// helloMark is the control payload's handle position in a new node's hello
// (a handle always starts with @).
const helloMark = "+hello"

// forgetMark is the control payload's handle position in a Forget; the
// session id follows in the reason's position.
const forgetMark = "+forget"

// refreshPeers counts the other registered nodes. On an error it assumes
// there are some: a needless NOTIFY costs little, a missing one delays.
func (n *Node) refreshPeers(ctx context.Context) {
	nodes, err := n.st.Nodes(ctx)
	if err != nil {
		n.peers.Store(1)
		return
	}
	var others int64
	for _, x := range nodes {
		if x.ID != n.id {
			others++
		}
	}
	n.peers.Store(others)
}

// Committed queues a local commit for the other nodes. It never blocks and
// never touches the database: the notifier sends one NOTIFY per batch.
func (n *Node) Committed(c *store.Commit) {
	if c == nil || len(c.Events) == 0 {
		return
	}
	if n.peers.Load() == 0 {
		// Alone: nobody to wake, and no work for the notifier either.
		n.stats.NotifySkipped.Add(1)
		return
	}
	sp := span{First: c.Events[0].Sequence, Last: c.Events[len(c.Events)-1].Sequence}
	n.mu.Lock()
	n.out[c.SessionID] = n.out[c.SessionID].merge(sp)
	n.mu.Unlock()
	select {
	case n.wakeOut <- struct{}{}:
	default:
	}
}

// Forget tells the other nodes to drop their in-memory copies of a
// session's events: some were rewritten (redacted) or purged here.
func (n *Node) Forget(sessionID string) { n.sendControl(forgetMark, sessionID) }

// CutOff tells the other nodes to close a handle's streams and forget its
// cached authentications (token rotated or revoked, agent deleted).
func (n *Node) CutOff(handle, reason string) { n.sendControl(handle, reason) }

// sendControl queues a control message "node handle reason" for the
// notifier (handle may be a mark: helloMark, forgetMark).
func (n *Node) sendControl(handle, reason string) {
	n.mu.Lock()
	n.control = append(n.control, n.id+" "+handle+" "+reason)
	n.mu.Unlock()
	select {
	case n.wakeOut <- struct{}{}:
	default:
	}
}

// lockLiveness opens the liveness connection and takes the node's lock.
func (n *Node) lockLiveness(ctx context.Context) (*pgx.Conn, error) {
	conn, err := n.connect("aspd-node")
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, store.NodeLockSQL, n.id); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("cluster: node lock: %w", err)
	}
	n.liveUp.Store(true)
	return conn, nil
}

// liveness keeps the liveness connection (and so the node's lock) up,
// checking it every heartbeat and re-taking the lock after a loss. While it
// is lost the other nodes may declare this one dead; the heartbeat then
// notices and rebuilds presence (NodeLost).
func (n *Node) liveness(conn *pgx.Conn) {
	defer n.wg.Done()
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		if conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Heartbeat)
			err := conn.Ping(ctx)
			cancel()
			if err == nil {
				continue
			}
			n.log.Error("cluster: the liveness connection is lost; other nodes may declare this node dead until it is back", "err", err)
			n.liveUp.Store(false)
			conn.Close(context.Background())
			conn = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := n.lockLiveness(ctx)
		cancel()
		if err != nil {
			n.log.Error("cluster: re-taking the node lock failed", "err", err, "retry_in", backoff)
			select {
			case <-n.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, n.cfg.Heartbeat)
			continue
		}
		conn, backoff = c, 100*time.Millisecond
		n.relocking.Store(time.Now().UnixNano())
	}
}

// LockCheckOK reports whether the dead-node sweep may treat a free liveness
// lock as a dead node. Not while this node's own liveness connection is
// down, nor for two heartbeats after it came back: a database restart drops
// every node's connection at once, and the others need that long to take
// their locks again. A fresh process checks at once, which is what expires
// a crashed predecessor at start-up.
func (n *Node) LockCheckOK() bool {
	if !n.liveUp.Load() {
		return false
	}
	at := n.relocking.Load()
	return at == 0 || time.Since(time.Unix(0, at)) > 2*n.cfg.Heartbeat
}

// heartbeat marks the node alive every Heartbeat. If the others declared it
// dead meanwhile, it registers again and records its agents' presence
// again.
func (n *Node) heartbeat() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.peersChanged:
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Heartbeat)
			n.refreshPeers(ctx)
			cancel()
			continue
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Heartbeat)
		n.refreshPeers(ctx)
		err := n.st.Heartbeat(ctx, n.id)
		if errors.Is(err, store.ErrNodeExpired) {
			n.log.Warn("this node was declared dead by another (heartbeats missed for the node expiry, or its liveness connection lost); registering again and recording its agents' presence again")
			if err = n.st.RegisterNode(ctx, n.id, n.cfg.Addr); err == nil {
				n.local.NodeLost()
			}
		}
		cancel()
		if err != nil {
			n.log.Error("cluster heartbeat failed", "err", err)
		}
	}
}

// notifier sends what Committed and CutOff queued. Whatever accumulates
// while one batch is in flight goes out in the next (group-commit style):
// no timer adds latency, and a busy node sends one wake-up per batch, not
// per message.
func (n *Node) notifier() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.wakeOut:
		}
		n.mu.Lock()
		out, control := n.out, n.control
		n.out, n.control = map[string]span{}, nil
		n.mu.Unlock()
		var payloads []string
		if n.peers.Load() > 0 { // commits queued just before the last peer left are dropped too
			payloads = encodeEvents(n.id, out)
		}
		if len(payloads) == 0 && len(control) == 0 {
			continue
		}
		for i, p := range control {
			if len(p) > maxPayload {
				control[i] = p[:maxPayload]
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.bus.send(ctx, payloads, control)
		cancel()
		if err == nil {
			n.stats.NotifySent.Add(int64(len(payloads) + len(control)))
			continue
		}
		// The others' catch-up finds these commits within their poll
		// interval; control messages are retried, and a node whose
		// listener resubscribes drops its whole auth cache.
		n.log.Error("cluster wake-up failed; the other nodes catch up by polling", "bus", n.bus.name(), "err", err)
		if len(control) > 0 {
			n.mu.Lock()
			n.control = append(control, n.control...)
			n.mu.Unlock()
			select {
			case <-n.stop:
				return
			case <-time.After(time.Second):
			}
			select {
			case n.wakeOut <- struct{}{}:
			default:
			}
		}
	}
}

// connect opens one of the node's dedicated connections, named for
// pg_stat_activity.
func (n *Node) connect(name string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Parsed as the store parses it (a pool's URL): pgxpool takes its own
	// settings (pool_max_conns, ...) out, which pgx.ParseConfig would send
	// to the server as runtime parameters, and the server refuses.
	pcfg, err := pgxpool.ParseConfig(n.cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: database URL: %w", err)
	}
	cfg := pcfg.ConnConfig
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = name
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect: %w", err)
	}
	return conn, nil
}

// encodeEvents renders spans as payloads "<node> <session>:<first>:<last> ...",
// each under maxPayload bytes.
func encodeEvents(node string, spans map[string]span) []string {
	var out []string
	var b strings.Builder
	for sid, sp := range spans {
		item := sid + ":" + strconv.FormatInt(sp.First, 10) + ":" + strconv.FormatInt(sp.Last, 10)
		if b.Len() > 0 && b.Len()+1+len(item) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(node)
		}
		b.WriteByte(' ')
		b.WriteString(item)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// decodeEvents parses a payload of encodeEvents.
func decodeEvents(payload string) (node string, spans map[string]span, err error) {
	fields := strings.Fields(payload)
	if len(fields) == 0 {
		return "", nil, errors.New("empty payload")
	}
	spans = map[string]span{}
	for _, f := range fields[1:] {
		parts := strings.Split(f, ":")
		if len(parts) != 3 {
			return "", nil, fmt.Errorf("bad item %q", f)
		}
		first, err1 := strconv.ParseInt(parts[1], 10, 64)
		last, err2 := strconv.ParseInt(parts[2], 10, 64)
		if err1 != nil || err2 != nil || first < 1 || last < first {
			return "", nil, fmt.Errorf("bad item %q", f)
		}
		spans[parts[0]] = spans[parts[0]].merge(span{First: first, Last: last})
	}
	return fields[0], spans, nil
}

// listener keeps the bus's subscription, subscribing again with a bounded
// backoff. Every (re)subscription owes a catch-up and drops the cached
// authentications, as wake-ups and control messages sent while it was down
// are lost.
func (n *Node) listener() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-n.stop
		cancel()
	}()
	var b listenBackoff
	for ctx.Err() == nil {
		began := time.Now()
		err := n.bus.listen(ctx, n.subscribed, n.received)
		if ctx.Err() != nil {
			return
		}
		wait := b.after(time.Since(began))
		n.log.Error("cluster listener lost its subscription; subscribing again", "bus", n.bus.name(), "err", err, "backoff", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// The listener's backoff: 100 ms after a lost subscription, doubled after
// each further loss up to 5 s.
const (
	listenFirstBackoff = 100 * time.Millisecond
	listenMaxBackoff   = 5 * time.Second
)

// listenBackoff is the wait before the listener subscribes again.
type listenBackoff struct{ next time.Duration }

// after returns the wait after a subscription that held for held. One that
// held a while (twice the longest wait) ends an outage: the next loss,
// maybe weeks later, starts again from the first wait rather than from
// where the last outage left it.
func (b *listenBackoff) after(held time.Duration) time.Duration {
	if b.next == 0 || held >= 2*listenMaxBackoff {
		b.next = listenFirstBackoff
	}
	wait := b.next
	b.next = min(2*b.next, listenMaxBackoff)
	return wait
}

// subscribed is called by the bus each time it (re)subscribes.
func (n *Node) subscribed() {
	n.stats.ListenerResets.Add(1)
	n.local.ResetAuth()
	n.owe(nil, true)
}

// received dispatches one notification.
func (n *Node) received(channel, payload string) {
	switch channel {
	case EventsChannel:
		node, spans, err := decodeEvents(payload)
		if err != nil {
			n.log.Warn("cluster: ignoring a malformed notification", "err", err)
			return
		}
		if node == n.id {
			return
		}
		n.stats.NotifyReceived.Add(1)
		if n.st != nil {
			// Before the events are read: this node's next message to
			// these sessions must not guess on its own last write
			// (store/fastappend.go).
			ids := make([]string, 0, len(spans))
			for sid := range spans {
				ids = append(ids, sid)
			}
			n.st.WrittenElsewhere(ids...)
		}
		n.owe(spans, false)
	case ControlChannel:
		node, rest, _ := strings.Cut(payload, " ")
		handle, reason, _ := strings.Cut(rest, " ")
		if node == n.id || handle == "" {
			return
		}
		if handle == helloMark {
			// A new node: count it before its first commit is announced.
			n.peers.Add(1)
			select {
			case n.peersChanged <- struct{}{}:
			default:
			}
			return
		}
		if handle == forgetMark {
			n.local.Forget(reason)
			return
		}
		n.local.CutOff(handle, reason)
	}
}

// owe records wake-ups (and a catch-up) for the worker.
func (n *Node) owe(spans map[string]span, catchUp bool) {
	n.inMu.Lock()
	for sid, sp := range spans {
		n.in[sid] = n.in[sid].merge(sp)
	}
	n.catchUp = n.catchUp || catchUp
	n.inMu.Unlock()
	select {
	case n.wakeIn <- struct{}{}:
	default:
	}
}

// worker turns wake-ups into deliveries, one batch at a time (so per
// session in order), and runs the catch-up every poll interval.
func (n *Node) worker() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.wakeIn:
		case <-t.C:
			// Alone for a whole poll interval: no other node commits, so
			// there is nothing to catch up. The first pass after the last
			// peer left still runs, for what it may have committed.
			alone := n.peers.Load() == 0
			if alone && n.aloneLastPass {
				continue
			}
			n.aloneLastPass = alone
			n.owe(nil, true)
			continue
		}
		n.inMu.Lock()
		in, catchUp := n.in, n.catchUp
		n.in, n.catchUp = map[string]span{}, false
		n.inMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if len(in) > 0 {
			if err := n.wake(ctx, in); err != nil {
				// The spans are not lost: the next catch-up finds them.
				n.log.Error("cluster: delivering remote commits failed; the catch-up retries", "err", err)
			}
		}
		if catchUp {
			if err := n.catchUpPass(ctx); err != nil {
				n.log.Error("cluster: catch-up failed; retried next poll", "err", err)
			}
		}
		cancel()
	}
}

// wake reads the notified events once and hands them to the hub, for the
// sessions one of this node's agents takes part in.
func (n *Node) wake(ctx context.Context, in map[string]span) error {
	online := n.local.Handles()
	if len(online) == 0 {
		return nil
	}
	isOnline := make(map[string]bool, len(online))
	for _, h := range online {
		isOnline[h] = true
	}
	sids := make([]string, 0, len(in))
	for sid := range in {
		sids = append(sids, sid)
	}
	parts, err := n.st.Participants(ctx, sids)
	if err != nil {
		return err
	}
	local := map[string][]string{}
	var ranges []store.EventRange
	for _, sid := range sids {
		for _, h := range parts[sid] {
			if isOnline[h] {
				local[sid] = append(local[sid], h)
			}
		}
		if len(local[sid]) == 0 {
			continue
		}
		sp := in[sid]
		// Read at most a ring's worth: connections further behind read the
		// store themselves.
		after := max(sp.First-1, sp.Last-int64(n.cfg.RingSize))
		ranges = append(ranges, store.EventRange{SessionID: sid, After: after, Through: sp.Last})
	}
	if len(ranges) == 0 {
		return nil
	}
	events, err := n.st.EventsIn(ctx, ranges)
	if err != nil {
		return err
	}
	bySession := map[string][]store.StoredEvent{}
	for _, e := range events {
		bySession[e.SessionID] = append(bySession[e.SessionID], e)
	}
	n.stats.RemoteEvents.Add(int64(len(events)))
	for _, r := range ranges {
		n.local.PublishRemote(r.SessionID, bySession[r.SessionID], r.Through, local[r.SessionID])
		n.announce[r.SessionID] = max(n.announce[r.SessionID], r.Through)
	}
	return nil
}

// catchUpPass announces, to the local connections of its participants, the
// head of every session that moved past what this node announced: the
// wake-ups it missed. A session that only this node wrote to is announced
// again too (local publication does not count as an announcement here, as
// its recipients may be fewer than a missed remote commit's): that costs an
// in-memory announcement that finds nothing to send.
func (n *Node) catchUpPass(ctx context.Context) error {
	n.stats.CatchUps.Add(1)
	online := n.local.Handles()
	if len(online) == 0 {
		clear(n.announce)
		return nil
	}
	rows, err := n.st.SessionHeads(ctx, online)
	if err != nil {
		return err
	}
	isOnline := make(map[string]bool, len(online))
	for _, h := range online {
		isOnline[h] = true
	}
	local := map[string][]string{}
	heads := map[string]int64{}
	for _, r := range rows {
		if !isOnline[r.Handle] {
			continue
		}
		local[r.SessionID] = append(local[r.SessionID], r.Handle)
		heads[r.SessionID] = r.LastSeq
	}
	for sid, head := range heads {
		if head > 0 && head > n.announce[sid] {
			n.stats.CatchUpWakes.Add(1)
			n.local.PublishRemote(sid, nil, head, local[sid])
		}
	}
	// Keep only the sessions local agents take part in.
	n.announce = heads
	return nil
}
