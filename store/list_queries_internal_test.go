package store

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
)

// countingQuerier counts the statements run through it.
type countingQuerier struct {
	q querier
	n int
}

func (c *countingQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.n++
	return c.q.QueryContext(ctx, query, args...)
}

func (c *countingQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	c.n++
	return c.q.QueryRowContext(ctx, query, args...)
}

func (c *countingQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.n++
	return c.q.ExecContext(ctx, query, args...)
}

// A page of GET /sessions costs the same three statements whatever its
// length and however many of its sessions the viewer sees live or as of its
// horizon: participants are read for the page, never per session.
func TestListSessionsQueriesDoNotGrowWithThePage(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := openStore(t, url)
		a, v, w := "@q.a", "@q.v", "@q.w"
		for _, h := range []string{a, v, w} {
			if err := s.CreateAgent(ctx, NewAgent{Handle: h, InboundPolicy: protocol.PolicyOpen, TokenHash: []byte(h)}); err != nil {
				t.Fatal(err)
			}
		}
		// 24 sessions of v, alternately seen live (v joined) and as of its
		// horizon (v invited, then the session went on).
		for i := range 24 {
			resp, _, err := s.CreateSession(ctx, CreateSession{Creator: a, Invite: []string{v}, Topic: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				if _, err := s.Join(ctx, resp.SessionID, v); err != nil {
					t.Fatal(err)
				}
			} else if _, _, err := s.Invite(ctx, resp.SessionID, a, []string{w}); err != nil {
				t.Fatal(err)
			}
		}
		for _, limit := range []int{1, 2, 5, 24, 100} {
			c := &countingQuerier{q: s.read}
			rows, err := listSessionsFor(ctx, c, SessionFilter{Participant: v, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			if want := min(limit, 24); len(rows) != want {
				t.Fatalf("limit %d: %d rows, want %d", limit, len(rows), want)
			}
			for _, r := range rows {
				if n := len(r.Participants); n != 2 {
					t.Fatalf("limit %d: %s lists %d participants, want 2 (a and v; w is after v's horizon)", limit, r.ID, n)
				}
			}
			// One page of one session is seen either live or as of a
			// horizon, so it needs one statement fewer.
			if want := min(3, 1+len(rows)); c.n != want {
				t.Errorf("a page of %d sessions took %d statements, want %d", len(rows), c.n, want)
			}
		}
	})
}
