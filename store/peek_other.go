//go:build !unix

package store

import "net"

// connClosedByPeer cannot peek here; the query's own failure is retried
// where that is safe (guard.go, inTx).
func connClosedByPeer(net.Conn) bool { return false }
