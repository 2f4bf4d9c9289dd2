package store

// Export: the network, page by page, in the portable format (portable.go).

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

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
	tables := []exportTable{
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
			query: selectEventColumns,
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
		{kind: KindBindingMoment, keys: []string{"moment_id"},
			query: `SELECT moment_id, session_id, sequence, emitter, resolver, option_count, free_text, dialogue, envelope, created_at,
				outcome, option_idx, answer, objection, resolved_by, resolution_id, resolution_seq, resolved_at FROM binding_moments`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := bindingMomentRecord{Kind: KindBindingMoment}
				var resolver, outcome, answer, objection, resolvedBy, resolutionID sql.NullString
				var idx, resSeq, resAt sql.NullInt64
				err := rows.Scan(&r.MomentID, &r.SessionID, &r.Sequence, &r.Emitter, &resolver, &r.OptionCount, &r.FreeText, &r.Dialogue,
					&r.Envelope, &r.CreatedAt, &outcome, &idx, &answer, &objection, &resolvedBy, &resolutionID, &resSeq, &resAt)
				r.Resolver, r.Outcome, r.Answer, r.Objection = nullStr(resolver), nullStr(outcome), nullStr(answer), nullStr(objection)
				r.ResolvedBy, r.ResolutionID = nullStr(resolvedBy), nullStr(resolutionID)
				r.OptionIdx, r.ResolutionSeq, r.ResolvedAt = nullInt(idx), nullInt(resSeq), nullInt(resAt)
				return r, []any{r.MomentID}, err
			}},
		{kind: KindAudit, keys: []string{"id"},
			query: `SELECT id, at, actor, action, target, request_id, detail FROM audit_log`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := auditRecord{Kind: KindAudit}
				var id int64
				var detail string
				err := rows.Scan(&id, &r.At, &r.Actor, &r.Action, &r.Target, &r.RequestID, &detail)
				r.Detail = json.RawMessage(detail)
				return r, []any{id}, err
			}},
	}
	if opts.IncludeTokenHashes {
		// A named operator token is its hash: without it, nothing to write.
		tables = slices.Insert(tables, len(tables)-1, exportTable{kind: KindOperatorToken, keys: []string{"name"},
			query: `SELECT name, scope, token_hash, created_at, rotated_at, last_used_at FROM operator_tokens`,
			scan: func(rows *sql.Rows) (any, []any, error) {
				r := operatorTokenRecord{Kind: KindOperatorToken}
				var rotated, used sql.NullInt64
				err := rows.Scan(&r.Name, &r.Scope, &r.TokenHash, &r.CreatedAt, &rotated, &used)
				r.RotatedAt, r.LastUsedAt = nullInt(rotated), nullInt(used)
				return r, []any{r.Name}, err
			}})
	}
	return tables
}
