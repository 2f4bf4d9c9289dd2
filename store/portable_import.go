package store

// Import: a portable file (portable.go) into a fresh store, in one
// transaction.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aspd/aspd/protocol"
)

// ErrStoreNotEmpty is returned by Import when the target store already has
// agents or sessions.
var ErrStoreNotEmpty = errors.New("store: import: the target store is not empty (it has agents or sessions); import only into a fresh database")

// maxPortableLine bounds one line of a portable file (an event body is at
// most the server's body limit, far below this).
const maxPortableLine = 64 << 20

// importKind says how one record kind is read and inserted: decode checks a
// record line and returns the row to insert, in cols order.
type importKind struct {
	table  string
	cols   []string
	decode func(b []byte) ([]any, error)
}

// decodeAs decodes a line strictly into a record of type R, then row turns
// the record into its row (or refuses it).
func decodeAs[R any](row func(r *R) ([]any, error)) func(b []byte) ([]any, error) {
	return func(b []byte) ([]any, error) {
		var r R
		if err := strictDecode(b, &r); err != nil {
			return nil, err
		}
		return row(&r)
	}
}

// importKinds is the table of record kinds an import reads.
var importKinds = map[string]importKind{
	KindAgent: {"agents", []string{"handle", "owner", "inbound_policy", "token_hash", "roles", "created_at", "deleted_at"},
		decodeAs(func(r *agentRecord) ([]any, error) {
			if err := required("handle", r.Handle, "owner", r.Owner, "inbound_policy", r.InboundPolicy); err != nil {
				return nil, err
			}
			if r.Roles == nil {
				r.Roles = []string{}
			}
			roles, _ := json.Marshal(r.Roles)
			return []any{r.Handle, r.Owner, r.InboundPolicy, nullBytes(r.TokenHash), string(roles), r.CreatedAt, nullIntArg(r.DeletedAt)}, nil
		})},
	KindAllowlist: {"allowlist_entries", []string{"handle", "entry"},
		decodeAs(func(r *allowlistRecord) ([]any, error) {
			return []any{r.Handle, r.Entry}, required("handle", r.Handle, "entry", r.Entry)
		})},
	KindBlock: {"blocks", []string{"blocker", "blocked", "created_at"},
		decodeAs(func(r *blockRecord) ([]any, error) {
			return []any{r.Blocker, r.Blocked, r.CreatedAt}, required("blocker", r.Blocker, "blocked", r.Blocked)
		})},
	KindSession: {"sessions", []string{"id", "topic", "state", "created_by", "created_at", "ended_at", "last_seq", "send_and_end"},
		decodeAs(func(r *sessionRecord) ([]any, error) {
			if err := required("id", r.ID, "state", r.State, "created_by", r.CreatedBy); err != nil {
				return nil, err
			}
			if r.LastSeq < 0 {
				return nil, fmt.Errorf("negative last_seq %d", r.LastSeq)
			}
			return []any{r.ID, r.Topic, r.State, r.CreatedBy, r.CreatedAt, nullIntArg(r.EndedAt), r.LastSeq, r.SendAndEnd}, nil
		})},
	KindParticipant: {"participants", []string{"session_id", "handle", "status", "visible_through", "last_change_seq", "disconnected", "invited_at", "joined_at", "left_at"},
		decodeAs(func(r *participantRecord) ([]any, error) {
			return []any{r.SessionID, r.Handle, r.Status, r.VisibleThrough, r.LastChangeSeq, r.Disconnected,
					nullIntArg(r.InvitedAt), nullIntArg(r.JoinedAt), nullIntArg(r.LeftAt)},
				required("session_id", r.SessionID, "handle", r.Handle, "status", r.Status)
		})},
	KindEvent: {"events", []string{"session_id", "sequence", "event_id", "type", "subject", "audience", "created_at", "body"},
		decodeAs(decodeEvent)},
	KindMessageKey: {"message_keys", []string{"session_id", "sender", "key", "request_hash", "message_id", "sequence"},
		decodeAs(func(r *messageKeyRecord) ([]any, error) {
			return []any{r.SessionID, r.Sender, r.Key, r.RequestHash, r.MessageID, r.Sequence},
				required("session_id", r.SessionID, "sender", r.Sender, "key", r.Key, "message_id", r.MessageID)
		})},
	KindSessionKey: {"session_keys", []string{"creator", "key", "request_hash", "session_id", "sequence"},
		decodeAs(func(r *sessionKeyRecord) ([]any, error) {
			return []any{r.Creator, r.Key, r.RequestHash, r.SessionID, nullIntArg(r.Sequence)},
				required("creator", r.Creator, "key", r.Key, "session_id", r.SessionID)
		})},
	KindCursor: {"cursors", []string{"handle", "session_id", "seq"},
		decodeAs(func(r *cursorRecord) ([]any, error) {
			return []any{r.Handle, r.SessionID, r.Seq}, required("handle", r.Handle, "session_id", r.SessionID)
		})},
	KindPresence: {"presence", []string{"handle", "online", "offline_since"},
		decodeAs(func(r *presenceRecord) ([]any, error) {
			return []any{r.Handle, r.Online, nullIntArg(r.OfflineSince)}, required("handle", r.Handle)
		})},
	KindBindingMoment: {"binding_moments", []string{"moment_id", "session_id", "sequence", "emitter", "resolver", "option_count", "free_text", "dialogue",
		"envelope", "created_at", "outcome", "option_idx", "answer", "objection", "resolved_by", "resolution_id", "resolution_seq", "resolved_at"},
		decodeAs(func(r *bindingMomentRecord) ([]any, error) {
			return []any{r.MomentID, r.SessionID, r.Sequence, r.Emitter, nullStrArg(r.Resolver), r.OptionCount, r.FreeText, r.Dialogue,
					r.Envelope, r.CreatedAt, nullStrArg(r.Outcome), nullIntArg(r.OptionIdx), nullStrArg(r.Answer), nullStrArg(r.Objection),
					nullStrArg(r.ResolvedBy), nullStrArg(r.ResolutionID),
					nullIntArg(r.ResolutionSeq), nullIntArg(r.ResolvedAt)},
				required("moment_id", r.MomentID, "session_id", r.SessionID, "emitter", r.Emitter, "envelope", r.Envelope)
		})},
	KindOperatorToken: {"operator_tokens", []string{"name", "scope", "token_hash", "created_at", "rotated_at", "last_used_at"},
		decodeAs(func(r *operatorTokenRecord) ([]any, error) {
			if err := required("name", r.Name, "scope", r.Scope); err != nil {
				return nil, err
			}
			if r.Scope != protocol.ScopeRead && r.Scope != protocol.ScopeAdmin {
				return nil, fmt.Errorf("operator token %s: scope %q is not read or admin", r.Name, r.Scope)
			}
			if len(r.TokenHash) != 32 {
				return nil, fmt.Errorf("operator token %s: token_hash is not a SHA-256", r.Name)
			}
			return []any{r.Name, r.Scope, r.TokenHash, r.CreatedAt, nullIntArg(r.RotatedAt), nullIntArg(r.LastUsedAt)}, nil
		})},
	// Audit rows get fresh ids, in file order (portable.go).
	KindAudit: {"audit_log", []string{"at", "actor", "action", "target", "request_id", "detail"},
		decodeAs(func(r *auditRecord) ([]any, error) {
			if err := required("actor", r.Actor, "action", r.Action); err != nil {
				return nil, err
			}
			var obj map[string]any
			if err := json.Unmarshal(r.Detail, &obj); err != nil || obj == nil {
				return nil, fmt.Errorf("audit %s %s: detail is not a JSON object", r.Action, r.Target)
			}
			return []any{r.At, r.Actor, r.Action, r.Target, r.RequestID, string(r.Detail)}, nil
		})},
}

