package store_test

import (
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

// Creating an agent on a deleted agent's handle is refused with a message
// saying that handles are never reused, not that the agent "already exists".
func TestDeletedHandleMessage(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		mustAgent(t, s, "@reuse.gone", "open")
		mustAgent(t, s, "@reuse.here", "open")
		_, err := s.DeleteAgent(bg, "@reuse.gone")
		must(t, err)
		err = s.CreateAgent(bg, store.NewAgent{Handle: "@reuse.gone", InboundPolicy: "open", TokenHash: []byte("x1")})
		if err == nil || !strings.Contains(err.Error(), "belonged to a deleted agent and cannot be reused") {
			t.Errorf("deleted handle: %v", err)
		}
		err = s.CreateAgent(bg, store.NewAgent{Handle: "@reuse.here", InboundPolicy: "open", TokenHash: []byte("x2")})
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Errorf("live handle: %v", err)
		}
	})
}
