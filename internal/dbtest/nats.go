package dbtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// DefaultNATSURL is the NATS server the tests use when ASPD_TEST_NATS_URL
// is unset.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// NATS returns the URL of a running NATS server (ASPD_TEST_NATS_URL, or
// DefaultNATSURL). Without one the test is skipped loudly, or fails when
// ASPD_REQUIRE_NATS=1 (as CI sets).
func NATS(t testing.TB) string {
	t.Helper()
	u := os.Getenv("ASPD_TEST_NATS_URL")
	if u == "" {
		u = DefaultNATSURL
	}
	p, err := url.Parse(u)
	if err == nil {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", p.Host, 3*time.Second); err == nil {
			c.Close()
			return u
		}
	}
	natsMissing(t, fmt.Sprintf("NATS is not reachable at %s: %v", redact(u), err))
	return ""
}

// NATSServer is a private nats-server process, for tests that stop and
// restart it.
type NATSServer struct {
	URL  string
	bin  string
	port int
	cmd  *exec.Cmd
}

// StartNATSServer starts nats-server (from PATH or /usr/sbin) on a free
// loopback port; it is stopped when the test ends. Without the binary the
// test is skipped loudly, or fails when ASPD_REQUIRE_NATS=1.
func StartNATSServer(t testing.TB) *NATSServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/nats-server"); statErr != nil {
			natsMissing(t, "nats-server is not installed (Debian package nats-server)")
		}
		bin = "/usr/sbin/nats-server"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &NATSServer{URL: "nats://127.0.0.1:" + strconv.Itoa(port), bin: bin, port: port}
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

// Start starts the server (again) on its port and waits until it accepts.
func (s *NATSServer) Start(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not accept connections on port %d: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it.
func (s *NATSServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func natsMissing(t testing.TB, why string) {
	t.Helper()
	msg := "\n*** " + why + "\n*** NATS tests are SKIPPED. Set ASPD_TEST_NATS_URL, or install and start nats-server.\n"
	if os.Getenv("ASPD_REQUIRE_NATS") == "1" {
		t.Fatal(msg + "*** ASPD_REQUIRE_NATS=1: failing instead of skipping.")
	}
	fmt.Fprint(os.Stderr, msg)
	t.Skip(msg)
}
