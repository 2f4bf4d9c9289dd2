// Package app is aspd's application layer: everything an agent or an
// operator can do, whatever the transport. Each action validates its typed
// request (protocol limits, invitees, topics, idempotency keys, frames),
// applies trust and per-agent rate limits, makes the one store call and
// publishes what it committed to the hub. The HTTP adapter (package server),
// and any other adapter (MCP tools, webhook bridges), decode a request, call
// one App method and encode its answer; no rule is written twice. Which
// events an agent may see, and the delivery walk over a session's log, are
// internal/visibility's (Visible, Walk), shared with the WebSocket writer.
// Adapters see protocol and app types (SessionFilter, LogEvent, ...), not
// the store's.
//
// internal/daemon builds the App beside its adapters and the Chorus worker,
// and starts and stops it. App also owns the process's background work (presence recovery, the grace
// window sweeper, frame expiry) and the authentication cache, whose entries
// are evicted by the token and agent actions that invalidate them.
//
// The Chorus webhook rules live here as well: registration, credentials,
// callbacks and a webhook agent's presence (chorus.go), and the outbox's
// steps (chorus_outbox.go: what is queued for whom, claims, what an attempt
// carries, what its outcome does), which App offers the delivery worker of
// internal/chorus through the one interface that package declares
// (chorus.App). The worker reaches the store only through those steps.
package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aspd/aspd/internal/cluster"
	"github.com/aspd/aspd/internal/framefeed"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// Config is what the application layer needs to decide requests.
type Config struct {
	Limits      protocol.Limits
	GraceWindow time.Duration // how long a disconnected agent stays joined
	Hub         replay.Config
	Frames      FramesConfig
	// Per-agent request rates (token buckets); a rate of 0 disables the limit.
	ContactRate  float64 // session creation, invitations, reopening: contact attempts
	ContactBurst int
	MessageRate  float64 // messages sent in sessions
	MessageBurst int
	Chorus       ChorusConfig // webhooks (chorus.go)
	// Cluster, when set, makes this process one node of several on one
	// PostgreSQL database (cluster.go, docs/cluster.md); nil: single node.
	Cluster *cluster.Config
	// Retention purges sessions ended long ago (retention.go); zero: never.
	Retention RetentionConfig
}

// App is the application layer over one store, one hub and one frame
// stream registry.
type App struct {
	cfg     Config
	st      *store.Store
	hub     *replay.Hub
	streams *framefeed.Registry
	log     *slog.Logger
	auth    *authCache

	frames   *rateLimiter // frame submissions
	contacts *rateLimiter // nil = unlimited
	messages *rateLimiter // nil = unlimited

	waits    waits         // polled delivery (wait.go)
	waitPoll time.Duration // fallback re-read of a waiting call; tests lengthen it

	decided decisionSignal // wakes AwaitDecision (decisions.go)

	chorus *chorusState // webhooks (chorus.go)

	node *cluster.Node // nil on a single node (cluster.go)

	stop chan struct{}
	wg   sync.WaitGroup

	liveWatches watchCount // the operator's open live transcripts (live.go)

	opUse     operatorUse    // when operator tokens' last use was written (operator_tokens.go)
	retention RetentionStats // what retention purged (retention.go)
	// retentionListed, set by tests, is called with each retention round's
	// listed sessions before they are purged: a test changes one there (a
	// reopen) as a request could meanwhile.
	retentionListed func(ids []string)
}

// New builds the application layer on st, with its own hub (whose presence
// callbacks it answers) and frame stream registry. Call Start to run
// background work and Close to stop.
func New(cfg Config, st *store.Store, log *slog.Logger) *App {
	a := &App{cfg: cfg, st: st, log: log, auth: newAuthCache(), stop: make(chan struct{}),
		streams: framefeed.New(cfg.Frames.Retention), frames: newRateLimiter(cfg.Frames.RatePerSecond, cfg.Frames.Burst)}
	if cfg.ContactRate > 0 {
		a.contacts = newRateLimiter(cfg.ContactRate, max(cfg.ContactBurst, 1))
	}
	if cfg.MessageRate > 0 {
		a.messages = newRateLimiter(cfg.MessageRate, max(cfg.MessageBurst, 1))
	}
	a.hub = replay.New(cfg.Hub, st, presence{a}, log)
	var err error
	if a.chorus, err = newChorusState(cfg.Chorus); err != nil {
		log.Error("chorus disabled", "err", err)
		a.chorus, _ = newChorusState(ChorusConfig{})
	}
	a.waitPoll = waitPollInterval
	if cfg.Cluster != nil {
		a.node = cluster.New(*cfg.Cluster, st, clusterLocal{a}, log)
		a.auth.ttl = clusterAuthTTL
	}
	return a
}

// Store returns the store, for the components that work on it beside the
// application (the Chorus delivery worker). Adapters do not use it.
func (a *App) Store() *store.Store { return a.st }

// Ready reports whether the store can serve requests (store.Ready): the
// database answers and, after writes failed, a probe write commits.
func (a *App) Ready(ctx context.Context) error { return a.st.Ready(ctx) }

