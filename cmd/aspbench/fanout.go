package main

import (
	"context"
	"errors"
	"flag"
	"sync/atomic"
	"time"
)

// fanoutScenario: one session of N joined participants, one sender at a
// fixed rate; latency until the first and the last recipient has each
// message.
type fanoutScenario struct {
	participants int
	messages     int
	rate         float64
	concurrency  int
}

func (s *fanoutScenario) flags(fs *flag.FlagSet) {
	fs.IntVar(&s.participants, "participants", 1000, "joined participants in the session (N), the sender included")
	fs.IntVar(&s.messages, "messages", 100, "messages the sender posts")
	fs.Float64Var(&s.rate, "rate", 10, "messages per second (open loop: latency is measured from each message's scheduled time)")
	fs.IntVar(&s.concurrency, "concurrency", 16, "most message requests in flight")
}

func (s *fanoutScenario) prepare(o *options) error {
	switch {
	case o.duration != 0:
		return errors.New("--duration does not apply to fanout (use --messages and --rate)")
	case s.participants < 2:
		return errors.New("--participants must be at least 2")
	case s.messages < 1:
		return errors.New("--messages must be at least 1")
	case s.rate <= 0:
		return errors.New("--rate must be positive")
	case s.concurrency < 1:
		return errors.New("--concurrency must be at least 1")
	}
	return nil
}

func (s *fanoutScenario) agentsNeeded() int      { return s.participants }
func (s *fanoutScenario) connectionsNeeded() int { return s.participants + s.concurrency }

func (s *fanoutScenario) params(p *ordered) {
	p.set("participants", s.participants)
	p.set("messages", s.messages)
	p.set("rate", s.rate)
	p.set("concurrency", s.concurrency)
}

func (s *fanoutScenario) run(ctx context.Context, b *bench) error {
	N, M := s.participants, s.messages
	sess := &session{idx: 0, creator: b.agents[0], members: b.agents}
	sender := b.agents[0]
	if err := b.phase("session", func() error { return b.setupSession(ctx, sess, b.o.setupConc) }); err != nil {
		return err
	}

	per, first, last := newHistogram(), newHistogram(), newHistogram()
	remaining := make([]atomic.Int32, M)
	for i := range remaining {
		remaining[i].Store(int32(N - 1))
	}
	hook := func(c *wsConn, ev *wireEvent, mark *benchMark, fresh bool, at time.Duration) {
		if mark == nil || !fresh || mark.ID < 0 || mark.ID >= int64(M) || ev.Payload.Sender == c.ag.handle {
			return
		}
		lat := at - time.Duration(mark.T)
		per.Record(lat)
		switch remaining[mark.ID].Add(-1) {
		case int32(N - 2):
			first.Record(lat)
			if N == 2 {
				last.Record(lat)
			}
		case 0:
			last.Record(lat)
		}
	}
	// Every participant first receives the set-up (N-1 invitations, N-1
	// joins) and the sync message: N * (2N-1) events, more when the
	// operator restarts streams at the join (see sessTrack.observe).
	var conns map[*agent]*wsConn
	syncStart, syncBase := b.now(), b.events.Load()
	if err := b.phase("connect", func() error {
		var err error
		conns, err = b.connectSynced(ctx, []*session{sess}, b.agents, hook, func(c *wsConn) { c.expect(sess.id, 1) })
		return err
	}); err != nil {
		return err
	}
	syncEvents := float64(b.events.Load() - syncBase)
	b.rep.Figures.set("initial_sync_log_events", float64(sess.tally.maxSeq.Load()))
	b.rep.Figures.set("initial_sync_events_delivered", syncEvents)
	b.rep.Figures.set("initial_sync_events_per_s", round3(syncEvents/(b.now()-syncStart).Seconds()))

	post := newHistogram()
	sendStart := b.now()
	b.winStart.Store(int64(sendStart))
	b.serverSample("before")
	var res sendResult
	if err := b.phase("send", func() error {
		var err error
		res, err = b.send(ctx, sendPlan{
			concurrency: s.concurrency, rate: s.rate, start: sendStart, count: int64(M),
			job:        func(n int64) (*session, *agent) { return sess, sender },
			onAccepted: func(n int64, t, started, done time.Duration) { post.Record(done - t) },
		})
		return err
	}); err != nil {
		return err
	}
	drainErr := b.phase("drain", func() error {
		return b.waitCaughtUp(ctx, []*session{sess}, conns, b.o.drainTimeout, "every message")
	})
	b.serverSample("after")
	var lastAt time.Duration
	for _, c := range conns {
		lastAt = max(lastAt, time.Duration(c.lastAt.Load()))
	}
	if drainErr == nil {
		b.verifySessions([]*session{sess}, conns)
		if last.Count() != res.accepted {
			b.check.violate(kindIncomplete, abs(res.accepted-last.Count()), "%d of %d accepted messages reached every recipient", last.Count(), res.accepted)
		}
		if want := res.accepted * int64(N-1); per.Count() != want {
			b.check.violate(kindIncomplete, abs(want-per.Count()), "%d deliveries measured; want %d accepted messages x %d recipients = %d", per.Count(), res.accepted, N-1, want)
		}
	}

	f := b.rep.Figures
	f.set("messages_accepted", float64(res.accepted))
	f.set("recipients_per_message", float64(N-1))
	f.set("deliveries", float64(per.Count()))
	if span := (lastAt - sendStart).Seconds(); span > 0 {
		f.set("delivered_events_per_s", round3(float64(b.winEvents.Load())/span))
	}
	f.set("send_span_s", round3((lastAt - sendStart).Seconds()))
	f.set("requests_failed", float64(res.failed))
	b.rep.Latency.set("last_recipient", last.Summary())
	b.rep.Latency.set("first_recipient", first.Summary())
	b.rep.Latency.set("per_recipient", per.Summary())
	b.rep.Latency.set("send_to_201", post.Summary())
	return drainErr
}
