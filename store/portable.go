package store

// The portable network format moves a whole network (agents, trust settings,
// sessions, the event log, idempotency keys, delivery cursors and presence)
// between stores, whatever their dialect: `aspd export` writes it, `aspd
// import` reads it.
//
// It is JSON Lines. The first line is a header:
//
//	{"format":"aspd-network","version":1,"exported_at":<epoch ms>,"dialect":"sqlite"}
//
// then one line per record, {"kind": ..., <columns>}, grouped by kind in this
// order (parents before children): agent, allowlist, block, session,
// participant, event, message_key, session_key, cursor, presence; and last an
// end record {"kind":"end","counts":{<kind>: <records>, ...}} that lets an
// import tell a complete file from a truncated one.
//
// An event's body is the stored wire JSON carried as a JSON string, so its
// bytes round-trip exactly. Token hashes are written (base64) only when the
// export asks for them; without them the imported agents have no token and
// each needs `aspctl agent rotate-token`.

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
	"unicode/utf8"
)

// Portable format identifiers.
const (
	PortableFormat  = "aspd-network"
	PortableVersion = 1
)

// Record kinds of the portable format, in file order.
const (
	KindAgent       = "agent"
	KindAllowlist   = "allowlist"
	KindBlock       = "block"
	KindSession     = "session"
	KindParticipant = "participant"
	KindEvent       = "event"
	KindMessageKey  = "message_key"
	KindSessionKey  = "session_key"
	KindCursor      = "cursor"
	KindPresence    = "presence"
	KindEnd         = "end"
)

// portableKinds lists the data kinds in the order they must appear.
var portableKinds = []string{KindAgent, KindAllowlist, KindBlock, KindSession, KindParticipant, KindEvent,
	KindMessageKey, KindSessionKey, KindCursor, KindPresence}

// PortableCounts counts the records of each kind.
type PortableCounts map[string]int64

