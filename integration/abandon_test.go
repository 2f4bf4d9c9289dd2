package integration

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAbandonedSendsDoNotStallDelivery: clients that hang up while their
// messages are being appended must not leave live delivery waiting for a
// publication that never comes. A message acknowledged afterwards reaches
// the other participant live, and so does everything that committed.
func TestAbandonedSendsDoNotStallDelivery(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		a := s.provision("@ab.a", "open")
		b := s.provision("@ab.b", "open")
		sid := a.createSession(map[string]any{"invite": []string{"@ab.b"}})
		b.join(sid)
		bs := b.connect()

		impatient := &http.Client{Timeout: 2 * time.Millisecond}
		var wg sync.WaitGroup
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", s.url+"/sessions/"+sid+"/messages", strings.NewReader(`{"content":"impatient"}`))
				req.Header.Set("Authorization", "Bearer "+a.token)
				if resp, err := impatient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		last := a.send(sid, "final")
		// b must receive every event up to and including "final", live.
		deadline := time.After(15 * time.Second)
		for {
			select {
			case e, ok := <-bs.events:
				if !ok {
					t.Fatal("stream closed")
				}
				if e.Sequence == last {
					return
				}
			case <-deadline:
				t.Fatalf("the acknowledged message %d never reached the other participant live", last)
			}
		}
	})
}
