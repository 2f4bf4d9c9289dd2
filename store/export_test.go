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

// SearchStepsForTest runs a first walk, the capped index step and the
// index step with every hit of search on f, each alone: on a small store
// the walk reads every event and answers, so the search tests check the
// index steps' SQL this way.
func (s *Store) SearchStepsForTest(ctx context.Context, f SearchFilter) (map[string][]SearchHit, error) {
	out := map[string][]SearchHit{}
	for name, st := range map[string]searchStep{
		"walk":         {walk: searchWalkShort},
		"capped index": {limit: searchIndexCap, budget: searchIndexBudget},
		"every hit":    {},
	} {
		hits, _, err := s.searchStep(ctx, f, st)
		if err != nil {
			return nil, err
		}
		out[name] = hits
	}
	return out, nil
}
