package replay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aspd/aspd/internal/visibility"
)

// WebSocket close codes aspd uses (docs/api.md, docs/delivery.md).
const (
	CloseNormal        = 1000
	CloseGoingAway     = 1001 // server shutting down
	ClosePolicy        = 1008 // slow consumer
	CloseInternal      = 1011 // server-side failure; reconnect
	CloseTryAgainLater = 1013 // the store cannot serve now; reconnect after a pause
	CloseUnauthorized  = 4001 // token rotated or revoked, agent deleted
)

// Transport is one live connection's outbound side.
type Transport interface {
	// Write sends one event, or queues it for the next Flush; it must give
	// up when ctx is cancelled. ctx lives as long as the connection (the
	// write timeout cancels it), so a transport must not treat it as a
	// per-write context.
	Write(ctx context.Context, msg []byte) error
	// Flush sends what Write queued, in order and in as few writes to the
	// socket as it can, and gives up at deadline (an error that wraps
	// context.DeadlineExceeded when it does). The writer calls it once per
	// batch: N events ready cost one system call, not N. A transport that
	// writes through returns nil.
	Flush(deadline time.Time) error
	// Ping sends a ping after everything written so far and waits for the
	// peer's pong, within ctx. Peers answer pings in the order they read
	// frames, so a pong confirms every frame written before its ping.
	Ping(ctx context.Context) error
	// Close closes the connection with a WebSocket close code and reason.
	Close(code int, reason string)
}

// Conn is one live connection of an agent. Its writer goroutine (writer.go)
// is the only one that writes events to the transport. The order its locks
// and the hub's are taken in is in LOCKS.md.
type Conn struct {
	hub    *Hub
	handle string
	tr     Transport
	opened time.Time

	mu       sync.Mutex
	dirty    map[string]announce  // session -> what was announced and not yet pulled
	pos      map[string]*position // session -> what was written and what the peer confirmed
	posDirty map[string]bool      // sessions whose confirmed position moved since the last cursor flush
	// placing: sessions announced to this connection whose position it has
	// not set up yet (the writer reads the agent's cursor there first). While
	// a session is in it, the agent's durable cursor there stays put: a
	// sibling connection's confirmation moving it would make this writer
	// start past events it was announced and never wrote. nil until used.
	placing  map[string]struct{}
	replayed bool // the initial replay is done; lag limits apply from then on
	acking   bool // the peer sent an ack: from now on only acks confirm (see Ack)

	// Confirmation pings (see requestConfirmLocked): at most one scheduled or
	// in flight per connection, at most one per ConfirmInterval.
	confirming   bool
	confirmAgain bool        // more was written while a ping was in flight
	confirmTimer *time.Timer // the scheduled ping, stopped by Finish
	lastPing     time.Time

	// The writer goroutine exists only while there is work: notify starts
	// one if none runs, and it exits when nothing announced remains. An idle
	// connection therefore holds no writer goroutine (only its reader).
	started bool               // Start was called; writers may run
	running bool               // a writer goroutine is active
	done    bool               // Finish was called; no writer may start
	writers sync.WaitGroup     // the active writer, for Finish
	ctx     context.Context    // the connection's; cancelled by Finish or a write timeout
	cancel  context.CancelFunc // cancels ctx
	// writeTimer bounds each batch's writes and their flush
	// (Config.WriteTimeout); armed by the batch's first write and stopped
	// by its flush, it cancels ctx when it fires.
	writeTimer *time.Timer
	start      time.Time
	closed     chan struct{}
	closeOnce  sync.Once
	closeWhy   string // reason given by the Close that closed it (under mu)

	// Writer-owned state.
	sessions  map[string]*connSession
	delivered atomic.Int64 // events written; writers hand over, so atomic
	// The batch written and not yet flushed (see write and flush): the
	// flush deadline (zero: nothing written since the last flush), the bytes
	// queued, and the created_at of each live event in it, for OnLiveWrite.
	deadline time.Time
	queued   int
	liveAt   []int64
}

// announce is what notify recorded for a session and no writer pulled yet:
// the head, and the agent's view as of viewAt, carried by the commit that
// announced it (viewAt 0: none carried). A view carried at viewAt reflects
// every membership change up to viewAt, so a writer meeting a membership
// event at or below viewAt takes it instead of reading the store.
type announce struct {
	head   int64
	view   visibility.View
	viewAt int64
}

// viewAsOf returns the carried view if it is valid at seq (reflects every
// change up to seq).
func (a *announce) viewAsOf(seq int64) (visibility.View, bool) {
	return a.view, a.viewAt > 0 && a.viewAt >= seq
}

type connSession struct {
	walk visibility.Walk // the agent's view, and the join that last restarted the pull
	sent int64
}

func newConnSession(v visibility.View, cursor int64) *connSession {
	return &connSession{walk: visibility.NewWalk(v, cursor, 0), sent: cursor}
}

// position is a connection's delivery state in one session, shared between
// its writer (which advances written) and whoever confirms (the pong of a
// confirmation ping, or the peer's ack), under Conn.mu.
//
// The agent's durable cursor follows confirmed, never written: a write that
// returned has only reached the kernel's send buffer, and a peer that stops
// reading or drops abruptly never received what sat there.
type position struct {
	session   string
	written   int64  // every event up to here was written to the transport, or was not visible
	shown     int64  // sequence of the last visible event written
	confirmed int64  // the peer confirmed everything up to here
	gen       uint32 // bumped when a join restarts the pull; older confirmations are void
	ackFrom   int64  // after a join restart: acks below the join do not count (they may predate it)
	acked     int64  // highest ack of this pass; applied as far as written allows
	pending   bool   // written moved past what the last confirmation ping covered
}

func newPosition(sessionID string, cursor int64) *position {
	return &position{session: sessionID, written: cursor, shown: cursor, confirmed: cursor}
}
func (c *Conn) markPosDirty(sessionID string) {
	c.mu.Lock()
	c.posDirty[sessionID] = true
	c.mu.Unlock()
}

func (c *Conn) takeDirtyPositions(into map[string]bool) {
	c.mu.Lock()
	for sid := range c.posDirty {
		into[sid] = true
	}
	clear(c.posDirty)
	c.mu.Unlock()
}

// position returns the connection's confirmed position in a session;
// placing reports a session announced to it whose position is not set up
// yet, which holds the agent's cursor there (see Conn.placing).
func (c *Conn) position(sessionID string) (confirmed int64, ok, placing bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, placing = c.placing[sessionID]; placing {
		return 0, false, true
	}
	p, ok := c.pos[sessionID]
	if !ok {
		return 0, false, false
	}
	return p.confirmed, true, false
}

// placedLocked records that the connection's position in a session is set
// up (or that it has none there) and marks it for the next cursor flush,
// which the placing held back. Called with c.mu held.
func (c *Conn) placedLocked(sessionID string) {
	if _, ok := c.placing[sessionID]; ok {
		delete(c.placing, sessionID)
		c.posDirty[sessionID] = true
	}
}
