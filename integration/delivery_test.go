package integration

// End-to-end tests of aspd's delivery guarantees (whitepaper §6.4, Appendix
// C.4 and C.5): replay past per-agent cursors, presence and the grace
// window, several connections per agent, at-least-once delivery across a
// crash, slow-consumer isolation, block-induced silence, per-session order
// under concurrent senders, and presence recovery after a restart.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestDeliveryOfflineReplay: an agent offline (within the grace window)
// receives, per session, exactly the events it missed — its own
// session.disconnected, the messages, its session.reconnected — in order,
// with no gap and no duplicate, then live events.
func TestDeliveryOfflineReplay(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--grace-window", "30s", "--cursor-flush-interval", "50ms")
		ag := dlAgents(s, "a", "b")
		a, b := ag[0], ag[1]
		sids := make([]string, 3)
		heads := map[string]int64{}
		for i := range sids {
			sids[i] = dlSession(a, fmt.Sprintf("offline replay %d", i), b)
			heads[sids[i]] = int64(len(dlLog(t, s, sids[i])))
		}

		// B connects and receives the sessions so far.
		bs := b.connect()
		last := map[string]int64{}
		for _, e := range dlReadUntil(bs, heads) {
			if _, ok := heads[e.SessionID]; !ok || e.Sequence > heads[e.SessionID] {
				t.Fatalf("B: unexpected event %s", e.Raw)
			}
			last[e.SessionID] = max(last[e.SessionID], e.Sequence)
		}
		bs.quiet(200 * time.Millisecond)
		bs.close()
		dlWaitConnections(t, s, 0)
		for _, sid := range sids {
			dlWaitLog(t, s, sid, "session.disconnected of B", func(e event) bool {
				return e.Type == "session.disconnected" && e.field("agent") == b.handle
			})
		}

		// While B is offline, A sends 50 messages over the three sessions.
		sent := map[string][]*dlMsg{}
		for i := range 50 {
			m := &dlMsg{from: a, sid: sids[i%3], text: fmt.Sprintf("offline %d", i)}
			if err := m.try(); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			sent[m.sid] = append(sent[m.sid], m)
		}

		// B reconnects: its session.reconnected is appended first, so the
		// replay of each session ends with it.
		bs = b.connect()
		reconnected := map[string]int64{}
		for _, sid := range sids {
			reconnected[sid] = dlWaitLog(t, s, sid, "session.reconnected of B", func(e event) bool {
				return e.Type == "session.reconnected" && e.field("agent") == b.handle
			}).Sequence
		}
		got := dlReadUntil(bs, reconnected)
		for _, sid := range sids {
			log := dlLog(t, s, sid)
			want := dlAfter(log, last[sid])
			// disconnected, the messages in the order sent, reconnected.
			if len(want) != len(sent[sid])+2 {
				t.Fatalf("session %s: log after %d has %d events, want %d: %s", sid, last[sid], len(want), len(sent[sid])+2, dlSeqString(want))
			}
			dlIs(t, want[0], "session.disconnected", "agent", b.handle)
			for i, m := range sent[sid] {
				dlMessage(t, want[i+1], m.ack, m.text)
			}
			dlIs(t, want[len(want)-1], "session.reconnected", "agent", b.handle)
			mine := dlOf(got, sid)
			dlSame(t, "B replay of "+sid, mine, want)
			dlRun(t, "B replay of "+sid, mine, last[sid]+1, int64(len(log)))
		}
		if len(got) != 50+2*3 {
			t.Fatalf("B replay has %d events, want %d", len(got), 56)
		}

		// Live delivery resumes after the replay, with nothing in between.
		m := &dlMsg{from: a, sid: sids[1], text: "live after replay"}
		if err := m.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, bs.next(), m.ack, m.text)
		bs.quiet(300 * time.Millisecond)
	})
}

