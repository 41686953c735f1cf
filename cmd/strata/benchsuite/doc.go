// Package benchsuite holds the pure parts of `strata bench suite`: the
// machine's limits measured in the same run (fdatasync latency and write
// bandwidth of one and of three concurrent journal-like files, loopback
// TCP round trip), CPU accounting from /proc/PID/stat, the bookies'
// journal metrics scraped from their /metrics, the ledger entries each
// broker and bookie handled and the CPU and heap allocations they cost
// per entry (perentry.go), the JSON report, and the
// table that states every result as a ratio to the limit that binds it
// next to its target, every Kafka workload against its gRPC twin
// (KafkaRatios; docs/bench/README.md), and the group workloads' reads and
// rebalance times (groups.go).
//
// The command (cmd/strata/benchsuite.go) wires it: it starts a cluster
// with cmd/strata/devcluster, runs the workloads with the `strata bench`
// code, and fills a Report.
//
// Invariants:
//
//	B1. Limits are measured in the directory the bookies' data lives in,
//	    before the cluster starts, so that they see the same file system
//	    and are not disturbed by it.
//	B2. A disk probe writes like the bookie journal (ledger/journal): one
//	    write of the whole group, then one fdatasync, into a file whose
//	    space was reserved ahead (fallocate KEEP_SIZE), with O_DIRECT
//	    where the file system allows it (journal format 2), at most
//	    ProbeFileBytes per journal (the probe wraps around), so a probe
//	    never takes more disk than Journals × ProbeFileBytes. The read
//	    probe reads such files sequentially, one reader per bookie, with
//	    O_DIRECT, so it measures the disk and not the page cache.
//	B3. Latency quantiles are nearest-rank over every sample (Quantile);
//	    a probe with no sample reports zeros, never NaN.
//	B4. Ratios are computed from the Report alone (Ratios), so a stored
//	    report can be re-read and its table printed again.
//
// The report's JSON is the Report type's encoding; Version is bumped when
// a field changes meaning.
package benchsuite
