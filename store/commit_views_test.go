package store_test

import (
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

// Every commit carries, for each recipient, the view the store holds for it
// after the commit, so the hub needs no read to learn it.
func TestCommitCarriesRecipientViews(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		s := open(t, url)
		a, b, c := "@a.views", "@b.views", "@c.views"
		agents(t, s, a, b, c)
		check := func(what string, commit *store.Commit, err error) {
			t.Helper()
			must(t, err)
			if commit == nil {
				t.Fatalf("%s: no commit", what)
			}
			if len(commit.Views) != len(commit.Recipients) {
				t.Fatalf("%s: %d views for %d recipients", what, len(commit.Views), len(commit.Recipients))
			}
			for i, h := range commit.Recipients {
				want, err := s.View(bg, commit.SessionID, h)
				must(t, err)
				if commit.Views[i] != want {
					t.Fatalf("%s: %s's carried view %+v, the store holds %+v", what, h, commit.Views[i], want)
				}
			}
		}
		resp, commit, err := s.CreateSession(bg, store.CreateSession{Creator: a, Invite: []string{b, c}})
		check("create", commit, err)
		sid := resp.SessionID
		commit, err = s.Join(bg, sid, b)
		check("join", commit, err)
		_, commit, err = s.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: b, Content: text("hi")})
		check("send", commit, err)
		commit, err = s.Leave(bg, sid, b)
		check("leave", commit, err)
		commit, err = s.End(bg, sid, a)
		check("end", commit, err)
		commit, err = s.Reopen(bg, sid, a, []string{b}, nil, nil)
		check("reopen", commit, err)
	})
}
