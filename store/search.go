package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aspd/aspd/internal/search"
)

// Transcript search (docs/search.md). The query arrives parsed
// (search.Query); this file turns it into SQL, the same shape on both
// stores, with each group's predicate from the dialect (searchAnyOf): a
// term matches an event when the word index finds its words as a phrase,
// or (for a term of search.MinSubstringChars characters or more) the
// trigram index finds it as a substring. Hits are newest first, keyed by
// (created_at, session_id, sequence) for the cursor. A search runs in
// bounded steps (search), so that its cost follows its hits, not the
// size of the log.

// SearchCursor is the position after which a page of hits starts: the last
// hit of the previous page.
type SearchCursor struct {
	CreatedAt int64
	SessionID string
	Sequence  int64
}

// SearchFilter is one search: its parsed query, filters and page.
type SearchFilter struct {
	Query       *search.Query
	Session     string // only this session's events
	Sender      string // only events sent by this handle
	Participant string // only events of sessions this handle is or was part of
	Type        string // only events of this type
	Since       int64  // created_at >= Since (epoch ms), 0 = unbounded
	Until       int64  // created_at < Until (epoch ms), 0 = unbounded
	After       *SearchCursor
	Limit       int
}

// SearchHit is an event that matched, with its indexed text (for the
// snippet).
type SearchHit struct {
	Event StoredEvent
	Text  string
}

// Bounds on searches, so that searching cannot starve the event reads that
// agents depend on: at most maxConcurrentSearches run at once (on the read
// pool: 8 connections on SQLite, 32 on PostgreSQL), and a search that has
// not finished, its wait for a slot included, within searchTimeout is
// cancelled and answered ErrSearchTooSlow.
const (
	maxConcurrentSearches = 4
	searchTimeout         = 10 * time.Second
)

// ErrSearchTooSlow is the answer to a search that ran out of time.
var ErrSearchTooSlow = refusal(KindSearchTooSlow, fmt.Sprintf("the search did not finish within %v; narrow it (session, participant, sender, since, until) or use rarer terms", searchTimeout))

// Search returns up to f.Limit events matching f, newest first.
func (s *Store) Search(ctx context.Context, f SearchFilter) ([]SearchHit, error) {
	if f.Query == nil || len(f.Query.All) == 0 {
		return nil, fmt.Errorf("store: search: empty query")
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	if s.searches != nil {
		select {
		case s.searches <- struct{}{}:
			// The slot is given back once the search and the steps it
			// cancelled have ended (searchRace's loser).
			slot := newSearchSlot(func() { <-s.searches })
			ctx = context.WithValue(ctx, searchSlotKey{}, slot)
			defer slot.let()
		case <-ctx.Done():
			return nil, s.searchDone(ctx)
		}
	}
	hits, err := s.search(ctx, f)
	if err != nil && ctx.Err() != nil {
		return nil, s.searchDone(ctx)
	}
	return hits, err
}

// searchDone is the error of a search whose context ended: the caller's
// cancellation as it is, or ErrSearchTooSlow when the time bound ran out.
func (s *Store) searchDone(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrSearchTooSlow
	}
	return ctx.Err()
}

// How far each step of a search goes (see search).
const (
	// searchWalkShort is how many of the newest events the first walk
	// reads: a term in more than limit/searchWalkShort of the events (2%
	// for a page of 20) fills its page there.
	searchWalkShort = 1000
	// searchIndexCap is how many index hits the index step reads before
	// it gives up on sorting them all: a term with fewer hits (the rare
	// terms, whatever the size of the log) is answered there, exactly.
	searchIndexCap = 5000
	// searchWalkLong is the most events a second walk reads. A walk reads
	// about 10 µs per event on the 2-core test machine under load.
	searchWalkLong = 50000
)

// searchIndexBudget is the time the capped index step may take on
// PostgreSQL when it runs alone, within one session (dialect.searchSettings;
// racing, it has searchAllHitsBudget). A variable for the test that
// spends it.
var searchIndexBudget = 100 * time.Millisecond

