package cluster

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A bus carries wake-ups and control messages between the nodes: PostgreSQL
// LISTEN/NOTIFY by default (pgBus), or NATS (natsBus, with --cluster-nats).
// Either way it is only a wake-up: the events are read from the store, and
// the catch-up finds whatever a bus lost.
type bus interface {
	name() string
	// send publishes event wake-ups and control messages, in that order.
	send(ctx context.Context, events, control []string) error
	// listen delivers every message from the other nodes to recv (channel
	// is EventsChannel or ControlChannel) until ctx ends or the
	// subscription fails. It calls subscribed once it is subscribed, and
	// again after every reconnection that may have lost messages.
	listen(ctx context.Context, subscribed func(), recv func(channel, payload string)) error
	close()
}

// pgBus is LISTEN/NOTIFY on two dedicated connections of the node's own:
// one that sends, opened when first needed, and one that listens.
type pgBus struct {
	n    *Node
	conn *pgx.Conn // the sending connection; notifier goroutine only
}

func (b *pgBus) name() string { return "postgres" }

func (b *pgBus) send(ctx context.Context, events, control []string) error {
	if b.conn == nil {
		conn, err := b.n.connect("aspd-notify")
		if err != nil {
			return err
		}
		// A wake-up needs no durability: its commit need not wait for the
		// WAL flush (NOTIFY takes a transaction id).
		if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
			conn.Close(context.Background())
			return fmt.Errorf("cluster: notify connection: %w", err)
		}
		b.conn = conn
	}
	batch := &pgx.Batch{}
	for _, p := range events {
		batch.Queue(`SELECT pg_notify($1, $2)`, EventsChannel, p)
	}
	for _, p := range control {
		batch.Queue(`SELECT pg_notify($1, $2)`, ControlChannel, p)
	}
	if err := b.conn.SendBatch(ctx, batch).Close(); err != nil {
		b.conn.Close(context.Background())
		b.conn = nil
		return fmt.Errorf("cluster: notify: %w", err)
	}
	return nil
}

func (b *pgBus) listen(ctx context.Context, subscribed func(), recv func(channel, payload string)) error {
	conn, err := b.n.connect("aspd-listen")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, ch := range []string{EventsChannel, ControlChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	subscribed()
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		recv(msg.Channel, msg.Payload)
	}
}

// close closes the sending connection; the notifier has stopped.
func (b *pgBus) close() {
	if b.conn != nil {
		b.conn.Close(context.Background())
		b.conn = nil
	}
}
