package bench

import (
	"fmt"

	"github.com/strata-log/strata/internal/benchsuite"
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
// cluster's data dir, or nil. A workload is estimated to write copies x its
// records at produce-max's measured rate for its duration (an upper bound:
// the e2e workloads run slower), plus the compaction workload's source
// topics. Writing past the bookies' threshold turns them read-only, and the
// workload then stalls at 0 records/s instead of measuring anything: the
// suite with --duration 60s did that on a 75 GB disk.
func spaceFor(dir, name string, o Options, done benchsuite.Run, quick bool) error {
	total, free, err := diskUsage(dir)
	if err != nil || total == 0 {
		return nil // unknown: let the bookies' own check decide
	}
	var need float64
	if p, ok := done.Workload(benchsuite.WorkloadProduce); ok && name != benchsuite.WorkloadCatchUp {
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
	return fmt.Errorf("%s would write about %.1f GB (%d copies at produce-max's rate for %s) to %s, which has %.1f GB free of %.1f GB; "+
		"the bookies turn read-only at %.0f%% used: give a shorter --duration or a --dir with more room",
		name, need/1e9, copies, o.Duration, dir, float64(free)/1e9, float64(total)/1e9, 100*bookieReadOnlyAbove)
}

// compactSource is the size of the compaction workload's source topics.
func compactSource(quick bool) float64 {
	cycles, sourceBytes, _ := compactShape(quick)
	return float64(cycles) * sourceBytes
}
