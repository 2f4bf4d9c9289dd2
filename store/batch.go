package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aspd/aspd/protocol"
)

// Group commit for messages, the hot path. Concurrent SendMessage calls
// queue up; each committer takes whatever has queued (at most maxBatch) and
// appends all of it in one transaction, by the same message rule as a lone
// message (appendMessages in sessions.go): one statement locks every session
// involved (in id order, so concurrent batches cannot deadlock) and loads
// their participants, one checks idempotency keys (when any), one inserts
// every event and advances every session's counter (two on SQLite), one
// commit and one fsync. On PostgreSQL these travel in two pipelined round
// trips on pgx's own interface (stmtqueue.go). Nothing waits for a batch to fill: at low load a
// batch is one message and costs what a lone transaction costs; under load,
// batches grow by themselves.
//
// One member's failure is not the batch's: rule refusals (not joined, an
// ended session, a reused key) are per member anyway, and if a statement
// fails the shared transaction, each member is retried in a transaction of
// its own, so that only the member at fault gets the error.

const maxBatch = 128

type sendCall struct {
	ctx  context.Context
	req  SendMessage
	done chan sendResult
}

type sendResult struct {
	resp   protocol.SendMessageResponse
	commit *Commit
	err    error
}

type batcher struct {
	in       chan *sendCall
	stop     chan struct{} // closed by stopBatcher: committers return
	drained  chan struct{} // closed once the queue has been answered
	stopOnce sync.Once
}

// startBatcher starts n committers.
func (s *Store) startBatcher(n int) {
	b := &batcher{in: make(chan *sendCall, 4*maxBatch), stop: make(chan struct{}), drained: make(chan struct{})}
	s.batch = b
	for range n {
		s.bg.Add(1)
		go s.commitLoop(b)
	}
}

func (s *Store) commitLoop(b *batcher) {
	defer s.bg.Done()
	calls := make([]*sendCall, 0, maxBatch)
	for {
		select {
		case <-b.stop:
			return
		case c := <-b.in:
			calls = append(calls[:0], c)
		}
	drain:
		for len(calls) < maxBatch {
			select {
			case c := <-b.in:
				calls = append(calls, c)
			default:
				break drain
			}
		}
		s.commitBatch(calls)
	}
}

// sendBatched queues a message for the next batch and waits for its result.
func (s *Store) sendBatched(ctx context.Context, req SendMessage) (protocol.SendMessageResponse, *Commit, error) {
	b := s.batch
	c := &sendCall{ctx: ctx, req: req, done: make(chan sendResult, 1)}
	select {
	case <-b.stop:
		return protocol.SendMessageResponse{}, nil, ErrClosed
	case b.in <- c:
	case <-ctx.Done():
		return protocol.SendMessageResponse{}, nil, ctx.Err()
	}
	// Once queued, wait for the batch whatever happens to ctx: the batch
	// always answers, and a committed message's Commit must reach the
	// caller, who publishes it for the whole session (a Commit dropped here
	// would leave live delivery waiting for it). The one exception is a
	// call queued after the store closed and its queue was drained: nobody
	// will take it.
	var r sendResult
	select {
	case r = <-c.done:
	case <-b.drained:
		select {
		case r = <-c.done: // answered by the drain
		default:
			r.err = ErrClosed
		}
	}
	return r.resp, r.commit, r.err
}

func (s *Store) commitBatch(calls []*sendCall) {
	results := make([]sendResult, len(calls))
	var live []int // calls whose client is still waiting
	for i, c := range calls {
		if c.ctx.Err() != nil {
			results[i].err = c.ctx.Err()
			continue
		}
		live = append(live, i)
	}
	if len(live) == 1 {
		if r, ok := s.appendCached(context.Background(), &calls[live[0]].req); ok {
			results[live[0]] = sendResult{resp: r.resp, commit: r.commit, err: memberError(r.err)}
			live = nil
		}
	}
	if len(live) > 0 {
		reqs := make([]*SendMessage, len(live))
		for j, i := range live {
			reqs[j] = &calls[i].req
		}
		err := s.inQueuedTx(context.Background(), func(q stmtQueue) error {
			res, err := s.appendMessages(context.Background(), q, reqs)
			if err != nil {
				return err
			}
			for j, i := range live {
				results[i] = res[j]
			}
			return nil
		})
		switch {
		case err == nil:
		case len(live) > 1 && !errors.As(err, new(errCommit)) && !errors.Is(err, context.DeadlineExceeded) && !IsUnavailable(err):
			// A statement failed, and with it the transaction that every
			// member shared, though the cause may be one member's row. One
			// request's failure must not fail the others: each member is
			// tried again alone, so only the one at fault gets the error.
			s.sendAlone(calls, live, results)
		default:
			// One member (its failure is its own), a transaction that timed
			// out, or a failed commit, whose outcome is unknown: retrying
			// could append a message twice. Nor is a batch split when the
			// store cannot serve (inQueuedTx has retried it on another
			// connection already): every member would fail alike.
			for _, i := range live {
				results[i] = sendResult{err: memberError(err)}
			}
		}
	}
	for i, c := range calls {
		c.done <- results[i]
	}
}

// sendAlone appends each live call's message in a transaction of its own,
// by the one-message path, after their shared transaction failed and
// rolled back. A call whose client has gone meanwhile is not written.
func (s *Store) sendAlone(calls []*sendCall, live []int, results []sendResult) {
	for _, i := range live {
		c := calls[i]
		if err := c.ctx.Err(); err != nil {
			results[i] = sendResult{err: err}
			continue
		}
		resp, commit, err := s.sendOne(context.WithoutCancel(c.ctx), c.req)
		results[i] = sendResult{resp: resp, commit: commit, err: memberError(err)}
	}
}

// memberError turns a database's refusal of one message's data into an
// answer to its sender where the refusal says what is wrong: PostgreSQL's
// data exceptions (SQLSTATE class 22: text it cannot store, a value out of
// range) are ErrInvalidData (the edge answers 400 invalid_request), its
// program limits (class 54) ErrTooLarge (413 content_too_large). Anything
// else stays an internal error.
func memberError(err error) error {
	var pg *pgconn.PgError
	switch {
	case !errors.As(err, &pg):
		return err
	case strings.HasPrefix(pg.Code, "22"):
		return &Error{Kind: KindInvalidData, Message: fmt.Sprintf("the database cannot store this message's data (SQLSTATE %s)", pg.Code)}
	case strings.HasPrefix(pg.Code, "54"):
		return &Error{Kind: KindTooLarge, Message: fmt.Sprintf("the message exceeds a database limit (SQLSTATE %s)", pg.Code)}
	}
	return err
}

// stopBatcher stops the committers and fails whatever is still queued with
// ErrClosed; a call queued later finds the queue drained (sendBatched).
func (s *Store) stopBatcher() {
	b := s.batch
	if b == nil {
		return
	}
	b.stopOnce.Do(func() {
		close(b.stop)
		s.bg.Wait()
		for {
			select {
			case c := <-b.in:
				c.done <- sendResult{err: ErrClosed}
			default:
				close(b.drained)
				return
			}
		}
	})
}

// EnableGroupCommit routes SendMessage through n group-commit committers
// (n < 1 picks a default: 1 on SQLite, which has one writer; 2 on PostgreSQL).
// Call it once, before use.
func (s *Store) EnableGroupCommit(n int) {
	if n < 1 {
		// Measured on 2 cores (docs/benchmarks.md): two committers keep the
		// tail latency lowest at the same throughput; SQLite has one writer.
		n = 2
		if s.d.name == "sqlite" {
			n = 1
		}
	}
	s.startBatcher(n)
}
