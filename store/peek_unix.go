//go:build unix

package store

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// connClosedByPeer reports whether an idle connection has anything waiting
// to be read, or its end: on an idle PostgreSQL connection the server sends
// nothing unasked except a FATAL error before it closes the connection
// (its backend terminated). One non-blocking peek, no round trip.
func connClosedByPeer(c net.Conn) bool {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn() // bytes waiting under TLS are bytes waiting
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	// Control, not Read: Read takes the descriptor's read lock, which pgx's
	// background reader may hold, blocked in a read of its own.
	_ = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		case err != nil, n >= 0: // an error, data, or the end of the stream (n == 0)
			closed = true
		}
	})
	return closed
}
