package store_test

// Tests of the portable network format (Export/Import): a network built on
// one dialect is exported, imported into a fresh store of the other dialect,
// and every observable piece of it is compared. Helpers here are prefixed pt
// so they cannot collide with other test files of the package.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/internal/visibility"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

const (
	ptNick    = "@nick.assistant"
	ptSupport = "@acme.support"
	ptBilling = "@acme.billing"
	ptEve     = "@eve.spam"
	ptOld     = "@old.agent"
	// ptBulk is the number of messages in the bulk session: more than one
	// export page (500 rows), so keyset paging across a page boundary in the
	// middle of a session is exercised.
	ptBulk = 520
)

func ptHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func ptToken(h string) string { return "tok-" + h }

// ptNet is what the populated network looks like, for the assertions.
type ptNet struct {
	lifecycle, sendEnd, blocked, deleted, empty, bulk string
	createResp                                        protocol.CreateSessionResponse
	supportMsg                                        protocol.SendMessageResponse // idempotency key "m-1"
}

func ptMust(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// ptPopulate builds a network that touches every table and every column
// that matters: roles, allowlists, blocks, a deleted agent, sessions through
// invite/join/message/leave/end/reopen, a send-and-end session, a silent
// block force-leave, an empty session, idempotency keys of both kinds,
// cursors, presence (online, offline with a disconnect) and a session
// longer than one export page.
func ptPopulate(t *testing.T, s *store.Store) ptNet {
	t.Helper()
	ctx := context.Background()
	var n ptNet
	for _, a := range []store.NewAgent{
		{Handle: ptNick, InboundPolicy: "open"},
		{Handle: ptSupport, InboundPolicy: "allowlist", Allowlist: []string{"@nick.*"}},
		{Handle: ptBilling, InboundPolicy: "allowlist", Allowlist: []string{ptNick, "@acme.*"}},
		{Handle: ptEve, InboundPolicy: "open"},
		{Handle: ptOld, InboundPolicy: "open"},
	} {
		a.TokenHash = ptHash(ptToken(a.Handle))
		ptMust(t, s.CreateAgent(ctx, a), "create "+a.Handle)
	}
	ptMust(t, s.SetRoles(ctx, ptNick, []string{"org:acme", "admin"}), "roles")

	// A session longer than one export page, created first so that its id
	// sorts first and the page boundary falls inside it with other
	// sessions' (lower) sequences after it.
	resp, _, err := s.CreateSession(ctx, store.CreateSession{Creator: ptNick, Invite: []string{ptSupport}, Topic: "bulk"})
	ptMust(t, err, "create bulk")
	n.bulk = resp.SessionID
	_, err = s.Join(ctx, n.bulk, ptSupport)
	ptMust(t, err, "join bulk")
	for i := 0; i < ptBulk; i++ {
		from := ptNick
		if i%2 == 1 {
			from = ptSupport
		}
		_, _, err = s.SendMessage(ctx, store.SendMessage{SessionID: n.bulk, Sender: from, Content: json.RawMessage(fmt.Sprintf(`"bulk %d"`, i))})
		ptMust(t, err, "bulk message")
	}

	_, err = s.Block(ctx, ptSupport, ptEve)
	ptMust(t, err, "block")

	// Lifecycle: create (with a session idempotency key), join, keyed
	// message, leave, end (the pending invitee becomes left), reopen with a
	// re-invitation, join again, another message.
	content := json.RawMessage(`{"parts":[{"type":"text","text":"caf\u00e9 <&> 😀 \"quoted\" \\ back"}]}`)
	n.createResp, _, err = s.CreateSession(ctx, store.CreateSession{Creator: ptNick, Invite: []string{ptSupport, ptBilling}, Topic: "quarterly <review>",
		Initial:        &protocol.InitialMessage{Content: content, Metadata: json.RawMessage(`{"k":[1,2.5,null]}`)},
		IdempotencyKey: "create-1", RequestHash: "rh-create-1"})
	ptMust(t, err, "create lifecycle")
	n.lifecycle = n.createResp.SessionID
	_, err = s.Join(ctx, n.lifecycle, ptSupport)
	ptMust(t, err, "join")
	n.supportMsg, _, err = s.SendMessage(ctx, store.SendMessage{SessionID: n.lifecycle, Sender: ptSupport, Content: json.RawMessage(`"from support"`),
		IdempotencyKey: "m-1", RequestHash: "rh-m-1"})
	ptMust(t, err, "keyed message")
	_, _, err = s.SendMessage(ctx, store.SendMessage{SessionID: n.lifecycle, Sender: ptNick, Content: json.RawMessage(`"from nick"`)})
	ptMust(t, err, "message")
	_, err = s.Leave(ctx, n.lifecycle, ptSupport)
	ptMust(t, err, "leave")
	_, err = s.End(ctx, n.lifecycle, ptNick)
	ptMust(t, err, "end")
	_, err = s.Reopen(ctx, n.lifecycle, ptNick, []string{ptSupport}, &protocol.InitialMessage{Content: json.RawMessage(`"welcome back"`)}, nil)
	ptMust(t, err, "reopen")
	_, err = s.Join(ctx, n.lifecycle, ptSupport)
	ptMust(t, err, "join again")
	_, _, err = s.SendMessage(ctx, store.SendMessage{SessionID: n.lifecycle, Sender: ptNick, Content: json.RawMessage(`"after reopen"`),
		IdempotencyKey: "m-2", RequestHash: "rh-m-2"})
	ptMust(t, err, "message after reopen")

	// Send-and-end.
	resp, _, err = s.CreateSession(ctx, store.CreateSession{Creator: ptNick, Invite: []string{ptBilling},
		Initial: &protocol.InitialMessage{Content: json.RawMessage(`"fyi"`)}, EndAfterSend: true})
	ptMust(t, err, "send-and-end")
	n.sendEnd = resp.SessionID

	// A block force-leaves eve silently (its horizon stops before its own
	// session.left).
	resp, _, err = s.CreateSession(ctx, store.CreateSession{Creator: ptEve, Invite: []string{ptNick}, Topic: "offer"})
	ptMust(t, err, "create blocked")
	n.blocked = resp.SessionID
	_, err = s.Join(ctx, n.blocked, ptNick)
	ptMust(t, err, "join blocked")
	_, _, err = s.SendMessage(ctx, store.SendMessage{SessionID: n.blocked, Sender: ptEve, Content: json.RawMessage(`"buy now"`)})
	ptMust(t, err, "spam")
	_, err = s.Block(ctx, ptNick, ptEve)
	ptMust(t, err, "block eve")

	// A deleted agent: its handle is retired, its invitation became left.
	resp, _, err = s.CreateSession(ctx, store.CreateSession{Creator: ptNick, Invite: []string{ptOld}})
	ptMust(t, err, "create deleted")
	n.deleted = resp.SessionID
	_, err = s.DeleteAgent(ctx, ptOld)
	ptMust(t, err, "delete agent")

	// A session without events (last_seq 0).
	resp, _, err = s.CreateSession(ctx, store.CreateSession{Creator: ptNick, Topic: "empty"})
	ptMust(t, err, "create empty")
	n.empty = resp.SessionID

	// Presence: nick online; support connected and dropped (session.disconnected
	// in its active sessions, inside the grace window).
	_, err = s.MarkOnline(ctx, ptNick)
	ptMust(t, err, "online")
	_, err = s.MarkOnline(ctx, ptSupport)
	ptMust(t, err, "online")
	_, err = s.MarkOffline(ctx, ptSupport)
	ptMust(t, err, "offline")

	ptMust(t, s.SaveCursors(ctx, []visibility.Cursor{
		{Handle: ptNick, SessionID: n.lifecycle, Seq: 3},
		{Handle: ptSupport, SessionID: n.lifecycle, Seq: 2},
		{Handle: ptBilling, SessionID: n.sendEnd, Seq: 2},
		{Handle: ptSupport, SessionID: n.bulk, Seq: 100},
	}), "cursors")

	// Named operator tokens and audited changes (one rotates a token).
	audited := func(action, target string) context.Context {
		return store.WithAudit(ctx, &store.AuditEntry{Actor: "ops", Action: action, Target: target, RequestID: "req-" + action,
			Detail: map[string]any{"n": 1}})
	}
	_, err = s.CreateOperatorToken(audited("operator_token.create", "viewer"), "viewer", "read", ptHash("viewer-token"))
	ptMust(t, err, "operator token")
	_, err = s.CreateOperatorToken(ctx, "ops", "admin", ptHash("ops-token"))
	ptMust(t, err, "operator token")
	_, err = s.RotateOperatorToken(audited("operator_token.rotate", "viewer"), "viewer", ptHash("viewer-token-2"))
	ptMust(t, err, "rotate operator token")
	ptMust(t, s.SetPolicy(audited("agent.policy.set", ptEve), ptEve, "open"), "audited policy")
	return n
}

func ptExport(t *testing.T, s *store.Store, hashes bool) ([]byte, store.ExportStats) {
	t.Helper()
	var buf bytes.Buffer
	stats, err := s.Export(context.Background(), &buf, store.ExportOptions{IncludeTokenHashes: hashes})
	ptMust(t, err, "export")
	return buf.Bytes(), stats
}

func ptLines(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func ptEvents(t *testing.T, s *store.Store) []store.StoredEvent {
	t.Helper()
	var out []store.StoredEvent
	ptMust(t, s.ExportEvents(context.Background(), store.SessionFilter{}, func(e *store.StoredEvent) error {
		c := *e
		c.Body = append([]byte(nil), e.Body...)
		out = append(out, c)
		return nil
	}), "export events")
	return out
}

// ptEmpty asserts that nothing was written to s.
func ptEmpty(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	agents, err := s.ListAgents(ctx, "")
	ptMust(t, err, "list agents")
	sessions, err := s.ListSessions(ctx, store.SessionFilter{Limit: 100})
	ptMust(t, err, "list sessions")
	if len(agents) != 0 || len(sessions) != 0 {
		t.Fatalf("store not empty after a failed import: %d agents, %d sessions", len(agents), len(sessions))
	}
	b, _ := ptExport(t, s, true)
	var end struct {
		Counts map[string]int64 `json:"counts"`
	}
	lines := ptLines(b)
	ptMust(t, json.Unmarshal([]byte(lines[len(lines)-1]), &end), "end record")
	for k, n := range end.Counts {
		if n != 0 {
			t.Fatalf("store not empty after a failed import: %d %s records", n, k)
		}
	}
}

func TestPortableRoundTrip(t *testing.T) {
	pairs := []struct {
		name     string
		from, to func(testing.TB) string
	}{
		{"sqlite_to_postgres", dbtest.SQLite, dbtest.Postgres},
		{"postgres_to_sqlite", dbtest.Postgres, dbtest.SQLite},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			src := open(t, p.from(t))
			dst := open(t, p.to(t))
			n := ptPopulate(t, src)

			file, xs := ptExport(t, src, true)
			lines := ptLines(file)
			var h map[string]any
			ptMust(t, json.Unmarshal([]byte(lines[0]), &h), "header")
			if h["format"] != "aspd-network" || h["version"] != float64(1) || h["dialect"] != src.Dialect() || h["exported_at"] == nil || len(h) != 4 {
				t.Fatalf("header %s", lines[0])
			}
			if xs.TokenHashes != 4 { // every live agent; the deleted one has none
				t.Fatalf("exported %d token hashes, want 4", xs.TokenHashes)
			}
			is, err := dst.Import(ctx, bytes.NewReader(file))
			ptMust(t, err, "import")
			if !reflect.DeepEqual(is.Counts, xs.Counts) {
				t.Fatalf("imported %v, exported %v", is.Counts, xs.Counts)
			}
			if is.AgentsWithoutToken != 0 {
				t.Fatalf("%d agents without token after an import with hashes", is.AgentsWithoutToken)
			}
			if xs.Counts[store.KindOperatorToken] != 2 || xs.Counts[store.KindAudit] != 3 {
				t.Fatalf("exported %v, want 2 operator tokens and 3 audit rows", xs.Counts)
			}
			// Operator tokens keep working; the audit log reads the same
			// but for the ids, which are the store's own.
			if name, scope, err := dst.AuthenticateOperator(ctx, ptHash("viewer-token-2")); err != nil || name != "viewer" || scope != "read" {
				t.Fatalf("imported operator token: %q %q %v", name, scope, err)
			}
			srcTokens, _ := src.ListOperatorTokens(ctx)
			dstTokens, _ := dst.ListOperatorTokens(ctx)
			if !reflect.DeepEqual(srcTokens, dstTokens) {
				t.Fatalf("operator tokens differ:\n src %s\n dst %s", ptJSON(srcTokens), ptJSON(dstTokens))
			}
			srcAudit, _ := src.ListAudit(ctx, store.AuditFilter{})
			dstAudit, _ := dst.ListAudit(ctx, store.AuditFilter{})
			if len(srcAudit) != 3 || len(dstAudit) != 3 {
				t.Fatalf("audit rows: %d at the source, %d imported", len(srcAudit), len(dstAudit))
			}
			for i := range srcAudit {
				a, b := srcAudit[i], dstAudit[i]
				a.ID, b.ID = 0, 0
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("audit row %d differs:\n src %s\n dst %s", i, ptJSON(a), ptJSON(b))
				}
			}
			wantEvents := int64(len(ptEvents(t, src)))
			if xs.Counts[store.KindEvent] != wantEvents || wantEvents < ptBulk+20 {
				t.Fatalf("exported %d events, the source has %d", xs.Counts[store.KindEvent], wantEvents)
			}

			// Every record: re-exporting the imported store gives the same
			// file but for the header (dialect, time).
			again, _ := ptExport(t, dst, true)
			if got := ptLines(again); !reflect.DeepEqual(got[1:], lines[1:]) {
				for i := 1; i < min(len(got), len(lines)); i++ {
					if got[i] != lines[i] {
						t.Fatalf("re-export differs at line %d:\n got %s\nwant %s", i+1, got[i], lines[i])
					}
				}
				t.Fatalf("re-export has %d lines, want %d", len(got), len(lines))
			}

			// Agents.
			for _, st := range []*store.Store{src, dst} {
				if _, err := st.GetAgent(ctx, ptOld); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("%s: deleted agent: %v", st.Dialect(), err)
				}
			}
			srcAgents, err := src.ListAgents(ctx, "")
			ptMust(t, err, "list agents")
			dstAgents, err := dst.ListAgents(ctx, "")
			ptMust(t, err, "list agents")
			if len(srcAgents) != 4 || !reflect.DeepEqual(srcAgents, dstAgents) {
				t.Fatalf("agents differ:\n src %s\n dst %s", ptJSON(srcAgents), ptJSON(dstAgents))
			}
			nick, err := dst.GetAgent(ctx, ptNick)
			ptMust(t, err, "get nick")
			if !reflect.DeepEqual(nick.Roles, []string{"admin", "org:acme"}) || !reflect.DeepEqual(nick.Blocks, []string{ptEve}) || !nick.HasToken {
				t.Fatalf("nick on the imported store: %s", ptJSON(nick))
			}
			if err := dst.CreateAgent(ctx, store.NewAgent{Handle: ptOld, InboundPolicy: "open"}); err == nil {
				t.Fatalf("the deleted handle %s could be reused after import", ptOld)
			}

			// Sessions.
			srcSessions, err := src.ListSessions(ctx, store.SessionFilter{Limit: 100})
			ptMust(t, err, "list sessions")
			dstSessions, err := dst.ListSessions(ctx, store.SessionFilter{Limit: 100})
			ptMust(t, err, "list sessions")
			if len(srcSessions) != 6 || !reflect.DeepEqual(srcSessions, dstSessions) {
				t.Fatalf("sessions differ:\n src %s\n dst %s", ptJSON(srcSessions), ptJSON(dstSessions))
			}
			for _, sess := range srcSessions {
				a, err := src.AdminSession(ctx, sess.ID)
				ptMust(t, err, "admin session")
				b, err := dst.AdminSession(ctx, sess.ID)
				ptMust(t, err, "admin session")
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("session %s differs:\n src %s\n dst %s", sess.ID, ptJSON(a), ptJSON(b))
				}
				// Eligibility: every participant sees the same events.
				for _, part := range a.Participants {
					x, _, err := src.VisibleEvents(ctx, sess.ID, part.Handle, 0, 1000)
					ptMust(t, err, "visible")
					y, _, err := dst.VisibleEvents(ctx, sess.ID, part.Handle, 0, 1000)
					ptMust(t, err, "visible")
					if len(x) != len(y) {
						t.Fatalf("%s in %s sees %d events on the source, %d after import", part.Handle, sess.ID, len(x), len(y))
					}
					for i := range x {
						if x[i].EventID != y[i].EventID {
							t.Fatalf("%s in %s: event %d differs", part.Handle, sess.ID, i)
						}
					}
				}
			}
			eve, _, err := dst.VisibleEvents(ctx, n.blocked, ptEve, 0, 100)
			ptMust(t, err, "eve")
			if got := types(eve); !reflect.DeepEqual(got, []string{protocol.EventInvited, protocol.EventJoined, protocol.EventMessage}) { // not its own session.left
				t.Fatalf("blocked eve sees %v after import", types(eve))
			}

			// Events, byte for byte.
			x, y := ptEvents(t, src), ptEvents(t, dst)
			if len(x) != len(y) {
				t.Fatalf("%d events on the source, %d after import", len(x), len(y))
			}
			for i := range x {
				if !bytes.Equal(x[i].Body, y[i].Body) {
					t.Fatalf("event %s/%d body differs:\n src %s\n dst %s", x[i].SessionID, x[i].Sequence, x[i].Body, y[i].Body)
				}
				if !reflect.DeepEqual(x[i], y[i]) {
					t.Fatalf("event %s/%d differs:\n src %+v\n dst %+v", x[i].SessionID, x[i].Sequence, x[i], y[i])
				}
			}

			// Sessions as each agent lists them (state, status, last_sequence).
			for _, h := range []string{ptNick, ptSupport, ptBilling, ptEve} {
				a, err := src.ListSessionsFor(ctx, store.SessionFilter{Participant: h, Limit: 100})
				ptMust(t, err, "list sessions for")
				b, err := dst.ListSessionsFor(ctx, store.SessionFilter{Participant: h, Limit: 100})
				ptMust(t, err, "list sessions for")
				if len(a) == 0 || !reflect.DeepEqual(a, b) {
					t.Fatalf("%s's sessions differ:\n src %s\n dst %s", h, ptJSON(a), ptJSON(b))
				}
			}

			// Cursors.
			for _, c := range []visibility.Cursor{{Handle: ptNick, SessionID: n.lifecycle, Seq: 3}, {Handle: ptSupport, SessionID: n.lifecycle, Seq: 2},
				{Handle: ptBilling, SessionID: n.sendEnd, Seq: 2}, {Handle: ptSupport, SessionID: n.bulk, Seq: 100}, {Handle: ptEve, SessionID: n.blocked, Seq: 0}} {
				got, err := dst.Cursor(ctx, c.Handle, c.SessionID)
				ptMust(t, err, "cursor")
				if got != c.Seq {
					t.Fatalf("cursor %s/%s = %d after import, want %d", c.Handle, c.SessionID, got, c.Seq)
				}
			}
			for _, h := range []string{ptNick, ptSupport, ptBilling, ptEve, ptOld} {
				a, err := src.PendingSessions(ctx, h)
				ptMust(t, err, "pending")
				b, err := dst.PendingSessions(ctx, h)
				ptMust(t, err, "pending")
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("%s's pending sessions differ:\n src %+v\n dst %+v", h, a, b)
				}
			}

			// Tokens authenticate (the hashes were exported); the deleted agent's does not.
			for _, h := range []string{ptNick, ptSupport, ptBilling, ptEve} {
				got, err := dst.Authenticate(ctx, ptHash(ptToken(h)))
				if err != nil || got != h {
					t.Fatalf("token of %s on the imported store: %q %v", h, got, err)
				}
			}
			if _, err := dst.Authenticate(ctx, ptHash(ptToken(ptOld))); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("deleted agent's token: %v", err)
			}

			// Idempotent retries return the original ids.
			retry, commit, err := dst.SendMessage(ctx, store.SendMessage{SessionID: n.lifecycle, Sender: ptSupport, Content: json.RawMessage(`"from support"`),
				IdempotencyKey: "m-1", RequestHash: "rh-m-1"})
			ptMust(t, err, "retry")
			if retry != n.supportMsg || commit != nil {
				t.Fatalf("message retry after import: %+v (commit %v), want %+v", retry, commit, n.supportMsg)
			}
			_, _, err = dst.SendMessage(ctx, store.SendMessage{SessionID: n.lifecycle, Sender: ptSupport, Content: json.RawMessage(`"other"`),
				IdempotencyKey: "m-1", RequestHash: "rh-other"})
			wantErr(t, err, 409, protocol.CodeIdempotencyKey)
			cretry, _, err := dst.CreateSession(ctx, store.CreateSession{Creator: ptNick, Invite: []string{ptSupport, ptBilling}, Topic: "quarterly <review>",
				IdempotencyKey: "create-1", RequestHash: "rh-create-1"})
			ptMust(t, err, "create retry")
			if cretry.SessionID != n.createResp.SessionID || cretry.Sequence == nil || *cretry.Sequence != 1 {
				t.Fatalf("create retry after import: %+v, want session %s sequence 1", cretry, n.createResp.SessionID)
			}

			// A new message continues the sequence.
			before := int64(0)
			for _, e := range y {
				if e.SessionID == n.lifecycle {
					before = e.Sequence
				}
			}
			if before < 10 {
				t.Fatalf("lifecycle session has only %d events", before)
			}
			next, _, err := dst.SendMessage(ctx, store.SendMessage{SessionID: n.lifecycle, Sender: ptNick, Content: json.RawMessage(`"after import"`)})
			ptMust(t, err, "send after import")
			if next.Sequence != before+1 {
				t.Fatalf("new message got sequence %d, want %d", next.Sequence, before+1)
			}
			evs, err := dst.EventsAfter(ctx, n.lifecycle, before, 10)
			ptMust(t, err, "events after")
			if len(evs) != 1 || evs[0].Sequence != before+1 || evs[0].Type != protocol.EventMessage {
				t.Fatalf("events after import: %v", types(evs))
			}

			// Presence came along: nick was online, so a start-up recovery
			// on the imported store marks it disconnected in every active
			// session it is joined in (and nowhere else).
			active, err := dst.ListSessionsFor(ctx, store.SessionFilter{Participant: ptNick, Status: protocol.StatusJoined, State: protocol.StateActive, Limit: 100})
			ptMust(t, err, "nick's active sessions")
			var want []string
			for _, a := range active {
				want = append(want, a.ID)
			}
			commits, err := dst.RecoverPresence(ctx)
			ptMust(t, err, "recover presence")
			var got []string
			for _, c := range commits {
				if len(c.Events) != 1 || c.Events[0].Type != protocol.EventDisconnected || c.Events[0].Subject != ptNick {
					t.Fatalf("recover presence appended %v to %s", types(c.Events), c.SessionID)
				}
				got = append(got, c.SessionID)
			}
			sort.Strings(want)
			sort.Strings(got)
			if len(want) < 3 || !reflect.DeepEqual(got, want) {
				t.Fatalf("recover presence touched %v, want nick's active sessions %v", got, want)
			}
		})
	}
}

func ptJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Without token hashes the agents come over without a token: nothing
// authenticates until an operator rotates it.
func TestPortableWithoutTokenHashes(t *testing.T) {
	ctx := context.Background()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		dst := open(t, url)
		s := open(t, dbtest.SQLite(t))
		ptMust(t, s.CreateAgent(ctx, store.NewAgent{Handle: ptNick, InboundPolicy: "open", TokenHash: ptHash(ptToken(ptNick))}), "create")
		ptMust(t, s.CreateAgent(ctx, store.NewAgent{Handle: ptSupport, InboundPolicy: "open", TokenHash: ptHash(ptToken(ptSupport))}), "create")
		ptMust(t, s.CreateAgent(ctx, store.NewAgent{Handle: ptOld, InboundPolicy: "open", TokenHash: ptHash(ptToken(ptOld))}), "create")
		_, err := s.DeleteAgent(ctx, ptOld)
		ptMust(t, err, "delete")
		_, err = s.CreateOperatorToken(ctx, "ops", "admin", ptHash("ops-token"))
		ptMust(t, err, "operator token")
		file, xs := ptExport(t, s, false)
		if xs.TokenHashes != 0 || bytes.Contains(file, []byte("token_hash")) || bytes.Contains(file, []byte(`"kind":"operator_token"`)) {
			t.Fatalf("export without hashes wrote %d hashes:\n%s", xs.TokenHashes, file)
		}
		is, err := dst.Import(ctx, bytes.NewReader(file))
		ptMust(t, err, "import")
		if is.AgentsWithoutToken != 2 || is.Counts[store.KindAgent] != 3 {
			t.Fatalf("import stats %+v, want 3 agents of which 2 live without token", is)
		}
		a, err := dst.GetAgent(ctx, ptNick)
		ptMust(t, err, "get")
		if a.HasToken {
			t.Fatalf("agent has a token after an import without hashes")
		}
		if _, err := dst.Authenticate(ctx, ptHash(ptToken(ptNick))); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("old token works without exported hashes: %v", err)
		}
		ptMust(t, dst.SetTokenHash(ctx, ptNick, ptHash("fresh")), "rotate")
		if got, err := dst.Authenticate(ctx, ptHash("fresh")); err != nil || got != ptNick {
			t.Fatalf("rotated token: %q %v", got, err)
		}
	})
}

