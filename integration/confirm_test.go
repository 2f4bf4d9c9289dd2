package integration

// Confirmed delivery (docs/delivery.md, "Confirmation"): a delivery cursor
// moves past an event only once the client has confirmed it, by answering
// the ping the server sends after a batch, or by an explicit ack. A write
// that returned has only reached the kernel's send buffer; these tests drop
// what sits there and check that it comes again after the reconnect.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// dialTinyBuffer opens WS /connect with a 4 KB socket receive buffer and
// returns the connection without reading from it.
func dialTinyBuffer(t testing.TB, s *server, token string) *websocket.Conn {
	t.Helper()
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(s.url, "http://", "ws://", 1)+"/connect", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}},
	})
	if err != nil {
		t.Fatalf("dial /connect: %v", err)
	}
	ws.SetReadLimit(1 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

// cfSendUntil has a send messages of about size bytes into sid with 8
// workers until stop reports true (checked between messages) or max were
// sent; it returns the acknowledged messages.
func cfSendUntil(t *testing.T, a *agent, sid string, size, max int, stop func() bool) []*dlMsg {
	t.Helper()
	msgs, err := dlSendConcurrently(a, sid, size, 8, func(i int64) bool { return i < int64(max) && !stop() })()
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// cfReconnect waits until the server has let go of handle's dropped
// connection (its session.disconnected is in the log), reconnects it as an
// acking client, and returns everything it gets in sid up to its
// session.reconnected.
func cfReconnect(t *testing.T, s *server, ag *agent, sid string, after int64) []event {
	t.Helper()
	dlWaitLogFrom(t, s, sid, after, "session.disconnected of "+ag.handle, func(e event) bool {
		return e.Type == "session.disconnected" && e.field("agent") == ag.handle
	})
	st := ag.connect()
	rec := dlWaitLogFrom(t, s, sid, after, "session.reconnected of "+ag.handle, func(e event) bool {
		return e.Type == "session.reconnected" && e.field("agent") == ag.handle
	})
	return dlOf(dlReadUntil(st, map[string]int64{sid: rec.Sequence}), sid)
}

// TestConfirmStuckClient: a client with a 4 KB receive buffer that never
// reads is cut off as a slow consumer while thousands of events are written
// to its socket, then drops. After it reconnects it gets every event of the
// session, in order: none was confirmed, so none is skipped. (Before
// confirmed delivery the cursor followed the kernel writes, and after the
// reconnect most of the events never arrived.)
func TestConfirmStuckClient(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--ws-max-lag", "200", "--ws-write-timeout", "3s",
			"--cursor-flush-interval", "50ms", "--grace-window", "30s")
		ag := dlAgents(s, "a", "s")
		a, sl := ag[0], ag[1]
		sid := dlSession(a, "stuck client", sl)
		stuck := dialTinyBuffer(t, s, sl.token)
		dlWaitConnections(t, s, 1)

		cut := func() bool {
			logs := s.logs()
			return strings.Contains(logs, "slow consumer") && strings.Contains(logs, "agent=@dl.s reason=")
		}
		msgs := cfSendUntil(t, a, sid, 2<<10, 6000, cut)
		deadline := time.Now().Add(15 * time.Second)
		for !cut() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !cut() {
			t.Fatalf("the stuck client was not cut off after %d messages", len(msgs))
		}
		stuck.CloseNow() // the host goes away with its buffers unread

		got := cfReconnect(t, s, sl, sid, 0)
		// Every event of the log, from sequence 1, exactly in order.
		log := dlLog(t, s, sid)
		var want []event
		for _, e := range log {
			if e.Sequence <= got[len(got)-1].Sequence {
				want = append(want, e)
			}
		}
		dlSame(t, "S after reconnect", got, want)
		bySeq := map[int64]*dlMsg{}
		for _, m := range msgs {
			bySeq[m.ack.Sequence] = m
		}
		n := 0
		for _, e := range got {
			if m := bySeq[e.Sequence]; m != nil {
				dlMessage(t, e, m.ack, m.text)
				n++
			}
		}
		if n != len(msgs) {
			t.Fatalf("S got %d of the %d acknowledged messages after reconnecting", n, len(msgs))
		}
		t.Logf("%d messages sent while S was stuck; all arrived after its reconnect", len(msgs))
	})
}

// TestConfirmAbruptDrop: a client that confirms by pong only reads k
// events, stops reading while more are written to its socket, and its
// connection then dies without a close handshake (1006). The reconnect
// replays from no later than the first event it did not read, in order and
// without a gap.
func TestConfirmAbruptDrop(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		// A short interval, so that several confirmation pings go out while S
		// does not read them.
		s := startServer(t, dbURL, "--cursor-flush-interval", "50ms", "--grace-window", "30s", "--ws-confirm-interval", "50ms")
		ag := dlAgents(s, "a", "s")
		a, sl := ag[0], ag[1]
		sid := dlSession(a, "abrupt drop", sl)
		h0 := int64(len(dlLog(t, s, sid)))

		// A raw client: its library answers pings only while it reads.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ws, _, err := websocket.Dial(ctx, strings.Replace(s.url, "http://", "ws://", 1)+"/connect",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + sl.token}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		read := func() event {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			_, raw, err := ws.Read(rctx)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			var e event
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			e.Raw = raw
			return e
		}
		for range h0 {
			read()
		}
		first := cfSendUntil(t, a, sid, 100, 20, func() bool { return false })
		var lastRead int64
		for range first {
			lastRead = read().Sequence
		}
		// More events reach S's socket, and S never reads them.
		more := cfSendUntil(t, a, sid, 100, 50, func() bool { return false })
		time.Sleep(300 * time.Millisecond) // several confirmation rounds pass unanswered
		ws.CloseNow()

		got := cfReconnect(t, s, sl, sid, h0)
		if len(got) == 0 || got[0].Sequence > lastRead+1 {
			t.Fatalf("after the drop the replay starts at %s; S had read only up to %d", dlSeqString(got[:min(1, len(got))]), lastRead)
		}
		dlSame(t, "S after reconnect", got, dlLogFrom(t, s, sid, got[0].Sequence-1)[:len(got)])
		lastMsg := more[0].ack.Sequence
		for _, m := range more {
			lastMsg = max(lastMsg, m.ack.Sequence)
		}
		if got[len(got)-1].Sequence < lastMsg {
			t.Fatalf("S after reconnect ends at %d, before the last message %d", got[len(got)-1].Sequence, lastMsg)
		}
	})
}