// TestDeliveryGraceWithinWindow: a drop and return within the grace window
// shows as session.disconnected then session.reconnected, the agent stays
// joined, and what was sent during the gap reaches it when it returns.
func TestDeliveryGraceWithinWindow(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--grace-window", "30s", "--cursor-flush-interval", "50ms")
		ag := dlAgents(s, "a", "b")
		a, b := ag[0], ag[1]
		sid := dlSession(a, "grace within", b)
		head := map[string]int64{sid: 2}
		as := a.connect()
		dlRun(t, "A initial", dlReadUntil(as, head), 1, 2)
		bs := b.connect()
		dlReadUntil(bs, head)
		bs.quiet(200 * time.Millisecond)

		bs.close()
		e := as.next()
		dlIs(t, e, "session.disconnected", "agent", b.handle)
		if e.Sequence != 3 {
			t.Fatalf("disconnected at %d, want 3", e.Sequence)
		}
		if st := dlStatus(a, sid, b.handle); st != "joined" {
			t.Fatalf("B status during the gap: %q, want joined", st)
		}
		m1 := &dlMsg{from: a, sid: sid, text: "during the gap 1"}
		m2 := &dlMsg{from: a, sid: sid, text: "during the gap 2"}
		for _, m := range []*dlMsg{m1, m2} {
			if err := m.try(); err != nil {
				t.Fatal(err)
			}
			dlMessage(t, as.next(), m.ack, m.text)
		}

		bs = b.connect()
		got := bs.expect("session.disconnected", "session.message", "session.message", "session.reconnected")
		dlRun(t, "B after return", got, 3, 6)
		dlIs(t, got[0], "session.disconnected", "agent", b.handle)
		dlMessage(t, got[1], m1.ack, m1.text)
		dlMessage(t, got[2], m2.ack, m2.text)
		dlIs(t, got[3], "session.reconnected", "agent", b.handle)
		e = as.next()
		dlIs(t, e, "session.reconnected", "agent", b.handle)
		if e.Sequence != 6 {
			t.Fatalf("A: reconnected at %d, want 6", e.Sequence)
		}
		if st := dlStatus(a, sid, b.handle); st != "joined" {
			t.Fatalf("B status after return: %q, want joined", st)
		}

		// Both keep receiving live events.
		m3 := &dlMsg{from: b, sid: sid, text: "back"}
		if err := m3.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, as.next(), m3.ack, m3.text)
		dlMessage(t, bs.next(), m3.ack, m3.text)
		if n := len(dlLog(t, s, sid)); n != 7 {
			t.Fatalf("log has %d events, want 7", n)
		}
	})
}

// TestDeliveryGraceExpired: past the grace window the disconnect becomes
// session.left {reason: grace_expired}; the returning agent gets the events
// up to its session.left and nothing after.
func TestDeliveryGraceExpired(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--grace-window", "1s", "--cursor-flush-interval", "50ms")
		ag := dlAgents(s, "a", "b")
		a, b := ag[0], ag[1]
		sid := dlSession(a, "grace expired", b)
		head := map[string]int64{sid: 2}
		as := a.connect()
		dlRun(t, "A initial", dlReadUntil(as, head), 1, 2)
		bs := b.connect()
		dlReadUntil(bs, head)

		bs.close()
		dlIs(t, as.next(), "session.disconnected", "agent", b.handle)
		m1 := &dlMsg{from: a, sid: sid, text: "before the window ends"}
		if err := m1.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, as.next(), m1.ack, m1.text)
		left := as.next() // within next's 10s bound: the window is 1s
		dlIs(t, left, "session.left", "agent", b.handle, "reason", "grace_expired")
		if left.Sequence != 5 {
			t.Fatalf("left at %d, want 5", left.Sequence)
		}
		if st := dlStatus(a, sid, b.handle); st != "left" {
			t.Fatalf("B status after the window: %q, want left", st)
		}
		if st := dlStatus(b, sid, b.handle); st != "left" {
			t.Fatalf("B's own view of its status: %q, want left", st)
		}
		m2 := &dlMsg{from: a, sid: sid, text: "after B left"}
		if err := m2.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, as.next(), m2.ack, m2.text)

		bs = b.connect()
		got := bs.expect("session.disconnected", "session.message", "session.left")
		dlRun(t, "B after the window", got, 3, 5)
		dlMessage(t, got[1], m1.ack, m1.text)
		dlIs(t, got[2], "session.left", "agent", b.handle, "reason", "grace_expired")
		m3 := &dlMsg{from: a, sid: sid, text: "after B came back"}
		if err := m3.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, as.next(), m3.ack, m3.text) // no session.reconnected for a left agent
		bs.quiet(time.Second)
		as.quiet(200 * time.Millisecond)

		if evs := b.events(sid); len(evs) != 5 || evs[4].Type != "session.left" {
			t.Fatalf("B reads %d events (%s), want 5 ending with its session.left", len(evs), dlSeqString(evs))
		}
		if code, out := b.do("POST", "/sessions/"+sid+"/messages", map[string]any{"content": "still here?"}); code != http.StatusConflict || !strings.Contains(string(out), `"not_joined"`) {
			t.Fatalf("B sends after grace expiry: %d %s, want 409 not_joined", code, out)
		}
		if n := len(dlLog(t, s, sid)); n != 7 {
			t.Fatalf("log has %d events, want 7", n)
		}
	})
}

