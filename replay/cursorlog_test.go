package replay

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestCursorFlushFailureLoggedOnce: a store that fails every flush (an
// outage; flushes run every 250 ms) is logged once when saving starts
// failing and once when it works again, with the count of failed flushes,
// not once per flush.
func TestCursorFlushFailureLoggedOnce(t *testing.T) {
	st := newLogStore()
	st.setView("sess_1", joined("@a.b"))
	st.add("sess_1", protocol.EventMessage, "@x.y", true)
	logs := &lockedBuffer{}
	cfg := DefaultConfig()
	cfg.ConfirmInterval = time.Millisecond
	cfg.CursorFlushInterval = time.Hour // flushed by hand
	h := New(cfg, st, nil, slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(h.Close)
	c := attachStart(t, h, "@a.b", newTestTransport())
	waitFor(t, "the confirmation", func() bool { p, _, _ := c.position("sess_1"); return p == 1 })

	st.mu.Lock()
	st.failSave = true
	st.mu.Unlock()
	for range 10 {
		h.flushCursors() // fails, and keeps the cursor for the next flush
	}
	if n := strings.Count(logs.String(), "saving cursors failed"); n != 1 {
		t.Fatalf("%d lines for 10 failed flushes, want 1:\n%s", n, logs)
	}
	st.mu.Lock()
	st.failSave = false
	st.mu.Unlock()
	h.flushCursors()
	if got := st.cursor("@a.b", "sess_1"); got != 1 {
		t.Fatalf("cursor %d after the store came back, want 1", got)
	}
	if !strings.Contains(logs.String(), `msg="saving cursors works again" failed_flushes=10`) {
		t.Fatalf("no recovery line with the count:\n%s", logs)
	}
	c.Close(CloseNormal, "test")
	c.Finish()
}
