package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"

	"github.com/aspd/aspd/internal/search"
)

// dialect holds everything that differs between the two SQL backends. All
// statements elsewhere are written once, in the common subset ($N
// placeholders, ON CONFLICT, RETURNING) that both PostgreSQL and SQLite speak.
type dialect struct {
	name  string
	goose goose.Dialect
	// forUpdate is appended to the SELECT that locks a session row. SQLite has
	// no row locks; its single write connection serialises transactions.
	forUpdate string
	// forUpdateOfSessions locks only the sessions rows of a join (alias s).
	forUpdateOfSessions string
	// skipLocked ends a locking subquery that several nodes may run at once
	// (the Chorus outbox claim); SQLite has one writer and needs none.
	skipLocked string
	// arrayParams: the dialect binds a list as one array parameter
	// (= ANY($1), unnest), so that the message path's statements have one
	// text whatever their number of rows and stay prepared (pgx's statement
	// cache); SQLite lists them one placeholder each.
	arrayParams bool
	// planPerRun: a search step's SELECT (search.go, searchSQL) is led by
	// pgx.QueryExecModeExec, a query option that pgx's driver takes as a
	// leading argument: an unnamed statement, which PostgreSQL plans with
	// the step's own arguments every time. pgx otherwise prepares and
	// caches statements per connection, and after five runs PostgreSQL may
	// plan one once for any arguments; a plan that does not know the terms
	// cannot tell a rare term from a common one (measured: 1.5 s instead of
	// 60 ms from the fifth run of one search on). SQLite has no plan cache
	// across arguments, and its driver takes no such option.
	planPerRun bool
	// searchKeys: the search index also holds each event's time keys
	// (migration 00011, search.go searchWindows), so a search can ask for
	// a term's hits within a time window. SQLite's FTS5 tables list hits in
	// rowid order, the order of writing, and need none.
	searchKeys bool
}

var (
	postgresDialect = dialect{name: "postgres", goose: goose.DialectPostgres, forUpdate: " FOR UPDATE", forUpdateOfSessions: " FOR UPDATE OF s", skipLocked: " FOR UPDATE SKIP LOCKED", arrayParams: true, planPerRun: true, searchKeys: true}
	sqliteDialect   = dialect{name: "sqlite", goose: goose.DialectSQLite3, forUpdate: ""}
)

// contextWatcher is the pool's context watcher for each connection; a
// benchmark sets pgx's own to compare (BenchmarkCancelledStatement).
var contextWatcher = func(c *pgconn.PgConn) ctxwatch.Handler { return newServerCancel(c) }

func openPostgres(url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") { // pgxpool's own setting, in the URL, wins
		cfg.MaxConns = 32
	}
	// Before a pooled connection is handed out, a look at its socket (no
	// round trip): a connection the server terminated meanwhile
	// (pg_terminate_backend, a restart) has its FATAL message or end of
	// stream waiting there, and is dropped rather than handed to a request
	// that would fail on it; the pool then takes another. So is one whose
	// statement was cancelled without the server confirming it
	// (serverCancel), as a late cancel could still land on it.
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerArrayCodecs(c) // pgarrays.go
		return nil
	}
	cfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
		return !connClosedByPeer(c.PgConn().Conn()) && !cancelUnconfirmedOn(c), nil
	}
	// A statement whose context ends is cancelled in the server too.
	// pgx's default only sets a deadline on the socket: its backend ran
	// the statement on to its end or its statement_timeout, as it writes
	// nothing until then. A search races two steps and cancels the loser
	// (searchRace): its backend went on taking a core from the winner and
	// from the next search. serverCancel (pgcancel.go) says when such a
	// connection is safe to reuse; one that is not is dropped when it is
	// next taken (PrepareConn, above). Not on release (AfterRelease):
	// pgxpool runs that hook in a goroutine of its own for every
	// connection given back, the message path's included.
	cfg.ConnConfig.BuildContextWatcherHandler = contextWatcher
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	// One pool for both interfaces: the hot path (stmtqueue.go) takes its
	// connections from the pool directly; every other statement goes
	// through database/sql on the same pool, under the guard. database/sql
	// keeps no idle connection of its own (it would hold it out of the
	// pool): each use takes one from the pool and gives it back.
	h := newHealth()
	db := sql.OpenDB(&guardConnector{inner: stdlib.GetPoolConnector(pool), h: h, writer: true})
	db.SetMaxIdleConns(0)
	return &Store{read: db, write: db, pool: pool, d: postgresDialect, now: timeNow, health: h, members: newMemberCache()}, nil
}