// TestConfirmPongAdvancesCursor: a client that never acks, but reads, has
// its durable cursor moved by the pongs to the server's confirmation pings,
// so a reconnect does not replay what it already had.
func TestConfirmPongAdvancesCursor(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--cursor-flush-interval", "50ms")
		ag := dlAgents(s, "a", "s")
		a, sl := ag[0], ag[1]
		sid := dlSession(a, "pong confirms", sl)
		st := dialNoAck(t, s, sl.token)
		msgs := cfSendUntil(t, a, sid, 100, 20, func() bool { return false })
		var head int64
		for _, m := range msgs {
			head = max(head, m.ack.Sequence)
		}
		dlReadUntil(st, map[string]int64{sid: head})
		cfWaitCursor(t, dbURL, sl.handle, sid, head)
		st.close()

		got := cfReconnect(t, s, sl, sid, head)
		if got[0].Sequence <= head {
			t.Fatalf("after a confirmed read the reconnect replays from %d (head was %d)", got[0].Sequence, head)
		}
	})
}

// TestConfirmAck: an acking client decides its position. It acks less than
// it received, and pongs no longer confirm beyond its ack, so the reconnect
// resumes right after the ack. A malformed ack closes the connection 1008.
func TestConfirmAck(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, "--cursor-flush-interval", "50ms")
		ag := dlAgents(s, "a", "s")
		a, sl := ag[0], ag[1]
		sid := dlSession(a, "acks", sl)
		st := dialNoAck(t, s, sl.token)
		// The first ack, sent before the client reads (and so before it
		// answers any ping), puts the connection in ack mode: no pong can
		// confirm past what it acks.
		first := fmt.Sprintf(`{"type":"ack","session_id":%q,"sequence":1}`, sid)
		if err := st.ws.Write(context.Background(), websocket.MessageText, []byte(first)); err != nil {
			t.Fatal(err)
		}
		msgs := cfSendUntil(t, a, sid, 100, 10, func() bool { return false })
		var head int64
		for _, m := range msgs {
			head = max(head, m.ack.Sequence)
		}
		dlReadUntil(st, map[string]int64{sid: head})
		acked := head - 5
		ack := fmt.Sprintf(`{"type":"ack","session_id":%q,"sequence":%d}`, sid, acked)
		if err := st.ws.Write(context.Background(), websocket.MessageText, []byte(ack)); err != nil {
			t.Fatal(err)
		}
		cfWaitCursor(t, dbURL, sl.handle, sid, acked)
		// Pongs keep coming back (the reader reads on), but no longer confirm.
		time.Sleep(300 * time.Millisecond)
		if c := cfCursor(t, dbURL, sl.handle, sid); c != acked {
			t.Fatalf("cursor %d after an ack of %d: pongs still confirm", c, acked)
		}
		st.close()
		got := cfReconnect(t, s, sl, sid, head)
		if got[0].Sequence != acked+1 {
			t.Fatalf("after an ack of %d the reconnect replays from %d", acked, got[0].Sequence)
		}

		// A malformed ack: 1008 with a reason that says what was wrong.
		bad := dialNoAck(t, s, sl.token)
		if err := bad.ws.Write(context.Background(), websocket.MessageText, []byte(`{"type":"ack","session_id":"x","sequence":1}`)); err != nil {
			t.Fatal(err)
		}
		if _, code := dlRest(t, bad, 10*time.Second); code != websocket.StatusPolicyViolation {
			t.Fatalf("a malformed ack closed the connection with %d, want 1008", code)
		}
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(s.logs(), `reason="invalid ack: session_id must be a session id"`); {
			if time.Now().After(deadline) {
				t.Fatalf("the server log does not say why the connection was closed")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// cfCursor reads handle's durable cursor in sid straight from the database
// (0 when it has none yet).
func cfCursor(t *testing.T, dbURL, handle, sid string) int64 {
	t.Helper()
	driver, dsn := "sqlite", dbURL
	if strings.HasPrefix(dbURL, "postgres") {
		driver = "pgx"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var seq int64
	err = db.QueryRow(`SELECT seq FROM cursors WHERE handle = $1 AND session_id = $2`, handle, sid).Scan(&seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("reading the cursor: %v", err)
	}
	return seq
}

// cfWaitCursor waits (10 s at most) until handle's durable cursor in sid
// reaches at least want.
func cfWaitCursor(t *testing.T, dbURL, handle, sid string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := cfCursor(t, dbURL, handle, sid)
		if c >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's cursor in %s is %d, want at least %d", handle, sid, c, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
