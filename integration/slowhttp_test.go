package integration

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// Slow HTTP clients: --http-read-timeout bounds reading a whole request,
// --http-read-header-timeout its headers, --http-idle-timeout an idle
// keep-alive connection and --http-max-header-bytes the headers' size. The
// long-lived WebSocket and SSE streams outlive the read timeout.

const (
	slowReadTimeout   = 2 * time.Second
	slowHeaderTimeout = time.Second
	slowIdleTimeout   = 3 * time.Second
)

// slowConn is one raw TCP connection that trickles a request one byte at a
// time and records when the server closed it.
type slowConn struct {
	start  time.Time
	closed chan time.Duration // how long after start the server closed it
	answer []byte             // what the server wrote before closing (read once closed is sent)
}

// slowTrickle opens a connection, writes head at once, then writes one byte
// of tail every interval until the server closes the connection (or 15s
// pass). Each connection is closed when the test ends.
func slowTrickle(t *testing.T, addr, head, tail string, interval time.Duration) *slowConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &slowConn{start: time.Now(), closed: make(chan time.Duration, 1)}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write: %v", err)
	}
	stop := make(chan struct{})
	go func() {
		// Read whatever the server answers (a 400 or 408, or nothing) until
		// it closes the connection.
		_ = conn.SetReadDeadline(c.start.Add(15 * time.Second))
		var buf bytes.Buffer
		_, err := io.Copy(&buf, conn)
		c.answer = buf.Bytes()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			close(stop)
			return // still open: c.closed stays empty
		}
		c.closed <- time.Since(c.start)
		close(stop)
	}()
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i = (i + 1) % len(tail) {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{tail[i]}); err != nil {
				return
			}
		}
	}()
	return c
}

// TestSlowHTTPClientsAreCut: 200 connections trickling a request body one
// byte every 500ms, and 20 trickling their headers, neither starve ordinary
// requests, which still answer promptly, nor stay open: the server closes
// each at the read (or header) timeout. A WebSocket /connect and an SSE
// /stream opened before them stay open well past the read timeout and
// still receive events. An idle keep-alive connection is closed after the
// idle timeout, and oversized headers are refused with 431.
func TestSlowHTTPClientsAreCut(t *testing.T) {
	s := startServer(t, dbtest.SQLite(t),
		"--http-read-timeout", slowReadTimeout.String(),
		"--http-read-header-timeout", slowHeaderTimeout.String(),
		"--http-idle-timeout", slowIdleTimeout.String(),
		"--http-max-header-bytes", "8192")
	addr := strings.TrimPrefix(s.url, "http://")
	alice := s.provision("@alice.slow", "open")
	bob := s.provision("@bob.slow", "open")

	// The long-lived streams, opened first.
	opened := time.Now()
	ws := bob.connect()
	sse := sseOpen(t, s, bob.token, "/stream?instrument=cc-1", nil)

	// An idle keep-alive connection, after one answered request.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	idleBR := bufio.NewReader(idle)
	resp, err := http.ReadResponse(idleBR, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz on the keep-alive connection: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	idleSince := time.Now()
	idleClosed := make(chan time.Duration, 1)
	go func() {
		_ = idle.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, err := idleBR.ReadByte()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			close(idleClosed)
			return
		}
		idleClosed <- time.Since(idleSince)
	}()

	// The slow clients.
	const bodies, headers = 200, 20
	var slow []*slowConn
	body := `{"invite":["@bob.slow"],"topic":"` + strings.Repeat("z", 200) + `"}`
	for i := 0; i < bodies; i++ {
		head := "POST /sessions HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + alice.token +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		slow = append(slow, slowTrickle(t, addr, head, body, 500*time.Millisecond))
	}
	var slowHeads []*slowConn
	for i := 0; i < headers; i++ {
		slowHeads = append(slowHeads, slowTrickle(t, addr, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n", "X-Slow: 1\r\n", 500*time.Millisecond))
	}

	// Ordinary requests are answered promptly meanwhile.
	var sids []string
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		sids = append(sids, alice.createSession(map[string]any{"invite": []string{"@bob.slow"}}))
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("POST /sessions took %v beside the slow clients", d)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every slow client is cut off at its timeout, not before, not long after.
	wantClosed := func(what string, conns []*slowConn, timeout time.Duration) {
		t.Helper()
		var worst time.Duration
		for i, c := range conns {
			select {
			case d := <-c.closed:
				if d < timeout-500*time.Millisecond || d > timeout+3*time.Second {
					t.Errorf("%s %d: closed after %v, want about %v", what, i, d, timeout)
				}
				worst = max(worst, d)
			case <-time.After(time.Until(c.start.Add(16 * time.Second))):
				t.Fatalf("%s %d: still open after 15s (timeout %v)", what, i, timeout)
			}
		}
		t.Logf("%d %s: all closed by the server, the last after %v", len(conns), what, worst)
	}
	wantClosed("body tricklers", slow, slowReadTimeout)
	for i, c := range slow {
		if !bytes.HasPrefix(c.answer, []byte("HTTP/1.1 408 ")) || !bytes.Contains(c.answer, []byte(`"code":"request_timeout"`)) {
			t.Fatalf("body trickler %d was answered %q, want 408 request_timeout", i, c.answer)
		}
	}
	wantClosed("header tricklers", slowHeads, slowHeaderTimeout)
	if d, ok := <-idleClosed; !ok || d < slowIdleTimeout-500*time.Millisecond || d > slowIdleTimeout+3*time.Second {
		t.Errorf("idle keep-alive connection: closed %v after %v, want after about %v", ok, d, slowIdleTimeout)
	}

	// Oversized headers: 431.
	req, _ := http.NewRequest("GET", s.url+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 16<<10))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("16 KiB of headers over --http-max-header-bytes 8192: %v %v, want 431", resp, err)
	} else {
		resp.Body.Close()
	}

	// The streams outlived the read timeout (and the idle timeout): both
	// still receive.
	if wait := time.Until(opened.Add(5 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	for range sids {
		ws.expect("session.invited")
	}
	late := alice.createSession(map[string]any{"invite": []string{"@bob.slow"}})
	if e := ws.expect("session.invited")[0]; e.SessionID != late {
		t.Fatalf("WebSocket: invited to %s, want %s", e.SessionID, late)
	}
	sent := frSent{}
	fr := sent.add(t, frNew(t, "@alice.slow", "@bob.slow", "agent_advisory", ""))
	frWantCount(t, alice, "@bob.slow/*", fr, 1, false)
	frWantIDs(t, "SSE stream after the read timeout", frCollect(t, "sse", sse, frID(fr), sent))
	t.Logf("WebSocket and SSE streams still live after %v (read timeout %v)", time.Since(opened).Round(time.Millisecond), slowReadTimeout)
}
