package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/aspd/aspd/protocol"
)

// Redaction (docs/api.md "Redacted events", docs/operators.md "Redaction
// and retention"), as Matrix does it: the event row stays, with its
// sequence, event id, type, sender and created_at, so the log stays
// gap-free and every cursor stays valid; its content is replaced by a
// tombstone in the stored body itself. Every read path serves the stored
// body (events API, replay, MCP, search hits, exports, Chorus attempts), so
// rewriting it is what removes the content from all of them at once; the
// only copies outside the database are the hub's in-memory rings, which the
// application layer replaces after the commit.
//
// Only session.message carries user content. A send-and-end message is
// also copied into the session.invited events appended with it
// (payload.initial_message): those copies are replaced by the same
// tombstone in the same transaction.

// Redact replaces the content of event seq of session sessionID with a
// tombstone recording who (by), when and why (reason), and clears its
// search index input, in one transaction. It returns the rewritten events
// (the message first, then any session.invited that carried a copy of it)
// and whether this call changed anything: redacting an event that is
// redacted already changes nothing and returns it as it is (the first
// redaction's by, at and reason stand). An event that does not exist is
// ErrNotFound; one that is not a session.message is ErrNotRedactable.
func (s *Store) Redact(ctx context.Context, sessionID string, seq int64, by, reason string) (evs []StoredEvent, changed bool, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		evs, changed = nil, false
		rows, err := queryEventsOn(ctx, tx, selectEventColumns+` WHERE session_id = $1 AND sequence = $2`+s.d.forUpdate, sessionID, seq)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return ErrNotFound
		}
		ev := rows[0]
		var env protocol.RedactedEvent
		if err := json.Unmarshal(ev.Body, &env); err != nil {
			return fmt.Errorf("store: redact: decode event: %w", err)
		}
		if env.Redacted != nil {
			evs = rows
			return nil
		}
		if ev.Type != protocol.EventMessage {
			return ErrNotRedactable
		}
		var m protocol.Message
		if err := json.Unmarshal(env.Payload, &m); err != nil {
			return fmt.Errorf("store: redact: decode message: %w", err)
		}
		red := &protocol.Redaction{At: s.nowMs(), By: by, Reason: reason}
		tomb := tombstone(m)
		if ev.Body, err = redactedBody(env, tomb, red); err != nil {
			return err
		}
		if err := s.rewriteBody(ctx, tx, ev); err != nil {
			return err
		}
		evs = append(evs, ev)
		// The copies: session.invited events whose initial_message is this
		// message. The LIKE narrows the scan; the decode decides.
		invited, err := queryEventsOn(ctx, tx, selectEventColumns+` WHERE session_id = $1 AND type = $2 AND body LIKE $3 ESCAPE '!' ORDER BY sequence`,
			sessionID, protocol.EventInvited, "%"+likeEscape(m.ID)+"%")
		if err != nil {
			return err
		}
		for _, inv := range invited {
			var ienv protocol.RedactedEvent
			var p protocol.InvitedPayload
			if json.Unmarshal(inv.Body, &ienv) != nil || json.Unmarshal(ienv.Payload, &p) != nil ||
				p.InitialMessage == nil || p.InitialMessage.ID != m.ID {
				continue
			}
			p.InitialMessage = &tomb
			if inv.Body, err = redactedBody(ienv, p, red); err != nil {
				return err
			}
			if err := s.rewriteBody(ctx, tx, inv); err != nil {
				return err
			}
			evs = append(evs, inv)
		}
		changed = true
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("store: redact: %w", err)
	}
	return evs, changed, nil
}

// tombstone is what is left of message m once redacted: its identity and
// place (id, session, sender, sequence, created_at) and the placeholder
// content; metadata and idempotency key, which may hold content, go too.
func tombstone(m protocol.Message) protocol.Message {
	content, _ := json.Marshal(protocol.RedactedContent)
	return protocol.Message{ID: m.ID, SessionID: m.SessionID, Sender: m.Sender, Sequence: m.Sequence, CreatedAt: m.CreatedAt, Content: content}
}

// redactedBody is envelope env with payload and the redaction mark.
func redactedBody(env protocol.RedactedEvent, payload any, red *protocol.Redaction) ([]byte, error) {
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("store: redact: encode payload: %w", err)
	}
	env.Payload, env.Redacted = p, red
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("store: redact: encode event: %w", err)
	}
	return b, nil
}

// rewriteBody stores ev's new body and empties its search index input (on
// SQLite the FTS5 update trigger drops its terms from both indexes).
func (s *Store) rewriteBody(ctx context.Context, tx *sql.Tx, ev StoredEvent) error {
	if _, err := tx.ExecContext(ctx, `UPDATE events SET body = $3, `+s.d.searchClearSet()+` WHERE session_id = $1 AND sequence = $2`,
		ev.SessionID, ev.Sequence, string(ev.Body)); err != nil {
		return fmt.Errorf("store: redact: rewrite event: %w", err)
	}
	return nil
}