// searchAllHitsBudget is the time the index step with every hit may take
// on PostgreSQL when it follows a capped index step that ran out of its
// own budget; past it, search walks further (searchWalksOverBudget). A
// variable for the test that spends it.
//
// It is also the capped index step's budget when that step races the
// windows or a participant's walks (searchRace), and the step with every
// hit, which reads the same posting lists, is then skipped. The race's
// other side answers a common term before it, but a rare term whose
// trigrams are common (an e-mail address with no hit at ten million
// events: 145 ms on a slow hour of the test machine) has no faster
// answer. With searchIndexBudget there, the windows read the log in
// windows too small, and the steps after them answered in 1.2-1.4 s; with
// this budget, 123-161 ms (docs/benchmarks.md, "Cancelled steps and the
// race's budget").
var searchAllHitsBudget = 500 * time.Millisecond

// searchWalksOverBudget are the walks search takes for a term whose index
// steps ran out of their budgets: its index hits are too many to sort (a
// common word; a phrase of common words, which the word index answers
// with a recheck of every event holding both), and at ten million events
// the index step with every hit took past the request's limit (503) for
// a common word absent from the newest 50,000 events. A walk costs its
// length whatever the log's size; each is four times the last, so
// together they cost at most a third more than the last one.
var searchWalksOverBudget = []int{4 * searchWalkLong, 16 * searchWalkLong}

// searchStep is one step of search: a walk of the newest walk events, or
// (walk 0) the index hits, at most limit of them (0: all). budget, when
// not 0, bounds an index step's time on PostgreSQL (searchSettings);
// ifOverBudget: the step runs only once the capped index step ran out of
// its budget.
type searchStep struct {
	walk, limit  int
	budget       time.Duration
	ifOverBudget bool
	// sessions: a step that reads the events of the participant's
	// sessions rather than the search index (searchParticipantWalks).
	// bitmap: such a step whose query the search index answers through
	// words alone (searchWordsOnly), which ANDs the index's hits with the
	// sessions' events instead (dialect.searchSettings).
	sessions, bitmap bool
	// race: the step is searchRace (PostgreSQL): the capped index step at
	// once with the windows or with a participant's walks.
	race bool
	// participant: on SQLite, every event of the participant's sessions
	// matched at once (the sessions step), when they hold at most
	// searchWalkLong events; otherwise the step gives way to the next.
	participant bool
	// key, below: a window's step (searchWindows), a capped index step for
	// the hits within the time window of key (searchKey) created before
	// below.
	key, below int64
}

