package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

// benchSessions opens a store with n two-party sessions ready for messages.
func benchSessions(b *testing.B, url string, n int, group bool) (*store.Store, []string) {
	b.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if group {
		s.EnableGroupCommit(0)
	}
	for _, h := range []string{"@bench.a", "@bench.b"} {
		if err := s.CreateAgent(ctx, store.NewAgent{Handle: h, InboundPolicy: "open", TokenHash: []byte(h)}); err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]string, n)
	for i := range ids {
		r, _, err := s.CreateSession(ctx, store.CreateSession{Creator: "@bench.a", Invite: []string{"@bench.b"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Join(ctx, r.SessionID, "@bench.b"); err != nil {
			b.Fatal(err)
		}
		ids[i] = r.SessionID
	}
	return s, ids
}

// BenchmarkAppendMessage measures the durable append path (a committed
// session.message per op) on each backend, one sender at a time and with
// 64 concurrent senders over 64 sessions, with and without group commit.
// Besides the time per op, it reports the process's CPU time per op
// (cpu-µs/op), which the load of a shared machine disturbs far less.
// Run: go test ./store -run '^$' -bench AppendMessage -benchtime 3s -benchmem
func BenchmarkAppendMessage(b *testing.B) {
	for _, be := range dbtest.Backends() {
		for _, group := range []bool{false, true} {
			for _, par := range []int{1, 64} {
				name := fmt.Sprintf("%s/group=%v/senders=%d", be.Name, group, par)
				b.Run(name, func(b *testing.B) {
					s, ids := benchSessions(b, be.New(b), 64, group)
					content := json.RawMessage(`"benchmark message of a typical short length"`)
					var next atomic.Int64
					b.SetParallelism(max(1, par/runtimeProcs()))
					b.ResetTimer()
					defer reportCPU(b, processCPU())
					if par == 1 {
						for b.Loop() {
							if _, _, err := s.SendMessage(context.Background(), store.SendMessage{SessionID: ids[0], Sender: "@bench.a", Content: content}); err != nil {
								b.Fatal(err)
							}
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							i := next.Add(1)
							if _, _, err := s.SendMessage(context.Background(), store.SendMessage{SessionID: ids[i%int64(len(ids))], Sender: "@bench.a", Content: content}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		}
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkAuditedChange measures what the audit row adds to an operator
// change (an agent's policy set, one transaction) on each backend, and the
// named operator token's lookup that authenticates every operator request.
// Run: go test ./store -run '^$' -bench 'AuditedChange|AuthenticateOperator' -benchtime 2000x
func BenchmarkAuditedChange(b *testing.B) {
	for _, be := range dbtest.Backends() {
		for _, audited := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/audited=%v", be.Name, audited), func(b *testing.B) {
				s, _ := benchSessions(b, be.New(b), 0, false)
				policies := []string{"open", "allowlist"}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					ctx := context.Background()
					if audited {
						ctx = store.WithAudit(ctx, &store.AuditEntry{Actor: "ops", Action: "agent.policy.set", Target: "@bench.a",
							RequestID: "bench", Detail: map[string]any{"inbound_policy": policies[i%2]}})
					}
					if err := s.SetPolicy(ctx, "@bench.a", policies[i%2]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkAuthenticateOperator(b *testing.B) {
	for _, be := range dbtest.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			s, _ := benchSessions(b, be.New(b), 0, false)
			ctx := context.Background()
			hash := []byte("0123456789abcdef0123456789abcdef")
			if _, err := s.CreateOperatorToken(ctx, "ops", "admin", hash); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := s.AuthenticateOperator(ctx, hash); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
