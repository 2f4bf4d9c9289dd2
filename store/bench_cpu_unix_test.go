//go:build unix

package store_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time this process has used so far (user and
// system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since start as
// cpu-µs/op. On a shared machine wall time per op mostly measures the
// neighbours' load; CPU per op measures the path itself (the client side
// of it: the database's CPU is not counted).
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	}
}
