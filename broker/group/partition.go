package group

import "github.com/strata-log/strata/recordbatch"

// OffsetsTopic is the internal topic whose partitions hold committed offsets
// and group metadata; the owner of partition PartitionFor(group, n) is the
// group's coordinator.
const OffsetsTopic = "__consumer_offsets"

// DefaultOffsetsPartitions is the partition count of OffsetsTopic.
const DefaultOffsetsPartitions int32 = 16

// PartitionFor returns the __consumer_offsets partition, hence the
// coordinator, of a group: toPositive(murmur2(group)) % n, Kafka's keyed
// partitioner (protocols.md §9), so any client can compute it. It returns 0
// when n <= 0.
func PartitionFor(group string, n int32) int32 {
	if n <= 0 {
		return 0
	}
	return recordbatch.PartitionForKey([]byte(group), n)
}
