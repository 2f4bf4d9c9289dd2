package cluster

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// natsBus carries the wake-ups on core NATS subjects <prefix>.events and
// <prefix>.control, off the database: NOTIFY takes a transaction and a
// database-wide lock at commit on PostgreSQL, a NATS publish does not.
//
// Core NATS rather than JetStream: a wake-up that NATS drops (a node
// reconnecting, a slow subscriber) costs at most the poll interval, because
// the catch-up reads the store, which stays the source of truth; stored
// streams would add a second log to keep consistent with it and no
// guarantee. A reconnection calls subscribed, which owes a catch-up.
type natsBus struct {
	nc     *nats.Conn
	prefix string
}

// dialNATS connects to the NATS server at rawURL, reconnecting forever
// after a loss; onReconnect runs after each reconnection.
func dialNATS(rawURL, prefix, nodeID string, onReconnect func()) (*natsBus, error) {
	nc, err := nats.Connect(rawURL,
		nats.Name("aspd "+nodeID),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(5*time.Second),
		nats.ReconnectHandler(func(*nats.Conn) { onReconnect() }),
	)
	if err != nil {
		return nil, fmt.Errorf("cluster: NATS at %s: %w", redactURL(rawURL), err)
	}
	return &natsBus{nc: nc, prefix: prefix}, nil
}

func (b *natsBus) name() string { return "nats" }

func (b *natsBus) subject(channel string) string {
	if channel == EventsChannel {
		return b.prefix + ".events"
	}
	return b.prefix + ".control"
}

// send publishes into the client's buffer, which its flusher writes at
// once; a closed connection is the only error (a disconnected one buffers
// until it is back, and the catch-up covers what is lost).
func (b *natsBus) send(_ context.Context, events, control []string) error {
	for _, p := range events {
		if err := b.nc.Publish(b.subject(EventsChannel), []byte(p)); err != nil {
			return fmt.Errorf("cluster: NATS publish: %w", err)
		}
	}
	for _, p := range control {
		if err := b.nc.Publish(b.subject(ControlChannel), []byte(p)); err != nil {
			return fmt.Errorf("cluster: NATS publish: %w", err)
		}
	}
	return nil
}

func (b *natsBus) listen(ctx context.Context, subscribed func(), recv func(channel, payload string)) error {
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, ch := range []string{EventsChannel, ControlChannel} {
		s, err := b.nc.Subscribe(b.subject(ch), func(m *nats.Msg) { recv(ch, string(m.Data)) })
		if err != nil {
			return fmt.Errorf("cluster: NATS subscribe: %w", err)
		}
		// A slow node drops wake-ups rather than growing without bound;
		// the catch-up covers them.
		if err := s.SetPendingLimits(65536, 64<<20); err != nil {
			return fmt.Errorf("cluster: NATS subscribe: %w", err)
		}
		subs = append(subs, s)
	}
	// The server has the subscriptions once a round trip is done: from
	// then on nothing is missed, so the catch-up starts after it.
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := b.nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		return fmt.Errorf("cluster: NATS subscribe: %w", err)
	}
	subscribed()
	<-ctx.Done()
	return nil
}

func (b *natsBus) close() { b.nc.Close() }

// redactURL hides the passwords (and bare user tokens) of a NATS server
// list for errors and logs.
func redactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, one := range parts {
		u, err := url.Parse(strings.TrimSpace(one))
		switch {
		case err != nil:
			parts[i] = "(unparsable URL)"
		case u.User != nil:
			u.User = url.User("xxxxx")
			parts[i] = u.String()
		default:
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
