package store_test

import (
	"slices"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

// TestMemberCacheSeesOtherNodes: the message path keeps each session's
// participants in memory (store/members.go). Two stores on one database
// stand for two nodes: what one changes about a session's members, the
// other's next message must see, although its own cache still holds the
// members it read before.
func TestMemberCacheSeesOtherNodes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, url string) {
		node1, node2 := open(t, url), open(t, url)
		a, b, c := "@mc.alice", "@mc.bob", "@mc.carol"
		agents(t, node1, a, b, c)
		sid := create(t, node1, a, "members", b, c)
		_, err := node1.Join(bg, sid, b)
		must(t, err)
		send(t, node1, sid, a, "cached now")
		send(t, node1, sid, b, "bob is joined")

		// Bob leaves on the other node: his next message, on the first,
		// is refused although the first node cached him as joined.
		_, err = node2.Leave(bg, sid, b)
		must(t, err)
		if _, _, err := node1.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: b, Content: text("after leaving")}); err == nil {
			t.Fatal("a participant who left on another node could still send on this one")
		}

		// Carol joins on the other node: the first node's next commit
		// names her among the recipients.
		_, err = node2.Join(bg, sid, c)
		must(t, err)
		_, commit, err := node1.SendMessage(bg, store.SendMessage{SessionID: sid, Sender: a, Content: text("welcome carol")})
		must(t, err)
		if !slices.Contains(commit.Recipients, c) {
			t.Fatalf("recipients %v miss %s, who joined on another node", commit.Recipients, c)
		}
		// And she may send there.
		send(t, node1, sid, c, "hello from carol")
	})
}
