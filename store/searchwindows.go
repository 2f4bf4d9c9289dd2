package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"
)

// Time windows (PostgreSQL; docs/search.md "Time windows"). The search
// index holds, besides each event's words and trigrams, its time keys:
// created_at (epoch ms) shifted right by searchKeyShift(level) bits for
// each of searchKeyLevels window sizes (migration 00011,
// aspd_search_keys). "A term's hits within one window" is then one index
// scan, in which GIN intersects the term's posting lists with the
// window's: it costs about the window's events, or the term's hits if
// they are fewer, never every hit in the log. searchWindows reads the
// log newest first, window by window, and so finds the newest hits of a
// word that is common in the log but absent from its newest events (at
// ten million events, up to 1.2 s through the walks and budgets alone).
// searchRace runs the windows at once with the index step, whose cost is
// the term's hits in the log, and takes the first answer.

// searchKeyLevels is how many window sizes the index holds: 2^16 ms
// (about a minute) to 2^36 ms (2.2 years), each 16 times the last.
const searchKeyLevels = 6

// searchKeyShift is the bits a created_at is shifted by for level's key.
func searchKeyShift(level int) uint { return 16 + 4*uint(level) }

// searchKey is the key of the window of size level that holds created_at
// t: the window's number, with level in the top byte. aspd_search_keys
// (migration 00011) computes the same; TestSearchKeysMatchTheIndex checks.
func searchKey(level int, t int64) int64 {
	return int64(level)<<56 | t>>searchKeyShift(level)
}

// searchMaxWindows bounds the windows of one search; past it, search goes
// on with its other steps, as without time keys.
const searchMaxWindows = 64

// searchWindowCap is the most hits one window's step reads: a window with
// more is read again as the smaller windows it holds. A variable for the
// test that makes windows overflow.
var searchWindowCap = 2000

// searchWindowBudget is the time one window's step may take (its
// statement_timeout); past it, the window is read as the smaller windows
// it holds, as if over searchWindowCap. searchWindowsBudget is the time
// all of them may take. Variables for the tests that spend them.
var (
	searchWindowBudget  = 50 * time.Millisecond
	searchWindowsBudget = time.Second
)

// searchSmallestWindowBudget is searchWindowBudget for the smallest
// windows, which have no smaller ones to be read as: past it, the minute
// is walked, or all its hits sorted (searchStretch), which cost more than
// the step would have. A minute whose events lie across the whole table
// (written into free space that VACUUM recorded) makes its step read the
// term's posting lists over the table: 110 ms for a phrase in a minute of
// 78,000 such events at ten million events, against about 200 ms for the
// walk and the hits.
var searchSmallestWindowBudget = 150 * time.Millisecond

// searchSessionsBudget is the time a participant's walks may take
// (searchParticipantWalks); past it, search goes on with its other steps.
var searchSessionsBudget = time.Second

// searchRace runs the capped index step and other at once, and takes the
// first answer; the loser is cancelled. other is a step, or steps in turn:
// it reports whether it answered and, if so, the name (SearchSteps) of the
// step that did. winner is the name of the step
// that answered (SearchSteps); ok is false when none did; spent, when the
// capped index step ran out of its budget (search then takes the steps
// for such terms). No one of them is cheap for every term:
//
//   - the capped index step costs every hit of the term in the log (a term
//     common in the log but absent from its newest events ran out of its
//     100 ms budget at ten million events);
//   - the windows (searchWindows) cost the windows they read (a term whose
//     trigrams are common but which has few hits, such as an e-mail
//     address, reads posting lists as long as the log in the largest
//     windows: 150 ms at ten million events, where the capped step took
//     70);
//   - with a participant, the walks of the newest events of the
//     participant's sessions (searchParticipantWalks) cost the events they
//     read, and answer a term with more hits elsewhere than in those
//     sessions (the planner cannot tell: through the index, 1 s for a
//     phrase of common words, 3 s for two common words).
func (s *Store) searchRace(ctx context.Context, f SearchFilter, other func(context.Context) (hits []SearchHit, step string, ok bool, err error)) (hits []SearchHit, winner string, ok, spent bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		kind      string
		hits      []SearchHit
		ok, spent bool
		err       error
	}
	answers := make(chan answer, 2)
	st := searchStep{limit: searchIndexCap, budget: searchAllHitsBudget}
	stepRan(ctx, st) // here, so that it is seen whichever side wins
	go func() {
		hits, candidates, err := s.searchStep(ctx, f, st)
		switch {
		case err != nil && ctx.Err() == nil && s.d.searchBudgetSpent(err):
			answers <- answer{kind: "index", spent: true}
		case err != nil:
			answers <- answer{kind: "index", err: err}
		default:
			answers <- answer{kind: "index", hits: hits, ok: candidates <= st.limit}
		}
	}()
	go func() {
		hits, kind, ok, err := other(ctx)
		answers <- answer{kind: kind, hits: hits, ok: ok, err: err}
	}()
	// The loser is cancelled when the race is decided; it reports no step
	// after that (stepRan). Its statement is cancelled in the server, and
	// its connection comes back once the server has confirmed that (a
	// fork of the postmaster, 1-13 ms on the machines measured:
	// BenchmarkCancelledStatement, serverCancel). search does not wait
	// for it: it ends in the background, and the search's slot is given
	// back once it has (searchSlot), so that it does not outlive its slot.
	received := 0
	defer func() {
		stepRanMu.Lock()
		cancel()
		stepRanMu.Unlock()
		if received == 2 {
			return
		}
		drain := func() {
			for ; received < 2; received++ {
				<-answers
			}
		}
		slot, ok := ctx.Value(searchSlotKey{}).(*searchSlot)
		if !ok { // a search without a slot (a test's, calling search)
			drain()
			return
		}
		slot.hold()
		go func() {
			defer slot.let()
			drain()
		}()
	}()
	for range 2 {
		a := <-answers
		received++
		spent = spent || a.spent
		if a.err != nil && ctx.Err() == nil {
			return nil, "", false, false, a.err
		}
		if a.ok {
			return a.hits, a.kind, true, false, nil
		}
	}
	return nil, "", false, spent, nil
}