// search answers in bounded steps, because no single plan serves both
// common and rare terms, and PostgreSQL's planner cannot tell them apart:
// it cannot estimate an OR of a word match and an ILIKE. Given ORDER BY
// created_at LIMIT, it would walk the whole log newest first
// (events_created_at) rather than sort the index hits, and takes seconds
// on a rare term at a million events (issue 21). Each step answers exactly
// or says that it could not:
//
//  1. A walk of the newest searchWalkShort events (after the cursor, within
//     the time filters), read through events_created_at and filtered. A
//     common term fills its page here.
//  2. If the walk found two hits or more (one says little: a rare term
//     can have a recent hit), a longer walk, twice as long as those hits
//     say the page needs, when that is less than searchWalkLong.
//  3. The index step: the word and trigram indexes' hits, at most
//     searchIndexCap of them, ordered in memory (by created_at + 0, which
//     no index provides, so that the planner cannot choose the walk). A
//     term with fewer hits is answered here, whatever the log's size. On
//     PostgreSQL it also has a time budget, searchIndexBudget: a common
//     term's posting lists are read whole before the cap can stop the scan.
//     (On SQLite a budget, interrupting the statement through its context,
//     made a common word with a participant filter slower at a million
//     events: 265 to 460 ms, 330 to 530 ms, as the steps after it cost
//     more than the unbudgeted step they replace.) On PostgreSQL, unless
//     the search is within one session, it runs at once with the time
//     windows (searchWindows) or, with a participant, with walks of the
//     newest events of the participant's sessions (searchParticipantWalks);
//     the first to answer wins (searchRace, searchwindows.go).
//     On SQLite, with a participant (and no session), a step before it
//     reads every event of the participant's sessions and ANDs them with
//     the FTS5 hits (the participant step), unless those sessions hold
//     more than searchWalkLong events: the capped step would look up every
//     hit of a term common in the log and check its session.
//  4. A walk of searchWalkLong events, for a term with more hits than
//     that (or than the budget allowed) but few among the newest events.
//  5. For a term whose capped index step ran out of its budget: the
//     index step with every hit, within searchAllHitsBudget (a rare term
//     whose trigrams are common is answered here), then walks of 200,000
//     and 800,000 events (searchWalksOverBudget) for a term with too many
//     hits to sort.
//  6. The index step with every hit: only for a term with more than
//     searchIndexCap hits too few of which are among the newest events
//     the walks read.
//
// A walk's page is the answer when it is full (the newest hits among the
// newest events are then the newest hits overall) or when the walk read
// fewer events than its length: it read every event within the bounds
// (since, until, the cursor), so its hits are all of them.
func (s *Store) search(ctx context.Context, f SearchFilter) ([]SearchHit, error) {
	steps := []searchStep{{walk: searchWalkShort}}
	overBudget, raced := false, false
	for i := 0; i < len(steps); i++ {
		st := steps[i]
		if st.ifOverBudget && !overBudget {
			continue
		}
		if raced && st.walk == 0 && st.ifOverBudget {
			// The race's index step had this step's budget
			// (searchAllHitsBudget) and read the same posting lists:
			// this step would run out of it too.
			continue
		}
		if st.participant {
			many, err := s.participantHasMore(ctx, f.Participant, searchWalkLong)
			if err != nil {
				return nil, err
			}
			if many {
				continue
			}
			st = searchStep{sessions: true}
			stepRan(ctx, st)
			hits, _, err := s.searchStep(ctx, f, st)
			if err != nil {
				return nil, err
			}
			s.searchAnswered("sessions")
			return hits, nil
		}
		stepRan(ctx, st)
		if st.race {
			// The capped index step, at once with the windows or, for a
			// participant's events, with the walks of them
			// (searchRace). (The windows too, for a participant, were
			// slower on two cores: 105-161 against 76-123 ms at ten
			// million events.)
			other := func(ctx context.Context) ([]SearchHit, string, bool, error) {
				hits, ok, err := s.searchWindows(ctx, f)
				return hits, "windows", ok, err
			}
			if f.Participant != "" {
				other = func(ctx context.Context) ([]SearchHit, string, bool, error) {
					return s.searchParticipantWalks(ctx, f)
				}
			}
			hits, winner, ok, spent, err := s.searchRace(ctx, f, other)
			if err != nil || ok {
				s.searchAnswered(winner)
				return hits, err
			}
			overBudget, raced = spent, true
			continue
		}
		hits, candidates, err := s.searchStep(ctx, f, st)
		switch {
		case err != nil && st.budget > 0 && ctx.Err() == nil && s.d.searchBudgetSpent(err):
			overBudget = true
			continue // as if over the cap: the next steps answer
		case err != nil:
			return nil, err
		case st.walk > 0 && (len(hits) >= f.Limit || candidates < st.walk):
			s.searchAnswered("walk")
			return hits, nil
		case st.walk == 0 && (st.limit == 0 || candidates <= st.limit):
			if st.limit == 0 {
				s.searchAnswered("all_hits")
			} else {
				s.searchAnswered("index")
			}
			return hits, nil
		case i == 0:
			if len(hits) >= 2 && 2*searchWalkShort*f.Limit/len(hits) < searchWalkLong {
				steps = append(steps, searchStep{walk: 2 * searchWalkShort * f.Limit / len(hits)})
			}
			if s.d.searchKeys && f.Session == "" {
				// The windows, and the capped index step at once (one
				// session's events are few: its index step alone is cheap).
				steps = append(steps, searchStep{race: true})
			} else {
				if f.Participant != "" && f.Session == "" && !s.d.searchKeys {
					// SQLite: the participant's events ANDed with the FTS5
					// tables' hits. The capped index step would look up every
					// hit of a term common in the log, and check its session,
					// one by one: 413-468 ms at a million events for
					// "invoice or refund", against 148 so (docs/search.md).
					steps = append(steps, searchStep{participant: true})
				}
				steps = append(steps, searchStep{limit: searchIndexCap, budget: searchIndexBudget})
			}
			steps = append(steps, searchStep{walk: searchWalkLong}, searchStep{budget: searchAllHitsBudget, ifOverBudget: true})
			for _, n := range searchWalksOverBudget {
				steps = append(steps, searchStep{walk: n, ifOverBudget: true})
			}
			steps = append(steps, searchStep{})
		}
	}
	panic("unreachable: the last step always answers")
}

