package main

import (
	"strings"
	"time"

	"github.com/aspd/aspd/aspclient"
)

// Several aspd nodes (docs/cluster.md): --server may name several nodes
// of one network, comma-separated. Agents are assigned to them round-robin
// in agent order; each agent's connection and every request made with its
// token go to its node (agent.node), so a session's participants sit on
// different nodes and its events cross nodes. Operator requests, /metrics, /readyz and
// --pid concern the first node.

// splitServers returns the base URLs of a --server value, without trailing
// slashes and empty items.
func splitServers(raw string) []string {
	var out []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSuffix(strings.TrimSpace(s), "/"); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// spreadAgents assigns the agents to the nodes round-robin and makes
// their clients (aspclient): one for REST calls on the pooled transport,
// one for WS /connect on the dialer that spreads source addresses. It runs
// once, after provisioning and before any agent request.
func (b *bench) spreadAgents() error {
	nodes := b.o.servers
	if len(nodes) == 0 {
		nodes = []string{strings.TrimSuffix(b.o.server, "/")}
	}
	for i, a := range b.agents {
		a.node = nodes[i%len(nodes)]
		var err error
		// The REST client's own timeout is off: b.http bounds each request
		// (60s) without a timer per call.
		if a.api, err = aspclient.New(a.node, a.token, aspclient.WithHTTPClient(b.http), aspclient.WithTimeout(0)); err != nil {
			return usagef("--server: %v", err)
		}
		if a.ws, err = aspclient.New(a.node, a.token, aspclient.WithHTTPClient(b.wsHTTP), aspclient.WithTimeout(30*time.Second), aspclient.WithReadLimit(8<<20)); err != nil {
			return usagef("--server: %v", err)
		}
	}
	if len(nodes) > 1 {
		b.logf("agents spread round-robin over %d nodes: %s", len(nodes), strings.Join(nodes, ", "))
	}
	return nil
}

// serverList is --server as the report shows it: every node.
func serverList(o *options) string {
	if len(o.servers) == 0 {
		return o.server
	}
	return strings.Join(o.servers, ",")
}