// decodeEvent checks an event record: its body is what clients receive, so
// it must be the event the columns describe.
func decodeEvent(r *eventRecord) ([]any, error) {
	if err := required("session_id", r.SessionID, "event_id", r.EventID, "type", r.Type, "body", r.Body); err != nil {
		return nil, err
	}
	var env struct {
		Type      string `json:"type"`
		SessionID string `json:"session_id"`
		EventID   string `json:"event_id"`
		Sequence  int64  `json:"sequence"`
	}
	if err := json.Unmarshal([]byte(r.Body), &env); err != nil {
		return nil, fmt.Errorf("%s/%d: body is not an event: %w", r.SessionID, r.Sequence, err)
	}
	if env.Type != r.Type || env.SessionID != r.SessionID || env.EventID != r.EventID || env.Sequence != r.Sequence {
		return nil, fmt.Errorf("%s/%d: body (%s %s/%d %s) does not match the record", r.SessionID, r.Sequence, env.Type, env.SessionID, env.Sequence, env.EventID)
	}
	for _, a := range r.Audience {
		if a == "" || strings.Contains(a, ",") {
			return nil, fmt.Errorf("%s/%d: invalid audience handle %q", r.SessionID, r.Sequence, a)
		}
	}
	return []any{r.SessionID, r.Sequence, r.EventID, r.Type, r.Subject, encodeAudience(r.Audience), r.CreatedAt, r.Body}, nil
}