// String renders the counts in file order, e.g. "agent=3 allowlist=2 ...".
func (c PortableCounts) String() string {
	parts := make([]string, 0, len(portableKinds))
	for _, k := range portableKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// ExportOptions tunes an export.
type ExportOptions struct {
	// IncludeTokenHashes writes each agent's token hash (SHA-256 of its
	// bearer token), so existing tokens keep working after an import. The
	// file is then as sensitive as the database itself.
	IncludeTokenHashes bool
}

// ExportStats reports what an export wrote.
type ExportStats struct {
	Counts      PortableCounts
	TokenHashes int64 // agents whose token hash was written
}

// ImportStats reports what an import wrote.
type ImportStats struct {
	Counts PortableCounts
	// AgentsWithoutToken counts live (not deleted) agents that have no
	// token after the import; each needs a new one (aspctl agent rotate-token).
	AgentsWithoutToken int64
}

type portableHeader struct {
	Format     string `json:"format"`
	Version    int    `json:"version"`
	ExportedAt int64  `json:"exported_at"`
	Dialect    string `json:"dialect"`
}

type agentRecord struct {
	Kind          string   `json:"kind"`
	Handle        string   `json:"handle"`
	Owner         string   `json:"owner"`
	InboundPolicy string   `json:"inbound_policy"`
	Roles         []string `json:"roles"`
	CreatedAt     int64    `json:"created_at"`
	DeletedAt     *int64   `json:"deleted_at"`
	TokenHash     []byte   `json:"token_hash,omitempty"` // base64 (encoding/json's []byte encoding)
}

type allowlistRecord struct {
	Kind   string `json:"kind"`
	Handle string `json:"handle"`
	Entry  string `json:"entry"`
}

type blockRecord struct {
	Kind      string `json:"kind"`
	Blocker   string `json:"blocker"`
	Blocked   string `json:"blocked"`
	CreatedAt int64  `json:"created_at"`
}

type sessionRecord struct {
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Topic      string `json:"topic"`
	State      string `json:"state"`
	CreatedBy  string `json:"created_by"`
	CreatedAt  int64  `json:"created_at"`
	EndedAt    *int64 `json:"ended_at"`
	LastSeq    int64  `json:"last_seq"`
	SendAndEnd bool   `json:"send_and_end"`
}

type participantRecord struct {
	Kind           string `json:"kind"`
	SessionID      string `json:"session_id"`
	Handle         string `json:"handle"`
	Status         string `json:"status"`
	VisibleThrough int64  `json:"visible_through"`
	LastChangeSeq  int64  `json:"last_change_seq"`
	Disconnected   bool   `json:"disconnected"`
	InvitedAt      *int64 `json:"invited_at"`
	JoinedAt       *int64 `json:"joined_at"`
	LeftAt         *int64 `json:"left_at"`
}

type eventRecord struct {
	Kind      string   `json:"kind"`
	SessionID string   `json:"session_id"`
	Sequence  int64    `json:"sequence"`
	EventID   string   `json:"event_id"`
	Type      string   `json:"type"`
	Subject   string   `json:"subject"`
	Audience  []string `json:"audience"`
	CreatedAt int64    `json:"created_at"`
	Body      string   `json:"body"` // the wire JSON, verbatim
}

type messageKeyRecord struct {
	Kind        string `json:"kind"`
	SessionID   string `json:"session_id"`
	Sender      string `json:"sender"`
	Key         string `json:"key"`
	RequestHash string `json:"request_hash"`
	MessageID   string `json:"message_id"`
	Sequence    int64  `json:"sequence"`
}

type sessionKeyRecord struct {
	Kind        string `json:"kind"`
	Creator     string `json:"creator"`
	Key         string `json:"key"`
	RequestHash string `json:"request_hash"`
	SessionID   string `json:"session_id"`
	Sequence    *int64 `json:"sequence"`
}

type cursorRecord struct {
	Kind      string `json:"kind"`
	Handle    string `json:"handle"`
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
}

type presenceRecord struct {
	Kind         string `json:"kind"`
	Handle       string `json:"handle"`
	Online       bool   `json:"online"`
	OfflineSince *int64 `json:"offline_since"`
}

type endRecord struct {
	Kind   string           `json:"kind"`
	Counts map[string]int64 `json:"counts"`
}

func nullInt(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	return &v.Int64
}

// exportPageSize bounds each export query; rows are written as they are read.
const exportPageSize = 500

// exportTable pages through one table in primary-key order (keyset
// pagination), calling scan for each row. scan returns the record to write
// and the row's key values, which start the next page.
type exportTable struct {
	kind  string
	query string // SELECT ... FROM t; the WHERE and ORDER BY are added
	keys  []string
	scan  func(rows *sql.Rows) (rec any, key []any, err error)
}

// Export writes the whole network to w in the portable format. It reads one
// consistent snapshot (a read-only transaction of the read pool) and pages
// through every table, so memory stays bounded however long the log is.
func (s *Store) Export(ctx context.Context, w io.Writer, opts ExportOptions) (ExportStats, error) {
	stats := ExportStats{Counts: PortableCounts{}}
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return stats, fmt.Errorf("store: export: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only

	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(portableHeader{Format: PortableFormat, Version: PortableVersion, ExportedAt: s.nowMs(), Dialect: s.d.name}); err != nil {
		return stats, fmt.Errorf("store: export: %w", err)
	}
	for _, t := range s.exportTables(opts, &stats) {
		if err := exportPages(ctx, tx, t, func(rec any) error {
			stats.Counts[t.kind]++
			return enc.Encode(rec)
		}); err != nil {
			return stats, err
		}
	}
	end := endRecord{Kind: KindEnd, Counts: map[string]int64{}}
	for _, k := range portableKinds {
		end.Counts[k] = stats.Counts[k]
	}
	if err := enc.Encode(end); err != nil {
		return stats, fmt.Errorf("store: export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return stats, fmt.Errorf("store: export: %w", err)
	}
	return stats, nil
}

func exportPages(ctx context.Context, tx *sql.Tx, t exportTable, write func(rec any) error) error {
	order := strings.Join(t.keys, ", ")
	var last []any
	for {
		q := t.query
		args := last
		if last != nil {
			ph := make([]string, len(last))
			for i := range last {
				ph[i] = fmt.Sprintf("$%d", i+1)
			}
			q += " WHERE (" + order + ") > (" + strings.Join(ph, ", ") + ")"
		}
		q += fmt.Sprintf(" ORDER BY %s LIMIT %d", order, exportPageSize)
		n, err := func() (int, error) {
			rows, err := tx.QueryContext(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				rec, key, err := t.scan(rows)
				if err != nil {
					return n, err
				}
				if err := write(rec); err != nil {
					return n, err
				}
				last = key
				n++
			}
			return n, rows.Err()
		}()
		if err != nil {
			return fmt.Errorf("store: export %s: %w", t.kind, err)
		}
		if n < exportPageSize {
			return nil
		}
	}
}

func (s *Store) exportTables(opts ExportOptions, stats *ExportStats) []exportTable {
	return []exportTable{
		{kind: KindAgent, keys: []string{"handle"},
			query: `SELECT handle, owner, inbound_policy, token_hash, roles, created_at, deleted_at FROM agents`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := agentRecord{Kind: KindAgent}
				var hash []byte
				var roles string
				var deleted sql.NullInt64
				if err := rows.Scan(&r.Handle, &r.Owner, &r.InboundPolicy, &hash, &roles, &r.CreatedAt, &deleted); err != nil {
					return nil, nil, err
				}
				if err := json.Unmarshal([]byte(roles), &r.Roles); err != nil {
					return nil, nil, fmt.Errorf("agent %s: roles %q are not a JSON array of strings: %w", r.Handle, roles, err)
				}
				if r.Roles == nil {
					r.Roles = []string{}
				}
				r.DeletedAt = nullInt(deleted)
				if opts.IncludeTokenHashes && len(hash) > 0 {
					r.TokenHash = hash
					stats.TokenHashes++
				}
				return r, []any{r.Handle}, nil
			}},
		{kind: KindAllowlist, keys: []string{"handle", "entry"},
			query: `SELECT handle, entry FROM allowlist_entries`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := allowlistRecord{Kind: KindAllowlist}
				err := rows.Scan(&r.Handle, &r.Entry)
				return r, []any{r.Handle, r.Entry}, err
			}},
		{kind: KindBlock, keys: []string{"blocker", "blocked"},
			query: `SELECT blocker, blocked, created_at FROM blocks`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := blockRecord{Kind: KindBlock}
				err := rows.Scan(&r.Blocker, &r.Blocked, &r.CreatedAt)
				return r, []any{r.Blocker, r.Blocked}, err
			}},
		{kind: KindSession, keys: []string{"id"},
			query: `SELECT id, topic, state, created_by, created_at, ended_at, last_seq, send_and_end FROM sessions`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := sessionRecord{Kind: KindSession}
				var ended sql.NullInt64
				err := rows.Scan(&r.ID, &r.Topic, &r.State, &r.CreatedBy, &r.CreatedAt, &ended, &r.LastSeq, &r.SendAndEnd)
				r.EndedAt = nullInt(ended)
				return r, []any{r.ID}, err
			}},
		{kind: KindParticipant, keys: []string{"session_id", "handle"},
			query: `SELECT session_id, handle, status, visible_through, last_change_seq, disconnected, invited_at, joined_at, left_at FROM participants`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := participantRecord{Kind: KindParticipant}
				var inv, joined, left sql.NullInt64
				err := rows.Scan(&r.SessionID, &r.Handle, &r.Status, &r.VisibleThrough, &r.LastChangeSeq, &r.Disconnected, &inv, &joined, &left)
				r.InvitedAt, r.JoinedAt, r.LeftAt = nullInt(inv), nullInt(joined), nullInt(left)
				return r, []any{r.SessionID, r.Handle}, err
			}},
		{kind: KindEvent, keys: []string{"session_id", "sequence"},
			query: `SELECT session_id, sequence, event_id, type, subject, audience, created_at, body FROM events`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := eventRecord{Kind: KindEvent}
				var audience string
				if err := rows.Scan(&r.SessionID, &r.Sequence, &r.EventID, &r.Type, &r.Subject, &audience, &r.CreatedAt, &r.Body); err != nil {
					return nil, nil, err
				}
				// encoding/json would silently replace invalid UTF-8, and the
				// body must round-trip byte for byte.
				if !utf8.ValidString(r.Body) {
					return nil, nil, fmt.Errorf("event %s/%d: body is not valid UTF-8", r.SessionID, r.Sequence)
				}
				r.Audience = decodeAudience(audience)
				if r.Audience == nil {
					r.Audience = []string{}
				}
				return r, []any{r.SessionID, r.Sequence}, nil
			}},
		{kind: KindMessageKey, keys: []string{"session_id", "sender", "key"},
			query: `SELECT session_id, sender, key, request_hash, message_id, sequence FROM message_keys`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := messageKeyRecord{Kind: KindMessageKey}
				err := rows.Scan(&r.SessionID, &r.Sender, &r.Key, &r.RequestHash, &r.MessageID, &r.Sequence)
				return r, []any{r.SessionID, r.Sender, r.Key}, err
			}},
		{kind: KindSessionKey, keys: []string{"creator", "key"},
			query: `SELECT creator, key, request_hash, session_id, sequence FROM session_keys`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := sessionKeyRecord{Kind: KindSessionKey}
				var seq sql.NullInt64
				err := rows.Scan(&r.Creator, &r.Key, &r.RequestHash, &r.SessionID, &seq)
				r.Sequence = nullInt(seq)
				return r, []any{r.Creator, r.Key}, err
			}},
		{kind: KindCursor, keys: []string{"handle", "session_id"},
			query: `SELECT handle, session_id, seq FROM cursors`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := cursorRecord{Kind: KindCursor}
				err := rows.Scan(&r.Handle, &r.SessionID, &r.Seq)
				return r, []any{r.Handle, r.SessionID}, err
			}},
		{kind: KindPresence, keys: []string{"handle"},
			query: `SELECT handle, online, offline_since FROM presence`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := presenceRecord{Kind: KindPresence}
				var since sql.NullInt64
				err := rows.Scan(&r.Handle, &r.Online, &since)
				r.OfflineSince = nullInt(since)
				return r, []any{r.Handle}, err
			}},
	}
}

