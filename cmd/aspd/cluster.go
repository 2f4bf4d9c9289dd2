package main

import (
	"fmt"
	"time"

	"github.com/aspd/aspd/internal/cluster"
)

// Cluster flags (docs/cluster.md). On PostgreSQL every aspd is a node of
// the network its database holds: any number of them may share the URL.
// The embedded store serves one process (lock.go), so these flags do
// nothing there.

// maxNodeExpiry is the documented bound on how long a dead node's agents
// stay online.
const maxNodeExpiry = 20 * time.Second

func clusterFlags(e *envFlags, c *config) {
	def := cluster.DefaultConfig()
	e.dur(&c.cluster.Heartbeat, "cluster-heartbeat", def.Heartbeat, "PostgreSQL: how often this node marks itself alive in the nodes table")
	e.dur(&c.cluster.NodeExpiry, "cluster-node-expiry", def.NodeExpiry,
		"PostgreSQL: a node silent this long is dead; a surviving node expires its connections (at most 20s, more than twice --cluster-heartbeat)")
	e.dur(&c.cluster.Poll, "cluster-poll", def.Poll,
		"PostgreSQL: how often a node checks for commits whose wake-up (NOTIFY) it missed; the bound on the delay a missed wake-up causes")
	e.str(&c.cluster.Addr, "cluster-addr", "", "PostgreSQL: this node's address as operators should see it in the nodes table (default: --listen)")
}

func checkCluster(c *config) error {
	cl := c.cluster
	switch {
	case cl.Heartbeat <= 0 || cl.Poll <= 0:
		return fmt.Errorf("--cluster-heartbeat and --cluster-poll must be positive")
	case cl.NodeExpiry > maxNodeExpiry:
		return fmt.Errorf("--cluster-node-expiry must be at most %s", maxNodeExpiry)
	case cl.NodeExpiry <= 2*cl.Heartbeat:
		return fmt.Errorf("--cluster-node-expiry (%s) must be more than twice --cluster-heartbeat (%s), or a slow heartbeat would expire a live node",
			cl.NodeExpiry, cl.Heartbeat)
	}
	return nil
}

// clusterConfig returns the node configuration for dbURL, or nil when the
// store is the embedded one (a single node).
func clusterConfig(c *config, dbURL string, ringSize int) *cluster.Config {
	if !isPostgresURL(dbURL) {
		return nil
	}
	cl := c.cluster
	cl.DatabaseURL = dbURL
	cl.RingSize = ringSize
	if cl.Addr == "" {
		cl.Addr = c.listen
	}
	return &cl
}
