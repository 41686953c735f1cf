package bench

import (
	"fmt"

	"github.com/strata-log/strata/cmd/strata/benchsuite"
)

// copies: every acknowledged byte is written by Qw = 3 bookies, all in the
// suite's one data directory.
const copies = 3

// bookieReadOnlyAbove is the used fraction at which the bookies turn
// read-only (storage.DefaultReadOnlyAbove; a test holds them equal: the
// strata binary must not link the storage engine). spareFraction: what a
// workload must leave free beyond it, for Pebble, logs and the estimate's
// error.
const (
	bookieReadOnlyAbove = 0.95
	spareFraction       = 0.05
)

// spaceFor says why the named workload would not fit on the disk of the
// cluster's data dir, or nil. o is the workload's plan (planWorkload). A
// workload is estimated to write copies x its records for its duration:
// an open-loop one (o.Rate > 0: the e2e and compaction loads) at its own
// rate, a closed-loop one at produce-max's measured rate (an estimate for
// the 64 KiB one, which may run faster), plus the compaction workload's
// source topics. Writing past the bookies' threshold turns them
// read-only, and the workload then stalls at 0 records/s instead of
// measuring anything: the suite with --duration 60s did that on a 75 GB
// disk.
func spaceFor(dir, name string, o Options, done benchsuite.Run, quick bool) error {
	total, free, err := diskUsage(dir)
	if err != nil || total == 0 {
		return nil // unknown: let the bookies' own check decide
	}
	var need float64
	rate := "produce-max's rate"
	switch p, ok := done.Workload(benchsuite.WorkloadProduce); {
	case benchsuite.IsCatchUp(name):
	case o.Rate > 0:
		need = copies * o.Rate * float64(o.RecordSize) * o.Duration.Seconds()
		rate = fmt.Sprintf("%.0f records/s", o.Rate)
	case ok:
		need = copies * p.MBPerSec * 1e6 * o.Duration.Seconds()
	}
	if name == benchsuite.WorkloadCompact {
		need += copies * compactSource(quick)
	}
	limit := (bookieReadOnlyAbove - spareFraction) * float64(total)
	used := float64(total - free)
	if used+need <= limit {
		return nil
	}
	return fmt.Errorf("%s would write about %.1f GB (%d copies at %s for %s) to %s, which has %.1f GB free of %.1f GB; "+
		"the bookies turn read-only at %.0f%% used: give a shorter --duration or a --dir with more room",
		name, need/1e9, copies, rate, o.Duration, dir, float64(free)/1e9, float64(total)/1e9, 100*bookieReadOnlyAbove)
}

// compactSource is the size of the compaction workload's source topics.
func compactSource(quick bool) float64 {
	cycles, sourceBytes, _ := compactShape(quick)
	return float64(cycles) * sourceBytes
}
