package integration

import (
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/aspdtest"
	"github.com/aspd/aspd/internal/dbtest"
)

// Several aspd nodes on one PostgreSQL database (docs/cluster.md). Every
// test starts three aspd processes on the same database URL, on different
// ports, and puts agents on different nodes. PostgreSQL only: the embedded
// store serves one process (TestClusterSQLiteRefused). With
// ASPD_REQUIRE_POSTGRES=1 an unreachable PostgreSQL fails these tests.

// clusterFast are flags that shorten the cluster's timers for the tests:
// heartbeat 200ms, a node is dead after 1s of silence, catch-up every 250ms.
var clusterFast = []string{"--cluster-heartbeat", "200ms", "--cluster-node-expiry", "1s", "--cluster-poll", "250ms"}

// startCluster starts n aspd nodes on one fresh PostgreSQL database.
func startCluster(t *testing.T, n int, args ...string) []*server {
	t.Helper()
	dbURL := dbtest.Postgres(t)
	nodes := make([]*server, n)
	for i := range nodes {
		nodes[i] = startServer(t, dbURL, args...)
	}
	return nodes
}

// on returns the agent with its requests and streams sent to node s.
func (a *agent) on(s *server) *agent {
	b := *a
	b.s = s
	return &b
}

// TestClusterWalkthrough plays the whitepaper §7.1 and §7.2 walkthrough with
// each of the three agents on its own node.
func TestClusterWalkthrough(t *testing.T) {
	nodes := startCluster(t, 3)
	walkthrough(t, nodes[0], nodes[1], nodes[2])
}

// TestClusterOrdering: two agents per node, all in one session, each sends
// its messages through its own node while all of them send at once. Every
// agent's stream receives every sequence of the session exactly in order,
// with no gap, and each sender's messages in the order it sent them.
func TestClusterOrdering(t *testing.T) {
	clusterOrdering(t, startCluster(t, 3))
}