// searchWindows answers f from the newest window down, or reports that it
// could not (ok false: over searchMaxWindows or searchWindowsBudget), and
// search then goes on with its other steps. Each round:
//
//  1. finds the newest event below the windows already read (upper), one
//     look into events_created_at, so that empty stretches of time cost
//     nothing;
//  2. reads the hits of the window of the current size that holds it,
//     created before upper: at most searchWindowCap of them, the newest
//     first. Every event of the window below upper is read, so these
//     are all its hits, and every later window is older;
//  3. with more than searchWindowCap hits (or past searchWindowBudget),
//     reads that stretch again as a window a size smaller; at the
//     smallest size, walks it, or sorts every hit in it;
//  4. a window with no hit (or few) makes the next one a size larger.
//
// It ends when the page is full or no event is left within the bounds.
func (s *Store) searchWindows(ctx context.Context, f SearchFilter) ([]SearchHit, bool, error) {
	upper := f.createdBefore() // every window read so far is at or after it
	deadline := time.Now().Add(searchWindowsBudget)
	// ceiling is the largest size the next window may have: below the
	// size of a window that had too many hits, until the windows read
	// have passed below it (ceilingUntil), so that they do not grow back
	// into it.
	level, ceiling, ceilingUntil := 0, searchKeyLevels-1, int64(math.MinInt64)
	var out []SearchHit
	for n := 0; n < searchMaxWindows && time.Now().Before(deadline); n++ {
		top, ok, err := s.newestBefore(ctx, upper, f.Since)
		if err != nil || !ok {
			return out, err == nil, err
		}
		if top < ceilingUntil {
			ceiling = searchKeyLevels - 1
		}
		lo := top >> searchKeyShift(level) << searchKeyShift(level)
		g := f
		g.Limit = f.Limit - len(out)
		budget := searchWindowBudget
		if level == 0 {
			budget = searchSmallestWindowBudget
		}
		st := searchStep{limit: searchWindowCap, budget: budget, key: searchKey(level, top), below: upper}
		stepRan(ctx, st)
		hits, candidates, err := s.searchStep(ctx, g, st)
		switch {
		case err != nil && ctx.Err() == nil && s.d.searchBudgetSpent(err), err == nil && candidates > searchWindowCap:
			if level > 0 {
				// Two sizes smaller: a window with too many hits holds a
				// common term, whose page the smaller windows fill.
				ceilingUntil = lo
				level = max(level-2, 0)
				ceiling = level
				continue
			}
			// A minute with more hits than the cap: walk it, or sort
			// every hit in it.
			if hits, err = s.searchStretch(ctx, g, lo, upper); err != nil {
				return nil, false, err
			}
		case err != nil:
			return nil, false, err
		}
		out = append(out, hits...)
		if len(out) >= f.Limit {
			return out[:f.Limit], true, nil
		}
		upper = lo
		if f.Since > 0 && upper <= f.Since {
			return out, true, nil
		}
		// Few hits or none: a larger window next. (Two sizes larger after
		// a window without hits was measured slower: a common word absent
		// from the newest events then met windows of hundreds of
		// thousands of events holding too many of its hits, and ran out
		// of their budget.)
		if len(hits)*4 < g.Limit && level < ceiling {
			level++
		}
	}
	return nil, false, nil
}

// searchStretch answers f within created_at [lo, upper): a walk of
// searchWalkLong events, which answers when its page fills or when it read
// every event of the stretch, else every hit of the stretch, sorted.
func (s *Store) searchStretch(ctx context.Context, f SearchFilter, lo, upper int64) ([]SearchHit, error) {
	if lo > f.Since {
		f.Since = lo
	}
	if f.Until == 0 || upper < f.Until {
		f.Until = upper
	}
	for _, st := range []searchStep{{walk: searchWalkLong}, {}} {
		stepRan(ctx, st)
		hits, candidates, err := s.searchStep(ctx, f, st)
		if err != nil || st.walk == 0 || len(hits) >= f.Limit || candidates < st.walk {
			return hits, err
		}
	}
	panic("unreachable: the last step always answers")
}

// createdBefore is the created_at that every event within f's bounds is
// created before: its until, or just after its cursor's (the cursor's
// ties included, which the row comparison of searchSQL then excludes).
func (f SearchFilter) createdBefore() int64 {
	upper := int64(math.MaxInt64)
	if f.Until > 0 {
		upper = f.Until
	}
	if c := f.After; c != nil && c.CreatedAt < upper {
		upper = c.CreatedAt + 1
	}
	return upper
}

// newestBefore is the created_at of the newest event created before upper
// and at or after since (0: unbounded); ok is false when there is none.
func (s *Store) newestBefore(ctx context.Context, upper, since int64) (int64, bool, error) {
	var top sql.NullInt64
	err := s.read.QueryRowContext(ctx, `SELECT max(created_at) FROM events WHERE created_at < $1 AND created_at >= $2`, upper, since).Scan(&top)
	if err != nil {
		return 0, false, fmt.Errorf("store: search: %w", err)
	}
	return top.Int64, top.Valid, nil
}
