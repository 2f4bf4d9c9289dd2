package app

import (
	"context"
	"time"

	"github.com/aspd/aspd/internal/cluster"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// Several nodes on one PostgreSQL database (docs/cluster.md). With a
// cluster node configured, the App
//   - tells the other nodes of every commit (App.publish -> Node.Committed)
//     and of every cut-off (token rotation, revocation, agent deletion);
//   - records presence per node (store.ConnectOn / DisconnectOn), so
//     session.disconnected and session.reconnected fire once for the
//     network;
//   - runs the grace sweeper and the dead-node sweeper only on the node that
//     holds the sweeper's advisory lock;
//   - does not run the single-node presence recovery at start-up (it would
//     mark the other nodes' agents offline): the dead-node sweep expires
//     whatever a previous process of this node left.

// clusterAuthTTL bounds how long a node trusts a cached authentication:
// the other nodes' cut-offs (token rotation, revocation, agent deletion)
// normally reach it within milliseconds, and this bounds the time a missed
// one leaves a revoked token working on REST here.
const clusterAuthTTL = 5 * time.Second

// Advisory lock keys, one per sweeper ("aspd" in the high bytes).
const (
	sweepLockGrace int64 = 0x61737064_00000001
	sweepLockNodes int64 = 0x61737064_00000002
)

// Node returns the cluster node, or nil when aspd runs as a single node.
func (a *App) Node() *cluster.Node { return a.node }

// clusterLocal is the node's view of this process.
type clusterLocal struct{ a *App }

// Handles are the agents with a WebSocket here and those with a polled
// wait_for_events call sleeping here.
func (l clusterLocal) Handles() []string {
	hs := l.a.hub.Handles()
	waiting := l.a.waits.waitingHandles()
	if len(waiting) == 0 {
		return hs
	}
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		seen[h] = true
	}
	for _, h := range waiting {
		if !seen[h] {
			hs = append(hs, h)
		}
	}
	return hs
}

func (l clusterLocal) PublishRemote(sessionID string, events []store.StoredEvent, head int64, handles []string) {
	l.a.hub.PublishRemote(sessionID, events, head, handles)
	l.a.waits.wake(handles)
}

func (l clusterLocal) CutOff(handle, reason string) { l.a.cutOffLocal(handle, reason) }

func (l clusterLocal) ResetAuth() { l.a.auth.reset() }

func (l clusterLocal) Forget(sessionID string) { l.a.hub.Forget(sessionID) }

func (l clusterLocal) NodeLost() {
	l.a.auth.reset()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l.a.hub.RecheckPresence(ctx)
}

// startCluster registers the node, expires dead nodes (including this
// node's predecessor if it shut down cleanly) and starts the sweepers.
func (a *App) startCluster(ctx context.Context) error {
	if err := a.node.Start(ctx); err != nil {
		return err
	}
	a.sweepNodesOnce(ctx)
	if err := a.recoverChorusPresence(ctx); err != nil {
		return err
	}
	a.wg.Add(3)
	go a.sweepGrace()
	go a.expireFrames()
	go a.sweepNodes()
	a.startRetention()
	return nil
}

// sweepNodes expires nodes whose heartbeat is older than the node expiry.
func (a *App) sweepNodes() {
	a.every(min(max(a.node.Config().NodeExpiry/10, 100*time.Millisecond), time.Second), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		a.sweepNodesOnce(ctx)
		cancel()
	})
}

func (a *App) sweepNodesOnce(ctx context.Context) {
	cutoff := time.Now().Add(-a.node.Config().NodeExpiry).UnixMilli()
	var commits []*store.Commit
	var dead []string
	_, err := a.st.WithSweepLock(ctx, sweepLockNodes, a.node.Config().NodeExpiry, func(ctx context.Context) error {
		var err error
		commits, dead, err = a.st.ExpireNodes(ctx, cutoff, a.node.ID(), a.node.LockCheckOK())
		return err
	})
	if err != nil {
		a.logFailure("dead node sweep failed", err)
	}
	if len(dead) > 0 {
		a.log.Info("expired dead nodes: their agents' connections are gone; agents no other node holds are offline and their grace windows run",
			"nodes", dead, "sessions", len(commits))
	}
	a.publish(commits...)
}

// expireGraceLocked runs one grace sweep on the node holding its lock (on
// a single node, always).
func (a *App) expireGraceLocked(ctx context.Context, offlineBefore int64) ([]*store.Commit, error) {
	var commits []*store.Commit
	_, err := a.st.WithSweepLock(ctx, sweepLockGrace, a.sweepHold(), func(ctx context.Context) error {
		var err error
		commits, err = a.st.ExpireGrace(ctx, offlineBefore)
		return err
	})
	return commits, err
}

// cutOffLocal is cutOff on this node only (a cut-off another node sent).
func (a *App) cutOffLocal(handle, reason string) {
	a.auth.evict(handle)
	a.hub.Disconnect(handle, replay.CloseUnauthorized, reason)
	a.streams.Disconnect(handle)
}

// reset drops every cached authentication.
func (c *authCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.byHash)
	clear(c.byHandle)
	clear(c.at)
}

// publishPresence publishes a cluster presence change's commits.
func (a *App) publishPresence(commits []*store.Commit, err error) {
	if err != nil {
		a.logFailure("presence: recording the change failed", err)
	}
	a.publish(commits...)
}

// waitingHandles lists the handles with a wait_for_events call asleep.
func (w *waits) waitingHandles() []string {
	if w.waiting.Load() == 0 {
		return nil
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	out := make([]string, 0, len(w.wakers))
	for h := range w.wakers {
		out = append(out, h)
	}
	return out
}

// commitsSeen moves whenever commits may have appeared in the store: this
// node's publications and, on several nodes, the wake-ups and catch-ups
// from the others (for the operator's live transcript, live.go).
func (a *App) commitsSeen() int64 {
	n := a.hub.Stats().Published.Load()
	if a.node != nil {
		st := a.node.Stats()
		n += st.NotifyReceived.Load() + st.CatchUpWakes.Load()
	}
	return n
}

// chorusHold makes a webhook agent online or offline on several nodes: its
// healthy endpoint holds a presence row of its own (store.ExternalHolder),
// which no node's death expires, instead of a row of the node that noticed.
// Dropping it marks the agent offline only if no node holds a connection.
func (a *App) chorusHold(ctx context.Context, h string, online bool) {
	if online {
		a.publishPresence(a.st.ConnectOn(ctx, store.ExternalHolder, h))
		return
	}
	a.publishPresence(a.st.DisconnectOn(ctx, store.ExternalHolder, h))
}

// sweepHold bounds how long a node that stops answering mid-sweep keeps a
// sweeper's lock (store.WithSweepLock): the node expiry, after which the
// others would declare it dead anyway. 0 on a single node.
func (a *App) sweepHold() time.Duration {
	if a.node == nil {
		return 0
	}
	return a.node.Config().NodeExpiry
}