// clusterOrdering is TestClusterOrdering's hammer on the given nodes.
func clusterOrdering(t *testing.T, nodes []*server) {
	const perNode, perSender = 2, 40
	var agents []*agent
	for i, n := range nodes {
		for j := 0; j < perNode; j++ {
			agents = append(agents, n.provision(fmt.Sprintf("@cl.a%d%d", i, j), "open"))
		}
	}
	sid := dlSession(agents[0], "hammer", agents[1:]...)
	head := int64(len(dlLog(t, nodes[0], sid))) // the invitations and joins

	streams := make([]*stream, len(agents))
	for i, a := range agents {
		streams[i] = a.connect() // each on its own node
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(agents))
	for _, a := range agents {
		wg.Add(1)
		go func(a *agent) {
			defer wg.Done()
			for k := 0; k < perSender; k++ {
				code, out, err := dlTry("POST", a.s.url+"/sessions/"+sid+"/messages", a.token,
					map[string]any{"content": fmt.Sprintf("%s %d", a.handle, k)})
				if err != nil || code != http.StatusCreated {
					errs <- fmt.Errorf("%s message %d: %d %s %v", a.handle, k, code, out, err)
					return
				}
			}
		}(a)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last := head + int64(len(agents)*perSender)

	deadline := time.Now().Add(60 * time.Second)
	for i, st := range streams {
		var prev int64
		nextFrom := map[string]int{}
		for prev < last {
			if time.Now().After(deadline) {
				t.Fatalf("%s: stream reached sequence %d of %d within 60s", agents[i].handle, prev, last)
			}
			e := st.next()
			if e.SessionID != sid {
				continue
			}
			if e.Sequence != prev+1 {
				t.Fatalf("%s (on %s): sequence %d after %d: a gap or a reordering", agents[i].handle, agents[i].s.url, e.Sequence, prev)
			}
			prev = e.Sequence
			if e.Type == "session.message" {
				text := dlText(e)
				sender, k, ok := strings.Cut(text, " ")
				if !ok {
					t.Fatalf("unexpected message %q", text)
				}
				if want := fmt.Sprint(nextFrom[sender]); k != want {
					t.Fatalf("%s: message %s of %s arrived when %s was due", agents[i].handle, k, sender, want)
				}
				nextFrom[sender]++
			}
		}
		for _, a := range agents {
			if nextFrom[a.handle] != perSender {
				t.Fatalf("%s received %d messages of %s, want %d", agents[i].handle, nextFrom[a.handle], a.handle, perSender)
			}
		}
	}
}

// TestClusterPresence: an agent with connections on two nodes that drops
// one stays online (no session.disconnected anywhere); dropping the other
// fires session.disconnected once, and connecting on a third node fires
// session.reconnected once.
func TestClusterPresence(t *testing.T) {
	nodes := startCluster(t, 3, clusterFast...)
	alice := nodes[0].provision("@cl.alice", "open")
	bob := nodes[2].provision("@cl.bob", "open")
	sid := dlSession(bob, "presence", alice)
	bobIn := newInbox(bob.connect())
	a1 := alice.connect()
	a2 := alice.on(nodes[1]).connect()
	bob.send(sid, "both up")
	untilMessage(t, bobIn, "both up")
	// Both streams delivered: both nodes have committed alice's presence.
	untilMessage(t, newInbox(a1), "both up")
	a2In := newInbox(a2)
	untilMessage(t, a2In, "both up")
	a1.close()
	dlWaitConnections(t, nodes[0], 0)
	// Long enough for a wrong disconnect to be written, published and
	// delivered across nodes (several catch-up polls).
	bobIn.quiet(1500 * time.Millisecond)
	bob.send(sid, "one down")
	untilMessage(t, bobIn, "one down")

	a2.close()
	e := bobIn.expect("session.disconnected")[0]
	wantPayload(t, e, map[string]any{"agent": alice.handle})
	a3 := alice.on(nodes[2]).connect()
	e = bobIn.expect("session.reconnected")[0]
	wantPayload(t, e, map[string]any{"agent": alice.handle})
	bobIn.quiet(1500 * time.Millisecond)
	a3.close()
	bobIn.expect("session.disconnected")

	// The log agrees: one disconnect and one reconnect for each real change.
	var got []string
	for _, e := range dlLog(t, nodes[1], sid) {
		if e.Type == "session.disconnected" || e.Type == "session.reconnected" {
			got = append(got, e.Type)
		}
	}
	if want := "[session.disconnected session.reconnected session.disconnected]"; fmt.Sprint(got) != want {
		t.Fatalf("presence events in the log: %v, want %s", got, want)
	}
}

// TestClusterNodeKilled: a node is killed (SIGKILL). Its agent that
// reconnects to another node misses nothing sent meanwhile; its agent that
// does not come back is marked disconnected by a surviving node within the
// documented bound (PostgreSQL frees the dead node's liveness lock at once,
// so one sweep: here 100ms; checked with slack), and the grace window then
// runs once for the network.
func TestClusterNodeKilled(t *testing.T) {
	nodes := startCluster(t, 3, append([]string{"--grace-window", "2s"}, clusterFast...)...)
	alice := nodes[0].provision("@cl.alice", "open")
	carol := nodes[0].provision("@cl.carol", "open")
	bob := nodes[1].provision("@cl.bob", "open")
	sid := dlSession(bob, "kill", alice, carol)
	bobIn := newInbox(bob.connect())
	aliceIn := newInbox(alice.connect())
	carolIn := newInbox(carol.connect())
	bob.send(sid, "before")
	// Every stream delivered: every connection's presence is committed.
	untilMessage(t, aliceIn, "before")
	untilMessage(t, carolIn, "before")
	untilMessage(t, bobIn, "before")

	nodes[0].kill()
	killed := time.Now()
	// Bob keeps talking while alice is cut off; she comes back on node 3.
	sent := []string{"during 1", "during 2", "during 3"}
	for _, m := range sent {
		bob.send(sid, m)
	}
	alice3 := newInbox(alice.on(nodes[2]).connect())
	var got []string
	for len(got) < len(sent) {
		e := alice3.next()
		if e.Type == "session.message" && strings.HasPrefix(dlText(e), "during") {
			got = append(got, dlText(e))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(sent) {
		t.Fatalf("alice on another node got %v, want %v", got, sent)
	}

	// Carol is not coming back: a survivor expires the dead node. (Alice
	// may have been marked disconnected too, and reconnected.)
	for {
		e := bobIn.next()
		if e.Type == "session.disconnected" && e.field("agent") == carol.handle {
			break
		}
		if e.Type == "session.left" {
			t.Fatalf("bob got %s before carol's disconnect", e.Raw)
		}
	}
	if d := time.Since(killed); d > 3*time.Second {
		t.Fatalf("the dead node's agent was marked disconnected after %v; the bound is one sweep (100ms here) after PostgreSQL drops the connection", d)
	}
	// Her grace window runs (2s): one session.left for the network.
	for {
		e := bobIn.next()
		if e.Type == "session.left" {
			wantPayload(t, e, map[string]any{"agent": carol.handle, "reason": "grace_expired"})
			break
		}
	}
	// Once each for the network: carol disconnected and left; alice, if
	// the expiry beat her reconnect, disconnected and reconnected once.
	counts := map[string]int{}
	for _, e := range dlLog(t, nodes[1], sid) {
		if e.Type == "session.disconnected" || e.Type == "session.reconnected" || e.Type == "session.left" {
			counts[e.Type+" "+payload(t, e)["agent"].(string)]++
		}
	}
	aliceDown := counts["session.disconnected @cl.alice"]
	want := map[string]int{"session.disconnected @cl.carol": 1, "session.left @cl.carol": 1}
	if aliceDown > 0 {
		want["session.disconnected @cl.alice"], want["session.reconnected @cl.alice"] = 1, 1
	}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("presence events in the log %v, want %v", counts, want)
	}
}

// TestClusterSweepOnce: with three nodes running the grace sweeper, a
// disconnect past the grace window becomes exactly one session.left, and
// every node's stream of the other participant shows it once.
func TestClusterSweepOnce(t *testing.T) {
	nodes := startCluster(t, 3, append([]string{"--grace-window", "500ms"}, clusterFast...)...)
	agents := []*agent{nodes[0].provision("@cl.owner", "open"), nodes[1].provision("@cl.second", "open"), nodes[2].provision("@cl.leaver", "open")}
	sid := dlSession(agents[0], "sweep", agents[1], agents[2])
	leaver := agents[2].connect()
	in0, in1 := newInbox(agents[0].connect()), newInbox(agents[1].connect())
	dlWaitConnections(t, nodes[2], 1)
	leaver.close()
	for _, in := range []*inbox{in0, in1} {
		for {
			e := in.next()
			if e.Type == "session.disconnected" {
				break
			}
		}
		in.expect("session.left")
		in.quiet(1500 * time.Millisecond) // several sweeps on every node
	}
	n := 0
	for _, e := range dlLog(t, nodes[0], sid) {
		if e.Type == "session.left" {
			n++
			wantPayload(t, e, map[string]any{"agent": agents[2].handle, "reason": "grace_expired"})
		}
	}
	if n != 1 {
		t.Fatalf("%d session.left events, want exactly 1", n)
	}
}

// TestClusterSQLiteRefused: the embedded store serves one process; a second
// aspd on the same SQLite file is refused, and the message names the fix
// for several nodes: PostgreSQL.
func TestClusterSQLiteRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "aspd.db")
	var log aspdtest.Log
	p, err := aspdtest.Start(aspdBin, []string{"--listen", "127.0.0.1:0", "--database-url", db, "--data-dir", dir},
		append(append([]string{}, ddEnv...), "ASPD_ADMIN_TOKEN=admin-cluster-refused-0123456789"), &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	defer p.Stop()
	code, stderr := ddRun(t, "--listen", "127.0.0.1:0", "--database-url", db, "--data-dir", t.TempDir())
	if code != 1 {
		t.Fatalf("second aspd on the SQLite file: exit %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"PostgreSQL", "--database-url postgres://", "several aspd nodes"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr)
		}
	}
}

// untilMessage reads in until the session.message with text, failing on
// any presence event on the way.
func untilMessage(t *testing.T, in *inbox, text string) {
	t.Helper()
	for {
		e := in.next()
		switch e.Type {
		case "session.disconnected", "session.reconnected", "session.left":
			t.Fatalf("got %s while waiting for %q", e.Raw, text)
		case "session.message":
			if dlText(e) == text {
				return
			}
		}
	}
}

// TestClusterTokenRotation: rotating a token through one node closes the
// agent's WebSockets and frame stream on the other nodes and makes the old
// token fail there at once, though those nodes had it in their
// authentication caches; revocation does the same.
func TestClusterTokenRotation(t *testing.T) {
	clusterTokenRotation(t, startCluster(t, 3))
}

// clusterTokenRotation is TestClusterTokenRotation on the given nodes.
func clusterTokenRotation(t *testing.T, nodes []*server) {
	a := nodes[0].provision("@cl.rotating", "open")
	// Warm the other nodes' authentication caches with the old token.
	for _, n := range nodes[1:] {
		if code, out := a.on(n).do("GET", "/sessions", nil); code != http.StatusOK {
			t.Fatalf("GET /sessions on %s: %d %s", n.url, code, out)
		}
	}
	ws1, ws2 := a.on(nodes[1]).connect(), a.on(nodes[2]).connect()
	sse := sseOpen(t, nodes[2], a.token, "/stream?instrument=cl-1", nil)
	dlWaitConnections(t, nodes[1], 1)
	dlWaitConnections(t, nodes[2], 1)

	code, out := nodes[0].adminDo("POST", "/agents/@cl.rotating/token", nil)
	if code != http.StatusOK {
		t.Fatalf("rotate: %d %s", code, out)
	}
	ws1.wantClosed(4001)
	ws2.wantClosed(4001)
	sseWaitEnd(t, sse)
	for _, n := range nodes {
		clusterWait401(t, a.on(n))
	}
	var rot struct {
		Token string `json:"token"`
	}
	mustUnmarshal(t, out, &rot)
	a.token = rot.Token
	ws := a.on(nodes[2]).connect()
	dlWaitConnections(t, nodes[2], 1)
	if code, out := nodes[1].adminDo("DELETE", "/agents/@cl.rotating/token", nil); code != http.StatusOK {
		t.Fatalf("revoke: %d %s", code, out)
	}
	ws.wantClosed(4001)
	clusterWait401(t, a.on(nodes[2]))
}

// clusterWait401 waits until the agent's token fails on its node. The
// node that made the change answers 401 at once; the others as soon as the
// cut-off's notification arrives (milliseconds; the authentication cache's
// 5s TTL would be too late for this bound).
func clusterWait401(t *testing.T, a *agent) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		code, out := a.do("GET", "/sessions", nil)
		if code == http.StatusUnauthorized {
			wantError(t, "old token on "+a.s.url, code, out, http.StatusUnauthorized, "unauthorized")
			return
		}
		if code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("old token on %s: %d %s, still not 401 after 1s", a.s.url, code, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sseWaitEnd waits (bounded) for the server to end an SSE stream.
func sseWaitEnd(t *testing.T, c *sseClient) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-c.items:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the frame stream is still open 10s after the cut-off")
		}
	}
}