// StoreDialect names the store's database: "postgres" or "sqlite".
func (a *App) StoreDialect() string { return a.st.Dialect() }

// Stopping is closed when Close begins: long-lived streams end then.
func (a *App) Stopping() <-chan struct{} { return a.stop }

// publish hands committed events to live delivery. Every action that
// commits goes through it, after the commit and never before.
func (a *App) publish(commits ...*store.Commit) {
	chorus := false
	for _, c := range commits {
		if c != nil {
			a.hub.Publish(c)
			a.waits.wake(c.Recipients)
			chorus = chorus || a.chorusRecipient(c.Recipients)
			if a.node != nil {
				a.node.Committed(c)
			}
		}
	}
	if chorus {
		a.notifyChorus()
	}
}

// Start recovers presence left by a previous process and starts the grace
// window sweeper and the frame expiry loop.
func (a *App) Start(ctx context.Context) error {
	if a.node != nil {
		return a.startCluster(ctx)
	}
	commits, err := a.st.RecoverPresence(ctx)
	if err != nil {
		return err
	}
	if len(commits) > 0 {
		a.log.Info("presence recovered after restart: agents online before the restart have a fresh grace window", "sessions", len(commits))
	}
	a.publish(commits...)
	if err := a.recoverChorusPresence(ctx); err != nil {
		return err
	}
	a.wg.Add(2)
	go a.sweepGrace()
	go a.expireFrames()
	a.startRetention()
	return nil
}

// startRetention starts the retention sweeper when a retention period is set.
func (a *App) startRetention() {
	if a.cfg.Retention.ClosedSessions > 0 {
		a.wg.Add(1)
		go a.sweepRetention()
	}
}

// Close stops background work and closes every live connection.
func (a *App) Close() {
	close(a.stop)
	a.wg.Wait()
	a.hub.Close()
	if a.node != nil {
		a.node.Close()
	}
}

// expireFrames drops retained frames past their age even on handles that
// nothing touches any more, so retention memory follows --frame-retain-age.
func (a *App) expireFrames() {
	a.every(5*time.Second, func() { a.streams.ExpireAll() })
}

// every runs fn every d until the application stops, as one of the
// background goroutines a.wg counts.
func (a *App) every(d time.Duration, fn func()) {
	defer a.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// sweepGrace promotes disconnects older than the grace window to
// session.left {reason: grace_expired}.
func (a *App) sweepGrace() {
	a.every(min(max(a.cfg.GraceWindow/4, 50*time.Millisecond), time.Second), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		commits, err := a.expireGraceLocked(ctx, time.Now().Add(-a.cfg.GraceWindow).UnixMilli())
		cancel()
		if err != nil {
			a.logFailure("grace window sweep failed", err)
		}
		if len(commits) > 0 {
			a.log.Info("grace window expired", "sessions", len(commits))
		}
		a.publish(commits...)
	})
}

// presence appends session.reconnected/disconnected when an agent's first
// connection opens or its last one closes.
type presence struct{ a *App }

func (p presence) Online(ctx context.Context, h string) {
	if p.a.node != nil {
		p.a.publishPresence(p.a.st.ConnectOn(ctx, p.a.node.ID(), h))
		return
	}
	commits, err := p.a.st.MarkOnline(ctx, h)
	if err != nil {
		p.a.logFailure("presence: mark online failed", err, "agent", h)
	}
	p.a.publish(commits...)
}

func (p presence) Offline(ctx context.Context, h string) {
	if p.a.node != nil {
		// A healthy Chorus endpoint holds its own presence row
		// (cluster.go), so dropping this node's row keeps it online.
		p.a.publishPresence(p.a.st.DisconnectOn(ctx, p.a.node.ID(), h))
		return
	}
	if p.a.chorusKeepsOnline(ctx, h) {
		return // its healthy Chorus endpoint keeps it online
	}
	commits, err := p.a.st.MarkOffline(ctx, h)
	if err != nil {
		p.a.logFailure("presence: mark offline failed", err, "agent", h)
	}
	p.a.publish(commits...)
}

// DeliveryStats is a snapshot of live delivery's gauges and counters.
type DeliveryStats struct {
	Connections   int   // live connections
	AgentsOnline  int   // agents with at least one live connection
	Connects      int64 // connections attached since start
	Handed        int64 // committed events handed to live delivery
	Delivered     int64 // events written to connections
	Confirms      int64 // pongs that confirmed the events written before their ping
	Acks          int64 // explicit acknowledgements received
	StoreReads    int64 // catch-up reads served by the database instead of memory
	SlowConsumers int64 // connections closed as slow consumers
}

// DeliveryStats reads live delivery's gauges and counters.
func (a *App) DeliveryStats() DeliveryStats {
	st := a.hub.Stats()
	return DeliveryStats{Connections: a.hub.Connections(), AgentsOnline: a.hub.Agents(), Connects: st.Connects.Load(),
		Handed: st.Published.Load(), Delivered: st.Delivered.Load(), Confirms: st.Confirms.Load(), Acks: st.Acks.Load(),
		StoreReads: st.StoreReads.Load(), SlowConsumers: st.SlowConsumers.Load()}
}