// SearchSteps are the steps that answer a search, as
// aspd_search_answers_total names them: a walk of the newest events, the
// index step (its hits, at most searchIndexCap), the time windows, a walk
// of a participant's newest events, every event of a participant's
// sessions (searchParticipantWalks), and the index step with every hit.
var SearchSteps = [...]string{"walk", "index", "windows", "sessions_walk", "sessions", "all_hits"}

// searchAnswers counts the searches each step of SearchSteps answered.
type searchAnswers [len(SearchSteps)]atomic.Int64

func (s *Store) searchAnswered(step string) {
	if i := slices.Index(SearchSteps[:], step); i >= 0 {
		s.searchAnswers[i].Add(1)
	}
}

// SearchAnswers is how many searches step (one of SearchSteps) answered
// since the store opened.
func (s *Store) SearchAnswers(step string) int64 {
	if i := slices.Index(SearchSteps[:], step); i >= 0 {
		return s.searchAnswers[i].Load()
	}
	return 0
}

// searchSlot is a search's place among maxConcurrentSearches, given back
// (release) once nothing holds it: neither the search (until it returns)
// nor a step it cancelled (searchRace does not wait for its loser, which
// ends in the background within cancelDeadline).
type searchSlot struct {
	release func()
	holders atomic.Int32
}

// searchSlotKey is the context key of a search's *searchSlot.
type searchSlotKey struct{}

// newSearchSlot is a slot held by its search.
func newSearchSlot(release func()) *searchSlot {
	sl := &searchSlot{release: release}
	sl.holders.Store(1)
	return sl
}

// hold adds a holder: a cancelled step that goes on after the search. It
// is called by a holder (the search), so the count is never zero here.
func (sl *searchSlot) hold() { sl.holders.Add(1) }

// let ends a holder's hold; the last one gives the slot back.
func (sl *searchSlot) let() {
	if sl.holders.Add(-1) == 0 {
		sl.release()
	}
}

// searchStepRan, when set (by a test, setSearchStepRan), sees every step
// search runs while its search is on.
var searchStepRan atomic.Pointer[func(searchStep)]

// stepRanMu serialises the calls of searchStepRan (the steps of a race run
// at once) and orders them with a race's end (searchRace cancels its loser
// under it): a loser's steps are seen before its search returns, or never.
var stepRanMu sync.Mutex

func stepRan(ctx context.Context, st searchStep) {
	if f := searchStepRan.Load(); f != nil {
		stepRanMu.Lock()
		defer stepRanMu.Unlock()
		if ctx.Err() == nil {
			(*f)(st)
		}
	}
}

// setSearchStepRan sets (f nil: clears) the test hook searchStepRan.
func setSearchStepRan(f func(searchStep)) {
	if f == nil {
		searchStepRan.Store(nil)
		return
	}
	searchStepRan.Store(&f)
}

// queryWithSettings runs q in a read-only transaction after set, the
// statement of its settings (searchSettings: they are local to the
// transaction). end, when not nil, ends the transaction and gives back its
// connection; call it once the rows are closed.
//
// The transaction is begun and ended by hand, on a connection of its own,
// so that a cancelled step (a race's loser, a search past its time) still
// ends it. database/sql would roll it back with the cancelled context,
// which pgx cannot send, and drop the connection: every race cost the next
// step a new one. The statement itself is cancelled in the server
// (openPostgres).
func (s *Store) queryWithSettings(ctx context.Context, set, q string, args ...any) (rows *sql.Rows, end func(), err error) {
	conn, err := s.read.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	end = func() {
		// Within cancelDeadline whether or not ctx has ended. A
		// connection left in the transaction is dropped by the pool (its
		// session reset checks).
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelDeadline)
		defer cancel()
		conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // read-only: nothing to undo
		conn.Close()
	}
	if _, err = conn.ExecContext(ctx, "BEGIN READ ONLY"); err == nil {
		if _, err = conn.ExecContext(ctx, set); err == nil {
			rows, err = conn.QueryContext(ctx, q, args...)
		}
	}
	return rows, end, err
}

