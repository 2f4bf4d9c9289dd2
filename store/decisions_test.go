package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// TestMomentsPortable: binding moments, open and resolved, survive aspd
// export and import between dialects: pending lists and records are the
// same afterwards, and an open moment can still be resolved once.
func TestMomentsPortable(t *testing.T) {
	for _, p := range []struct {
		name     string
		from, to func(testing.TB) string
	}{
		{"sqlite_to_postgres", dbtest.SQLite, dbtest.Postgres},
		{"postgres_to_sqlite", dbtest.Postgres, dbtest.SQLite},
	} {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			src, dst := open(t, p.from(t)), open(t, p.to(t))
			for _, h := range []string{"@acme.bot", "@acme.nick"} {
				mustAgent(t, src, h, "open")
			}
			cs, _, err := src.CreateSession(ctx, store.CreateSession{Creator: "@acme.bot", Invite: []string{"@acme.nick"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := src.Join(ctx, cs.SessionID, "@acme.nick"); err != nil {
				t.Fatal(err)
			}
			env := []byte(`{"synopsis":"s","findings":[],"recommendations":[],"offer":"o","question":{"stem":"q","options":[{"label":"a","reasoning":"r"},{"label":"b","reasoning":"r"}],"recommended_idx":0,"hatches":{"free_text":false,"dialogue":true}}}`)
			send := func(sender string, b *store.Binding) protocol.SendMessageResponse {
				t.Helper()
				content, _ := json.Marshal("binding part")
				r, _, err := src.SendMessage(ctx, store.SendMessage{SessionID: cs.SessionID, Sender: sender, Content: content, Binding: b})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			moment := func(resolver string) string {
				return send("@acme.bot", &store.Binding{Moment: &store.Moment{Resolver: resolver, OptionCount: 2, Dialogue: true, Envelope: env}}).MessageID
			}
			open1, resolved, open2 := moment("@acme.nick"), moment(""), moment("")
			send("@acme.nick", &store.Binding{Resolution: &store.Resolution{MomentID: resolved, Outcome: protocol.OutcomeReferredBack, OptionIdx: -1, Objection: "not now"}})

			var buf bytes.Buffer
			xs, err := src.Export(ctx, &buf, store.ExportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if xs.Counts[store.KindBindingMoment] != 3 {
				t.Fatalf("exported %d moments, want 3", xs.Counts[store.KindBindingMoment])
			}
			if _, err := dst.Import(ctx, &buf); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{open1, resolved, open2} {
				a, err := src.GetMoment(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				b, err := dst.GetMoment(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("moment %s:\nsource   %+v\nimported %+v", id, a, b)
				}
			}
			pend, err := dst.PendingMoments(ctx, "@acme.nick", 10)
			if err != nil || len(pend) != 2 || pend[0].MomentID != open1 || pend[1].MomentID != open2 {
				t.Fatalf("pending after import: %v, %v", pend, err)
			}
			content, _ := json.Marshal("again")
			res := &store.Resolution{MomentID: open2, Outcome: protocol.OutcomeSelected, OptionIdx: 1}
			if _, _, err := dst.SendMessage(ctx, store.SendMessage{SessionID: cs.SessionID, Sender: "@acme.nick", Content: content, Binding: &store.Binding{Resolution: res}}); err != nil {
				t.Fatalf("resolving an imported moment: %v", err)
			}
			if _, _, err := dst.SendMessage(ctx, store.SendMessage{SessionID: cs.SessionID, Sender: "@acme.nick", Content: content, Binding: &store.Binding{Resolution: res}}); !errorsIs(err, store.ErrAlreadyResolved) {
				t.Fatalf("second resolution after import: %v", err)
			}
		})
	}
}

func errorsIs(err, target error) bool {
	e := store.AsError(err)
	return e != nil && e.Is(target)
}
