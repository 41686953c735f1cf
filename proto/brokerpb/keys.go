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
