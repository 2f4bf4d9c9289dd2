package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// idleScenario: C idle connections; server memory per connection.
type idleScenario struct {
	connections int
	agents      int
	hold        time.Duration
}

func (s *idleScenario) flags(fs *flag.FlagSet) {
	fs.IntVar(&s.connections, "connections", 20000, "idle WebSocket connections (C)")
	fs.IntVar(&s.agents, "agents", 0, "agents the connections belong to, round-robin (default C: one connection per agent)")
}

func (s *idleScenario) prepare(o *options) error {
	s.hold = o.duration
	if s.hold == 0 {
		s.hold = 10 * time.Second
	}
	if s.agents == 0 {
		s.agents = s.connections
	}
	switch {
	case s.connections < 1:
		return errors.New("--connections must be at least 1")
	case s.agents < 1 || s.agents > s.connections:
		return fmt.Errorf("--agents must be from 1 to --connections (%d)", s.connections)
	}
	return nil
}

func (s *idleScenario) agentsNeeded() int      { return s.agents }
func (s *idleScenario) connectionsNeeded() int { return s.connections }

func (s *idleScenario) params(p *ordered) {
	p.set("connections", s.connections)
	p.set("agents", s.agents)
	p.set("hold", s.hold.String())
}

// noFileReserve is what the tool keeps for everything but the WebSocket
// connections (HTTP clients, files).
const noFileReserve = 512

// raiseNoFile raises the open-file limit so that conns connections fit;
// if the hard limit is too low and cannot be raised, that is a usage error.
func raiseNoFile(conns int) error {
	need := uint64(conns + noFileReserve)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // not knowable here; let the dials fail loudly if it matters
	}
	if lim.Cur >= need {
		return nil
	}
	want := lim
	want.Cur = min(max(need, lim.Cur), lim.Max)
	if lim.Max < need {
		want.Cur, want.Max = need, need
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		if lim.Max < need {
			// Use what the hard limit allows and say what is missing.
			lim.Cur = lim.Max
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
			return usagef("%d connections need about %d open files (%d reserved for the rest), but the hard limit (ulimit -Hn) is %d and raising it failed: %v; raise it (as root, ulimit -Hn or LimitNOFILE=) or open fewer connections (the server needs as many too)",
				conns, need, noFileReserve, lim.Max, err)
		}
		return fmt.Errorf("raising the open-file limit to %d: %w", need, err)
	}
	return nil
}

func (s *idleScenario) run(ctx context.Context, b *bench) error {
	C, A := s.connections, len(b.agents)
	// One loopback source address per 10,000 connections (IPv4 targets).
	b.spread.Store(int64(1 + C/10000))

	var unexpected atomic.Int64
	hook := func(c *wsConn, ev *wireEvent, mark *benchMark, fresh bool, at time.Duration) {
		unexpected.Add(1)
	}
	metricsBefore := b.metrics(ctx)
	b.serverSample("before")
	clientBefore, _ := readProc(os.Getpid())

	agents := make([]*agent, C)
	for i := range agents {
		agents[i] = b.agents[i%A]
	}
	var conns []*wsConn
	connectStart := b.now()
	if err := b.phase("connect", func() error {
		var err error
		conns, err = b.connectAll(ctx, agents, hook, nil)
		return err
	}); err != nil {
		return err
	}
	connectSpan := b.now() - connectStart
	hs := newHistogram()
	for _, c := range conns {
		hs.Record(c.handshake)
	}

	if err := b.phase("hold", func() error {
		end := time.Now().Add(s.hold)
		for time.Now().Before(end) {
			if err := b.closedConnsError(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(time.Until(end), 250*time.Millisecond)):
			}
		}
		return b.closedConnsError()
	}); err != nil {
		return err
	}
	b.serverSample("after")
	clientAfter, _ := readProc(os.Getpid())
	metricsAfter := b.metrics(ctx)
	readyConns, readyOK := b.readyzConnections(ctx)

	// Every connection is still alive end to end: it answers a ping.
	var pingFailed atomic.Int64
	if err := b.phase("ping", func() error {
		return parallel(ctx, len(conns), 256, func(ctx context.Context, i int) error {
			if err := conns[i].ping(ctx); err != nil && ctx.Err() == nil {
				pingFailed.Add(1)
				b.check.violate(kindClosed, 1, "%s: an idle connection did not answer a ping: %v", conns[i].ag.handle, err)
			}
			return nil
		})
	}); err != nil {
		return err
	}

	f := b.rep.Figures
	f.set("connections", float64(len(conns)))
	f.set("connects_per_s", round3(float64(len(conns))/connectSpan.Seconds()))
	if sp := b.rep.ServerProcess; sp != nil && sp.Before != nil && sp.After != nil {
		f.set("server_rss_before_bytes", float64(sp.Before.RSSBytes))
		f.set("server_rss_after_bytes", float64(sp.After.RSSBytes))
		f.set("server_rss_per_connection_bytes", round3(float64(sp.RSSDeltaBytes)/float64(C)))
		f.set("server_threads_after", float64(sp.After.Threads))
		f.set("server_open_files_after", float64(sp.After.OpenFiles))
	} else {
		b.rep.Notes = append(b.rep.Notes, "no --pid: server memory per connection not measured")
	}
	if clientBefore.RSSBytes > 0 && clientAfter.RSSBytes > 0 {
		f.set("client_rss_per_connection_bytes", round3(float64(clientAfter.RSSBytes-clientBefore.RSSBytes)/float64(C)))
	}
	if readyOK {
		f.set("server_reported_connections", float64(readyConns))
	}
	f.set("events_received", float64(unexpected.Load()))
	f.set("pings_failed", float64(pingFailed.Load()))
	b.rep.Latency.set("handshake", hs.Summary())

	if metricsAfter != nil {
		m := newOrdered()
		keys := make([]string, 0, len(metricsAfter))
		for k := range metricsAfter {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m.set(k+" (after)", metricsAfter[k])
			if v, ok := metricsBefore[k]; ok {
				m.set(k+" (per connection)", round3((metricsAfter[k]-v)/float64(C)))
			}
		}
		b.rep.Metrics = m
	} else {
		b.rep.Notes = append(b.rep.Notes, "the server has no GET /metrics (Prometheus text)")
	}
	return nil
}

// readyzConnections reads aspd's GET /readyz {"connections": n}, if the
// operator has it.
func (b *bench) readyzConnections(ctx context.Context) (int64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(b.o.server, "/")+"/readyz", nil)
	if err != nil {
		return 0, false
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var r struct {
		Connections *int64 `json:"connections"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil || r.Connections == nil {
		return 0, false
	}
	return *r.Connections, true
}