// TestClusterNodeStalled: a node that stops heartbeating while its database
// connections stay open (SIGSTOP: a hung host or a long pause) is expired
// by a survivor after the node expiry (1s here, plus a sweep); when it
// resumes it finds itself expired, registers again and records its agents'
// presence again: session.reconnected, with the agent's connection kept
// open all along and delivery going on.
func TestClusterNodeStalled(t *testing.T) {
	nodes := startCluster(t, 3, append([]string{"--grace-window", "30s"}, clusterFast...)...)
	carol := nodes[0].provision("@cl.carol", "open")
	bob := nodes[1].provision("@cl.bob", "open")
	sid := dlSession(bob, "stall", carol)
	bobIn := newInbox(bob.connect())
	carolIn := newInbox(carol.connect())
	bob.send(sid, "before")
	untilMessage(t, bobIn, "before")
	// Carol's stream has delivered: her connection's presence is committed
	// (a node frozen inside that transaction would hold it uncommitted).
	untilMessage(t, carolIn, "before")

	pid := nodes[0].proc.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	stopped := time.Now()
	for {
		e := bobIn.next()
		if e.Type == "session.disconnected" {
			wantPayload(t, e, map[string]any{"agent": carol.handle})
			break
		}
	}
	if d := time.Since(stopped); d < 500*time.Millisecond || d > 4*time.Second {
		t.Fatalf("the stalled node's agent was marked disconnected after %v; want the node expiry (1s) plus a sweep", d)
	}
	resume()
	e := bobIn.expect("session.reconnected")[0]
	wantPayload(t, e, map[string]any{"agent": carol.handle})
	bob.send(sid, "after")
	untilMessage(t, bobIn, "after")
	// Her stream stayed open all along; it gets what happened meanwhile.
	for _, want := range []string{"session.disconnected", "session.reconnected"} {
		if e := carolIn.next(); e.Type != want || e.field("agent") != carol.handle {
			t.Fatalf("carol got %s, want her own %s", e.Raw, want)
		}
	}
	untilMessage(t, carolIn, "after")
	// The network agrees she is online: no grace expiry, presence once each.
	counts := map[string]int{}
	for _, e := range dlLog(t, nodes[2], sid) {
		counts[e.Type]++
	}
	if counts["session.disconnected"] != 1 || counts["session.reconnected"] != 1 || counts["session.left"] != 0 {
		t.Fatalf("log %v", counts)
	}
}

