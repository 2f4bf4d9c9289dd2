package app

import (
	"context"
	"sync/atomic"
	"time"
)

// Retention of ended sessions (docs/operators.md, "Redaction and
// retention"): with --retention-closed-sessions set, a sweeper deletes the
// sessions ended longer ago than that, each in bounded transactions
// (store.PurgeSession), and never an active session, nor one reopened
// since it was listed (the store re-checks under the session's lock).

// RetentionConfig is the retention policy; the zero value keeps everything.
type RetentionConfig struct {
	// ClosedSessions: sessions ended longer ago than this are purged; 0 = never.
	ClosedSessions time.Duration
	// Interval is how often the sweeper looks (0: RetentionInterval).
	Interval time.Duration
	// Batch is the most events deleted in one transaction (0: RetentionBatch).
	Batch int
}

const (
	// RetentionInterval is how often the retention sweeper runs by default.
	RetentionInterval = time.Minute
	// RetentionBatch is the default number of events deleted per
	// transaction: small enough that a transaction holds the write lock
	// (SQLite's one writer) briefly, so live traffic is not stalled
	// (docs/benchmarks.md, "Retention purge under load").
	RetentionBatch = 500
	// retentionSessionsPerRound bounds one round's listing; the next round
	// takes the rest.
	retentionSessionsPerRound = 100
)

// sweepLockRetention is the retention sweeper's advisory lock (cluster.go).
const sweepLockRetention int64 = 0x61737064_00000003

// RetentionStats counts what retention purged since start, for /metrics.
type RetentionStats struct {
	Sessions atomic.Int64 // sessions purged
	Events   atomic.Int64 // events purged
	Redacted atomic.Int64 // events redacted (redact.go), counted here beside what retention removes
}

// RetentionStats returns retention's counters.
func (a *App) RetentionStats() *RetentionStats { return &a.retention }

func (a *App) retentionConfig() RetentionConfig {
	rc := a.cfg.Retention
	if rc.Interval <= 0 {
		rc.Interval = RetentionInterval
	}
	if rc.Batch <= 0 {
		rc.Batch = RetentionBatch
	}
	return rc
}

// pace pauses a purge between two batches for three times as long as the
// last one took (at most 2s), outside any transaction: the purge then holds
// the write lock (SQLite's one writer) and its share of the CPU at most a
// quarter of the time, and writes queued behind a batch go first. A purge
// is background work; taking four times as long costs nobody.
func pace(ctx context.Context, took time.Duration) {
	t := time.NewTimer(min(3*took, 2*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// sweepRetention runs PurgeExpired every interval, when retention is on.
func (a *App) sweepRetention() {
	a.every(a.retentionConfig().Interval, func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-a.stop: // a long purge stops with the application
				cancel()
			case <-ctx.Done():
			}
		}()
		if _, _, err := a.PurgeExpired(ctx, time.Now()); err != nil && ctx.Err() == nil {
			a.logFailure("retention sweep failed", err)
		}
	})
}

// PurgeExpired purges every session ended before now minus the retention
// period, and returns how many sessions and events it purged. With
// retention off it does nothing. On a cluster, one node at a time sweeps.
// The sweeper calls it with time.Now(); tests with the time they need.
func (a *App) PurgeExpired(ctx context.Context, now time.Time) (sessions int, events int64, err error) {
	rc := a.retentionConfig()
	if rc.ClosedSessions <= 0 {
		return 0, 0, nil
	}
	cutoff := now.Add(-rc.ClosedSessions).UnixMilli()
	sweep := func(ctx context.Context) error {
		for ctx.Err() == nil {
			ids, err := a.st.SessionsEndedBefore(ctx, cutoff, retentionSessionsPerRound)
			if err != nil || len(ids) == 0 {
				return err
			}
			if a.retentionListed != nil {
				a.retentionListed(ids)
			}
			purgedAny := false
			for _, id := range ids {
				// The longest batch is how long the purge held the write lock
				// at once (SQLite's one writer): what live traffic may wait.
				began := time.Now()
				last, longest := began, time.Duration(0)
				n, purged, err := a.st.PurgeSession(ctx, id, cutoff, rc.Batch, func(n int64) {
					a.retention.Events.Add(n)
					took := time.Since(last)
					longest = max(longest, took)
					pace(ctx, took)
					last = time.Now()
				})
				events += n
				if err != nil {
					return err
				}
				if purged {
					// Only a purged session's copies go: one reopened
					// since it was listed is live, and its ring (this
					// node's and the others') still serves its agents.
					a.hub.Forget(id)
					if a.node != nil {
						a.node.Forget(id)
					}
					purgedAny = true
					sessions++
					a.retention.Sessions.Add(1)
					a.log.Info("retention: purged a session", "session", id, "events", n, "batch", rc.Batch,
						"duration", time.Since(began).Round(time.Millisecond), "longest_batch", longest.Round(time.Millisecond))
				}
			}
			if !purgedAny {
				return nil // all reopened meanwhile: nothing left that is due
			}
		}
		return ctx.Err()
	}
	if a.node != nil {
		_, err = a.st.WithSweepLock(ctx, sweepLockRetention, a.node.Config().NodeExpiry, sweep)
	} else {
		err = sweep(ctx)
	}
	if sessions > 0 {
		a.log.Info("retention sweep purged sessions ended before the cutoff", "sessions", sessions, "events", events,
			"ended_before", time.UnixMilli(cutoff).UTC().Format(time.RFC3339), "retention", rc.ClosedSessions)
	}
	return sessions, events, err
}