// importBatch accumulates rows of one kind for a multi-row INSERT.
type importBatch struct {
	kind  string
	rows  [][]any
	bytes int
}

const (
	importBatchRows  = 100
	importBatchBytes = 4 << 20
)

func (b *importBatch) flush(ctx context.Context, tx *sql.Tx) error {
	if len(b.rows) == 0 {
		return nil
	}
	t := importKinds[b.kind]
	var q strings.Builder
	fmt.Fprintf(&q, "INSERT INTO %s (%s) VALUES ", t.table, strings.Join(t.cols, ", "))
	args := make([]any, 0, len(b.rows)*len(t.cols))
	for i, row := range b.rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('(')
		for j := range row {
			if j > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "$%d", len(args)+j+1)
		}
		q.WriteByte(')')
		args = append(args, row...)
	}
	if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("store: import %s: %w", b.kind, err)
	}
	b.rows, b.bytes = b.rows[:0], 0
	return nil
}

// Import loads a portable file into this store. The store must be fresh (no
// agents, no sessions): anything else is ErrStoreNotEmpty. Everything is
// written in one transaction, in batches, so an import either loads the
// whole file or writes nothing. Before committing it checks that the file
// was complete (its end record's counts) and that every session's events
// are exactly 1..last_seq.
func (s *Store) Import(ctx context.Context, r io.Reader) (ImportStats, error) {
	stats := ImportStats{Counts: PortableCounts{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxPortableLine)
	line := 0
	next := func() ([]byte, bool) {
		for sc.Scan() {
			line++
			if b := sc.Bytes(); len(bytes.TrimSpace(b)) > 0 {
				return b, true
			}
		}
		return nil, false
	}

	// The header is checked before the database is touched.
	first, ok := next()
	if !ok {
		if err := sc.Err(); err != nil {
			return stats, fmt.Errorf("store: import: reading: %w", err)
		}
		return stats, errors.New("store: import: empty input (no header line)")
	}
	var h portableHeader
	if err := strictDecode(first, &h); err != nil {
		return stats, fmt.Errorf("store: import: line %d: not an aspd-network header: %w", line, err)
	}
	if h.Format != PortableFormat {
		return stats, fmt.Errorf("store: import: line %d: format %q, want %q", line, h.Format, PortableFormat)
	}
	if h.Version != PortableVersion {
		return stats, fmt.Errorf("store: import: line %d: format version %d is not supported (this aspd reads version %d)", line, h.Version, PortableVersion)
	}
	if h.Dialect != postgresDialect.name && h.Dialect != sqliteDialect.name {
		return stats, fmt.Errorf("store: import: line %d: unknown dialect %q", line, h.Dialect)
	}

	// One transaction, without the bound of request transactions: a large
	// or piped import takes as long as its input takes to arrive.
	err := s.runTx(ctx, 0, func(tx *sql.Tx) error {
		for _, table := range []string{"agents", "sessions"} {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM `+table+` LIMIT 1`).Scan(&one)
			if err == nil {
				return ErrStoreNotEmpty
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("store: import: %w", err)
			}
		}
		rank := map[string]int{}
		for i, k := range portableKinds {
			rank[k] = i
		}
		batch := &importBatch{}
		lastRank := -1
		var end *endRecord
		for {
			b, ok := next()
			if !ok {
				break
			}
			if end != nil {
				return fmt.Errorf("store: import: line %d: data after the end record", line)
			}
			var k struct {
				Kind string `json:"kind"`
			}
			if err := json.Unmarshal(b, &k); err != nil {
				return fmt.Errorf("store: import: line %d: %w", line, err)
			}
			if k.Kind == KindEnd {
				end = &endRecord{}
				if err := strictDecode(b, end); err != nil {
					return fmt.Errorf("store: import: line %d: %w", line, err)
				}
				continue
			}
			r, ok := rank[k.Kind]
			if !ok {
				return fmt.Errorf("store: import: line %d: unknown record kind %q", line, k.Kind)
			}
			if r < lastRank {
				return fmt.Errorf("store: import: line %d: %s record after %s records (records must be grouped in the order %s)",
					line, k.Kind, portableKinds[lastRank], strings.Join(portableKinds, ", "))
			}
			lastRank = r
			if k.Kind != batch.kind {
				if err := batch.flush(ctx, tx); err != nil {
					return err
				}
				batch.kind = k.Kind
			}
			row, size, err := decodeRecord(k.Kind, b)
			if err != nil {
				return fmt.Errorf("store: import: line %d: %s: %w", line, k.Kind, err)
			}
			batch.rows = append(batch.rows, row)
			batch.bytes += size
			stats.Counts[k.Kind]++
			if k.Kind == KindAgent && row[6] == nil && row[3] == nil { // live (deleted_at), no token_hash
				stats.AgentsWithoutToken++
			}
			if len(batch.rows) >= importBatchRows || batch.bytes >= importBatchBytes {
				if err := batch.flush(ctx, tx); err != nil {
					return err
				}
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("store: import: reading line %d: %w", line+1, err)
		}
		if err := batch.flush(ctx, tx); err != nil {
			return err
		}
		if err := checkGaps(ctx, tx); err != nil {
			return err
		}
		if end == nil {
			return errors.New("store: import: the file is truncated (no end record)")
		}
		for kind, n := range end.Counts {
			if _, ok := rank[kind]; !ok {
				return fmt.Errorf("store: import: end record counts an unknown kind %q", kind)
			}
			if stats.Counts[kind] != n {
				return fmt.Errorf("store: import: the file is incomplete: the end record counts %d %s records, the file has %d", n, kind, stats.Counts[kind])
			}
		}
		for _, kind := range portableKinds {
			if _, ok := end.Counts[kind]; !ok && stats.Counts[kind] > 0 {
				return fmt.Errorf("store: import: the end record has no count of %s records", kind)
			}
		}
		return nil
	})
	if err != nil {
		return ImportStats{Counts: PortableCounts{}}, err
	}
	// The imported events are indexed for search as a backfill indexes
	// events older than search (search.go), the import's rows having left
	// search_text NULL.
	if _, err := s.backfillSearch(ctx); err != nil {
		return stats, fmt.Errorf("store: import: the network is imported, but indexing it for search failed (aspd retries when it next opens the store): %w", err)
	}
	return stats, nil
}

// checkGaps fails unless every session's events are exactly 1..last_seq.
func checkGaps(ctx context.Context, tx *sql.Tx) error {
	var id string
	var lastSeq, n, lo, hi int64
	err := tx.QueryRowContext(ctx, `SELECT s.id, s.last_seq, COUNT(e.sequence), COALESCE(MIN(e.sequence), 0), COALESCE(MAX(e.sequence), 0)
		FROM sessions s LEFT JOIN events e ON e.session_id = s.id
		GROUP BY s.id, s.last_seq
		HAVING COUNT(e.sequence) <> s.last_seq OR COALESCE(MIN(e.sequence), 1) <> 1 OR COALESCE(MAX(e.sequence), 0) <> s.last_seq
		ORDER BY s.id LIMIT 1`).Scan(&id, &lastSeq, &n, &lo, &hi)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: import: gap check: %w", err)
	}
	return fmt.Errorf("store: import: gap check failed: session %s has last_seq %d but %d events (sequences %d..%d); the file is truncated or corrupted",
		id, lastSeq, n, lo, hi)
}

func nullIntArg(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func required(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return fmt.Errorf("%s is empty", fields[i])
		}
	}
	return nil
}

// decodeRecord decodes one record line into the row to insert (in
// importKinds column order) and its approximate size.
func decodeRecord(kind string, b []byte) ([]any, int, error) {
	k, ok := importKinds[kind]
	if !ok {
		return nil, 0, fmt.Errorf("unknown record kind %q", kind)
	}
	row, err := k.decode(b)
	if err != nil {
		return nil, 0, err
	}
	return row, len(b), nil
}
