package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aspd/aspd/internal/daemon"
	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// BenchmarkSendMessage: the cost of one accepted message through the whole
// HTTP handler (middleware, agent auth, decoding, the store's write, the
// publish to a hub with no connections), on each store; -benchmem gives
// the allocations per accepted message (docs/benchmarks.md, "Message path:
// syscalls and allocations"). In process, without a socket: the request
// and recorder the benchmark builds count too (about 20 allocations).
func BenchmarkSendMessage(b *testing.B) {
	for _, be := range dbtest.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			ctx := context.Background()
			st, err := store.Open(ctx, be.New(b))
			if err != nil {
				b.Fatal(err)
			}
			d := daemon.New(testConfig(), st, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err := d.Start(ctx); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Close(); st.Close() })
			h := d.Handler()
			do := func(status int, method, path, token string, body []byte, out any) {
				req := httptest.NewRequest(method, path, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != status {
					b.Fatalf("%s %s: %d, want %d: %s", method, path, rec.Code, status, rec.Body)
				}
				if out != nil {
					if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
						b.Fatal(err)
					}
				}
			}
			tokens := map[string]string{}
			for _, hd := range []string{"@bench.alice", "@bench.bob"} {
				var a struct{ Token string }
				do(http.StatusCreated, "POST", "/admin/v1/agents", adminToken,
					[]byte(`{"handle":"`+hd+`","inbound_policy":"open"}`), &a)
				tokens[hd] = a.Token
			}
			var created protocol.CreateSessionResponse
			do(http.StatusCreated, "POST", "/sessions", tokens["@bench.alice"], []byte(`{"invite":["@bench.bob"]}`), &created)
			sp := "/sessions/" + created.SessionID
			do(http.StatusOK, "POST", sp+"/join", tokens["@bench.bob"], []byte(`{}`), nil)
			body := []byte(`{"content":"a message of a typical length for the chat benchmark"}`)
			alice := tokens["@bench.alice"]
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				do(http.StatusCreated, "POST", sp+"/messages", alice, body, nil)
			}
		})
	}
}
