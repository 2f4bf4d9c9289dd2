//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

var errLockHeld = errors.New("lock held by another process")

// flockExclusive takes an exclusive flock(2) on f without waiting.
func flockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errLockHeld
		default:
			return err
		}
	}
}
