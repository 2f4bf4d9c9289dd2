package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/search"
)

// A search that cannot get a slot before its time runs out is refused with
// ErrSearchTooSlow (503 at the edge), and takes nothing from the searches
// that hold the slots; once a slot is free, searching works.
func TestSearchSlotsAndTimeBound(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s, err := Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		q, err := search.Parse("anything")
		if err != nil {
			t.Fatal(err)
		}
		for range cap(s.searches) {
			s.searches <- struct{}{}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := s.Search(ctx, SearchFilter{Query: q, Limit: 10}); !errors.Is(err, ErrSearchTooSlow) {
			t.Fatalf("search with every slot taken: %v, want ErrSearchTooSlow", err)
		}
		if len(s.searches) != cap(s.searches) {
			t.Fatalf("the refused search changed the slots: %d of %d taken", len(s.searches), cap(s.searches))
		}
		<-s.searches
		if _, err := s.Search(context.Background(), SearchFilter{Query: q, Limit: 10}); err != nil {
			t.Fatalf("search with a free slot: %v", err)
		}
		if len(s.searches) != cap(s.searches)-1 {
			t.Fatalf("a finished search kept its slot: %d of %d taken", len(s.searches), cap(s.searches))
		}
	})
}
