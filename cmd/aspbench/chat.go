package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// chatScenario: A agents in S sessions of K joined participants, all
// connected; closed-loop or open-loop senders.
type chatScenario struct {
	agents       int
	sessions     int
	participants int
	concurrency  int
	rate         float64
	warmup       time.Duration
	duration     time.Duration
	timeline     string // --timeline FILE (timeline.go)
}

func (s *chatScenario) flags(fs *flag.FlagSet) {
	fs.IntVar(&s.sessions, "sessions", 100, "sessions (S)")
	fs.IntVar(&s.participants, "participants", 3, "joined participants per session (K)")
	fs.IntVar(&s.agents, "agents", 0, "agents (A); default S*K, each in one session; fewer (at least K) are reused across sessions round-robin")
	fs.IntVar(&s.concurrency, "concurrency", 0, "senders in flight: closed loop, each posts its next message when the previous is accepted (default 64); open loop, the most requests in flight (default 256)")
	fs.Float64Var(&s.rate, "rate", 0, "total messages per second; > 0 selects the open loop: send times are scheduled on a fixed clock and latency is measured from the scheduled time")
	fs.DurationVar(&s.warmup, "warmup", 2*time.Second, "sending before the measured window (not measured, but checked)")
	fs.StringVar(&s.timeline, "timeline", "", "write, after the run, every measured message's scheduled, POST-start, 201 and last-delivery times (Unix µs) to FILE as JSON lines, and send each message's X-Request-Id (bench-RUN-N) for aspd's access log: the input of 'aspbench timeline'")
}

func (s *chatScenario) prepare(o *options) error {
	s.duration = o.duration
	if s.duration == 0 {
		s.duration = 10 * time.Second
	}
	if s.agents == 0 {
		s.agents = s.sessions * s.participants
	}
	if s.concurrency == 0 {
		s.concurrency = 64
		if s.rate > 0 {
			s.concurrency = 256
		}
	}
	switch {
	case s.sessions < 1:
		return errors.New("--sessions must be at least 1")
	case s.participants < 2:
		return errors.New("--participants must be at least 2")
	case s.agents < s.participants:
		return fmt.Errorf("--agents %d is fewer than --participants %d", s.agents, s.participants)
	case s.agents > s.sessions*s.participants:
		return fmt.Errorf("--agents %d is more than --sessions x --participants = %d", s.agents, s.sessions*s.participants)
	case s.concurrency < 1:
		return errors.New("--concurrency must be at least 1")
	case s.rate < 0:
		return errors.New("--rate must not be negative")
	case s.warmup < 0:
		return errors.New("--warmup must not be negative")
	}
	o.requestIDs = s.timeline != ""
	return nil
}

func (s *chatScenario) agentsNeeded() int      { return s.agents }
func (s *chatScenario) connectionsNeeded() int { return s.agents + s.concurrency }

func (s *chatScenario) params(p *ordered) {
	mode := "closed"
	if s.rate > 0 {
		mode = "open"
	}
	p.set("agents", s.agents)
	p.set("sessions", s.sessions)
	p.set("participants", s.participants)
	p.set("loop", mode)
	p.set("concurrency", s.concurrency)
	p.set("rate", s.rate)
	p.set("warmup", s.warmup.String())
	p.set("duration", s.duration.String())
}

