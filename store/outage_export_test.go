package store

import (
	"context"
	"time"
)

// Test-only access for the outage tests (outage_test.go).

// QueryIntForTest reads one integer on the write connection (SQLite's
// pragmas are per connection; the write pool has one).
func (s *Store) QueryIntForTest(ctx context.Context, query string) (int64, error) {
	var n int64
	err := s.write.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}

// SetHealthClockForTest moves the outage tracker's clock, so that a test
// need not wait out its settle time.
func (s *Store) SetHealthClockForTest(now func() time.Time) {
	s.health.mu.Lock()
	s.health.now = now
	s.health.mu.Unlock()
}
