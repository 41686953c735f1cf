// Package alloctest measures what code allocates and the CPU it takes,
// for the tests that bound them and the benchmarks that report them.
// Allocations are the whole process's: run the code measured with
// nothing else busy.
package alloctest

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/racedetect"
)

// SkipUnderRace skips a test of allocation bounds under the race
// detector, which voids them (make test runs them again without it).
func SkipUnderRace(tb testing.TB) {
	tb.Helper()
	if racedetect.Enabled {
		tb.Skip("allocation bounds are not asserted under the race detector")
	}
}

// MallocsPer runs f and returns the heap allocations made while it ran,
// divided by n.
func MallocsPer(n int, f func()) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(n)
}

// Bytes runs f and returns the bytes allocated while it ran (TotalAlloc:
// counted even if the collector frees them again).
func Bytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// CPUTime is the process's user and system CPU time so far.
func CPUTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