// ptSourceFile populates a fresh SQLite store and exports it.
func ptSourceFile(t *testing.T) []byte {
	t.Helper()
	s := open(t, dbtest.SQLite(t))
	ptPopulate(t, s)
	b, _ := ptExport(t, s, true)
	return b
}

func TestPortableRefusesNonEmptyStore(t *testing.T) {
	file := ptSourceFile(t)
	dbtest.ForEach(t, func(t *testing.T, url string) {
		ctx := context.Background()
		dst := open(t, url)
		ptMust(t, dst.CreateAgent(ctx, store.NewAgent{Handle: "@already.here", InboundPolicy: "open"}), "create")
		before, _ := ptExport(t, dst, true)
		_, err := dst.Import(ctx, bytes.NewReader(file))
		if !errors.Is(err, store.ErrStoreNotEmpty) {
			t.Fatalf("import into a store with an agent: %v, want ErrStoreNotEmpty", err)
		}
		after, _ := ptExport(t, dst, true)
		if !reflect.DeepEqual(ptLines(before)[1:], ptLines(after)[1:]) {
			t.Fatalf("a refused import changed the store:\nbefore %s\nafter %s", before, after)
		}
		agents, err := dst.ListAgents(ctx, "")
		ptMust(t, err, "list")
		if len(agents) != 1 || agents[0].Handle != "@already.here" {
			t.Fatalf("agents after a refused import: %s", ptJSON(agents))
		}

		// A second import of the same file into a freshly imported store is refused too.
		dst2 := open(t, dbtest.SQLite(t))
		_, err = dst2.Import(ctx, bytes.NewReader(file))
		ptMust(t, err, "first import")
		if _, err := dst2.Import(ctx, bytes.NewReader(file)); !errors.Is(err, store.ErrStoreNotEmpty) {
			t.Fatalf("second import: %v, want ErrStoreNotEmpty", err)
		}
	})
}