// ErrStoreNotEmpty is returned by Import when the target store already has
// agents or sessions.
var ErrStoreNotEmpty = errors.New("store: import: the target store is not empty (it has agents or sessions); import only into a fresh database")

// maxPortableLine bounds one line of a portable file (an event body is at
// most the server's body limit, far below this).
const maxPortableLine = 64 << 20

// importTable describes how one kind is inserted.
type importTable struct {
	table string
	cols  []string
}

var importTables = map[string]importTable{
	KindAgent:       {"agents", []string{"handle", "owner", "inbound_policy", "token_hash", "roles", "created_at", "deleted_at"}},
	KindAllowlist:   {"allowlist_entries", []string{"handle", "entry"}},
	KindBlock:       {"blocks", []string{"blocker", "blocked", "created_at"}},
	KindSession:     {"sessions", []string{"id", "topic", "state", "created_by", "created_at", "ended_at", "last_seq", "send_and_end"}},
	KindParticipant: {"participants", []string{"session_id", "handle", "status", "visible_through", "last_change_seq", "disconnected", "invited_at", "joined_at", "left_at"}},
	KindEvent:       {"events", []string{"session_id", "sequence", "event_id", "type", "subject", "audience", "created_at", "body"}},
	KindMessageKey:  {"message_keys", []string{"session_id", "sender", "key", "request_hash", "message_id", "sequence"}},
	KindSessionKey:  {"session_keys", []string{"creator", "key", "request_hash", "session_id", "sequence"}},
	KindCursor:      {"cursors", []string{"handle", "session_id", "seq"}},
	KindPresence:    {"presence", []string{"handle", "online", "offline_since"}},
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
	t := importTables[b.kind]
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

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
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
// importTables column order) and its approximate size.
func decodeRecord(kind string, b []byte) ([]any, int, error) {
	switch kind {
	case KindAgent:
		var r agentRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("handle", r.Handle, "owner", r.Owner, "inbound_policy", r.InboundPolicy); err != nil {
			return nil, 0, err
		}
		if r.Roles == nil {
			r.Roles = []string{}
		}
		roles, _ := json.Marshal(r.Roles)
		row := []any{r.Handle, r.Owner, r.InboundPolicy, nullBytes(r.TokenHash), string(roles), r.CreatedAt, nullIntArg(r.DeletedAt)}
		return row, len(b), nil
	case KindAllowlist:
		var r allowlistRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("handle", r.Handle, "entry", r.Entry); err != nil {
			return nil, 0, err
		}
		return []any{r.Handle, r.Entry}, len(b), nil
	case KindBlock:
		var r blockRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("blocker", r.Blocker, "blocked", r.Blocked); err != nil {
			return nil, 0, err
		}
		return []any{r.Blocker, r.Blocked, r.CreatedAt}, len(b), nil
	case KindSession:
		var r sessionRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("id", r.ID, "state", r.State, "created_by", r.CreatedBy); err != nil {
			return nil, 0, err
		}
		if r.LastSeq < 0 {
			return nil, 0, fmt.Errorf("negative last_seq %d", r.LastSeq)
		}
		return []any{r.ID, r.Topic, r.State, r.CreatedBy, r.CreatedAt, nullIntArg(r.EndedAt), r.LastSeq, r.SendAndEnd}, len(b), nil
	case KindParticipant:
		var r participantRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("session_id", r.SessionID, "handle", r.Handle, "status", r.Status); err != nil {
			return nil, 0, err
		}
		return []any{r.SessionID, r.Handle, r.Status, r.VisibleThrough, r.LastChangeSeq, r.Disconnected,
			nullIntArg(r.InvitedAt), nullIntArg(r.JoinedAt), nullIntArg(r.LeftAt)}, len(b), nil
	case KindEvent:
		var r eventRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("session_id", r.SessionID, "event_id", r.EventID, "type", r.Type, "body", r.Body); err != nil {
			return nil, 0, err
		}
		// The body is what clients receive: it must be the event the columns describe.
		var env struct {
			Type      string `json:"type"`
			SessionID string `json:"session_id"`
			EventID   string `json:"event_id"`
			Sequence  int64  `json:"sequence"`
		}
		if err := json.Unmarshal([]byte(r.Body), &env); err != nil {
			return nil, 0, fmt.Errorf("%s/%d: body is not an event: %w", r.SessionID, r.Sequence, err)
		}
		if env.Type != r.Type || env.SessionID != r.SessionID || env.EventID != r.EventID || env.Sequence != r.Sequence {
			return nil, 0, fmt.Errorf("%s/%d: body (%s %s/%d %s) does not match the record", r.SessionID, r.Sequence, env.Type, env.SessionID, env.Sequence, env.EventID)
		}
		for _, a := range r.Audience {
			if a == "" || strings.Contains(a, ",") {
				return nil, 0, fmt.Errorf("%s/%d: invalid audience handle %q", r.SessionID, r.Sequence, a)
			}
		}
		return []any{r.SessionID, r.Sequence, r.EventID, r.Type, r.Subject, encodeAudience(r.Audience), r.CreatedAt, r.Body}, len(b), nil
	case KindMessageKey:
		var r messageKeyRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("session_id", r.SessionID, "sender", r.Sender, "key", r.Key, "message_id", r.MessageID); err != nil {
			return nil, 0, err
		}
		return []any{r.SessionID, r.Sender, r.Key, r.RequestHash, r.MessageID, r.Sequence}, len(b), nil
	case KindSessionKey:
		var r sessionKeyRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("creator", r.Creator, "key", r.Key, "session_id", r.SessionID); err != nil {
			return nil, 0, err
		}
		return []any{r.Creator, r.Key, r.RequestHash, r.SessionID, nullIntArg(r.Sequence)}, len(b), nil
	case KindCursor:
		var r cursorRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("handle", r.Handle, "session_id", r.SessionID); err != nil {
			return nil, 0, err
		}
		return []any{r.Handle, r.SessionID, r.Seq}, len(b), nil
	case KindPresence:
		var r presenceRecord
		if err := strictDecode(b, &r); err != nil {
			return nil, 0, err
		}
		if err := required("handle", r.Handle); err != nil {
			return nil, 0, err
		}
		return []any{r.Handle, r.Online, nullIntArg(r.OfflineSince)}, len(b), nil
	}
	return nil, 0, fmt.Errorf("unknown record kind %q", kind)
}