// openSQLite opens the embedded store at path. Pragmas go in the DSN so every
// pooled connection gets them (busy_timeout first); writes go through one
// connection so "database is locked" cannot happen, reads use a WAL pool.
func openSQLite(path string) (*Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: create data directory: %w", err)
		}
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)"
	wc, err := sqlite.NewConnector(dsn + "&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite: %w", err)
	}
	rc, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite: %w", err)
	}
	h := newHealth()
	write := sql.OpenDB(&guardConnector{inner: wc, h: h, writer: true})
	write.SetMaxOpenConns(1)
	read := sql.OpenDB(&guardConnector{inner: rc, h: h})
	read.SetMaxOpenConns(8)
	return &Store{read: read, write: write, d: sqliteDialect, now: timeNow, health: h, members: newMemberCache()}, nil
}

// inStrings is the condition "col is one of vals" with its arguments,
// numbered from first: one array parameter on PostgreSQL, one placeholder
// per value on SQLite.
func (d dialect) inStrings(col string, vals []string, first int) (string, []any) {
	if d.arrayParams {
		return fmt.Sprintf("%s = ANY($%d)", col, first), []any{textArray(vals)}
	}
	in, args := inList(vals, first)
	return col + " IN (" + in + ")", args
}

// Transcript search (search.go, docs/search.md): the statements that differ.

// eventSearchColumns are the columns of the events INSERT that carry an
// event's search index input, after its eight others, and the SQL of
// their values given the placeholders of the indexed text, of its words
// and of their pairs (searchInput). PostgreSQL stores the word index's
// tsvector and the pairs' in columns; SQLite's FTS5 tables are filled by
// triggers from search_text.
func (d dialect) eventSearchColumns(textArg, wordsArg, pairsArg string) (cols, values string) {
	if d.name == "postgres" {
		return ", search_text, search_words, search_pairs",
			", " + textArg + ", to_tsvector('simple', NULLIF(" + wordsArg + ", '')), CAST(" + pairsArg + " AS tsvector)"
	}
	return ", search_text", ", " + textArg
}

// searchWordsArg reports whether eventSearchColumns uses its words
// argument (only PostgreSQL's does).
func (d dialect) searchWordsArg() bool { return d.name == "postgres" }

// searchBackfillSet is the SET of the backfill's UPDATE, from a row v(s,
// q, t, w, p) of event key, text, words and pairs.
func (d dialect) searchBackfillSet() string {
	if d.name == "postgres" {
		return "search_text = v.t, search_words = to_tsvector('simple', NULLIF(v.w, '')), search_pairs = CAST(v.p AS tsvector)"
	}
	return "search_text = v.t"
}

// searchClearSet is the SET that empties an event's search index input
// (a redaction): the empty text rather than NULL, which would queue it for
// the backfill.
func (d dialect) searchClearSet() string {
	if d.name == "postgres" {
		return "search_text = '', search_words = NULL, search_pairs = NULL"
	}
	return "search_text = ''"
}

// searchPart is one index lookup of a query term: its words in the word
// index (a phrase, or the one word), or its text as a substring in the
// trigram index. arg is its placeholder, bound to searchWordArg's or
// searchSubstringArg's value.
type searchPart struct {
	substring bool
	arg       string
	// words, for a substring part on PostgreSQL, is the placeholder of
	// the words every text holding the substring holds
	// (searchSubstringWordsArg), or "".
	words string
	// pairs, on PostgreSQL, is the placeholder of a term's word pairs
	// (searchPairsArg), of is the term's own parts: the events holding the
	// pairs that match one of them.
	pairs string
	of    []searchPart
}

