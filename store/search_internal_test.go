package store

import (
	"context"
	"database/sql"
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
		s := openStore(t, url)
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

// A race returns as soon as one side answers, without waiting for the
// cancelled loser, and the search's slot is given back only once the loser
// has ended (searchSlot): its work never outlives the slot.
func TestSearchRaceLoserKeepsTheSlot(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := openStore(t, url)
		q, err := search.Parse("anything")
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		slot := newSearchSlot(func() { close(released) })
		proceed := make(chan struct{})
		loserCancelled := make(chan struct{})
		// The index step (an empty store: no hits, an exact answer) wins;
		// the other side ends only when the test lets it.
		other := func(ctx context.Context) ([]SearchHit, string, bool, error) {
			<-ctx.Done()
			close(loserCancelled)
			<-proceed
			return nil, "windows", false, ctx.Err()
		}
		type result struct {
			winner string
			ok     bool
			err    error
		}
		raced := make(chan result, 1)
		go func() {
			_, winner, ok, _, err := s.searchRace(context.WithValue(ctx, searchSlotKey{}, slot), SearchFilter{Query: q, Limit: 10}, other)
			raced <- result{winner, ok, err}
		}()
		var r result
		select {
		case r = <-raced:
		case <-time.After(5 * time.Second):
			close(proceed)
			t.Fatal("the race did not return while its cancelled loser ran")
		}
		if winner, ok, err := r.winner, r.ok, r.err; err != nil || !ok || winner != "index" {
			t.Fatalf("race: winner %q, ok %v, err %v; want the index step's answer", winner, ok, err)
		}
		select {
		case <-loserCancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the race's loser was not cancelled")
		}
		slot.let() // the search's own hold
		select {
		case <-released:
			t.Fatal("the slot was given back while the race's loser still ran")
		default:
		}
		close(proceed)
		select {
		case <-released:
		case <-time.After(5 * time.Second):
			t.Fatal("the slot was not given back once the race's loser ended")
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

// A search step whose context ends mid-statement (the loser of a race, a
// search past its time) is cancelled in PostgreSQL too, and its
// connection ends its transaction and goes back to the pool: pgx's default
// only dropped the connection, and the backend ran the statement on to its
// end (the race's loser went on taking a core from the next search), and
// the next step paid for a new connection. (SQLite's steps run in aspd's
// process and stop with their context; they take no settings, so no
// transaction: searchSettings.)
func TestCancelledSearchStepEndsInTheServer(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, dbtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const marker = "aspd-cancelled-step-test"
	// The backend running the statement, seen from another connection.
	sleeper := func() (pid int, state string) {
		t.Helper()
		err := s.read.QueryRowContext(ctx, `SELECT pid, state FROM pg_stat_activity
			WHERE query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, marker).Scan(&pid, &state)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return pid, state
	}
	stepCtx, cancel := context.WithCancel(ctx)
	pids := make(chan int, 1)
	go func() {
		defer cancel()
		for range 200 {
			if pid, state := sleeper(); state == "active" {
				pids <- pid
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		pids <- 0
	}()
	rows, end, err := s.queryWithSettings(stepCtx, "SELECT set_config('statement_timeout', '30000', true)",
		"SELECT pg_sleep(20) /* "+marker+" */")
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
		rows.Close()
	}
	if err == nil {
		t.Fatal("a statement cancelled mid-way: no error")
	}
	if end == nil {
		t.Fatal("queryWithSettings gave no end for the transaction it began")
	}
	end()
	pid := <-pids
	if pid == 0 {
		t.Fatal("never saw the statement running")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The pool may hand this very connection to the look itself: it is
		// kept once the server has confirmed the cancel (serverCancel),
		// and its statement is not cancelled.
		var state sql.NullString
		var self bool
		err := s.read.QueryRowContext(ctx, `SELECT state, pid = pg_backend_pid() FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&state, &self)
		switch {
		case errors.Is(err, sql.ErrNoRows), err == nil && (self || state.String != "active"):
			return // cancelled in the server
		case err != nil:
			t.Fatal(err)
		case time.Now().After(deadline):
			t.Fatalf("backend %d is still %q 5 s after the step was cancelled", pid, state.String)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