// TestDeliveryTwoConnections: every connection of an agent receives every
// event; closing one of two is not a presence change; a REST join reaches
// both connections with the join replay.
func TestDeliveryTwoConnections(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--grace-window", "30s")
		ag := dlAgents(s, "a", "b")
		a, b := ag[0], ag[1]
		s1 := dlSession(a, "two connections", b)
		head := map[string]int64{s1: 2}
		as := a.connect()
		dlReadUntil(as, head)
		b1, b2 := b.connect(), b.connect()
		dlReadUntil(b1, head)
		dlReadUntil(b2, head)
		dlWaitConnections(t, s, 3)

		m := &dlMsg{from: a, sid: s1, text: "to both"}
		if err := m.try(); err != nil {
			t.Fatal(err)
		}
		for _, st := range []*stream{as, b1, b2} {
			dlMessage(t, st.next(), m.ack, m.text)
		}

		// A REST join is seen on both connections, with the replay.
		s2 := a.createSession(map[string]any{"topic": "joined over REST", "invite": []string{b.handle}})
		for _, st := range []*stream{as, b1, b2} {
			e := st.next()
			dlIs(t, e, "session.invited", "invitee", b.handle, "by", a.handle)
			if e.SessionID != s2 || e.Sequence != 1 {
				t.Fatalf("invited: session %s seq %d, want %s 1", e.SessionID, e.Sequence, s2)
			}
		}
		b.join(s2)
		e := as.next()
		dlIs(t, e, "session.joined", "agent", b.handle)
		if e.SessionID != s2 || e.Sequence != 2 {
			t.Fatalf("A: joined in %s seq %d, want %s 2", e.SessionID, e.Sequence, s2)
		}
		for i, st := range []*stream{b1, b2} {
			// The join restarts the connection's pull at sequence 1.
			got := st.expect("session.invited", "session.joined")
			dlRun(t, fmt.Sprintf("B connection %d join replay", i+1), got, 1, 2)
			dlIs(t, got[1], "session.joined", "agent", b.handle)
			if got[0].SessionID != s2 || got[1].SessionID != s2 {
				t.Fatalf("join replay in the wrong session: %s %s", got[0].Raw, got[1].Raw)
			}
		}

		// Closing one of the two connections is not a disconnect.
		b1.close()
		dlWaitConnections(t, s, 2)
		as.quiet(500 * time.Millisecond)
		m = &dlMsg{from: a, sid: s1, text: "after one connection closed"}
		if err := m.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, as.next(), m.ack, m.text)
		dlMessage(t, b2.next(), m.ack, m.text)
		m = &dlMsg{from: b, sid: s2, text: "from the remaining connection's agent"}
		if err := m.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, as.next(), m.ack, m.text)
		dlMessage(t, b2.next(), m.ack, m.text)
		for _, sid := range []string{s1, s2} {
			for _, e := range dlLog(t, s, sid) {
				if e.Type == "session.disconnected" || e.Type == "session.reconnected" {
					t.Fatalf("session %s: presence event although B stayed online: %s", sid, e.Raw)
				}
			}
		}
		b2.quiet(200 * time.Millisecond)
	})
}

