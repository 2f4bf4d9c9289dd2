package store

import (
	"context"
	"time"

	"github.com/aspd/aspd/protocol"
)

// Test-only access to internals, for package store_test.

// SendAsOneBatch appends reqs through the group-commit path as one batch, as
// if they had queued together, and returns each one's result in order.
func (s *Store) SendAsOneBatch(reqs []SendMessage) ([]protocol.SendMessageResponse, []*Commit, []error) {
	calls := make([]*sendCall, len(reqs))
	for i, r := range reqs {
		calls[i] = &sendCall{ctx: context.Background(), req: r, done: make(chan sendResult, 1)}
	}
	s.commitBatch(calls)
	resps, commits, errs := make([]protocol.SendMessageResponse, len(reqs)), make([]*Commit, len(reqs)), make([]error, len(reqs))
	for i, c := range calls {
		r := <-c.done
		resps[i], commits[i], errs[i] = r.resp, r.commit, r.err
	}
	return resps, commits, errs
}

// ExecForTest runs a statement on the write connection.
func (s *Store) ExecForTest(ctx context.Context, query string) error {
	_, err := s.write.ExecContext(ctx, query)
	return err
}

// SetTxTimeoutForTest shortens the bound on request transactions.
func (s *Store) SetTxTimeoutForTest(d time.Duration) { s.txTimeout = d }
