package kafka

import (
	"strconv"
)

// apis are the APIs the adapter serves and the versions it advertises.
// Minimums reach down to what old clients need to turn features on
// (librdkafka enables compression only when Produce v0 is in range, and
// time-based offsets with ListOffsets v1; Produce v0-2 are then refused per
// partition).
func (a *Adapter) apis() []api {
	return []api{
		{key: 0, min: 0, max: 11, h: a.produce},
		{key: 1, min: 4, max: 16, h: a.fetch},
		{key: 2, min: 0, max: 8, h: a.listOffsets},
		{key: 3, min: 0, max: 12, h: a.metadata},
		{key: 8, min: 0, max: 9, h: a.grp.offsetCommit},
		{key: 9, min: 0, max: 9, h: a.grp.offsetFetch},
		{key: 10, min: 0, max: 5, h: a.grp.findCoordinator},
		{key: 11, min: 0, max: 9, h: a.grp.joinGroup},
		{key: 12, min: 0, max: 4, h: a.grp.heartbeat},
		{key: 13, min: 0, max: 5, h: a.grp.leaveGroup},
		{key: 14, min: 0, max: 5, h: a.grp.syncGroup},
		{key: 15, min: 0, max: 5, h: a.grp.describeGroups},
		{key: 16, min: 0, max: 5, h: a.grp.listGroups},
		{key: 19, min: 0, max: 7, h: a.createTopics},
		{key: 20, min: 0, max: 6, h: a.deleteTopics},
		{key: 21, min: 0, max: 2, h: a.deleteRecords},
		{key: 22, min: 0, max: 4, h: a.initProducerID},
		{key: 23, min: 0, max: 4, h: a.offsetForLeaderEpoch},
		{key: 32, min: 0, max: 4, h: a.describeConfigs},
		{key: 33, min: 0, max: 2, h: a.alterConfigs},
		{key: 37, min: 0, max: 3, h: a.createPartitions},
		{key: 42, min: 0, max: 2, h: a.grp.deleteGroups},
		{key: 44, min: 0, max: 1, h: a.incrementalAlterConfigs},
		{key: 47, min: 0, max: 0, h: a.grp.offsetDelete},
		{key: 60, min: 0, max: 1, h: a.describeCluster},
		{key: 68, min: 0, max: 1, h: a.grp.consumerGroupHeartbeat},
		{key: 69, min: 0, max: 0, h: a.grp.consumerGroupDescribe},
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
