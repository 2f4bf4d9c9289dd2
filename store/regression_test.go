package store_test

// Regression tests for defects found in review; each failed before its fix.

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

// slowReader hands out its data in two halves with a pause between them, as
// a large or piped import does.
type slowReader struct {
	data  []byte
	pause time.Duration
	off   int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	if r.off >= len(r.data)/2 && r.pause > 0 {
		time.Sleep(r.pause)
		r.pause = 0
	}
	end := min(len(r.data), r.off+len(p))
	if r.off < len(r.data)/2 {
		end = min(end, len(r.data)/2)
	}
	n := copy(p, r.data[r.off:end])
	r.off += n
	return n, nil
}

// An import takes as long as its input takes to arrive: the bound on
// ordinary request transactions (30 s; here shortened) must not cut it.
func TestRegressionImportHasNoTransactionDeadline(t *testing.T) {
	file := ptSourceFile(t)
	dbtest.ForEach(t, func(t *testing.T, url string) {
		dst := open(t, url)
		dst.SetTxTimeoutForTest(100 * time.Millisecond)
		stats, err := dst.Import(context.Background(), &slowReader{data: file, pause: 400 * time.Millisecond})
		if err != nil {
			t.Fatalf("slow import: %v", err)
		}
		if stats.Counts[store.KindEvent] == 0 {
			t.Fatalf("slow import wrote no events: %v", stats.Counts)
		}
		// Ordinary transactions keep their bound: the same store still works.
		if err := dst.CreateAgent(context.Background(), store.NewAgent{Handle: "@after.import", InboundPolicy: "open"}); err != nil {
			t.Fatalf("create after import: %v", err)
		}
	})
}

// A send after Close returns ErrClosed at once, in both commit modes; with
// group commit it used to queue behind committers that had gone, forever.
func TestRegressionSendAfterCloseFailsPromptly(t *testing.T) {
	forEachSendMode(t, func(t *testing.T, s *store.Store, grouped bool) {
		a, b := "@closed.a", "@closed.b"
		agents(t, s, a, b)
		sid := create(t, s, a, "closing", b)
		send(t, s, sid, a, "before close")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := s.SendMessage(context.Background(), store.SendMessage{SessionID: sid, Sender: a, Content: text("after close")})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, store.ErrClosed) {
				t.Fatalf("send after close: %v, want ErrClosed", err)
			}
			wantErr(t, err, 503, "unavailable")
		case <-time.After(5 * time.Second):
			t.Fatal("send after close still blocked after 5s")
		}
	})
}
