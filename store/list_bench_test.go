package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

// BenchmarkListSessionsFor measures one page of GET /sessions: 100 sessions
// of the viewer, half seen live (joined) and half as of its horizon (invited,
// then the session went on), each with a few messages.
// Run: go test ./store -run '^$' -bench ListSessionsFor -benchtime 2s
func BenchmarkListSessionsFor(b *testing.B) {
	for _, be := range dbtest.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			ctx := context.Background()
			s, err := store.Open(ctx, be.New(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			a, v, w := "@lb.a", "@lb.v", "@lb.w"
			for _, h := range []string{a, v, w} {
				if err := s.CreateAgent(ctx, store.NewAgent{Handle: h, InboundPolicy: "open", TokenHash: []byte(h)}); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 100 {
				r, _, err := s.CreateSession(ctx, store.CreateSession{Creator: a, Invite: []string{v}, Topic: fmt.Sprint(i)})
				if err != nil {
					b.Fatal(err)
				}
				if i%2 == 0 {
					if _, err := s.Join(ctx, r.SessionID, v); err != nil {
						b.Fatal(err)
					}
				} else if _, _, err := s.Invite(ctx, r.SessionID, a, []string{w}); err != nil {
					b.Fatal(err)
				}
				for range 3 {
					if _, _, err := s.SendMessage(ctx, store.SendMessage{SessionID: r.SessionID, Sender: a, Content: []byte(`"m"`)}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			for b.Loop() {
				rows, err := s.ListSessionsFor(ctx, store.SessionFilter{Participant: v, Limit: 100})
				if err != nil || len(rows) != 100 {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
		})
	}
}
