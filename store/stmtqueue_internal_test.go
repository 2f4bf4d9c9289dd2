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
	s.queueLockForMessages(context.Background(), q, ids, map[string]*sessionTx{})
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
// statements have one text whatever the batch size (two for the events:
// queueOneEvent's for a lone event, the arrays' for more), so that pgx's
// statement cache keeps each prepared on its connection (a text it has not
// prepared costs the batch another round trip). SQLite's texts grow with
// the batch (one placeholder per value), which this test also checks, so
// that it would see a dialect that stopped binding arrays.
func TestMessagePathStatementsStayPrepared(t *testing.T) {
	texts := map[int]map[string]bool{}
	for n := 1; n <= 9; n++ {
		got := messagePathTexts(postgresDialect, n)
		if len(got) != 5 {
			t.Fatalf("postgres: %d statements queued for a batch of %d, want 5 (lock, participants, keys, events, new keys)", len(got), n)
		}
		for i, q := range got {
			if texts[i] == nil {
				texts[i] = map[string]bool{}
			}
			texts[i][q] = true
		}
	}
	for i, want := range []int{1, 1, 1, 2, 1} {
		if len(texts[i]) != want {
			t.Errorf("postgres statement %d has %d texts over batches of 1 to 9, want %d: %v", i, len(texts[i]), want, texts[i])
		}
	}
	if !texts[3][appendOneEvent] {
		t.Errorf("postgres: a lone event does not take the one-event statement")
	}
	one, many := messagePathTexts(sqliteDialect, 2), messagePathTexts(sqliteDialect, 7)
	for i := range min(len(one), len(many)) {
		if one[i] == many[i] {
			t.Errorf("sqlite statement %d is the same for a batch of 2 and of 7; this test no longer tells the dialects apart:\n%s", i, one[i])
		}
	}
}
