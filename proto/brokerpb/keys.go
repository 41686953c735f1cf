package brokerpb

// Hand-written, not generated: the metad keys of meta.proto's records that
// packages outside the broker read, so that they need not link the code
// that writes them (`strata tier scrub` reads the partitions' lists
// without linking broker/partlog, which owns them).

// PartitionPrefix + "<topic>/<partition>" holds a partition's
// PartitionLog, written by compare-and-set by its owner. Topic names never
// contain '/', so PartitionPrefix + "<topic>/" lists exactly one topic's
// partitions.
const PartitionPrefix = "/strata/partitions/"

// TierSegmentMACKey holds the cluster's tier key: 32 random bytes, the
// secret of the MACs of segment objects (tiering/segfile, tiering T11).
// The first broker with a tier store creates it (create-only); brokers
// read it to write and read objects, and `strata tier scrub` to check
// them. No other role needs it.
const TierSegmentMACKey = "/strata/tier/segment-mac-key"
