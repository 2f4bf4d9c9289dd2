// Package daemon wires aspd over one store: it builds the application layer
// (internal/app), the Chorus delivery worker (internal/chorus), the HTTP
// adapter (server) and the metrics registry GET /metrics exposes, and it
// orders their start and stop. It is the one place where the components
// meet: each takes its own section of Config, and an adapter is given the
// built *app.App, never the store. cmd/aspd runs a Daemon; tests build the
// same graph with it. Another adapter would be built here, beside the HTTP
// one, over the same App.
package daemon

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/chorus"
	"github.com/aspd/aspd/server"
	"github.com/aspd/aspd/store"
)

// Config has one section per component.
type Config struct {
	// App is the application layer's: limits, request rates, the delivery
	// hub, frames, the Chorus rules and key, the cluster node.
	App app.Config
	// HTTP is the HTTP adapter's own: body and WebSocket limits, the
	// operator token, keepalives.
	HTTP server.Config
	// Chorus is the webhook delivery worker's; it runs only when App.Chorus
	// has a key.
	Chorus chorus.Config
}

// Daemon is one aspd process's components over one store.
type Daemon struct {
	app           *app.App
	chorus        *chorus.Worker
	http          *server.Server
	chorusRunning bool
	// stopSampler stops the overview sampler (overview.go); nil before Start.
	stopSampler func()
}

// New builds every component on st; nothing runs until Start. Close stops
// what Start started; st stays the caller's to close, after Close.
func New(cfg Config, st *store.Store, log *slog.Logger) *Daemon {
	reg := prometheus.NewRegistry()
	delivery := newDeliveryLatency()
	reg.MustRegister(delivery)
	cfg.App.Hub.OnLiveWrite = observeDelivery(delivery)
	a := app.New(cfg.App, st, log)
	// The worker is built even when Chorus is off: it installs the
	// application's Chorus hooks, and its metrics are always exposed.
	w := chorus.New(cfg.Chorus, a, log)
	reg.MustRegister(w.Collectors()...)
	return &Daemon{app: a, chorus: w, http: server.New(cfg.HTTP, a, reg, log)}
}

// Handler is the HTTP adapter's handler, to be served once Start has
// returned.
func (d *Daemon) Handler() http.Handler { return d.http.Handler() }

// Start starts the application (presence recovery, background work, the
// cluster node), then the Chorus worker when Chorus has a key: the worker
// delivers what the application commits.
func (d *Daemon) Start(ctx context.Context) error {
	if err := d.app.Start(ctx); err != nil {
		return err
	}
	if d.app.ChorusEnabled() {
		d.chorus.Start()
		d.chorusRunning = true
	}
	d.stopSampler = sampleOverview(d.http, server.OverviewInterval)
	return nil
}

// Close stops the Chorus worker, whose attempts in flight still record
// their outcome through the application, and then the application, which
// closes every live connection and flushes delivery cursors.
func (d *Daemon) Close() {
	if d.stopSampler != nil {
		d.stopSampler()
	}
	if d.chorusRunning {
		d.chorus.Close()
	}
	d.app.Close()
}
