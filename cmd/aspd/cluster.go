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
	// A NATS URL may carry a user and password or a token: a secret.
	e.secret(&c.cluster.NATSURL, "cluster-nats",
		"PostgreSQL: carry the nodes' wake-ups on this NATS server (nats://host:4222) instead of LISTEN/NOTIFY; every node of the network must set it alike").
		withFile(e, "cluster-nats-file", true, "file holding the --cluster-nats URL, when it carries credentials")
	e.str(&c.cluster.NATSSubject, "cluster-nats-subject", def.NATSSubject,
		"PostgreSQL with --cluster-nats: the subject prefix; networks sharing a NATS server need different ones")
}

// natsSubject matches a NATS subject prefix: dot-separated tokens of
// letters, digits, - and _ (no wildcards, no spaces).
var natsSubject = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

func checkCluster(c *config, e *envFlags) error {
	cl := c.cluster
	if err := e.check(
		bound{cl.Heartbeat <= 0, "cluster-heartbeat", "a positive duration, e.g. 3s"},
		bound{cl.Poll <= 0, "cluster-poll", "a positive duration, e.g. 1s"},
		bound{cl.NodeExpiry > maxNodeExpiry, "cluster-node-expiry", "at most " + maxNodeExpiry.String()},
		bound{!natsSubject.MatchString(cl.NATSSubject), "cluster-nats-subject", "dot-separated tokens of letters, digits, - and _ (no wildcards), e.g. net-1.aspd"},
	); err != nil {
		return err
	}
	switch {
	case cl.NATSURL != "" && !validNATSURL(cl.NATSURL):
		// The URL is not echoed: it may carry credentials.
		return fmt.Errorf("the NATS URL from %s must be a nats://, tls://, ws:// or wss:// URL with a host (or a comma-separated list of them), e.g. nats://127.0.0.1:4222", e.secretSource("cluster-nats"))
	case cl.NodeExpiry <= 2*cl.Heartbeat:
		return fmt.Errorf("%s is not more than twice %s: a slow heartbeat would expire a live node; raise --cluster-node-expiry or lower --cluster-heartbeat",
			e.describe("cluster-node-expiry"), e.describe("cluster-heartbeat"))
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
