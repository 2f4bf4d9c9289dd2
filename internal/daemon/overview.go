package daemon

import (
	"time"

	"github.com/aspd/aspd/server"
)

// sampleOverview samples the console overview's series (server/overview.go)
// every interval, starting now, until the func it returns is called; that
// func returns once the sampler has stopped.
func sampleOverview(s *server.Server, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.SampleOverview()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