// TestDeliveryCrash: SIGKILL while messages flow. Every acknowledged
// message is in the log and reaches every participant (before the kill or
// in the replay after it); idempotent retries of the request cut by the kill
// answer 201 with the original ids when it had committed.
func TestDeliveryCrash(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--grace-window", "30s", "--cursor-flush-interval", "50ms")
		ag := dlAgents(s, "a", "b", "c")
		sid := dlSession(ag[0], "crash", ag[1], ag[2])
		h0 := int64(len(dlLog(t, s, sid)))
		pre := make([]*stream, len(ag))
		for i, a := range ag {
			pre[i] = a.connect()
			dlReadUntil(pre[i], map[string]int64{sid: h0})
		}
		dlWaitConnections(t, s, len(ag))

		// Every agent sends continuously with idempotency keys until the
		// server goes away.
		var (
			mu      sync.Mutex
			acked   []*dlMsg
			count   atomic.Int64
			wg      sync.WaitGroup
			pending = make([]*dlMsg, len(ag))
			failed  = make([]error, len(ag))
		)
		for i, a := range ag {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					m := &dlMsg{from: a, sid: sid, text: fmt.Sprintf("%s says %d", a.handle, n), key: fmt.Sprintf("key-%d", n)}
					code, out, err := dlTry("POST", s.url+"/sessions/"+sid+"/messages", a.token, m.body())
					if err != nil { // the kill: this request may or may not have committed
						pending[i] = m
						return
					}
					if code != http.StatusCreated || json.Unmarshal(out, &m.ack) != nil {
						failed[i] = fmt.Errorf("%s message %d: %d %s", a.handle, n, code, out)
						return
					}
					mu.Lock()
					acked = append(acked, m)
					mu.Unlock()
					count.Add(1)
				}
			}()
		}
		deadline := time.Now().Add(15 * time.Second)
		for count.Load() < 150 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		s.kill()
		wg.Wait()
		dlHTTPClient.CloseIdleConnections()
		for _, err := range failed {
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(acked) < 150 {
			t.Fatalf("only %d messages acknowledged before the kill", len(acked))
		}
		before := make([][]event, len(ag))
		for i := range ag {
			before[i], _ = dlRest(t, pre[i], 10*time.Second)
		}

		s.restart()
		// Retry the cut requests with the same key and body.
		inLog := map[string]event{}
		for _, e := range dlLog(t, s, sid) {
			if e.Type == "session.message" {
				if _, dup := inLog[dlText(e)]; dup {
					t.Fatalf("message committed twice: %s", e.Raw)
				}
				inLog[dlText(e)] = e
			}
		}
		retried := 0
		for _, m := range pending {
			if m == nil {
				continue
			}
			orig, committed := inLog[m.text]
			if err := m.try(); err != nil {
				t.Fatalf("retry of %q after restart: %v", m.text, err)
			}
			if committed && (m.ack.MessageID != orig.field("id") || m.ack.Sequence != orig.Sequence) {
				t.Fatalf("retry of committed %q answered %+v, want the original %s seq %d", m.text, m.ack, orig.field("id"), orig.Sequence)
			}
			t.Logf("retried %q: committed before the kill: %v", m.text, committed)
			acked = append(acked, m)
			retried++
		}
		if retried == 0 {
			t.Fatalf("no request was cut by the kill")
		}
		// A retry of an acknowledged message still answers its original ids.
		again := *acked[0]
		if err := again.try(); err != nil || again.ack != acked[0].ack {
			t.Fatalf("retry of acknowledged %q after restart: %+v %v, want %+v", again.text, again.ack, err, acked[0].ack)
		}

		after := make([]*stream, len(ag))
		for i, a := range ag {
			after[i] = a.connect()
		}
		for _, a := range ag {
			dlWaitLog(t, s, sid, "session.reconnected of "+a.handle, func(e event) bool {
				return e.Type == "session.reconnected" && e.field("agent") == a.handle
			})
		}
		fin := &dlMsg{from: ag[0], sid: sid, text: "final"}
		if err := fin.try(); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, fin)
		last := fin.ack.Sequence

		log := dlLog(t, s, sid)
		if int64(len(log)) != last {
			t.Fatalf("log ends at %d, want the final message %d", len(log), last)
		}
		texts := map[string]int{}
		for _, e := range log {
			if e.Type == "session.message" {
				texts[dlText(e)]++
			}
		}
		for _, m := range acked {
			dlMessage(t, log[m.ack.Sequence-1], m.ack, m.text)
			if texts[m.text] != 1 {
				t.Fatalf("%q is %d times in the log, want once", m.text, texts[m.text])
			}
		}
		// Start-up marked everyone disconnected; each reconnect reflowed.
		for _, a := range ag {
			var disc, reconn int
			for _, e := range log {
				if e.field("agent") == a.handle {
					switch e.Type {
					case "session.disconnected":
						disc++
					case "session.reconnected":
						reconn++
					}
				}
			}
			if disc != 1 || reconn != 1 {
				t.Fatalf("%s: %d disconnected and %d reconnected events, want 1 and 1", a.handle, disc, reconn)
			}
		}

		for i, a := range ag {
			got := dlReadUntil(after[i], map[string]int64{sid: last})
			b := dlAfter(before[i], h0)
			lastBefore := h0
			if len(b) > 0 {
				lastBefore = b[len(b)-1].Sequence
			}
			dlRun(t, a.handle+" before the kill", b, h0+1, lastBefore)
			g := dlAfter(got, h0)
			if len(g) == 0 || g[0].Sequence > lastBefore+1 {
				t.Fatalf("%s: events after reconnect start at %s, after %d received before the kill: gap", a.handle, dlSeqString(g), lastBefore)
			}
			dlRun(t, a.handle+" after reconnect", g, g[0].Sequence, last)
			t.Logf("%s: received %d..%d before the kill, %d..%d after (%d re-sent)", a.handle, h0+1, lastBefore, g[0].Sequence, last, lastBefore-g[0].Sequence+1)
			union := map[int64]event{}
			for _, e := range append(b, g...) {
				union[e.Sequence] = e
			}
			for _, m := range acked {
				e, ok := union[m.ack.Sequence]
				if !ok {
					t.Fatalf("%s never received acknowledged message %q (seq %d)", a.handle, m.text, m.ack.Sequence)
				}
				dlMessage(t, e, m.ack, m.text)
			}
			after[i].quiet(100 * time.Millisecond)
		}
	})
}

