package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aspd/aspd/internal/search"
)

// A participant's events (PostgreSQL; docs/search.md, "A participant's
// events"). With a participant filter, searchRace runs the capped index
// step at once with searchParticipantWalks, which reads the participant's
// sessions instead of the search index, newest events first, through
// events_session_time (migration 00012). A word common in the log but
// rarer in the participant's sessions, whose hits the index step must
// count one by one, costs a walk the few thousand events it reads.

// searchParticipantWalkShort is how many of the participant's newest
// events the first participant walk reads. A variable for the test that
// makes walks end within ties and skewed clocks.
var searchParticipantWalkShort = 2000

// searchParticipantWalks answers f (with a participant) from the newest
// events of the participant's sessions. step is the name (SearchSteps) of
// the step that answered; ok is false when its steps ran out of
// searchSessionsBudget.
//
//  1. A walk of the newest searchParticipantWalkShort events: the oldest
//     created_at among them, lo (participantNewest, from the index alone),
//     then every event of the sessions from lo on, matched (searchStep
//     sessions, with since lo). Every event it did not read is older than
//     every event it read, so a full page is the answer; so are its hits
//     when the sessions hold no more events than the walk's length.
//  2. With two hits or more, a walk twice as long as those hits say the
//     page needs, when that is at most searchWalkLong.
//  3. Every event of the participant's sessions (within the bounds), or,
//     when the search index answers the query through words alone
//     (searchWordsOnly), the index's hits ANDed with those events: a term
//     with few hits among them but thousands in the log (a handle at ten
//     million events, 10,000 hits, 30 of them the participant's: 26 ms,
//     against 65-70 ms planned freely, bench/search-explain.sh; 30-31 ms
//     through HTTP, against 99-102). Through the trigrams, whose posting
//     lists are as long as the log, the AND cost more than the events.
func (s *Store) searchParticipantWalks(ctx context.Context, f SearchFilter) (hits []SearchHit, step string, ok bool, err error) {
	deadline := time.Now().Add(searchSessionsBudget)
	n := searchParticipantWalkShort
	for i := 0; ; i++ {
		g := f
		step = "sessions"
		if n > 0 {
			lo, walked, spent, err := s.participantNewest(ctx, f, n, deadline)
			switch {
			case spent:
				return nil, "", false, nil
			case err != nil:
				return nil, "", false, err
			case walked == 0:
				return nil, "sessions_walk", true, nil
			case walked < n:
				n = 0 // the walk holds every event: its hits are all there are
			case lo > g.Since:
				g.Since = lo
			}
			step = "sessions_walk"
		}
		budget := time.Until(deadline)
		if budget < time.Millisecond {
			return nil, "", false, nil
		}
		st := searchStep{sessions: true, bitmap: n == 0 && s.searchWordsOnly(f.Query), budget: budget}
		stepRan(ctx, st)
		hits, _, err := s.searchStep(ctx, g, st)
		switch {
		case err != nil && ctx.Err() == nil && s.d.searchBudgetSpent(err):
			return nil, "", false, nil
		case err != nil:
			return nil, "", false, err
		case n == 0 || len(hits) >= f.Limit:
			return hits, step, true, nil
		}
		next := 0
		if i == 0 && len(hits) >= 2 {
			if m := 2 * searchParticipantWalkShort * f.Limit / len(hits); m <= searchWalkLong {
				next = m
			}
		}
		n = next
	}
}

// participantNewest is the created_at of the n-th newest event of f's
// participant's sessions within f's time bounds (the cursor's as a time
// alone: at worst the walk reads a few events fewer), and how many events
// that look counted (at most n). It reads events_session_time alone, each
// session's newest n keys, newest first. spent: past the deadline.
func (s *Store) participantNewest(ctx context.Context, f SearchFilter, n int, deadline time.Time) (lo int64, walked int, spent bool, err error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var oldest *int64
	err = s.read.QueryRowContext(ctx, `SELECT min(k.created_at), count(*) FROM (
		SELECT k.created_at FROM unnest(`+s.d.searchParticipantSessionIDs("$1")+`) AS s(sid)
		CROSS JOIN LATERAL (SELECT created_at FROM events WHERE session_id = s.sid AND created_at >= $2 AND created_at < $3
			ORDER BY created_at DESC LIMIT $4) k
		ORDER BY k.created_at DESC LIMIT $4) k`, f.Participant, f.Since, f.createdBefore(), n).Scan(&oldest, &walked)
	switch {
	case err != nil && time.Now().After(deadline) && (errors.Is(err, context.DeadlineExceeded) || s.d.searchBudgetSpent(err)):
		return 0, 0, true, nil
	case err != nil:
		return 0, 0, false, fmt.Errorf("store: search: %w", err)
	case oldest != nil:
		lo = *oldest
	}
	return lo, walked, false, nil
}

// searchWordsOnly reports whether PostgreSQL's search indexes answer every
// term an event must match through words: none is a substring that only
// the trigrams answer (searchSubstringWordsArg, or the word pairs,
// searchPairsArg). Excluded terms do not count: they are checked on the
// rows found.
func (s *Store) searchWordsOnly(q *search.Query) bool {
	for _, group := range q.All {
		for _, t := range group {
			if len(t.Words) == 0 || t.Substring() && s.d.searchSubstringWordsArg(t.SubstringWords()) == "" && s.d.searchPairsArg(t) == "" {
				return false
			}
		}
	}
	return true
}

// participantHasMore reports whether the sessions of participant hold more
// than n events (SQLite's participant step, search: read through the
// primary key alone, at most n + 1 entries).
func (s *Store) participantHasMore(ctx context.Context, participant string, n int) (bool, error) {
	var count int
	err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM events WHERE `+
		s.d.searchParticipantSessions("$1")+` LIMIT $2)`, participant, n+1).Scan(&count)
	if err != nil {
		return false, fmt.Errorf("store: search: %w", err)
	}
	return count > n, nil
}