// ptEdit returns the file with edit applied to its lines.
func ptEdit(file []byte, edit func(lines []string) []string) []byte {
	return []byte(strings.Join(edit(ptLines(file)), "\n") + "\n")
}

func ptKind(line string) (kind, session string, seq int64) {
	var r struct {
		Kind      string `json:"kind"`
		SessionID string `json:"session_id"`
		Sequence  int64  `json:"sequence"`
	}
	_ = json.Unmarshal([]byte(line), &r)
	return r.Kind, r.SessionID, r.Sequence
}

func TestPortableRejectsDamagedFiles(t *testing.T) {
	file := ptSourceFile(t)
	lines := ptLines(file)
	// The first session's event with sequence 2 (not its last).
	dropAt, firstMsgKey := -1, -1
	for i, l := range lines {
		k, _, seq := ptKind(l)
		if k == store.KindEvent && seq == 2 && dropAt < 0 {
			dropAt = i
		}
		if k == store.KindMessageKey && firstMsgKey < 0 {
			firstMsgKey = i
		}
	}
	if dropAt < 0 || firstMsgKey < 0 {
		t.Fatal("fixture has no event with sequence 2 or no message key")
	}
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"dropped event line", ptEdit(file, func(l []string) []string {
			return append(append([]string(nil), l[:dropAt]...), l[dropAt+1:]...)
		}), "gap check failed"},
		{"truncated after the events", ptEdit(file, func(l []string) []string { return l[:firstMsgKey] }), "truncated"},
		{"truncated mid-line", file[:len(file)/2], ""},
		{"end record count mismatch", ptEdit(file, func(l []string) []string {
			l = append([]string(nil), l...)
			l[len(l)-1] = strings.Replace(l[len(l)-1], `"cursor":4`, `"cursor":5`, 1)
			return l
		}), "end record counts 5 cursor"},
		{"version 2", ptEdit(file, func(l []string) []string {
			l = append([]string(nil), l...)
			l[0] = strings.Replace(l[0], `"version":1`, `"version":2`, 1)
			return l
		}), "version 2 is not supported"},
		{"not a portable file", []byte(`{"type":"session.message"}` + "\n"), "header"},
		{"empty", nil, "empty input"},
		{"body does not match its record", ptEdit(file, func(l []string) []string {
			l = append([]string(nil), l...)
			var r map[string]any
			_ = json.Unmarshal([]byte(l[dropAt]), &r)
			r["sequence"] = float64(99999)
			b, _ := json.Marshal(r)
			l[dropAt] = string(b)
			return l
		}), "does not match the record"},
		{"records out of order", ptEdit(file, func(l []string) []string {
			l = append([]string(nil), l...)
			l[1], l[dropAt] = l[dropAt], l[1]
			return l
		}), "records must be grouped"},
		{"unknown field", ptEdit(file, func(l []string) []string {
			l = append([]string(nil), l...)
			l[1] = strings.Replace(l[1], `{"kind":"agent",`, `{"kind":"agent","extra":1,`, 1)
			return l
		}), "unknown field"},
	}
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
					if bytes.Equal(c.file, file) {
						t.Fatal("the edit did not change the file")
					}
					dst := open(t, b.New(t))
					_, err := dst.Import(context.Background(), bytes.NewReader(c.file))
					if err == nil {
						t.Fatal("import of a damaged file succeeded")
					}
					if !strings.Contains(err.Error(), c.want) {
						t.Fatalf("error %q does not mention %q", err, c.want)
					}
					ptEmpty(t, dst)
					// Nothing half-written blocks a clean retry.
					if _, err := dst.Import(context.Background(), bytes.NewReader(file)); err != nil {
						t.Fatalf("clean import after a failed one: %v", err)
					}
				})
			}
		})
	}
}