// TestDeliverySlowConsumer: a connection that stops reading is cut off
// with 1008 "slow consumer" once it is --ws-max-lag events behind, without
// delaying the other connections, and on reconnect receives everything it
// missed exactly once.
func TestDeliverySlowConsumer(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		// The write timeout is longer than the test needs: the lag limit is
		// what cuts S off, while its writer is blocked on the full socket.
		dlSlowConsumer(t, dbURL, 3000, 2<<10, "lag",
			"--ws-max-lag", "200", "--ws-write-timeout", "5s")
	})
}

// TestDeliverySlowConsumerWriteTimeout: the other limit. A write blocked for
// longer than --ws-write-timeout cuts the connection off; the server cannot
// send a close frame behind a half-written one, so the peer sees the
// connection end, and the server logs the slow consumer.
func TestDeliverySlowConsumerWriteTimeout(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		dlSlowConsumer(t, dbURL, 200, 64<<10, "write timeout",
			"--ws-max-lag", "1000000", "--ws-write-timeout", "1s")
	})
}

// dlSlowConsumer runs the slow-consumer scenario: A sends n messages of
// about size bytes to a session with F (reading) and S (not reading). cut is
// "lag" or "write timeout": which limit must cut S off.
func dlSlowConsumer(t *testing.T, dbURL string, n, size int, cut string, flags ...string) {
	s := startServer(t, dbURL, append([]string{"--cursor-flush-interval", "50ms", "--grace-window", "30s"}, flags...)...)
	ag := dlAgents(s, "a", "f", "s")
	a, f, sl := ag[0], ag[1], ag[2]
	sid := dlSession(a, "slow consumer", f, sl)
	h0 := int64(len(dlLog(t, s, sid)))
	as, fs := a.connect(), f.connect()
	dlReadUntil(as, map[string]int64{sid: h0})
	dlReadUntil(fs, map[string]int64{sid: h0})
	raw := dlDialRaw(t, s, sl.token) // S reads nothing until it has been cut off
	dlWaitConnections(t, s, 3)

	// S resumes reading once the server log shows it cut off (or once
	// everything was sent and F checked, if that never shows).
	cutLine := "slow consumer: closing connection"
	if cut != "lag" {
		cutLine = `agent=@dl.s reason="slow consumer (write timeout)"`
	}
	var cutSeen atomic.Bool
	sendsDone := make(chan struct{})
	type result struct {
		frames [][]byte
		err    error
	}
	sres := make(chan result, 1)
	go func() {
	wait:
		for !strings.Contains(s.logs(), cutLine) {
			select {
			case <-sendsDone:
				break wait
			case <-time.After(10 * time.Millisecond):
			}
		}
		cutSeen.Store(true)
		var r result
		r.frames, r.err = raw.readAll(20 * time.Second)
		sres <- r
	}()

	// A sends n messages, and more (up to 4n) if S has not been cut off by
	// then: how much fills the socket buffers depends on the system.
	sent := dlSendConcurrently(a, sid, size, 16, func(i int64) bool {
		return i < int64(n) || !cutSeen.Load() && i < 4*int64(n)
	})
	// F reads while A sends; A's own stream is drained by its reader.
	var last atomic.Int64
	var fgot []event
	fdone := make(chan struct{})
	go func() {
		defer close(fdone)
		for {
			select {
			case e, ok := <-fs.events:
				if !ok {
					return
				}
				fgot = append(fgot, e)
			case <-time.After(10 * time.Millisecond):
			}
			if l := last.Load(); l < 0 || l > 0 && len(fgot) > 0 && fgot[len(fgot)-1].Sequence >= l {
				return
			}
		}
	}()
	msgs, err := sent()
	if err != nil {
		t.Fatal(err)
	}
	byseq := map[int64]*dlMsg{}
	var maxSeq int64
	for _, m := range msgs {
		byseq[m.ack.Sequence] = m
		maxSeq = max(maxSeq, m.ack.Sequence)
	}
	last.Store(maxSeq)
	select {
	case <-fdone:
	case <-time.After(15 * time.Second):
		last.Store(-1) // stop the reader
		<-fdone
	}
	// F got every event, in order, while S was stalled.
	if len(fgot) == 0 || fgot[len(fgot)-1].Sequence < maxSeq {
		t.Fatalf("F received %d events, up to %s; want up to %d", len(fgot), dlSeqString(fgot[max(0, len(fgot)-1):]), maxSeq)
	}
	for _, e := range fgot {
		validate(t, "events.json", e.Raw)
	}
	dlRun(t, "F", fgot, h0+1, maxSeq)
	fmsgs := 0
	for _, e := range fgot {
		if m := byseq[e.Sequence]; m != nil {
			dlMessage(t, e, m.ack, m.text)
			fmsgs++
		} else if e.Type != "session.disconnected" || e.field("agent") != sl.handle {
			t.Fatalf("F: unexpected event %s", e.Raw)
		}
	}
	if fmsgs != len(msgs) {
		t.Fatalf("F received %d messages, want %d", fmsgs, len(msgs))
	}
	close(sendsDone)

	// S: what the server wrote before the cut, then the end.
	var r result
	select {
	case r = <-sres:
	case <-time.After(30 * time.Second):
		t.Fatalf("S's reader did not finish")
	}
	if r.err == nil || errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("S's connection was not ended by the server: %v (after %d events)", r.err, len(r.frames))
	}
	var ce websocket.CloseError
	switch {
	case errors.As(r.err, &ce):
		if ce.Code != websocket.StatusPolicyViolation || ce.Reason != "slow consumer" {
			t.Fatalf("S closed with %d %q, want 1008 \"slow consumer\"", ce.Code, ce.Reason)
		}
	case cut == "lag":
		t.Fatalf("S: no 1008 close frame although it read right after the cut: %v", r.err)
	default:
		t.Logf("S: connection dropped without a close frame (%v)", r.err)
	}
	logs := s.logs()
	switch cut {
	case "lag":
		if !strings.Contains(logs, "slow consumer: closing connection") || !strings.Contains(logs, `agent=@dl.s reason="slow consumer"`) {
			t.Fatalf("the server log does not show S cut off for lagging")
		}
	default:
		if strings.Contains(logs, "slow consumer: closing connection") || !strings.Contains(logs, `agent=@dl.s reason="slow consumer (write timeout)"`) {
			t.Fatalf("the server log does not show S cut off by the write timeout")
		}
	}
	var sgot []event
	for _, raw := range r.frames {
		sgot = append(sgot, decodeEvent(t, raw))
	}
	slast := int64(0)
	for _, e := range sgot {
		slast = max(slast, e.Sequence)
	}
	if slast >= maxSeq {
		t.Fatalf("S received everything (%d) although it did not read", slast)
	}
	dlRun(t, "S before the cut", dlAfter(sgot, h0), h0+1, slast)
	t.Logf("S received up to %d of %d before it was cut off (%s); %d messages sent", slast, maxSeq, cut, len(msgs))

	dlWaitConnections(t, s, 2)
	dlWaitLogFrom(t, s, sid, slast, "session.disconnected of S", func(e event) bool {
		return e.Type == "session.disconnected" && e.field("agent") == sl.handle
	})
	ss := sl.connect()
	rec := dlWaitLogFrom(t, s, sid, maxSeq, "session.reconnected of S", func(e event) bool {
		return e.Type == "session.reconnected" && e.field("agent") == sl.handle
	})
	got := dlReadUntil(ss, map[string]int64{sid: rec.Sequence})
	// Nothing S did not confirm is lost: the replay starts at or before the
	// first event S never read, and runs in order, without a gap, to the end.
	// (S confirmed at most what it read: its pongs only answer pings that
	// followed frames it had read.)
	if len(got) == 0 || got[0].Sequence > slast+1 {
		t.Fatalf("S after reconnect starts at %s; S had received only up to %d", dlSeqString(got[:min(1, len(got))]), slast)
	}
	dlSame(t, "S after reconnect", got, dlLogFrom(t, s, sid, got[0].Sequence-1))
	for _, e := range got {
		if m := byseq[e.Sequence]; m != nil {
			dlMessage(t, e, m.ack, m.text)
		}
	}
	ss.quiet(200 * time.Millisecond)
}