func (s *chatScenario) run(ctx context.Context, b *bench) error {
	A, S, K := len(b.agents), s.sessions, s.participants
	sessions := make([]*session, S)
	memberOf := map[*agent][]*session{}
	for i := range sessions {
		ss := &session{idx: i}
		for j := 0; j < K; j++ {
			a := b.agents[(i*K+j)%A]
			ss.members = append(ss.members, a)
			memberOf[a] = append(memberOf[a], ss)
		}
		ss.creator = ss.members[0]
		sessions[i] = ss
	}
	if err := b.phase("sessions", func() error { return b.setupSessions(ctx, sessions) }); err != nil {
		return err
	}

	lat := newHistogram()
	var tl *timeline // --timeline: every measured message's times
	if s.timeline != "" {
		n := 1 << 16
		if s.rate > 0 {
			n = int(s.rate*(s.warmup+s.duration).Seconds()) + 1
		}
		tl = newTimeline(n)
	}
	hook := func(c *wsConn, ev *wireEvent, mark *benchMark, fresh bool, at time.Duration) {
		if mark == nil || !fresh || mark.ID < 0 || ev.Payload.Sender == c.ag.handle {
			return
		}
		if mark.T >= b.winStart.Load() {
			lat.Record(at - time.Duration(mark.T))
			if tl != nil {
				tl.delivered(mark.ID, time.Duration(mark.T), at)
			}
		}
	}
	var conns map[*agent]*wsConn
	if err := b.phase("connect", func() error {
		var err error
		conns, err = b.connectSynced(ctx, sessions, b.agents, hook, func(c *wsConn) {
			for _, ss := range memberOf[c.ag] {
				c.expect(ss.id, 1)
			}
		})
		return err
	}); err != nil {
		return err
	}

	// The measurement.
	post, lag := newHistogram(), newHistogram()
	var acceptedTotal, acceptedWin, measured atomic.Int64
	sendStart := b.now()
	winStart, winEnd := sendStart+s.warmup, sendStart+s.warmup+s.duration
	b.winStart.Store(int64(winStart))
	b.winEnd.Store(int64(winEnd))
	var sampled sync.WaitGroup
	var mallocsBefore map[string]float64
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		select {
		case <-time.After(winStart - b.now()):
			b.serverSample("before")
			mallocsBefore = b.metrics(ctx)
		case <-ctx.Done():
		}
	}()
	plan := sendPlan{
		concurrency: s.concurrency, rate: s.rate, start: sendStart, end: winEnd,
		job: func(n int64) (*session, *agent) {
			ss := sessions[n%int64(S)]
			return ss, ss.members[(n/int64(S))%int64(K)]
		},
		onAccepted: func(n int64, t, started, done time.Duration) {
			acceptedTotal.Add(1)
			if done >= winStart && done < winEnd {
				acceptedWin.Add(1)
			}
			if t >= winStart {
				measured.Add(1)
				post.Record(done - t)
				if s.rate > 0 {
					lag.Record(started - t)
				}
				if tl != nil {
					tl.accepted(n, int(n%int64(S)), t, started, done)
				}
			}
		},
	}
	var res sendResult
	if err := b.phase("measure", func() error {
		var err error
		res, err = b.send(ctx, plan)
		return err
	}); err != nil {
		return err
	}
	sampled.Wait()
	b.serverSample("after")
	mallocsAfter := b.metrics(ctx)
	drainErr := b.phase("drain", func() error {
		return b.waitCaughtUp(ctx, sessions, conns, b.o.drainTimeout, "every accepted message")
	})
	if drainErr == nil {
		b.verifySessions(sessions, conns)
		if want := measured.Load() * int64(K-1); lat.Count() != want {
			b.check.violate(kindIncomplete, abs(want-lat.Count()), "%d send-to-deliver samples for %d measured messages x %d recipients = %d", lat.Count(), measured.Load(), K-1, want)
		}
	}

	win := s.duration.Seconds()
	f := b.rep.Figures
	f.set("accepted_msgs_per_s", round3(float64(acceptedWin.Load())/win))
	f.set("delivered_events_per_s", round3(float64(b.winEvents.Load())/win))
	if s.rate > 0 {
		f.set("target_msgs_per_s", s.rate)
		f.set("scheduled_msgs", res.scheduled)
	}
	f.set("messages_accepted", float64(acceptedTotal.Load()))
	if sp := b.rep.ServerProcess; sp != nil && sp.Before != nil && sp.After != nil && acceptedWin.Load() > 0 {
		// The server's CPU per message in the measured window: steadier than
		// throughput when server and load generator share the cores.
		f.set("server_cpu_us_per_msg", round3(sp.CPUSeconds*1e6/float64(acceptedWin.Load())))
	}
	if m0, ok := mallocsBefore[goMallocs]; ok && acceptedWin.Load() > 0 {
		if m1, ok := mallocsAfter[goMallocs]; ok {
			// The server's heap allocations per message over the same
			// window (a Go server's /metrics; none for others): the
			// allocation budget of issue 21 under a real load, delivery
			// included, where BenchmarkSendMessage sends alone.
			f.set("server_allocs_per_msg", round3((m1-m0)/float64(acceptedWin.Load())))
		}
	}
	f.set("messages_measured", float64(measured.Load()))
	f.set("deliveries_measured", float64(lat.Count()))
	f.set("events_received_total", float64(b.events.Load()))
	f.set("requests_failed", float64(res.failed))
	b.rep.Latency.set("send_to_deliver", lat.Summary())
	b.rep.Latency.set("send_to_201", post.Summary())
	if s.rate > 0 {
		b.rep.Latency.set("send_start_lag", lag.Summary())
	}
	if tl != nil {
		n, err := tl.write(s.timeline, b.base, b.runID)
		if err != nil {
			return errors.Join(drainErr, fmt.Errorf("--timeline: %w", err))
		}
		b.logf("timeline: %d messages written to %s", n, s.timeline)
	}
	return drainErr
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// ---- the sending engine (chat, fanout, replay) ----

