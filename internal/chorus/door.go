package chorus

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aspd/aspd/protocol"
)

// App is the worker's one door into aspd: the application layer as the
// worker needs it, nothing more, one call per step of the outbox
// (*app.App satisfies it, internal/app/chorus_outbox.go). The application
// holds the rules and the store: what is queued for whom, claims, the
// credentials a delivery carries, what an outcome does to the endpoint and
// the agent's presence. The worker decides when and how: rounds, leases,
// concurrency, rendering, signing, sending, retries. Steps that return no
// error log their own failures: the application knows an outage of its
// store from a bug.
type App interface {
	// ChorusWake is signalled after commits that may have made deliveries
	// due.
	ChorusWake() <-chan struct{}
	// ReloadChorusHandles re-reads which agents have an endpoint (the set
	// that decides which commits signal ChorusWake), for registrations
	// made through other nodes.
	ReloadChorusHandles(ctx context.Context)
	// QueueChorus queues, for up to limit (agent, session) pairs with
	// events past their Chorus cursor and nothing pending, the next event
	// the agent is to be sent.
	QueueChorus(ctx context.Context, limit int)
	// ClaimChorus leases up to limit due deliveries to lease (a claim's
	// unique name) until until.
	ClaimChorus(ctx context.Context, lease string, until time.Time, limit int) []Delivery
	// PrepareChorus gathers what one attempt of d sends: the unsealed
	// endpoint, the event, its session, a fresh callback URL and the MCP
	// credentials. ErrNoEndpoint: the endpoint is gone, there is nothing to
	// attempt or record; ErrGone: the event is gone, the delivery is dead.
	PrepareChorus(ctx context.Context, d Delivery) (Attempt, error)
	// RecordChorus records the outcome of an attempt of d under its lease.
	// An endpoint whose deliveries have failed for failingAfter without a
	// success is marked failing (its agent goes offline); a success brings
	// it back.
	RecordChorus(ctx context.Context, d Delivery, o Outcome, failingAfter time.Duration)
	// ReleaseChorus gives up d's lease (an attempt cut short by shutdown).
	ReleaseChorus(ctx context.Context, d Delivery)
	// PruneChorus deletes expired credentials and the records of
	// deliveries finished before finishedBefore.
	PruneChorus(ctx context.Context, finishedBefore time.Time)
	// ChorusBacklog counts pending deliveries and returns the creation
	// time of the oldest (epoch milliseconds, 0 when none).
	ChorusBacklog(ctx context.Context) (pending, oldest int64, err error)
	// ChorusSignals counts the status and error callbacks received.
	ChorusSignals() Signals
}

// Delivery is a claimed delivery: one event for one agent.
type Delivery struct {
	ID        string // the webhook-id, stable across attempts (DeliveryID)
	Handle    string // the recipient
	SessionID string
	Sequence  int64
	Attempts  int    // attempts made before this one
	Lease     string // the claim that leased it, passed back to record the outcome
}

// Attempt is what one attempt of a delivery sends, from the application.
type Attempt struct {
	Target   Target
	Event    []byte            // the ASP event as stored (its JSON)
	Session  *protocol.Session // as the recipient sees it; nil when it could not be read
	Callback string            // a fresh callback URL for this attempt
	MCPURL   string            // aspd's /mcp
	MCPToken string            // a short-lived token authenticating as the recipient
	// Revoked is closed when the endpoint is rotated or removed through
	// this node: an attempt in flight to the old URL is aborted.
	Revoked <-chan struct{}
}

// Target is an endpoint unsealed for one delivery attempt.
type Target struct {
	URL    string // the connection string: never log it
	Secret string // whsec_...
}

// LogValue keeps a target out of logs whatever logs it.
func (Target) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Outcome is the result of one delivery attempt.
type Outcome struct {
	State       string // protocol.ChorusDelivered, ChorusFailed, or ChorusPending for a retry
	Status      int    // HTTP status, 0 when none
	Error       string // why it failed, for the delivery record
	NextAttempt int64  // a retry's due time, epoch milliseconds
}

// Signals counts the agents' status and error callbacks.
type Signals struct {
	Status, Error uint64
}

// PrepareChorus's refusals.
var (
	ErrNoEndpoint = errors.New("chorus: the endpoint was removed")
	ErrGone       = errors.New("the event is no longer in the store")
)
