package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
)

// A database URL that sets the store's pool size (pool_max_conns, which
// docs/storage.md documents) also opens the node's own connections: the
// pool's settings are not sent to the server as runtime parameters.
func TestConnectWithPoolSettings(t *testing.T) {
	u := dbtest.Postgres(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	n := &Node{cfg: Config{DatabaseURL: u + sep + "pool_max_conns=4&pool_min_conns=1"}}
	conn, err := n.connect("aspd-test")
	if err != nil {
		t.Fatalf("connect with pool settings in the URL: %v", err)
	}
	defer conn.Close(context.Background())
	var name string
	if err := conn.QueryRow(context.Background(), "SELECT current_setting('application_name')").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != "aspd-test" {
		t.Fatalf("application_name %q, want aspd-test", name)
	}
}