// TestDeliveryBlockLive: a block force-leaves the blocked agent; the others
// see its session.left, it sees nothing more (not even that), and it cannot
// be invited back.
func TestDeliveryBlockLive(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		ag := dlAgents(s, "a", "b", "c")
		a, b, c := ag[0], ag[1], ag[2]
		sid := dlSession(a, "block", b, c)
		h0 := int64(len(dlLog(t, s, sid)))
		streams := make([]*stream, 3)
		for i, x := range ag {
			streams[i] = x.connect()
			dlReadUntil(streams[i], map[string]int64{sid: h0})
		}
		as, bs, cs := streams[0], streams[1], streams[2]

		if code, out := s.adminDo("POST", "/agents/"+a.handle+"/blocks", map[string]any{"handle": b.handle}); code != http.StatusOK {
			t.Fatalf("block: %d %s", code, out)
		}
		for _, st := range []*stream{as, cs} {
			e := st.next()
			dlIs(t, e, "session.left", "agent", b.handle, "reason", "left")
			if e.Sequence != h0+1 {
				t.Fatalf("left at %d, want %d", e.Sequence, h0+1)
			}
		}
		for _, x := range []*agent{a, c} {
			m := &dlMsg{from: x, sid: sid, text: "after the block from " + x.handle}
			if err := m.try(); err != nil {
				t.Fatal(err)
			}
			dlMessage(t, as.next(), m.ack, m.text)
			dlMessage(t, cs.next(), m.ack, m.text)
		}
		bs.quiet(time.Second)
		if evs := b.events(sid); int64(len(evs)) != h0 {
			t.Fatalf("B reads %d events, want %d (nothing from its session.left on)", len(evs), h0)
		}
		if st := dlStatus(a, sid, b.handle); st != "left" {
			t.Fatalf("B status: %q, want left", st)
		}
		for _, x := range []*agent{a, c} {
			code, out := x.do("POST", "/sessions/"+sid+"/invite", map[string]any{"invite": []string{b.handle}})
			if code != http.StatusNotFound || !strings.Contains(string(out), `"not_found"`) {
				t.Fatalf("%s re-invites B: %d %s, want 404 not_found", x.handle, code, out)
			}
		}
		if n := int64(len(dlLog(t, s, sid))); n != h0+3 {
			t.Fatalf("log has %d events, want %d (the refused invitations wrote nothing)", n, h0+3)
		}
		bs.quiet(200 * time.Millisecond)
	})
}