// sendPlan describes a sending phase. Message n goes to the session and
// sender job(n) returns.
type sendPlan struct {
	concurrency int
	rate        float64       // > 0: open loop, message n scheduled at start + n/rate
	start       time.Duration // on the run's clock
	end         time.Duration // stop (closed loop) or stop scheduling (open loop) here, unless count > 0
	count       int64         // > 0: exactly this many messages
	job         func(n int64) (*session, *agent)
	// onAccepted is called after each 201 with the message's time t (the
	// scheduled time in the open loop, the send time in the closed loop),
	// when the request actually started and when the answer arrived.
	onAccepted func(n int64, t, started, done time.Duration)
}

type sendResult struct {
	scheduled int64
	accepted  int64
	failed    int64
}

// maxSendErrors stops a sending phase against a server that only fails.
const maxSendErrors = 1000

// send runs a sending phase. Failed requests are counted in b.errs (they
// fail the run) and do not stop it, up to maxSendErrors.
func (b *bench) send(ctx context.Context, p sendPlan) (sendResult, error) {
	var res sendResult
	var accepted, failed atomic.Int64
	var wg sync.WaitGroup
	do := func(n int64, t time.Duration) bool {
		s, a := p.job(n)
		started := b.now()
		if err := b.post(ctx, s, a, n, t); err != nil {
			if ctx.Err() != nil {
				return false
			}
			b.errs.add("POST /sessions/{id}/messages", err)
			return failed.Add(1) < maxSendErrors
		}
		accepted.Add(1)
		if p.onAccepted != nil {
			p.onAccepted(n, t, started, b.now())
		}
		return true
	}
	if p.rate <= 0 {
		var next atomic.Int64
		for w := 0; w < p.concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					n := next.Add(1) - 1
					if p.count > 0 && n >= p.count || p.count == 0 && b.now() >= p.end {
						return
					}
					if !do(n, b.now()) {
						return
					}
				}
			}()
		}
		wg.Wait()
		res.scheduled = next.Load()
	} else {
		interval := float64(time.Second) / p.rate
		sched := func(n int64) time.Duration { return p.start + time.Duration(float64(n)*interval) }
		jobs := make(chan int64)
		stop := make(chan struct{})
		var stopOnce sync.Once
		for w := 0; w < p.concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range jobs {
					if !do(n, sched(n)) {
						stopOnce.Do(func() { close(stop) })
					}
				}
			}()
		}
		// The dispatcher keeps the fixed schedule: when every sender is
		// busy it falls behind and then catches up, and latency is still
		// measured from each message's scheduled time.
		var n int64
	dispatch:
		for ; ; n++ {
			at := sched(n)
			if p.count > 0 && n >= p.count || p.count == 0 && at >= p.end {
				break
			}
			if d := at - b.now(); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					break dispatch
				case <-stop:
					break dispatch
				}
			}
			select {
			case jobs <- n:
			case <-ctx.Done():
				break dispatch
			case <-stop:
				break dispatch
			}
		}
		close(jobs)
		wg.Wait()
		res.scheduled = n
	}
	res.accepted, res.failed = accepted.Load(), failed.Load()
	if ctx.Err() != nil {
		return res, fmt.Errorf("sending: %w after %d accepted messages", ctx.Err(), res.accepted)
	}
	if res.failed >= maxSendErrors {
		return res, fmt.Errorf("sending stopped after %d failed requests (e.g. %s)", res.failed, b.errs.first())
	}
	return res, nil
}
