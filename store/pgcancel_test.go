package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/aspd/aspd/internal/dbtest"
)

// Statements cancelled at every moment of their life, the one connection
// reused at once by another caller's statement: no cancel request may land
// on that next statement, and the connection is kept rather than replaced
// after each cancel (serverCancel waits for the server's confirmation
// instead of dropping the connection or sleeping).
func TestCancelledStatementsLeaveTheConnectionSafe(t *testing.T) {
	dbURL := dbtest.Postgres(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1") // every statement on the same connection, when it is kept
	u.RawQuery = q.Encode()
	ctx := context.Background()
	s, err := Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// At least minRounds, and on until both cases have been met often
	// enough (a loaded machine shifts the mix), within maxRounds.
	const minRounds, maxRounds, minCancelled, minLate = 300, 3000, 30, 20
	// cancelled: stopped in the server (57014); late: the context ended
	// while the statement ran, and the statement ended first.
	cancelled, late, other, pids := 0, 0, 0, map[int]bool{}
	start := time.Now()
	rounds := 0
	for ; rounds < minRounds || (rounds < maxRounds && (cancelled < minCancelled || late < minLate)); rounds++ {
		i := rounds
		// From before the statement is sent to after it has ended. A
		// cancel request takes the server a fork and a kill (1-13 ms on
		// the machines measured, BenchmarkCancelledStatement): a short
		// statement often ends before it lands, the case where it could
		// land on the next statement; a long one is mostly cancelled in
		// the server.
		d := [...]time.Duration{time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond}[i%3]
		sleep := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
		after := time.Duration(rand.Int64N(int64(d) * 3 / 2))
		cctx, cancel := context.WithTimeout(ctx, after)
		var one int
		err := s.read.QueryRowContext(cctx, "SELECT 1 FROM pg_sleep("+sleep+")").Scan(&one)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "57014":
			cancelled++
		case err != nil:
			other++ // ended before it was sent, or database/sql gave the context's error
		case cctx.Err() != nil:
			late++
		}
		cancel()
		var pid int
		if err := s.read.QueryRowContext(ctx, "SELECT pg_backend_pid() FROM pg_sleep(0.01)").Scan(&pid); err != nil {
			if errors.As(err, &pe) && pe.Code == "57014" {
				t.Fatalf("round %d (cancel after %v): the next caller's statement was cancelled: %v", i, after, err)
			}
			t.Fatalf("round %d: %v", i, err)
		}
		pids[pid] = true
	}
	t.Logf("%d rounds in %v: %d cancelled in the server, %d ended before their cancel, %d other, %d backends",
		rounds, time.Since(start).Round(time.Millisecond), cancelled, late, other, len(pids))
	if cancelled < minCancelled || late < minLate {
		t.Fatalf("%d cancelled and %d late of %d statements (want %d and %d): the test no longer covers both cases", cancelled, late, rounds, minCancelled, minLate)
	}
	// A cancel not confirmed within cancelDeadline (a stalled server)
	// drops its connection; a handful is tolerated, one per cancel is not.
	if len(pids) > 5 {
		t.Fatalf("%d backends for %d cancelled statements: cancelled connections are replaced, not reused", len(pids), cancelled)
	}
}

// How long a caller waits for a statement it cancelled: from the end of
// its context to the statement's return, the cancel request's round trip
// included, with serverCancel and with pgx's own handler, which sleeps
// 100 ms after the request. go test ./store -run '^$' -bench CancelledStatement
func BenchmarkCancelledStatement(b *testing.B) {
	defer func(w func(*pgconn.PgConn) ctxwatch.Handler) { contextWatcher = w }(contextWatcher)
	for _, h := range []struct {
		name    string
		watcher func(*pgconn.PgConn) ctxwatch.Handler
	}{
		{"serverCancel", contextWatcher},
		{"pgx", func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelDeadline}
		}},
	} {
		b.Run(h.name, func(b *testing.B) {
			contextWatcher = h.watcher
			s, err := Open(context.Background(), dbtest.Postgres(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var waited time.Duration
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				cancelled := make(chan time.Time, 1)
				time.AfterFunc(2*time.Millisecond, func() { cancelled <- time.Now(); cancel() })
				var one int
				err := s.read.QueryRowContext(ctx, "SELECT 1 FROM pg_sleep(1)").Scan(&one)
				returned := time.Now()
				if err == nil {
					b.Fatal("a statement of 1 s, cancelled after 2 ms, gave no error")
				}
				waited += returned.Sub(<-cancelled)
			}
			b.ReportMetric(float64(waited.Microseconds())/float64(b.N), "us-after-cancel/op")
		})
	}
}
