package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
)

// TestSessionListItemsAreSnapshots: every item of GET /sessions is the
// caller's GET /sessions/{id} plus its status and last_sequence (upstream
// ASP clients read participants from list items as from snapshots): the
// same JSON, participants included, and so valid against
// GetSessionResponse once those two members are taken out. Checked for the
// creator, a joined member, a pending invitee whose view stopped at its
// invitation, a live invitee and a participant that left.
func TestSessionListItemsAreSnapshots(t *testing.T) {
	backends(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL)
		alice := s.provision("@sl.alice", "open")
		bob := s.provision("@sl.bob", "open")
		carol := s.provision("@sl.carol", "open")
		s.provision("@sl.dave", "open")

		s1 := alice.createSession(map[string]any{"invite": []string{"@sl.bob", "@sl.carol"}, "topic": "one"})
		bob.join(s1)
		alice.send(s1, "hi")
		alice.invite(s1, "@sl.dave") // after carol's horizon
		// alice: a live invitee.
		bob.createSession(map[string]any{"invite": []string{"@sl.alice"}})
		s3 := alice.createSession(map[string]any{"invite": []string{"@sl.bob"}, "topic": "three"})
		bob.join(s3)
		bob.leave(s3)
		alice.send(s3, "bob is gone")
		alice.end(s3)

		for _, tc := range []struct {
			a    *agent
			want int
		}{{alice, 3}, {bob, 3}, {carol, 1}} {
			out := tc.a.must(http.StatusOK, "GET", "/sessions", nil, "")
			var page struct {
				Sessions []map[string]json.RawMessage `json:"sessions"`
			}
			mustUnmarshal(t, out, &page)
			if len(page.Sessions) != tc.want {
				t.Fatalf("%s lists %d sessions, want %d: %s", tc.a.handle, len(page.Sessions), tc.want, out)
			}
			for _, item := range page.Sessions {
				if item["status"] == nil || item["last_sequence"] == nil || item["participants"] == nil {
					t.Fatalf("%s: item without status, last_sequence or participants: %s", tc.a.handle, out)
				}
				delete(item, "status")
				delete(item, "last_sequence")
				raw, err := json.Marshal(item)
				if err != nil {
					t.Fatal(err)
				}
				validate(t, "http.json#/$defs/GetSessionResponse", raw)
				var id string
				mustUnmarshal(t, item["id"], &id)
				var got, want any
				mustUnmarshal(t, raw, &got)
				mustUnmarshal(t, tc.a.getSession(id).Raw, &want)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s's list item for %s is not its snapshot:\n list %s\n snap %s", tc.a.handle, id, raw, tc.a.getSession(id).Raw)
				}
			}
		}
		// carol's item stops at her invitation: no dave, bob still invited.
		rows := carol.mySessions()
		var ps []string
		for _, raw := range rows[0].Participants {
			var p struct{ Handle, Status string }
			mustUnmarshal(t, raw, &p)
			ps = append(ps, p.Handle+"="+p.Status)
		}
		if fmt.Sprint(ps) != "[@sl.alice=joined @sl.bob=invited @sl.carol=invited]" || rows[0].ID != s1 {
			t.Fatalf("carol lists %s with participants %v", rows[0].ID, ps)
		}
	})
}
