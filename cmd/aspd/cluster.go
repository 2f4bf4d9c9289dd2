package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
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
	e.str(&c.cluster.NATSURL, "cluster-nats", "",
		"PostgreSQL: carry the nodes' wake-ups on this NATS server (nats://host:4222) instead of LISTEN/NOTIFY; every node of the network must set it alike")
	e.str(&c.cluster.NATSSubject, "cluster-nats-subject", def.NATSSubject,
		"PostgreSQL with --cluster-nats: the subject prefix; networks sharing a NATS server need different ones")
}

// natsSubject matches a NATS subject prefix: dot-separated tokens of
// letters, digits, - and _ (no wildcards, no spaces).
var natsSubject = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

func checkCluster(c *config) error {
	cl := c.cluster
	switch {
	case cl.Heartbeat <= 0 || cl.Poll <= 0:
		return fmt.Errorf("--cluster-heartbeat and --cluster-poll must be positive")
	case cl.NodeExpiry > maxNodeExpiry:
		return fmt.Errorf("--cluster-node-expiry must be at most %s", maxNodeExpiry)
	case !natsSubject.MatchString(cl.NATSSubject):
		return fmt.Errorf("--cluster-nats-subject %q must be dot-separated tokens of letters, digits, - and _", cl.NATSSubject)
	case cl.NATSURL != "" && !validNATSURL(cl.NATSURL):
		return fmt.Errorf("--cluster-nats must be a nats://, tls://, ws:// or wss:// URL with a host, e.g. nats://127.0.0.1:4222")
	case cl.NodeExpiry <= 2*cl.Heartbeat:
		return fmt.Errorf("--cluster-node-expiry (%s) must be more than twice --cluster-heartbeat (%s), or a slow heartbeat would expire a live node",
			cl.NodeExpiry, cl.Heartbeat)
	}
	return nil
}

func validNATSURL(raw string) bool {
	for _, one := range strings.Split(raw, ",") { // the client takes a server list
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" {
			return false
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return false
		}
	}
	return true
}

// checkClusterStore refuses cluster settings that the store cannot use.
func checkClusterStore(c *config, dbURL string) error {
	if c.cluster.NATSURL != "" && !isPostgresURL(dbURL) {
		return fmt.Errorf("--cluster-nats is for several nodes on PostgreSQL (--database-url postgres://...); the embedded store serves one node")
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
