package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// On PostgreSQL a search step's SELECT is planned for its own arguments
// each time (dialect.planPerRun): pgx runs it as an unnamed statement, not
// one prepared and cached on the connection, for which PostgreSQL may
// settle on a plan made for any terms after five runs. Run more often than
// that on one connection, it leaves no prepared statement there; the same
// SELECT without the option does (which shows that the check can see one).
func TestSearchStatementsNotPrepared(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, dbtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := search.Parse("anything")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := s.read.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	run := func(sqlText string, args []any) {
		t.Helper()
		for range 6 {
			rows, err := conn.QueryContext(ctx, sqlText, args...)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	prepared := func(sqlText string) int {
		t.Helper()
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`, sqlText).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, st := range []searchStep{{walk: searchWalkShort}, {limit: searchIndexCap}, {}} {
		sqlText, args := s.searchSQL(SearchFilter{Query: q, Limit: 10}, st)
		run(sqlText, args)
		if n := prepared(sqlText); n != 0 {
			t.Errorf("step %+v: %d prepared statements of the search's SELECT on the connection, want none", st, n)
		}
		if mode, ok := args[0].(pgx.QueryExecMode); st.walk > 0 && ok && mode == pgx.QueryExecModeExec {
			run(sqlText, args[1:]) // without pgx's option
			if n := prepared(sqlText); n != 1 {
				t.Errorf("step %+v: without the option, %d prepared statements of the SELECT, want 1", st, n)
			}
		}
	}
}
