package app

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
)

func TestWatchSession(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		mkAgent(t, a, "@lw.alice")
		mkAgent(t, a, "@lw.bob")
		res, err := a.CreateSession(ctx, "@lw.alice", protocol.CreateSessionRequest{Invite: []string{"@lw.bob"},
			InitialMessage: &protocol.InitialMessage{Content: content("hi")}})
		if err != nil {
			t.Fatal(err)
		}
		id := res.SessionID

		_, err = a.WatchSession(ctx, "sess_01M86CY12FHKM2MXSXFAPAZYQ7", 0)
		if pe := Answer(err); err == nil || pe.Status != http.StatusNotFound {
			t.Fatalf("watching an unknown session: %v", err)
		}
		_, err = a.WatchSession(ctx, id, -1)
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)

		w, err := a.WatchSession(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		seqs := func(wait time.Duration) []int64 {
			t.Helper()
			evs, err := w.Next(ctx, wait)
			if err != nil {
				t.Fatal(err)
			}
			var out []int64
			for _, e := range evs {
				out = append(out, e.Sequence)
			}
			return out
		}
		if got := seqs(0); fmt.Sprint(got) != "[1 2]" { // message, invitation
			t.Fatalf("first read %v, want [1 2]", got)
		}
		if got := seqs(0); got != nil {
			t.Fatalf("read with nothing new: %v", got)
		}
		if err := a.Join(ctx, "@lw.bob", id); err != nil {
			t.Fatal(err)
		}
		if got := seqs(5 * time.Second); fmt.Sprint(got) != "[3]" {
			t.Fatalf("after the join: %v, want [3]", got)
		}
		// More than one batch: LiveBatch, then the rest at once.
		for i := range LiveBatch + 20 {
			if _, err := a.SendMessage(ctx, "@lw.bob", id, protocol.SendMessageRequest{Content: content(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		if got := seqs(5 * time.Second); len(got) != LiveBatch || got[0] != 4 || got[LiveBatch-1] != 3+LiveBatch {
			t.Fatalf("first batch: %d events from %v", len(got), got[:1])
		}
		if got := seqs(0); len(got) != 20 || got[0] != 4+LiveBatch {
			t.Fatalf("second batch: %v", got)
		}
		if w.After() != 3+LiveBatch+20 {
			t.Fatalf("After = %d", w.After())
		}

		// The per-server cap, and Close releasing exactly one slot.
		if a.LiveWatches() != 1 {
			t.Fatalf("LiveWatches = %d, want 1", a.LiveWatches())
		}
		var ws []*SessionWatch
		for range MaxLiveWatches - 1 {
			x, err := a.WatchSession(ctx, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, x)
		}
		_, err = a.WatchSession(ctx, id, 0)
		wantCode(t, err, http.StatusTooManyRequests, protocol.CodeRateLimited)
		ws[0].Close()
		ws[0].Close()
		if a.LiveWatches() != MaxLiveWatches-1 {
			t.Fatalf("LiveWatches after one Close (twice) = %d", a.LiveWatches())
		}
		for _, x := range ws[1:] {
			x.Close()
		}
		if h := a.Health(ctx); h.LiveTranscripts != 1 || h.Store.Status != "ok" || h.Store.Dialect != a.Store().Dialect() || h.EventsCommitted < int64(3+LiveBatch+20) {
			t.Fatalf("health %+v", h)
		}
	})
}