// TestDeliveryOrdering: with eight concurrent senders, every connection
// receives the session's events strictly in sequence order with no gap, each
// acknowledged message exactly once.
func TestDeliveryOrdering(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		ag := dlAgents(s, "a", "b", "c", "d")
		sid := dlSession(ag[0], "ordering", ag[1:]...)
		h0 := int64(len(dlLog(t, s, sid)))
		streams := make([]*stream, len(ag))
		for i, a := range ag {
			streams[i] = a.connect()
			dlReadUntil(streams[i], map[string]int64{sid: h0})
		}
		dlWaitConnections(t, s, len(ag))

		const senders, each = 8, 100
		msgs := make([]*dlMsg, senders*each)
		errs := make(chan error, senders)
		var wg sync.WaitGroup
		for g := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				from := ag[g%len(ag)]
				for i := range each {
					m := &dlMsg{from: from, sid: sid, text: fmt.Sprintf("sender %d message %d", g, i)}
					if err := m.try(); err != nil {
						errs <- err
						return
					}
					msgs[g*each+i] = m
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		last := h0 + senders*each
		byseq := map[int64]*dlMsg{}
		for _, m := range msgs {
			if byseq[m.ack.Sequence] != nil {
				t.Fatalf("two messages acknowledged with sequence %d", m.ack.Sequence)
			}
			byseq[m.ack.Sequence] = m
			if m.ack.Sequence <= h0 || m.ack.Sequence > last {
				t.Fatalf("acknowledged sequence %d outside %d..%d", m.ack.Sequence, h0+1, last)
			}
		}
		if n := int64(len(dlLog(t, s, sid))); n != last {
			t.Fatalf("log has %d events, want %d", n, last)
		}
		for i, st := range streams {
			got := dlReadUntil(st, map[string]int64{sid: last})
			dlRun(t, ag[i].handle, got, h0+1, last)
			for _, e := range got {
				m := byseq[e.Sequence]
				dlMessage(t, e, m.ack, m.text)
			}
			st.quiet(100 * time.Millisecond)
		}
	})
}

