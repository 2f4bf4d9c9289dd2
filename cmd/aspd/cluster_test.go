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
		{"--cluster-nats", "127.0.0.1:4222"},
		{"--cluster-nats", "http://127.0.0.1:4222"},
		{"--cluster-nats", "nats://a:4222,nats://"},
		{"--cluster-nats", "nats://127.0.0.1:4222", "--cluster-nats-subject", "aspd.*"},
		{"--cluster-nats-subject", "a b"},
		{"--cluster-nats-subject", "a..b"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("%s accepted", strings.Join(args, " "))
		}
	}
	c2, err := parseConfig([]string{"--cluster-nats", "nats://127.0.0.1:4222,nats://10.0.0.2:4222", "--cluster-nats-subject", "net-1.aspd"})
	if err != nil || c2.cluster.NATSSubject != "net-1.aspd" {
		t.Fatalf("NATS flags: %v %+v", err, c2.cluster)
	}
	if err := checkClusterStore(c2, "/tmp/x.db"); err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("--cluster-nats on the embedded store: %v", err)
	}
	if err := checkClusterStore(c2, "postgres://db/aspd"); err != nil {
		t.Fatal(err)
	}
	if cl := clusterConfig(c, "/tmp/x.db", 256); cl != nil {
		t.Fatalf("a SQLite store got a cluster configuration: %+v", cl)
	}
	cl := clusterConfig(c, "postgres://db/aspd", 128)
	if cl == nil || cl.DatabaseURL != "postgres://db/aspd" || cl.Addr != "127.0.0.1:7000" || cl.RingSize != 128 || cl.Poll != 250*time.Millisecond {
		t.Fatalf("cluster configuration %+v", cl)
	}
}
