//go:build !unix

package main

import (
	"errors"
	"os"
)

var errLockHeld = errors.New("lock held by another process")

// flockExclusive is a no-op where flock(2) does not exist: nothing stops a
// second aspd on the same store there.
func flockExclusive(f *os.File) error { return nil }
