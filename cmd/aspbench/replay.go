package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync/atomic"
	"time"
)

// replayScenario: an agent goes offline while E events accumulate across S
// sessions; the time from its reconnect until every missed event arrived,
// each exactly once and in order.
type replayScenario struct {
	sessions    int
	events      int
	concurrency int
}

func (s *replayScenario) flags(fs *flag.FlagSet) {
	fs.IntVar(&s.sessions, "sessions", 100, "sessions (S) the offline agent is joined in, each with one writer agent")
	fs.IntVar(&s.events, "events", 10000, "messages (E) posted while the agent is offline, round-robin across the sessions")
	fs.IntVar(&s.concurrency, "concurrency", 16, "message requests in flight while the events accumulate")
}

func (s *replayScenario) prepare(o *options) error {
	switch {
	case o.duration != 0:
		return errors.New("--duration does not apply to replay (use --events)")
	case s.sessions < 1:
		return errors.New("--sessions must be at least 1")
	case s.events < 1:
		return errors.New("--events must be at least 1")
	case s.concurrency < 1:
		return errors.New("--concurrency must be at least 1")
	}
	return nil
}

func (s *replayScenario) agentsNeeded() int      { return 2 }
func (s *replayScenario) connectionsNeeded() int { return 3 + s.concurrency }

func (s *replayScenario) params(p *ordered) {
	p.set("sessions", s.sessions)
	p.set("events", s.events)
	p.set("concurrency", s.concurrency)
}

func (s *replayScenario) run(ctx context.Context, b *bench) error {
	X, W := b.agents[0], b.agents[1]
	S := s.sessions
	sessions := make([]*session, S)
	for i := range sessions {
		sessions[i] = &session{idx: i, creator: W, members: []*agent{W, X}}
	}
	if err := b.phase("sessions", func() error { return b.setupSessions(ctx, sessions) }); err != nil {
		return err
	}

	// The writer's stream notices the agent going offline.
	var offlineSeen atomic.Int64
	wHook := func(c *wsConn, ev *wireEvent, mark *benchMark, fresh bool, at time.Duration) {
		if c.ag == W && fresh && ev.Type == "session.disconnected" && ev.Payload.Agent == X.handle {
			offlineSeen.Add(1)
		}
	}
	var conns map[*agent]*wsConn
	if err := b.phase("connect", func() error {
		var err error
		conns, err = b.connectSynced(ctx, sessions, []*agent{W, X}, wHook, func(c *wsConn) {
			for _, ss := range sessions {
				c.expect(ss.id, 1)
			}
		})
		return err
	}); err != nil {
		return err
	}
	wc, xc := conns[W], conns[X]

	// Offline: a normal close, then wait for the operator to record it.
	prevLast := make([]int64, S)
	baseN := make([]int64, S)
	baseH := make([]uint64, S)
	if err := b.phase("offline", func() error {
		xc.close()
		for i, ss := range sessions {
			prevLast[i] = xc.last(ss.id)
			baseN[i], baseH[i] = ss.tally.count.Load(), ss.tally.hash.Load()
		}
		deadline := time.Now().Add(30 * time.Second)
		for offlineSeen.Load() < int64(S) {
			if time.Now().After(deadline) {
				b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("the writer saw session.disconnected for the offline agent in %d of %d sessions within 30s", offlineSeen.Load(), S))
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}); err != nil {
		return err
	}

	post := newHistogram()
	var res sendResult
	accStart := b.now()
	if err := b.phase("accumulate", func() error {
		var err error
		res, err = b.send(ctx, sendPlan{
			concurrency: s.concurrency, count: int64(s.events),
			job:        func(n int64) (*session, *agent) { return sessions[n%int64(S)], W },
			onAccepted: func(n int64, t, started, done time.Duration) { post.Record(done - t) },
		})
		if err != nil {
			return err
		}
		// The writer, still connected, receives everything live.
		return b.waitCaughtUp(ctx, sessions, map[*agent]*wsConn{W: wc}, b.o.drainTimeout, "the writer's own messages")
	}); err != nil {
		return err
	}
	accSpan := b.now() - accStart

	// Reconnect and time the replay.
	xr := b.newConn(X, nil)
	for i, ss := range sessions {
		xr.expect(ss.id, prevLast[i]+1)
		xr.setTarget(ss.id, ss.tally.maxSeq.Load())
	}
	b.serverSample("before")
	t0 := b.now()
	var done time.Duration
	replayErr := b.phase("replay", func() error {
		if err := xr.start(ctx); err != nil {
			return err
		}
		deadline := time.Now().Add(b.o.drainTimeout)
		for {
			waiting, example := 0, ""
			done = 0
			for _, ss := range sessions {
				at, ok := xr.reached(ss.id)
				if !ok {
					if waiting == 0 {
						example = fmt.Sprintf("session %s at sequence %d of %d", ss.id, xr.last(ss.id), ss.tally.maxSeq.Load())
					}
					waiting++
				}
				done = max(done, at)
			}
			if waiting == 0 {
				return nil
			}
			if err := b.closedConnsError(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("replay incomplete after %s: %d sessions still behind (e.g. %s)", b.o.drainTimeout, waiting, example)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	})
	b.serverSample("after")
	received := xr.events.Load()
	if replayErr == nil {
		// Each missed message exactly once: the reconnected stream's fresh
		// messages are exactly those accepted while the agent was away.
		for i, ss := range sessions {
			wantN, wantH := ss.tally.count.Load()-baseN[i], ss.tally.hash.Load()-baseH[i]
			gotN, gotH := xr.benchTally(ss.id)
			switch {
			case gotN < wantN:
				b.check.violate(kindMissing, wantN-gotN, "after reconnecting, %s in session %s received %d of the %d messages posted while it was offline", X.handle, ss.id, gotN, wantN)
			case gotN > wantN:
				b.check.violate(kindMismatch, gotN-wantN, "after reconnecting, %s in session %s received %d messages; %d were posted while it was offline", X.handle, ss.id, gotN, wantN)
			case gotH != wantH:
				b.check.violate(kindMismatch, 1, "after reconnecting, %s in session %s received other messages than those posted while it was offline", X.handle, ss.id)
			}
		}
		b.verifySessions(sessions, map[*agent]*wsConn{W: wc, X: nil})
	}
	// The reconnect's presence events (session.reconnected) come with or
	// right after the replay; give them a moment and count them.
	recon := 0
	for wait := time.Now().Add(2 * time.Second); ; {
		recon = 0
		for _, ss := range sessions {
			if xr.sawOwnReconnected(ss.id) {
				recon++
			}
		}
		if recon == S || time.Now().After(wait) || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}

	f := b.rep.Figures
	f.set("messages_missed", float64(res.accepted))
	f.set("accumulate_msgs_per_s", round3(float64(res.accepted)/accSpan.Seconds()))
	if replayErr == nil {
		span := done - t0
		f.set("replay_ms", ms(span))
		f.set("handshake_ms", ms(xr.handshake))
		if fa := xr.firstAt.Load(); fa > 0 {
			f.set("first_event_ms", ms(time.Duration(fa)-t0))
		}
		f.set("events_replayed", float64(received))
		f.set("replay_events_per_s", round3(float64(received)/span.Seconds()))
	}
	f.set("sessions_with_reconnected_event", float64(recon))
	f.set("requests_failed", float64(res.failed))
	b.rep.Latency.set("send_to_201", post.Summary())
	return replayErr
}
