package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Several aspd nodes on one PostgreSQL database (docs/cluster.md): node
// registration and heartbeats, network-wide presence (an agent is online
// while any node holds a connection of it), dead-node expiry, the reads the
// cross-node wake-up needs and the advisory lock that elects one node per
// sweeper. The SQL is the common subset, so the same code runs (and is
// tested) on SQLite, where there is only ever one node.

// ExternalHolder is the node_connections holder of presence kept by
// something other than a node's connections (a healthy Chorus webhook
// endpoint): no node sweep expires it; its owner drops it.
const ExternalHolder = "external"

// ErrNodeExpired is returned by Heartbeat when the node's row is gone:
// another node declared it dead and expired its connections.
var ErrNodeExpired = errors.New("store: this node was declared dead by another node")

// RegisterNode records a node that just started.
func (s *Store) RegisterNode(ctx context.Context, id, addr string) error {
	now := s.nowMs()
	if _, err := s.write.ExecContext(ctx, `INSERT INTO nodes (id, addr, started_at, heartbeat_at) VALUES ($1, $2, $3, $3)
		ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, heartbeat_at = excluded.heartbeat_at`, id, addr, now); err != nil {
		return fmt.Errorf("store: register node: %w", err)
	}
	return nil
}

// Heartbeat marks the node alive now. ErrNodeExpired means the node was
// declared dead meanwhile: its presence rows are gone.
func (s *Store) Heartbeat(ctx context.Context, id string) error {
	res, err := s.write.ExecContext(ctx, `UPDATE nodes SET heartbeat_at = $2 WHERE id = $1`, id, s.nowMs())
	if err != nil {
		return fmt.Errorf("store: heartbeat: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return ErrNodeExpired
	}
	return nil
}

// RetireNode marks a node that is shutting down as dead at once, so the
// next dead-node sweep (on any node, or this node's successor) expires its
// connections without waiting for the expiry.
func (s *Store) RetireNode(ctx context.Context, id string) error {
	if _, err := s.write.ExecContext(ctx, `UPDATE nodes SET heartbeat_at = 0 WHERE id = $1`, id); err != nil {
		return fmt.Errorf("store: retire node: %w", err)
	}
	return nil
}

// NodeInfo is one registered node.
type NodeInfo struct {
	ID          string
	Addr        string
	StartedAt   int64
	HeartbeatAt int64
	Connections int // agents with a live connection on the node
}

// Nodes lists the registered nodes, oldest first.
func (s *Store) Nodes(ctx context.Context) ([]NodeInfo, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT n.id, n.addr, n.started_at, n.heartbeat_at,
		(SELECT COUNT(*) FROM node_connections c WHERE c.node_id = n.id)
		FROM nodes n ORDER BY n.started_at, n.id`)
	if err != nil {
		return nil, fmt.Errorf("store: nodes: %w", err)
	}
	defer rows.Close()
	var out []NodeInfo
	for rows.Next() {
		var n NodeInfo
		if err := rows.Scan(&n.ID, &n.Addr, &n.StartedAt, &n.HeartbeatAt, &n.Connections); err != nil {
			return nil, fmt.Errorf("store: nodes: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// lockPresence takes h's presence row lock for the rest of tx (creating the
// row if needed): every network presence decision about h is serialised
// on it, so two nodes losing h's last connections at the same moment cannot
// both see the other's row and leave h online forever.
func (s *Store) lockPresence(ctx context.Context, tx *sql.Tx, h string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO presence (handle, online, offline_since) VALUES ($1, $2, NULL)
		ON CONFLICT (handle) DO NOTHING`, h, false); err != nil {
		return fmt.Errorf("store: presence: %w", err)
	}
	var online bool
	if err := tx.QueryRowContext(ctx, `SELECT online FROM presence WHERE handle = $1`+s.d.forUpdate, h).Scan(&online); err != nil {
		return fmt.Errorf("store: presence: %w", err)
	}
	return nil
}