// searchAnyOf is the predicate "event e matches at least one of parts". On
// PostgreSQL, an OR of conditions on e's columns, which the planner
// answers from the GIN indexes (a BitmapOr). On SQLite, one IN over the
// UNION of the FTS5 tables' answers: one list, built once, probed once
// per event. rowids, when not "", is a condition on the rowids of the
// events the caller can match (a walk's, from their lowest on; one
// session's, between its lowest and highest): FTS5 then lists only the
// hits within it (it seeks its doclists to rowid bounds), instead of every
// hit of a common word (a second at a million events). It changes no
// answer: every event the caller reads is within it.
func (d dialect) searchAnyOf(parts []searchPart, rowids string) string {
	alts := make([]string, len(parts))
	for i, p := range parts {
		table := "events_words"
		if p.substring {
			table = "events_trigram"
		}
		switch {
		case p.pairs != "":
			alts[i] = d.searchPairsMatch(p)
		case d.name == "postgres" && p.substring && p.words != "":
			// The ILIKE checks the rows the words found, out of the index
			// (search_text || '' is not the indexed column): in the index
			// too, it read the trigrams' posting lists besides the words'
			// (at ten million events, bench/grow.sh measure: the URL 27-31
			// ms against 9-10, the handle 37-41 against 26-28).
			alts[i] = "(e.search_words @@ to_tsquery('simple', " + p.words + ") AND (e.search_text || '') ILIKE " + p.arg + " ESCAPE '!')"
		case d.name == "postgres" && p.substring:
			alts[i] = "e.search_text ILIKE " + p.arg + " ESCAPE '!'"
		case d.name == "postgres":
			alts[i] = "e.search_words @@ websearch_to_tsquery('simple', " + p.arg + ")"
		default:
			alts[i] = "SELECT rowid FROM " + table + " WHERE " + table + " MATCH " + p.arg
			if rowids != "" {
				alts[i] += " AND " + rowids
			}
		}
	}
	if d.name == "postgres" {
		return "(" + strings.Join(alts, " OR ") + ")"
	}
	return "e.rowid IN (" + strings.Join(alts, " UNION ") + ")"
}

// searchPairsMatch is the condition "event e holds the term's word pairs
// and matches one of its parts" (PostgreSQL): the search index's pairs
// find the events, and the parts are checked on them, out of the index (the
// columns are not the indexed ones, so that the planner does not also
// read the words' or trigrams' posting lists, which is what the pairs
// spare). The parts come first: on an event written before migration
// 00013 the pairs are computed (aspd_search_pairs), and a row the parts
// refuse need not pay for it.
func (d dialect) searchPairsMatch(p searchPart) string {
	alts := make([]string, len(p.of))
	for i, o := range p.of {
		if o.substring {
			alts[i] = "(e.search_text || '') ILIKE " + o.arg + " ESCAPE '!'"
		} else {
			alts[i] = "(e.search_words || ''::tsvector) @@ websearch_to_tsquery('simple', " + o.arg + ")"
		}
	}
	return "((" + strings.Join(alts, " OR ") + ") AND " + searchPairsColumn + " @@ CAST(" + p.pairs + " AS tsquery))"
}

// searchPairsColumn is the search index's fourth column (migration 00013),
// word for word, so that the planner can use the index: an event's pairs
// as aspd wrote them, or computed from its words' positions for an event
// written without them.
const searchPairsColumn = "coalesce(e.search_pairs, aspd_search_pairs(e.search_words))"

// searchPairsArg is, on PostgreSQL, the tsquery of a term's word pairs
// (search.Term.Pairs), all of them: 'get rel' & 'ase not', for a term
// whose substring part has no words the word index can answer
// (searchSubstringWordsArg: a URL's and a handle's are more selective):
// a phrase, an e-mail address. "" for any other term, for a term without
// pairs, and on SQLite, whose FTS5 tables hold positions.
func (d dialect) searchPairsArg(t search.Term) string {
	if d.name != "postgres" || t.Substring() && d.searchSubstringWordsArg(t.SubstringWords()) != "" {
		return ""
	}
	pairs := t.Pairs()
	if len(pairs) == 0 {
		return ""
	}
	return "'" + strings.Join(pairs, "' & '") + "'" // letters, digits and a space: nothing to escape
}