// searchStep runs one step of search: its hits and, for an index step
// with a limit, how many candidates it found (at most limit + 1), for a
// walk how many events it read.
func (s *Store) searchStep(ctx context.Context, f SearchFilter, st searchStep) ([]SearchHit, int, error) {
	q, args := s.searchSQL(f, st)
	var rows *sql.Rows
	var err error
	if set := s.d.searchSettings(st); set != "" {
		var end func()
		rows, end, err = s.queryWithSettings(ctx, set, q, args...)
		if end != nil {
			defer end()
		}
	} else {
		rows, err = s.read.QueryContext(ctx, q, args...)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("store: search: %w", err)
	}
	defer rows.Close()
	var out []SearchHit
	candidates := 0
	for rows.Next() {
		var h SearchHit
		var audience, body string
		e := &h.Event
		if err := rows.Scan(&e.SessionID, &e.Sequence, &e.EventID, &e.Type, &e.Subject, &audience, &e.CreatedAt, &body, &h.Text, &candidates); err != nil {
			return nil, 0, fmt.Errorf("store: search: %w", err)
		}
		if e.SessionID == "" {
			continue // a walk's row without a hit (searchSQL)
		}
		e.Audience = decodeAudience(audience)
		e.Body = []byte(body)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: search: %w", err)
	}
	return out, candidates, nil
}