// TestDeliveryRestartPresence: after a graceful restart every agent that
// was online is marked disconnected at start-up with a fresh grace window;
// one that comes back in time is reconnected, one that does not is left.
func TestDeliveryRestartPresence(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--grace-window", "2s", "--cursor-flush-interval", "50ms")
		ag := dlAgents(s, "a", "b")
		a, b := ag[0], ag[1]
		sid := dlSession(a, "restart", b)
		as, bs := a.connect(), b.connect()
		dlReadUntil(as, map[string]int64{sid: 2})
		dlReadUntil(bs, map[string]int64{sid: 2})
		m := &dlMsg{from: a, sid: sid, text: "before the restart"}
		if err := m.try(); err != nil {
			t.Fatal(err)
		}
		dlMessage(t, as.next(), m.ack, m.text)
		dlMessage(t, bs.next(), m.ack, m.text)

		s.stop()
		for _, st := range []*stream{as, bs} {
			rest, code := dlRest(t, st, 10*time.Second)
			if len(rest) != 0 || code != websocket.StatusGoingAway {
				t.Fatalf("graceful stop: %d more events, close %d; want none and 1001", len(rest), code)
			}
		}
		s.restart()
		as = a.connect() // within the fresh window; B stays away
		// A client de-duplicates: an ack in flight when the server closed
		// may not have been read (the close handshake discards it), so what
		// A already had may come again.
		in := newInbox(as)
		for seq := int64(1); seq <= 3; seq++ {
			in.seen[eventKey(event{SessionID: sid, Sequence: seq})] = true
		}
		got := in.expect("session.disconnected", "session.disconnected", "session.reconnected")
		dlRun(t, "A after restart", got, 4, 6)
		dlIs(t, got[0], "session.disconnected", "agent", a.handle)
		dlIs(t, got[1], "session.disconnected", "agent", b.handle)
		dlIs(t, got[2], "session.reconnected", "agent", a.handle)
		left := in.next()
		dlIs(t, left, "session.left", "agent", b.handle, "reason", "grace_expired")
		if left.Sequence != 7 {
			t.Fatalf("left at %d, want 7", left.Sequence)
		}
		evs := a.events(sid)
		if len(evs) != 7 {
			t.Fatalf("A reads %d events, want 7", len(evs))
		}
		dlSame(t, "A's read of the log", evs[3:], append(got, left))
		if st := dlStatus(a, sid, b.handle); st != "left" {
			t.Fatalf("B: %q, want left", st)
		}
		if st := dlStatus(a, sid, a.handle); st != "joined" {
			t.Fatalf("A: %q, want joined (it came back within the window)", st)
		}
		in.quiet(500 * time.Millisecond)
	})
}

// TestDeliveryHealth: /healthz and /readyz answer 200 JSON without auth.
func TestDeliveryHealth(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		resp, err := http.Get(s.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Status string `json:"status"`
		}
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || err != nil || h.Status != "ok" {
			t.Fatalf("/healthz: %d %s %+v %v", resp.StatusCode, resp.Header.Get("Content-Type"), h, err)
		}
		resp, err = http.Get(s.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Status      string `json:"status"`
			Store       string `json:"store"`
			Connections *int   `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		want := "sqlite"
		if strings.HasPrefix(dbURL, "postgres") {
			want = "postgres"
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || err != nil ||
			r.Status != "ready" || r.Store != want || r.Connections == nil || *r.Connections != 0 {
			t.Fatalf("/readyz: %d %s %+v %v", resp.StatusCode, resp.Header.Get("Content-Type"), r, err)
		}
		a := dlAgents(s, "a")[0]
		a.connect()
		dlWaitConnections(t, s, 1)
	})
}