// searchKeyMatch is the condition "event e is in the time window of key
// arg" (searchKey), which the search index answers with the term's own
// predicates (PostgreSQL only: searchKeys). The expression is the
// index's, word for word, so that the planner can use it.
func (d dialect) searchKeyMatch(arg string) string {
	return "aspd_search_keys(e.created_at) @> ARRAY[CAST(" + arg + " AS BIGINT)]"
}

// searchParticipant is the condition "event e is in a session the handle
// arg is or was part of": an EXISTS per event.
func (d dialect) searchParticipant(arg string) string {
	return "EXISTS (SELECT 1 FROM participants p WHERE p.session_id = e.session_id AND p.handle = " + arg + ")"
}

// searchParticipantSessions is the same condition as a list of sessions,
// read once, for the step that reads the events of those sessions
// (searchStep.sessions; PostgreSQL: events_session_time, SQLite: the
// primary key). Unqualified: the step reads events in a subquery of its
// own.
func (d dialect) searchParticipantSessions(arg string) string {
	if d.name != "postgres" {
		return "session_id IN (SELECT p.session_id FROM participants p WHERE p.handle = " + arg + ")"
	}
	return "session_id = ANY(" + d.searchParticipantSessionIDs(arg) + ")"
}

// offsetZero is the clause that keeps a subquery from being merged into
// the query around it: " OFFSET 0" (SQLite takes an OFFSET only after a
// LIMIT, and LIMIT -1 is none).
func (d dialect) offsetZero() string {
	if d.name == "postgres" {
		return " OFFSET 0"
	}
	return " LIMIT -1 OFFSET 0"
}

// searchParticipantSessionIDs is the array of the sessions the handle arg
// is or was part of (PostgreSQL: searchParticipantWalks).
func (d dialect) searchParticipantSessionIDs(arg string) string {
	return "ARRAY(SELECT p.session_id FROM participants p WHERE p.handle = " + arg + ")"
}

// searchWalkColumns are the columns of events that the walk step of a
// search (search.go) hands to the predicates of searchAnyOf and the
// filters: on SQLite the rowid, which the FTS5 tables answer.
func (d dialect) searchWalkColumns() string {
	if d.name == "postgres" {
		return "session_id, sequence, created_at, type, subject, search_text, search_words"
	}
	return "rowid AS rowid, session_id, sequence, created_at, type, subject"
}

// searchWalkFrom is the events table as the walk reads it: newest first,
// through events_created_at. SQLite 3.54 (modernc), with the statistics
// of ANALYZE, rather scanned and sorted the whole table for the walk's
// ORDER BY created_at DESC, session_id DESC, sequence DESC LIMIT n: 10 s
// at a million events instead of milliseconds. PostgreSQL walks the index
// by itself (an incremental sort for the tie-breakers).
func (d dialect) searchWalkFrom() string {
	if d.name == "postgres" {
		return "events"
	}
	return "events INDEXED BY events_created_at"
}

// searchSettings is the statement that sets a search step's settings
// (search.go) in its transaction, "" for none (the step then runs without
// a transaction). On PostgreSQL, for the index steps:
//
//   - enable_seqscan = off: the planner misjudges how many events a word
//     match ORed with an ILIKE finds (most of all for a phrase of common
//     words, which the word index answers only with a recheck of every
//     event holding both words), and may then prefer reading the whole
//     table: at 10M events, seconds. The index steps exist to read index
//     hits only, so the sequential scan is priced out
//     (TestSearchPlansOnGrownStore checks the plans).
//   - statement_timeout = the step's budget (searchIndexBudget for the
//     capped index step within one session, searchAllHitsBudget for it
//     racing, and for the step with every hit):
//     a term common in the log but absent from its newest events makes the
//     index step read its whole posting lists before the cap can stop it
//     (a word in 60% of a million events: a second on the loaded test
//     machine). Past the budget, search moves on to the long walk, whose
//     cost does not grow with the log.
//
// SQLite's FTS5 tables answer first whatever the estimates.
//
// (Every step on PostgreSQL also plans for its own arguments: see
// planPerRun.)
func (d dialect) searchSettings(st searchStep) string {
	if d.name != "postgres" || st.walk > 0 {
		return ""
	}
	// No parallel workers: a search's race already runs two steps at once
	// on this project's two cores (searchRace), and a parallel step that
	// loses it stops only once its workers have (the index step for a
	// phrase at ten million events: 40 ms after its cancel, taking the
	// cores from the next search).
	q := "SELECT set_config('enable_seqscan', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)"
	if st.key != 0 {
		// A window's step is planned for any term and any window
		// (searchWindows): planned for a common word, it read the
		// window's key alone and checked the word on every event of the
		// window (84 ms for a window of 190,000 events without the word
		// at ten million events), where the index scan of both keys took
		// 3 ms. Without the values, the planner asks the index for both.
		q += ", set_config('plan_cache_mode', 'force_generic_plan', true)"
	}
	if st.sessions && st.bitmap {
		// A bitmap of the words' hits ANDed with one of the participant's
		// events: planned alone, the step read every event of the
		// participant's sessions by key instead (a handle at ten million
		// events: 65-70 against 26 ms, bench/search-explain.sh).
		q += ", set_config('enable_indexscan', 'off', true)"
	}
	if st.budget > 0 {
		q += fmt.Sprintf(", set_config('statement_timeout', '%d', true)", st.budget.Milliseconds())
	}
	return q
}