// searchSQL is the SELECT of one step of search, and its arguments (on
// PostgreSQL led by pgx's query option, see dialect.planPerRun).
func (s *Store) searchSQL(f SearchFilter, st searchStep) (string, []any) {
	var match, filters, bounds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	// A step that reads the search index asks it, on PostgreSQL, for a
	// term's word pairs (searchPairsArg) when the term has no words
	// the substring part can ask the word index for: a phrase, an e-mail
	// address. Not the walks, which read the events themselves, nor one
	// session's events, read by key, nor the excluded terms, checked on the
	// rows found: on the events written before migration 00013 the pairs
	// are computed, not read, and a row would pay for it.
	pairsStep := st.walk == 0 && !(st.sessions && !st.bitmap) && f.Session == ""
	parts := func(excluded bool, terms ...search.Term) []searchPart {
		var out []searchPart
		for _, t := range terms {
			var own []searchPart
			if len(t.Words) > 0 {
				own = append(own, searchPart{arg: arg(s.d.searchWordArg(t.Words))})
			}
			substringWords := ""
			if t.Substring() {
				substringWords = s.d.searchSubstringWordsArg(t.SubstringWords())
			}
			pairs := ""
			if pairsStep && !excluded {
				pairs = s.d.searchPairsArg(t)
			}
			if t.Substring() {
				part := searchPart{substring: true, arg: arg(s.d.searchSubstringArg(t.Text))}
				if substringWords != "" {
					part.words = arg(substringWords)
				}
				own = append(own, part)
			}
			if pairs != "" {
				out = append(out, searchPart{pairs: arg(pairs), of: own})
				continue
			}
			out = append(out, own...)
		}
		return out
	}
	// Every group needs a match in the indexed text, so an event without
	// text ('' for types not indexed, NULL until backfilled) is never a
	// hit; no condition of its own says so.
	//
	// rowids bounds the rowids of the events a step can match (used on
	// SQLite only, see searchAnyOf): a walk's events, or one session's.
	sessionArg, rowids := "", ""
	if f.Session != "" {
		sessionArg = arg(f.Session)
	}
	switch {
	case st.walk > 0:
		rowids = "rowid >= (SELECT min(rowid) FROM w)"
	case f.Session != "":
		rowids = "rowid BETWEEN (SELECT min(rowid) FROM events WHERE session_id = " + sessionArg +
			") AND (SELECT max(rowid) FROM events WHERE session_id = " + sessionArg + ")"
	}
	for _, group := range f.Query.All {
		match = append(match, s.d.searchAnyOf(parts(false, group...), rowids))
	}
	if len(f.Query.None) > 0 {
		match = append(match, "NOT "+s.d.searchAnyOf(parts(true, f.Query.None...), rowids))
	}
	if f.Session != "" {
		filters = append(filters, "e.session_id = "+sessionArg)
	}
	if f.Sender != "" {
		// The subject of a session.message is its sender (sessions.go).
		filters = append(filters, "e.subject = "+arg(f.Sender))
	}
	participantArg := ""
	if f.Participant != "" {
		participantArg = arg(f.Participant)
		switch {
		case st.sessions && !st.bitmap:
			// The step reads the participant's sessions alone (below).
		case st.sessions:
			// A list of sessions, which an index on session_id answers, for
			// the planner to AND with the search index's hits.
			filters = append(filters, "e."+s.d.searchParticipantSessions(participantArg))
		default:
			filters = append(filters, s.d.searchParticipant(participantArg))
		}
	}
	if f.Type != "" {
		filters = append(filters, "e.type = "+arg(f.Type))
	}
	// The bounds are on the sort key: the walk reads events_created_at
	// within them. Their columns are the walk's CTE's (events, unqualified)
	// or, in the index steps, those of events e.
	prefix := "e."
	if st.walk > 0 || st.sessions && !st.bitmap {
		prefix = ""
	}
	// A window's step (searchWindows) reads the search index only: its
	// time bounds are written so that no index on created_at answers them
	// (the planner otherwise walked events_created_at for them).
	at := prefix + "created_at"
	if st.key != 0 {
		at = "(e.created_at + 0)"
	}
	if f.Since > 0 {
		bounds = append(bounds, at+" >= "+arg(f.Since))
	}
	if f.Until > 0 {
		bounds = append(bounds, at+" < "+arg(f.Until))
	}
	if st.key != 0 {
		bounds = append(bounds, s.d.searchKeyMatch(arg(st.key)), at+" < "+arg(st.below))
	}
	if c := f.After; c != nil {
		// Row-value comparison, which both dialects have: strictly after
		// the cursor's hit in (created_at, session_id, sequence) DESC
		// order. The created_at bound alone is what an index range scan
		// can use.
		cursorAt := arg(c.CreatedAt)
		bounds = append(bounds, at+" <= "+cursorAt,
			fmt.Sprintf("(%[1]s, %[2]ssession_id, %[2]ssequence) < (%[3]s, %[4]s, %[5]s)", at, prefix, cursorAt, arg(c.SessionID), arg(c.Sequence)))
	}
	const order = " ORDER BY %[1]screated_at%[2]s DESC, %[1]ssession_id DESC, %[1]ssequence DESC"
	cols := "h.session_id, h.sequence, h.event_id, h.type, h.subject, h.audience, h.created_at, h.body, h.search_text"
	// The inner SELECT orders the matches by their keys alone and keeps a
	// page; only that page's rows are read whole. (On SQLite, sorting whole
	// rows, bodies included, cost twice as much for a common word.)
	page := func(from string, where []string, plus string) string {
		return `SELECT e.session_id, e.sequence FROM ` + from + andWhere(where, "\n\t\t\t") + fmt.Sprintf(order, "e.", plus) + ` LIMIT ` + arg(f.Limit)
	}
	conds := append(append([]string{}, match...), filters...)
	indexed := append(append([]string{}, conds...), bounds...)
	q, outer := "", "h."
	switch {
	case st.walk > 0:
		// The walked events, w, computed once (the SQLite match reads
		// their lowest rowid).
		// Every row carries how many events the walk read; with no hit,
		// one row of empty columns carries it alone. A walk that read
		// fewer than its length read every event within the bounds, so its
		// hits are all there are (search).
		q = `WITH w AS MATERIALIZED (SELECT ` + s.d.searchWalkColumns() + ` FROM ` + s.d.searchWalkFrom() + andWhere(bounds, "") +
			fmt.Sprintf(order, "", "") + ` LIMIT ` + arg(st.walk) + `),
		p AS MATERIALIZED (` + page("w e", conds, "") + `)
		SELECT * FROM (SELECT ` + cols + `, (SELECT count(*) FROM w) AS walked FROM events h
			WHERE (h.session_id, h.sequence) IN (SELECT session_id, sequence FROM p)
		UNION ALL
		SELECT '', 0, '', '', '', '', 0, '', '', (SELECT count(*) FROM w) WHERE NOT EXISTS (SELECT 1 FROM p)) walk`
		outer = "walk."
	case st.limit > 0:
		// The candidates, at most limit + 1 (one more tells that there
		// are more), in no order: the scan stops at limit + 1.
		// MATERIALIZED: the candidates are computed on their own, so that the
		// planner cannot push the ORDER BY into them (both dialects have it).
		q = `WITH c AS MATERIALIZED (SELECT e.session_id, e.sequence, e.created_at FROM events e` +
			andWhere(indexed, "\n\t\t\t") + ` LIMIT ` + arg(st.limit+1) + `)
		SELECT ` + cols + `, (SELECT count(*) FROM c) FROM events h WHERE (h.session_id, h.sequence) IN (` + page("c e", nil, "") + `)`
	case st.sessions && !st.bitmap:
		// The participant's events within the bounds, read session by
		// session, then matched: OFFSET 0 keeps the match out of the scan,
		// whose plan could otherwise AND the search index's bitmap of every
		// hit of the term in the log with the sessions' (once measured at
		// 500 ms for a phrase at ten million events, against 90-200 ms for
		// reading the participant's 30,000 events; bench/search-explain.sh
		// shows the plans on a grown store). (A bitmap scan, reading them
		// in the heap's order, is faster alone there, 122 against 176 ms,
		// but was slower racing the index step through HTTP: the phrase
		// 183-231 against 148-189 ms.)
		from := `(SELECT ` + s.d.searchWalkColumns() + ` FROM events` +
			andWhere(append([]string{s.d.searchParticipantSessions(participantArg)}, bounds...), "") + s.d.offsetZero() + `) e`
		q = `SELECT ` + cols + `, 0 FROM events h WHERE (h.session_id, h.sequence) IN (` +
			page(from, conds, " + 0") + `)`
	default:
		// Every hit within the bounds (or, for the bitmap step, the
		// index's hits of the words ANDed with the participant's events).
		q = `SELECT ` + cols + `, 0 FROM events h WHERE (h.session_id, h.sequence) IN (` +
			page("events e", indexed, " + 0") + `)`
	}
	q += fmt.Sprintf(order, outer, "")
	if s.d.planPerRun {
		// Planned for these arguments, not cached (dialect.planPerRun).
		// pgx takes the option off before it numbers the arguments.
		args = append([]any{pgx.QueryExecModeExec}, args...)
	}
	return q, args
}

