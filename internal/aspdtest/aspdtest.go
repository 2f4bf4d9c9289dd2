// Package aspdtest builds the aspd binary and runs it as a real process on a
// loopback port, for the tests that speak to aspd over the wire (integration,
// aspctl, aspbench): one implementation of build, start, log capture, stop
// and kill instead of one per test package.
package aspdtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"
)

// Build compiles aspd into a new temporary directory and returns the
// binary's path and a function that removes it. Call it from TestMain.
// GOFLAGS apply, so GOFLAGS=-race builds a race-detecting server.
func Build() (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "aspdtest")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "aspd")
	build := exec.Command("go", "build", "-o", bin, "github.com/aspd/aspd/cmd/aspd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building aspd: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// MustBuild is Build for TestMain: it exits the test binary on failure.
func MustBuild() (bin string, cleanup func()) {
	bin, cleanup, err := Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return bin, cleanup
}

// Log collects a process's stderr; one Log may span several processes (a
// server restarted on the same data). Safe for concurrent use.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// String returns everything logged so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *Log) line(s string) {
	l.mu.Lock()
	l.b.WriteString(s + "\n")
	l.mu.Unlock()
}

// Process is a running aspd.
type Process struct {
	URL  string // http://127.0.0.1:port, from aspd's "aspd listening" log line
	cmd  *exec.Cmd
	done chan struct{}
}

var listenRE = regexp.MustCompile(`aspd listening.*addr=(http://\S+)`)

// Start runs bin with args, env added to the environment and stderr
// captured in log, and waits (at most 30s) until it listens. The args must
// include --listen (use 127.0.0.1:0 for a free port).
func Start(bin string, args, env []string, log *Log) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			log.line(sc.Text())
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.URL = <-addr:
		return p, nil
	case <-p.done:
		return nil, errors.New("aspd exited during start-up")
	case <-time.After(30 * time.Second):
		p.Kill()
		return nil, errors.New("aspd did not start within 30s")
	}
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stop terminates aspd gracefully (SIGTERM: WebSockets close 1001) and
// waits; after 15s it kills it.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.Kill()
	}
}

// Kill terminates aspd with SIGKILL (no shutdown code runs) and waits.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
