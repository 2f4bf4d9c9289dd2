package store

import (
	"context"
	"time"
)

// A participant's events (PostgreSQL; docs/search.md, "A participant's
// events"). With a participant filter, searchRace runs the capped index
// step at once with searchParticipantWalks, which reads the participant's
// sessions instead of the search index. Its walks read the newest events
// of those sessions, newest first, through events_session_time (migration
// 00012): each session's newest keys from the index alone, then only the
// events the walk needs. A word common in the log but rarer in the
// participant's sessions, which the index step must count hit by hit,
// costs a walk a few thousand events; reading every event of the
// sessions cost 3-4 us an event (at ten million events, 30,000 events
// for 300 sessions: 101-123 ms).

// searchParticipantWalkShort is how many of the participant's newest
// events the first participant walk reads. A variable for the test that
// makes walks end within ties and skewed clocks.
var searchParticipantWalkShort = 2000

// searchParticipantWalks answers f (with a participant) from walks of the
// participant's events, or, for a term with too few hits among them, from
// every event of the participant's sessions, read by key (searchStep
// sessions). step is the name (SearchSteps) of the step that answered; ok
// is false when the steps ran out of searchSessionsBudget.
//
//  1. A walk of the newest searchParticipantWalkShort events.
//  2. With two hits or more, a walk twice as long as those hits say the
//     page needs, when that is at most searchWalkLong.
//  3. Every event of the participant's sessions.
//
// A walk answers when its page is full, or when it read fewer events
// than its length (every event within the bounds), as search's walks do.
func (s *Store) searchParticipantWalks(ctx context.Context, f SearchFilter) (hits []SearchHit, step string, ok bool, err error) {
	deadline := time.Now().Add(searchSessionsBudget)
	n := searchParticipantWalkShort
	for i := 0; ; i++ {
		budget := time.Until(deadline)
		if budget < time.Millisecond {
			return nil, "", false, nil
		}
		st := searchStep{sessionsWalk: n, budget: budget}
		if n == 0 {
			st = searchStep{sessions: true, budget: budget}
		}
		stepRan(st)
		hits, walked, err := s.searchStep(ctx, f, st)
		switch {
		case err != nil && ctx.Err() == nil && s.d.searchBudgetSpent(err):
			return nil, "", false, nil
		case err != nil:
			return nil, "", false, err
		case n == 0:
			return hits, "sessions", true, nil
		case len(hits) >= f.Limit || walked < n:
			return hits, "sessions_walk", true, nil
		}
		n = 0
		if i == 0 && len(hits) >= 2 {
			if next := 2 * searchParticipantWalkShort * f.Limit / len(hits); next <= searchWalkLong {
				n = next
			}
		}
	}
}
