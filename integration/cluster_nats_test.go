package integration

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aspd/aspd/internal/dbtest"
)

// The cluster with its wake-ups on NATS (--cluster-nats, docs/cluster.md)
// instead of LISTEN/NOTIFY. Every test sets --cluster-poll 1h, so a node
// learns of another node's commits only through the bus (or the catch-up a
// resubscription owes): what these tests see delivered, NATS carried.
// Without a NATS server they skip loudly; CI sets ASPD_REQUIRE_NATS=1.

// natsCluster starts n nodes on one database, with their wake-ups on NATS
// at url under a subject prefix of their own, and counts the wake-ups that
// cross it.
func natsCluster(t *testing.T, url string, n int) ([]*server, *atomic.Int64) {
	t.Helper()
	subject := fmt.Sprintf("aspdtest.n%d", time.Now().UnixNano())
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	var seen atomic.Int64
	if _, err := nc.Subscribe(subject+".events", func(*nats.Msg) { seen.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return startCluster(t, n, "--cluster-poll", "1h", "--cluster-nats", url, "--cluster-nats-subject", subject), &seen
}

func TestClusterNATS(t *testing.T) {
	url := dbtest.NATS(t)
	t.Run("walkthrough", func(t *testing.T) {
		nodes, seen := natsCluster(t, url, 3)
		walkthrough(t, nodes[0], nodes[1], nodes[2])
		if seen.Load() == 0 {
			t.Fatal("no wake-up crossed NATS")
		}
		if !strings.Contains(nodes[0].logs(), `bus=nats`) {
			t.Fatalf("the node does not log its bus as nats:\n%s", nodes[0].logs())
		}
	})
	t.Run("ordering", func(t *testing.T) {
		nodes, _ := natsCluster(t, url, 3)
		clusterOrdering(t, nodes)
	})
	t.Run("token rotation", func(t *testing.T) {
		nodes, _ := natsCluster(t, url, 3)
		clusterTokenRotation(t, nodes)
	})
}

// TestClusterNATSRestart: the NATS server dies and comes back. Messages
// sent meanwhile are accepted (the bus is not on the message path), and the
// node on the other side delivers them once it is subscribed again.
func TestClusterNATSRestart(t *testing.T) {
	ns := dbtest.StartNATSServer(t)
	nodes, _ := natsCluster(t, ns.URL, 2)
	alice := nodes[0].provision("@nr.alice", "open")
	bob := nodes[1].provision("@nr.bob", "open")
	sid := dlSession(alice, "restart", bob)
	bobIn := bob.connect()
	alice.send(sid, "before")
	untilText(t, bobIn, "before")

	ns.Stop()
	alice.send(sid, "while NATS is down") // 201, checked by send
	time.Sleep(300 * time.Millisecond)
	ns.Start(t)
	untilText(t, bobIn, "while NATS is down")
	alice.send(sid, "after")
	untilText(t, bobIn, "after")
}

// TestClusterNATSUnreachable: a node whose NATS server does not answer
// refuses to start, says so, and does not print the URL's password.
func TestClusterNATSUnreachable(t *testing.T) {
	dbURL := dbtest.Postgres(t)
	ns := dbtest.StartNATSServer(t) // a port known to be free once it stops
	ns.Stop()
	bad := strings.Replace(ns.URL, "nats://", "nats://aspd:hunter2secret@", 1)
	code, stderr := ddRun(t, "--listen", "127.0.0.1:0", "--database-url", dbURL, "--data-dir", t.TempDir(), "--cluster-nats", bad)
	if code != 1 {
		t.Fatalf("aspd with an unreachable NATS: exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "NATS") || strings.Contains(stderr, "hunter2secret") {
		t.Fatalf("the refusal must name NATS and hide the password:\n%s", stderr)
	}
}
