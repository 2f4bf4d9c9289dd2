package main

import (
	"strings"
	"testing"
	"time"
)

// The cluster flags: documented defaults, the environment, the bounds, and
// a node configuration only for PostgreSQL URLs.
func TestClusterFlags(t *testing.T) {
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.cluster.Heartbeat != 3*time.Second || c.cluster.NodeExpiry != 15*time.Second || c.cluster.Poll != time.Second {
		t.Fatalf("defaults %+v", c.cluster)
	}
	t.Setenv("ASPD_CLUSTER_POLL", "250ms")
	c, err = parseConfig([]string{"--cluster-heartbeat", "200ms", "--cluster-node-expiry", "1s", "--listen", "127.0.0.1:7000"})
	if err != nil {
		t.Fatal(err)
	}
	if c.cluster.Heartbeat != 200*time.Millisecond || c.cluster.NodeExpiry != time.Second || c.cluster.Poll != 250*time.Millisecond {
		t.Fatalf("flags %+v", c.cluster)
	}
	for _, args := range [][]string{
		{"--cluster-node-expiry", "21s"},
		{"--cluster-heartbeat", "5s", "--cluster-node-expiry", "10s"},
		{"--cluster-heartbeat", "0s"},
		{"--cluster-poll", "-1s"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("%s accepted", strings.Join(args, " "))
		}
	}
	if cl := clusterConfig(c, "/tmp/x.db", 256); cl != nil {
		t.Fatalf("a SQLite store got a cluster configuration: %+v", cl)
	}
	cl := clusterConfig(c, "postgres://db/aspd", 128)
	if cl == nil || cl.DatabaseURL != "postgres://db/aspd" || cl.Addr != "127.0.0.1:7000" || cl.RingSize != 128 || cl.Poll != 250*time.Millisecond {
		t.Fatalf("cluster configuration %+v", cl)
	}
}
