package store

import (
	"context"
	"testing"
)

// openStore opens the store at url for an internal test and closes it
// when the test ends (store_test.go's open, for package store's own tests).
func openStore(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
