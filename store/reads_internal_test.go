package store

import (
	"context"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
)

func TestLikeEscape(t *testing.T) {
	for in, want := range map[string]string{"@a_b.c": "@a!_b.c", "100%": "100!%", "a!b": "a!!b", `a\_%!`: `a\!_!%!!`, "@plain.x": "@plain.x"} {
		if got := likeEscape(in); got != want {
			t.Errorf("likeEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

// The SQL prefilter of the eligible log admits exactly what visibility.Visible
// admits: an audience naming a handle that "_" would match as a LIKE
// wildcard is not the viewer's.
func TestCandidatesAreExactlyTheVisibleEvents(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := openStore(t, url)
		a, v, w := "@x.a", "@x_y.v_", "@x-y.v-"
		for _, h := range []string{a, v, w} {
			if err := s.CreateAgent(ctx, NewAgent{Handle: h, InboundPolicy: protocol.PolicyOpen, TokenHash: []byte(h)}); err != nil {
				t.Fatal(err)
			}
		}
		resp, _, err := s.CreateSession(ctx, CreateSession{Creator: a, Invite: []string{v, w}})
		if err != nil {
			t.Fatal(err)
		}
		sid := resp.SessionID
		if _, err := s.End(ctx, sid, a); err != nil { // audience: v and w
			t.Fatal(err)
		}
		if _, err := s.Reopen(ctx, sid, a, []string{w}, nil, nil); err != nil { // audience: w
			t.Fatal(err)
		}
		if _, err := s.End(ctx, sid, a); err != nil { // audience: w
			t.Fatal(err)
		}
		for _, h := range []string{v, w} {
			view, err := s.View(ctx, sid, h)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.candidates(ctx, sid, view, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			all, err := s.EventsAfter(ctx, sid, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			var want []int64
			for _, e := range all {
				if visibility.Visible(view, e.Meta()) {
					want = append(want, e.Sequence)
				}
			}
			var seqs []int64
			for _, e := range got {
				seqs = append(seqs, e.Sequence)
			}
			if len(seqs) != len(want) {
				t.Fatalf("%s: candidates %v, visible %v", h, seqs, want)
			}
			for i := range want {
				if seqs[i] != want[i] {
					t.Fatalf("%s: candidates %v, visible %v", h, seqs, want)
				}
			}
		}
	})
}