// searchBudgetSpent reports whether err is the end of a step's time
// budget (searchSettings), rather than a failure.
func (d dialect) searchBudgetSpent(err error) bool {
	var pg *pgconn.PgError
	return d.name == "postgres" && errors.As(err, &pg) && pg.Code == "57014" // query_canceled
}

// searchWordArg is the argument of searchWordMatch for words: a quoted
// phrase for websearch_to_tsquery (which then means the words in a row,
// or the one word) and for FTS5 alike. Words hold letters and digits
// only, so nothing in them needs escaping.
func (d dialect) searchWordArg(words []string) string {
	return `"` + strings.Join(words, " ") + `"`
}

// searchSubstringWordsArg is, on PostgreSQL, a tsquery of the words every
// text holding a substring term holds (search.Term.SubstringWords): its
// inner words, and its last word as a prefix (":*"), when they are
// selective enough to be worth asking the word index for: two inner
// words, or one and a last word of five characters or more. The substring
// part of the term is then that tsquery AND the ILIKE (searchAnyOf): the
// word index finds the rows, the ILIKE checks them. A URL at ten million events
// took 300 ms through its trigrams alone (every address shares those of
// "example.org"), 18-25 ms so. An e-mail address (one inner word, a
// three-letter last one: "example & com:*") was slower so (140 against
// 111 ms) and keeps the trigrams alone. "" otherwise, and on SQLite, whose
// trigram table answers such terms by itself. (A word of over 2,047
// characters, which PostgreSQL does not index, would hide a substring at
// its start from such a term; docs/search.md lists it.)
func (d dialect) searchSubstringWordsArg(inner []string, prefix string) string {
	if d.name != "postgres" || !(len(inner) >= 2 || len(inner) == 1 && len(prefix) >= 5) {
		return ""
	}
	var b strings.Builder
	for i, w := range inner {
		if i > 0 {
			b.WriteString(" & ")
		}
		b.WriteString("'" + w + "'") // letters and digits only: nothing to escape
	}
	if prefix != "" {
		b.WriteString(" & '" + prefix + "':*")
	}
	return b.String()
}

// searchSubstringArg is the argument of searchSubstringMatch for text: an
// ILIKE pattern on PostgreSQL, an FTS5 phrase (quotes doubled) for the
// trigram table on SQLite.
func (d dialect) searchSubstringArg(text string) string {
	if d.name == "postgres" {
		return "%" + likeEscape(text) + "%"
	}
	return `"` + strings.ReplaceAll(text, `"`, `""`) + `"`
}

// searchAnalyze refreshes the planner's statistics after a backfill filled
// the search columns of many events at once: without them PostgreSQL
// guesses the selectivity of the word and trigram predicates, and may walk
// the whole log by time instead of using the indexes. Autovacuum would get
// there eventually. SQLite's planner does not use such statistics here
// (the FTS5 tables answer first), so it has none to refresh.
func (d dialect) searchAnalyze() string {
	if d.name == "postgres" {
		return "ANALYZE events"
	}
	return ""
}
