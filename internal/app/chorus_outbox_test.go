package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/chorus"
	"github.com/aspd/aspd/protocol"
)

// TestChorusOutboxDoor walks deliveries through the door the worker uses
// (chorus.App): queue, claim, prepare, record, on both stores; a rotation,
// a removal and an agent's deletion close the channel an attempt in flight
// watches; the operator's listing is the store's rows, byte for byte.
func TestChorusOutboxDoor(t *testing.T) {
	forEach(t, withChorus, func(t *testing.T, a *App) {
		mkAgent(t, a, "@own.human")
		mkAgent(t, a, "@own.bot")
		if _, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://x.test/in/sk_1"}); err != nil {
			t.Fatal(err)
		}
		sameJSON := func(step string) {
			t.Helper()
			got, err := a.ChorusDeliveries(ctx, "@own.bot", 50)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := a.st.ChorusDeliveries(ctx, "@own.bot", 50)
			if err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(map[string]any{"deliveries": got})
			w, _ := json.Marshal(map[string]any{"deliveries": rows})
			if !bytes.Equal(g, w) {
				t.Fatalf("%s: the listing is\n%s\nthe store's rows are\n%s", step, g, w)
			}
		}
		sameJSON("no deliveries")
		if got, _ := a.ChorusDeliveries(ctx, "@own.bot", 50); got == nil {
			t.Fatal("an empty listing is null, want []")
		}

		cs, err := a.CreateSession(ctx, "@own.human", protocol.CreateSessionRequest{Invite: []string{"@own.bot"}, Topic: "weather"})
		if err != nil {
			t.Fatal(err)
		}
		claim := func(lease string) []chorus.Delivery {
			t.Helper()
			a.QueueChorus(ctx, 16)
			return a.ClaimChorus(ctx, lease, time.Now().Add(time.Minute), 16)
		}
		ds := claim("node/1")
		if len(ds) != 1 || ds[0].Handle != "@own.bot" || ds[0].SessionID != cs.SessionID || ds[0].Attempts != 0 ||
			ds[0].ID != chorus.DeliveryID("@own.bot", cs.SessionID, ds[0].Sequence) || ds[0].Lease != "node/1" {
			t.Fatalf("claimed %+v", ds)
		}
		if again := claim("node/2"); len(again) != 0 {
			t.Fatalf("a leased delivery was claimed again: %+v", again)
		}
		d := ds[0]
		at, err := a.PrepareChorus(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if at.Target.URL != "https://x.test/in/sk_1" || !strings.HasPrefix(at.Target.Secret, "whsec_") || !bytes.Contains(at.Event, []byte(`"session.invited"`)) ||
			at.Session == nil || at.Session.Topic != "weather" || !strings.HasPrefix(at.Callback, "http://aspd.test/chorus/callback/") ||
			at.MCPURL != "http://aspd.test/mcp" || !strings.HasPrefix(at.MCPToken, "aspm_") {
			t.Fatalf("prepared %+v", at)
		}
		sameJSON("pending")
		if n, _, err := a.ChorusBacklog(ctx); err != nil || n != 1 {
			t.Fatalf("backlog %d %v", n, err)
		}

		// A record under a lost lease writes nothing.
		a.RecordChorus(ctx, chorus.Delivery{ID: d.ID, Handle: d.Handle, SessionID: d.SessionID, Sequence: d.Sequence, Lease: "node/other"},
			chorus.Outcome{State: protocol.ChorusDelivered, Status: 200}, time.Hour)
		if got, _ := a.ChorusDeliveries(ctx, "@own.bot", 50); got[0].State != protocol.ChorusPending || got[0].Attempts != 0 {
			t.Fatalf("a record under a lost lease was written: %+v", got[0])
		}
		// A failure past failingAfter marks the endpoint failing...
		a.RecordChorus(ctx, d, chorus.Outcome{State: protocol.ChorusPending, Status: 500, Error: "HTTP 500", NextAttempt: time.Now().UnixMilli()}, 0)
		if info, _ := a.Chorus(ctx, "@own.bot"); !info.Failing || info.LastError != "HTTP 500" {
			t.Fatalf("after a failure past failingAfter: %+v", info)
		}
		sameJSON("retry")
		// ... and a success clears it.
		ds = claim("node/3")
		if len(ds) != 1 || ds[0].ID != d.ID || ds[0].Attempts != 1 {
			t.Fatalf("the retry claimed %+v", ds)
		}
		a.RecordChorus(ctx, ds[0], chorus.Outcome{State: protocol.ChorusDelivered, Status: 204}, 0)
		if info, _ := a.Chorus(ctx, "@own.bot"); info.Failing || info.LastSuccessAt == 0 {
			t.Fatalf("after a success: %+v", info)
		}
		sameJSON("delivered")

		// The agent's signals are counted for the worker's metrics.
		tok := at.Callback[strings.LastIndex(at.Callback, "/")+1:]
		for _, req := range []protocol.ChorusCallbackRequest{{Type: "status", Status: "thinking"}, {Type: "status", Status: "done"}, {Type: "error", Message: "broke"}} {
			if _, err := a.ChorusCallback(ctx, tok, req); err != nil {
				t.Fatal(err)
			}
		}
		if s := a.ChorusSignals(); s != (chorus.Signals{Status: 2, Error: 1}) {
			t.Fatalf("signals %+v", s)
		}
		sameJSON("signalled")

		// Rotation, removal and deletion close Revoked.
		closed := func(ch <-chan struct{}) bool {
			select {
			case <-ch:
				return true
			default:
				return false
			}
		}
		revoked := a.chorusRevoked("@own.bot")
		if closed(revoked) {
			t.Fatal("revoked before any rotation")
		}
		if _, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://y.test/in/sk_2"}); err != nil {
			t.Fatal(err)
		}
		if !closed(revoked) || closed(a.chorusRevoked("@own.bot")) {
			t.Fatal("a rotation did not revoke the old endpoint's attempts, or revoked the new one's")
		}
		revoked = a.chorusRevoked("@own.bot")
		if err := a.DeleteChorus(ctx, "@own.bot"); err != nil {
			t.Fatal(err)
		}
		if !closed(revoked) {
			t.Fatal("a removal did not revoke the attempts in flight")
		}
		if _, err := a.PrepareChorus(ctx, d); !errors.Is(err, chorus.ErrNoEndpoint) {
			t.Fatalf("prepare without an endpoint: %v", err)
		}
		if _, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://x.test/in/sk_3"}); err != nil {
			t.Fatal(err)
		}
		revoked = a.chorusRevoked("@own.bot")
		if err := a.DeleteAgent(ctx, "@own.bot"); err != nil {
			t.Fatal(err)
		}
		if !closed(revoked) {
			t.Fatal("deleting the agent did not revoke the attempts in flight")
		}
	})
}