// TestClusterMCPWait: a wait_for_events call sleeping on one node returns
// a message sent through another as soon as the wake-up arrives, before
// its 1s fallback re-read would have found it.
func TestClusterMCPWait(t *testing.T) {
	nodes := startCluster(t, 2)
	alice := nodes[0].provision("@cl.alice", "open")
	bob := nodes[1].provision("@cl.bob", "open")
	sid := dlSession(bob, "mcp", alice)
	m := mcpConnect(t, nodes[0], alice)
	m.drain(100)

	type result struct {
		evs []event
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		evs, _ := m.wait(10, 100)
		done <- result{evs, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond) // the call is asleep by now
	sent := time.Now()
	bob.send(sid, "across nodes")
	select {
	case r := <-done:
		if len(r.evs) != 1 || dlText(r.evs[0]) != "across nodes" {
			t.Fatalf("wait_for_events returned %v", mcpTypes(r.evs))
		}
		if d := r.at.Sub(sent); d > 800*time.Millisecond {
			t.Fatalf("wait_for_events returned %v after the send: the fallback re-read, not the wake-up", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("wait_for_events did not return")
	}
}

// TestClusterLostWakeUps: the nodes' LISTEN and NOTIFY connections are
// killed over and over (pg_terminate_backend) while messages flow from one
// node to an agent on another. Wake-ups are lost, the listener reconnects,
// and the catch-up still delivers every message, in order, exactly once.
func TestClusterLostWakeUps(t *testing.T) {
	nodes := startCluster(t, 2, clusterFast...)
	alice := nodes[0].provision("@cl.alice", "open")
	bob := nodes[1].provision("@cl.bob", "open")
	sid := dlSession(bob, "lost", alice)
	aliceIn := alice.connect() // replays the set-up from 1, then live
	dlWaitConnections(t, nodes[0], 1)

	db, err := sql.Open("pgx", nodes[0].dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stop := make(chan struct{})
	killed := make(chan int, 1)
	go func() {
		n := 0
		defer func() { killed <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			var k int
			if err := db.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name IN ('aspd-listen', 'aspd-notify')`).Scan(&k); err == nil {
				n += k
			}
		}
	}()
	const msgs = 60
	for i := 0; i < msgs; i++ {
		bob.send(sid, fmt.Sprintf("m%d", i))
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	if n := <-killed; n == 0 {
		t.Fatal("no LISTEN or NOTIFY connection was terminated: the test tested nothing")
	}
	var prev int64
	for got := 0; got < msgs; {
		e := aliceIn.next()
		if e.Sequence != prev+1 {
			t.Fatalf("sequence %d after %d", e.Sequence, prev)
		}
		prev = e.Sequence
		if e.Type == "session.message" {
			if want := fmt.Sprintf("m%d", got); dlText(e) != want {
				t.Fatalf("got %q, want %q", dlText(e), want)
			}
			got++
		}
	}
	// Every message arrived by polling; the listener comes back once its
	// backoff (up to 5 s) has run out, which may be after the last one.
	for deadline := time.Now().Add(15 * time.Second); clusterMetric(t, nodes[0], "aspd_cluster_listener_connects_total") < 2; {
		if time.Now().After(deadline) {
			_, out := request(t, "GET", nodes[0].url+"/metrics", nodes[0].admin, nil)
			t.Fatalf("the listener has not reconnected within 15 s:\n%s", clusterMetrics(out))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func clusterMetrics(out []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "aspd_cluster_") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// clusterMetric reads one aspd_cluster_ sample of node s.
func clusterMetric(t *testing.T, s *server, name string) int64 {
	t.Helper()
	code, out := request(t, "GET", s.url+"/metrics", s.admin, nil)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, l)
			}
			return int64(n)
		}
	}
	t.Fatalf("no %s in /metrics:\n%s", name, clusterMetrics(out))
	return 0
}

// TestClusterAloneThenJoined: a node alone on its database announces no
// commits; a second node's hello makes the first announce again, so a
// commit on the first reaches the second by NOTIFY, not by the catch-up
// (set to an hour here, past the test's bounds).
func TestClusterAloneThenJoined(t *testing.T) {
	dbURL := dbtest.Postgres(t)
	args := []string{"--cluster-poll", "1h"}
	a := startServer(t, dbURL, args...)
	alice := a.provision("@cl.alice", "open")
	bob := a.provision("@cl.bob", "open")
	sid := dlSession(alice, "alone", bob)
	alice.send(sid, "while alone")
	if n := clusterMetric(t, a, "aspd_cluster_notify_skipped_total"); n < 1 {
		t.Fatalf("a lone node skipped %d announcements, want at least 1", n)
	}
	if n := clusterMetric(t, a, "aspd_cluster_notify_sent_total"); n != 1 {
		t.Fatalf("a lone node sent %d NOTIFYs, want 1 (its hello)", n)
	}

	b := startServer(t, dbURL, args...)
	deadline := time.Now().Add(10 * time.Second)
	for clusterMetric(t, a, "aspd_cluster_peers") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first node did not count the second within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	bobIn := bob.on(b).connect() // replays the session from 1 (the catch-up at connect)
	for {
		if e := bobIn.next(); e.Type == "session.message" && dlText(e) == "while alone" {
			break
		}
	}
	alice.send(sid, "after the hello")
	untilText(t, bobIn, "after the hello")
}

func untilText(t *testing.T, st *stream, text string) {
	t.Helper()
	for {
		if e := st.next(); e.Type == "session.message" && dlText(e) == text {
			return
		}
	}
}

// TestClusterGuessesFollowOtherNodes: a node appends a lone message in one
// round trip on its own last write of the session (store/fastappend.go),
// and a wake-up from another node drops that copy. Two agents on two nodes
// take turns in one session, each waiting for the other's message to
// arrive (by wake-up: the catch-up is set to an hour) before it answers:
// neither node ever guesses on a stale copy. Then one agent sends three in
// a row on its node: the second and third are guessed, and hold.
func TestClusterGuessesFollowOtherNodes(t *testing.T) {
	nodes := startCluster(t, 2, "--cluster-poll", "1h")
	for _, n := range nodes {
		deadline := time.Now().Add(10 * time.Second)
		for clusterMetric(t, n, "aspd_cluster_peers") != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the nodes did not count each other within 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	alice := nodes[0].provision("@gu.alice", "open")
	bob := nodes[0].provision("@gu.bob", "open").on(nodes[1])
	sid := dlSession(alice, "turns", bob)
	aliceIn, bobIn := alice.connect(), bob.connect()
	for i := range 5 {
		a, b := fmt.Sprintf("alice %d", i), fmt.Sprintf("bob %d", i)
		alice.send(sid, a)
		untilText(t, bobIn, a)
		bob.send(sid, b)
		untilText(t, aliceIn, b)
	}
	const miss, hit = `aspd_store_guessed_appends_total{result="miss"}`, `aspd_store_guessed_appends_total{result="hit"}`
	for i, n := range nodes {
		if m := clusterMetric(t, n, miss); m != 0 {
			t.Fatalf("node %d failed %d guesses: a wake-up from the other node did not drop its copy", i, m)
		}
	}
	hits := clusterMetric(t, nodes[0], hit)
	for i := range 3 {
		alice.send(sid, fmt.Sprintf("alice again %d", i))
	}
	if got := clusterMetric(t, nodes[0], hit) - hits; got != 2 {
		t.Fatalf("three messages in a row on one node: %d guessed, want 2 (the first takes the lock)", got)
	}
	if m := clusterMetric(t, nodes[0], miss); m != 0 {
		t.Fatalf("%d failed guesses", m)
	}
}