// ConnectOn records that node holds its first live connection of h. If h
// was offline on every node, it appends session.reconnected wherever h was
// marked disconnected (as MarkOnline); if another node already holds h, h
// was online and nothing is appended.
func (s *Store) ConnectOn(ctx context.Context, node, h string) ([]*Commit, error) {
	var commits []*Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.lockPresence(ctx, tx, h); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO node_connections (handle, node_id, since) VALUES ($1, $2, $3)
			ON CONFLICT (handle, node_id) DO NOTHING`, h, node, s.nowMs()); err != nil {
			return fmt.Errorf("store: node connections: %w", err)
		}
		var err error
		commits, err = s.markOnlineTx(ctx, tx, h)
		return err
	})
	return commits, err
}

// DisconnectOn records that node lost its last live connection of h. Only
// when no node holds h any more does it append session.disconnected and
// start the grace window (as MarkOffline).
func (s *Store) DisconnectOn(ctx context.Context, node, h string) ([]*Commit, error) {
	var commits []*Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		commits, err = s.dropConnection(ctx, tx, node, h)
		return err
	})
	return commits, err
}

// dropConnection removes node's row for h and, if it was h's last, marks h
// offline, all under h's presence lock.
func (s *Store) dropConnection(ctx context.Context, tx *sql.Tx, node, h string) ([]*Commit, error) {
	if err := s.lockPresence(ctx, tx, h); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM node_connections WHERE handle = $1 AND node_id = $2`, h, node); err != nil {
		return nil, fmt.Errorf("store: node connections: %w", err)
	}
	var others int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM node_connections WHERE handle = $1`, h).Scan(&others); err != nil {
		return nil, fmt.Errorf("store: node connections: %w", err)
	}
	if others > 0 {
		return nil, nil // still online through another node
	}
	var online bool
	if err := tx.QueryRowContext(ctx, `SELECT online FROM presence WHERE handle = $1`, h).Scan(&online); err != nil {
		return nil, fmt.Errorf("store: presence: %w", err)
	}
	if !online {
		return nil, nil // already offline: its grace window keeps running
	}
	return s.markOfflineTx(ctx, tx, h)
}

// NodeLockSQL takes a node's liveness lock ($1: the node id), a
// PostgreSQL session-level advisory lock each node holds on a dedicated
// connection for as long as it runs. When a node's process dies, however
// it dies, PostgreSQL closes its connection and frees the lock at once;
// ExpireNodes with byLock finds it free and expires the node without
// waiting for its heartbeat to age. The lock is always taken before the
// node's row is written.
const NodeLockSQL = `SELECT pg_advisory_lock(hashtextextended('aspd-node:' || $1, 0))`

// ExpireNodes expires every node other than self that is dead: its last
// heartbeat is before deadBefore (epoch ms), or, with byLock on
// PostgreSQL, its liveness lock (NodeLockSQL) is free because its
// connection is gone. Each agent a dead node held is dropped from it, and
// an agent no other node holds is marked offline (session.disconnected;
// its grace window starts now). It also marks offline agents recorded
// online that no node holds (left by a version without node rows). It
// returns the commits and the expired node ids.
func (s *Store) ExpireNodes(ctx context.Context, deadBefore int64, self string, byLock bool) ([]*Commit, []string, error) {
	dead, err := s.deadNodes(ctx, deadBefore, self, byLock && s.d.name == postgresDialect.name)
	if err != nil {
		return nil, nil, err
	}
	var all []*Commit
	for _, node := range dead {
		handles, err := queryStrings(ctx, s.read, `SELECT handle FROM node_connections WHERE node_id = $1 ORDER BY handle`, node)
		if err != nil {
			return all, nil, err
		}
		for _, h := range handles {
			commits, err := s.DisconnectOn(ctx, node, h)
			if err != nil {
				return all, nil, err
			}
			all = append(all, commits...)
		}
		// Only once all its rows are gone: a failure above retries next sweep.
		if _, err := s.write.ExecContext(ctx, `DELETE FROM nodes WHERE id = $1`, node); err != nil {
			return all, nil, fmt.Errorf("store: expire node: %w", err)
		}
	}
	orphans, err := queryStrings(ctx, s.read, `SELECT p.handle FROM presence p WHERE p.online = $1
		AND NOT EXISTS (SELECT 1 FROM node_connections c WHERE c.handle = p.handle) ORDER BY p.handle`, true)
	if err != nil {
		return all, dead, err
	}
	for _, h := range orphans {
		var commits []*Commit
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			// Re-check under the lock: a node may have just connected h.
			var err error
			commits, err = s.dropConnection(ctx, tx, "", h)
			return err
		})
		if err != nil {
			return all, dead, err
		}
		all = append(all, commits...)
	}
	return all, dead, nil
}

// deadNodes lists the dead nodes. The liveness locks are tried inside a
// transaction (pg_try_advisory_xact_lock), so a lock this finds free is
// released again when it commits.
func (s *Store) deadNodes(ctx context.Context, deadBefore int64, self string, byLock bool) ([]string, error) {
	// Rows of a node with no nodes row: written by a node that had been
	// expired and had not registered again yet when it died.
	const unregistered = ` UNION SELECT DISTINCT node_id FROM node_connections
		WHERE node_id <> $2 AND node_id <> '` + ExternalHolder + `' AND node_id NOT IN (SELECT id FROM nodes) ORDER BY 1`
	if !byLock {
		return queryStrings(ctx, s.read, `SELECT id FROM nodes WHERE heartbeat_at < $1 AND id <> $2`+unregistered, deadBefore, self)
	}
	tx, err := s.read.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: dead nodes: %w", err)
	}
	defer tx.Rollback()
	ids, err := queryStrings(ctx, tx, `SELECT id FROM nodes WHERE id <> $2
		AND (heartbeat_at < $1 OR pg_try_advisory_xact_lock(hashtextextended('aspd-node:' || id, 0)))`+unregistered, deadBefore, self)
	if err != nil {
		return nil, err
	}
	return ids, tx.Commit()
}

// SessionHead is a session's last sequence, for one of its participants.
type SessionHead struct {
	SessionID string
	Handle    string
	LastSeq   int64
}

// SessionHeads returns, for each of handles, the head of every session it
// takes part in (any status), for the cross-node catch-up: a node compares
// them with what it has announced to its connections.
func (s *Store) SessionHeads(ctx context.Context, handles []string) ([]SessionHead, error) {
	var out []SessionHead
	for start := 0; start < len(handles); start += 500 {
		chunk := handles[start:min(start+500, len(handles))]
		args := make([]any, len(chunk))
		for i, h := range chunk {
			args[i] = h
		}
		rows, err := s.read.QueryContext(ctx, `SELECT p.session_id, p.handle, s.last_seq FROM participants p
			JOIN sessions s ON s.id = p.session_id WHERE p.handle IN (`+placeholders(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("store: session heads: %w", err)
		}
		for rows.Next() {
			var h SessionHead
			if err := rows.Scan(&h.SessionID, &h.Handle, &h.LastSeq); err != nil {
				rows.Close()
				return nil, fmt.Errorf("store: session heads: %w", err)
			}
			out = append(out, h)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("store: session heads: %w", err)
		}
	}
	return out, nil
}

// Participants returns the handles taking part (any status) in each of the
// sessions: who may have to hear of a commit made on another node.
func (s *Store) Participants(ctx context.Context, sessionIDs []string) (map[string][]string, error) {
	out := map[string][]string{}
	for start := 0; start < len(sessionIDs); start += 500 {
		chunk := sessionIDs[start:min(start+500, len(sessionIDs))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.read.QueryContext(ctx, `SELECT session_id, handle FROM participants WHERE session_id IN (`+placeholders(1, len(chunk))+`)
			ORDER BY session_id, handle`, args...)
		if err != nil {
			return nil, fmt.Errorf("store: participants: %w", err)
		}
		for rows.Next() {
			var sid, h string
			if err := rows.Scan(&sid, &h); err != nil {
				rows.Close()
				return nil, fmt.Errorf("store: participants: %w", err)
			}
			out[sid] = append(out[sid], h)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("store: participants: %w", err)
		}
	}
	return out, nil
}

// EventRange is a run of one session's sequences: (After, Through].
type EventRange struct {
	SessionID string
	After     int64
	Through   int64
}

// EventsIn reads the events of several ranges in one statement per 100
// ranges, ordered by session and sequence.
func (s *Store) EventsIn(ctx context.Context, ranges []EventRange) ([]StoredEvent, error) {
	var out []StoredEvent
	for start := 0; start < len(ranges); start += 100 {
		chunk := ranges[start:min(start+100, len(ranges))]
		var b strings.Builder
		b.WriteString(selectEventColumns + ` WHERE `)
		args := make([]any, 0, len(chunk)*3)
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(" OR ")
			}
			fmt.Fprintf(&b, "(session_id = $%d AND sequence > $%d AND sequence <= $%d)", i*3+1, i*3+2, i*3+3)
			args = append(args, r.SessionID, r.After, r.Through)
		}
		b.WriteString(` ORDER BY session_id, sequence`)
		evs, err := s.queryEvents(ctx, b.String(), args...)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, nil
}

// placeholders returns "$from, ..., $(from+n-1)".
func placeholders(from, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d", from+i)
	}
	return b.String()
}

// WithSweepLock runs fn if this node wins the sweeper's lock, and reports
// whether it ran. On PostgreSQL the lock is the session-level advisory lock
// key, held on one pooled connection for the length of fn, so one node at a
// time runs each sweeper (nodes that lose skip this round). On SQLite there
// is one node (the store file is locked by its process), so fn always runs.
//
// hold bounds how long a holder that stops answering keeps the lock: the
// lock's connection is idle while fn runs, and PostgreSQL ends it after
// hold of idleness (idle_session_timeout), which frees the lock. A node
// frozen mid-sweep (SIGSTOP, a hung host) therefore blocks the sweep for
// the others for at most hold, instead of until it is killed. A sweep that
// runs longer than hold on a healthy node loses the lock the same way; the
// sweeps are transactions that re-check under row locks, so a second
// sweeper running meanwhile changes nothing twice. 0 means no bound.
func (s *Store) WithSweepLock(ctx context.Context, key int64, hold time.Duration, fn func(ctx context.Context) error) (bool, error) {
	if s.d.name != postgresDialect.name {
		return true, fn(ctx)
	}
	conn, err := s.write.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("store: sweep lock: %w", err)
	}
	defer conn.Close()
	dropConn := func() { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }
	if hold > 0 {
		if _, err := conn.ExecContext(ctx, `SELECT set_config('idle_session_timeout', $1, false)`,
			strconv.FormatInt(max(hold.Milliseconds(), 1), 10)); err != nil {
			dropConn()
			return false, fmt.Errorf("store: sweep lock: %w", err)
		}
	}
	var got bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
		dropConn()
		return false, fmt.Errorf("store: sweep lock: %w", err)
	}
	release := func() {
		// A fresh context: the unlock must run even if ctx ran out, or the
		// pooled connection would keep the lock; and the connection goes
		// back to the pool without the timeout.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if got {
			if _, err := conn.ExecContext(uctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
				dropConn() // closing the connection releases the lock
				return
			}
		}
		if hold > 0 {
			if _, err := conn.ExecContext(uctx, `SET idle_session_timeout = 0`); err != nil {
				dropConn()
			}
		}
	}
	defer release()
	if !got {
		return false, nil
	}
	return true, fn(ctx)
}
