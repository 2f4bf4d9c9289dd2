package store

import (
	"context"
	"fmt"
	"testing"
)

// recordQueue records what is queued and runs nothing.
type recordQueue struct{ stmtList }

func (q *recordQueue) Flush(context.Context) error { return nil }

// messagePathTexts returns the SQL texts the message path queues for a batch of n
// messages, each in a session of its own and with an idempotency key.
func messagePathTexts(d dialect, n int) []string {
	s := &Store{d: d, now: timeNow}
	q := &recordQueue{}
	var ids []string
	var events []StoredEvent
	var touched []*sessionTx
	reqs := make([]*SendMessage, n)
	results := make([]sendResult, n)
	which := make([]int, n)
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		ids = append(ids, id)
		t := &sessionTx{id: id, state: "active", lastSeq: 1}
		touched = append(touched, t)
		events = append(events, StoredEvent{SessionID: id, Sequence: 1, EventID: fmt.Sprintf("e%d", i), Type: "session.message", Body: []byte(`{}`)})
		reqs[i] = &SendMessage{SessionID: id, Sender: "@a.b", IdempotencyKey: fmt.Sprintf("k%d", i)}
		which[i] = i
	}
	s.queueLockSessions(context.Background(), q, ids, map[string]*sessionTx{})
	queueMessageKeys(q, d, reqs, map[msgKey]priorKey{})
	queueEvents(q, d, events, touched)
	queueMessageKeysInsert(q, d, reqs, results, which)
	var out []string
	for _, st := range q.take() {
		out = append(out, st.query)
	}
	return out
}

// TestMessagePathStatementsStayPrepared: on PostgreSQL the message path's
// statements have one text whatever the batch size, so that pgx's
// statement cache keeps each prepared on its connection (a text it has not
// prepared costs the batch another round trip). SQLite's texts grow with
// the batch (one placeholder per value), which this test also checks, so
// that it would see a dialect that stopped binding arrays.
func TestMessagePathStatementsStayPrepared(t *testing.T) {
	one, many := messagePathTexts(postgresDialect, 1), messagePathTexts(postgresDialect, 7)
	if len(one) != 4 || len(many) != 4 {
		t.Fatalf("postgres: %d and %d statements queued, want 4 (lock, keys, events, new keys)", len(one), len(many))
	}
	for i := range one {
		if one[i] != many[i] {
			t.Errorf("postgres statement %d differs between a batch of 1 and of 7:\n%s\n---\n%s", i, one[i], many[i])
		}
	}
	one, many = messagePathTexts(sqliteDialect, 1), messagePathTexts(sqliteDialect, 7)
	for i := range min(len(one), len(many)) {
		if one[i] == many[i] {
			t.Errorf("sqlite statement %d is the same for a batch of 1 and of 7; this test no longer tells the dialects apart:\n%s", i, one[i])
		}
	}
}