// andWhere is " WHERE c1 AND c2 ...", or "" without conditions.
func andWhere(conds []string, sep string) string {
	if len(conds) == 0 {
		return ""
	}
	return sep + " WHERE " + strings.Join(conds, sep+" AND ")
}

// backfillBatch is how many events one backfill transaction indexes.
const backfillBatch = 500

// backfillSearch indexes the events written before the search migration
// (search_text IS NULL), in batches of backfillBatch, each batch one
// SELECT through the events_search_pending partial index and one UPDATE,
// by the same extraction rule as the write path (search.ExtractEvent). It
// runs when the store opens, right after the migrations, and after an
// import; once every event is indexed, it costs one empty index lookup.
// It returns how many events it indexed.
func (s *Store) backfillSearch(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.backfillSearchBatch(ctx)
		if err != nil {
			return total, err
		}
		total += n
		if n < backfillBatch {
			break
		}
	}
	if q := s.d.searchAnalyze(); total > 0 && q != "" {
		if _, err := s.write.ExecContext(ctx, q); err != nil {
			return total, fmt.Errorf("store: search backfill: %w", err)
		}
	}
	return total, nil
}

func (s *Store) backfillSearchBatch(ctx context.Context) (int, error) {
	n := 0
	err := s.runTx(ctx, requestTxTimeout, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT session_id, sequence, type, body FROM events WHERE search_text IS NULL
			ORDER BY session_id, sequence LIMIT $1`, backfillBatch)
		if err != nil {
			return fmt.Errorf("store: search backfill: %w", err)
		}
		var b strings.Builder
		var args []any
		b.WriteString(`WITH v(s, q, t, w, p) AS (VALUES `)
		for rows.Next() {
			var sid, typ, body string
			var seq int64
			if err := rows.Scan(&sid, &seq, &typ, &body); err != nil {
				rows.Close()
				return fmt.Errorf("store: search backfill: %w", err)
			}
			text := search.ExtractEvent(typ, []byte(body))
			if n > 0 {
				b.WriteString(", ")
			}
			k := len(args)
			fmt.Fprintf(&b, "(CAST($%d AS TEXT), CAST($%d AS BIGINT), CAST($%d AS TEXT), CAST($%d AS TEXT), CAST($%d AS TEXT))", k+1, k+2, k+3, k+4, k+5)
			in := newSearchInput(s.d, text)
			args = append(args, sid, seq, text, in.words, in.pairs)
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: search backfill: %w", err)
		}
		if n == 0 {
			return nil
		}
		b.WriteString(`) UPDATE events SET ` + s.d.searchBackfillSet() + ` FROM v WHERE events.session_id = v.s AND events.sequence = v.q`)
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("store: search backfill: %w", err)
		}
		return nil
	})
	return n, err
}
