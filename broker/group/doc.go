// Package group is the consumer group coordinator (DESIGN §6): server-side
// assignment in the style of Kafka's KIP-848, and committed offsets kept
// durably in the internal topic __consumer_offsets.
//
// # Placement
//
// The coordinator of a group is the owner of partition PartitionFor(group, N)
// of __consumer_offsets (murmur2, as Kafka's keyed partitioner). The broker
// runs one Coordinator per __consumer_offsets partition it owns, created with
// New and made to serve by Load, which replays the partition; until then every
// call returns ErrLoading. When the partition moves away the broker calls
// Close.
//
// # Epochs
//
// The group epoch is bumped when a member joins, leaves, is removed (session
// expiry, rebalance timeout) or changes its subscription, and when a
// subscribed topic's partition count changes (seen on heartbeats). Each bump
// recomputes the target assignment with a sticky assignor: per topic, the
// partitions are split among its subscribers within one of each other,
// keeping partitions where they are whenever balance allows; deterministic.
//
// A member's epoch is the group epoch it has caught up with. A member moves to
// the current group epoch on the first heartbeat that reports it owns no
// partition outside its target (it has revoked what moves away). Until then
// its assignment lists only what it keeps, and nothing new.
//
// Heartbeat requests: epoch 0 joins (member id chosen by the coordinator when
// empty; an existing id rejoining with 0 restarts from nothing without a
// rebalance), -1 leaves, otherwise the epoch must equal the member's, or be
// the previous one with owned partitions the member still holds (the response
// that bumped it was lost). Any other epoch is ErrFencedMemberEpoch (drop
// everything, rejoin with 0); an unknown member id is ErrUnknownMember.
//
// # Hand-over (the invariant)
//
// A partition is HELD by a member while it is in the assignment the member
// was last told or in the owned set it last reported. A member is only ever
// told it may own (assignment) target partitions no other member holds; the
// others are listed in pending. A partition therefore goes to its new owner
// only after the previous owner reported, in a heartbeat sent after it was
// told to give the partition up, that it no longer owns it — or after it left,
// its session expired, or it was fenced for not revoking within its rebalance
// timeout. So, with clients that follow the protocol (revoke what is missing
// from the assignment before the next heartbeat, take only what is in it,
// drop everything once their own session is lost), no partition is ever
// owned by two members at once.
//
// # Commits
//
// A member commit must carry the member's epoch or the previous one (a commit
// racing the heartbeat that bumped it); newer is ErrFencedMemberEpoch, older
// ErrStaleMemberEpoch. Only held partitions may be committed (others are
// refused per partition with reason STALE_MEMBER_EPOCH). An admin commit
// (no member id) needs a group without members and existing partitions.
// Commits may move offsets backwards (that is the member's choice).
//
// # Records
//
// Every change is written to the OffsetsLog before it is answered (and before
// memory changes, for commits and deletes). Key: brokerpb.GroupRecordKey
// (proto, deterministic). Topic set: an offset, value brokerpb.GroupOffsetValue
// (member_epoch -1 for admin commits). Topic empty: the group's metadata,
// value brokerpb.GroupMetadataValue: group epoch and members with epoch,
// client, subscription, assignment (last told) and owned (last reported).
// A nil value is a tombstone (DeleteGroup writes one for each offset and for
// the metadata, in one batch). The topic is compacted on the key.
//
// After a failover Load restores members with their epochs, assignments and
// owned partitions, so the hand-over invariant survives; their sessions
// restart at Load with the default timeouts, and targets are recomputed
// using the persisted assignments as the sticky base. The previous epoch of a
// member is not persisted: a heartbeat that relies on it after a failover is
// fenced.
//
// # Limits (review finding M2)
//
// A group's metadata is one record, rewritten whole on every change, so it
// must fit in a batch of __consumer_offsets (max.message.bytes). Limits
// (config.go, limits.go) refuse, before anything changes, a request that
// would make a coordinator hold more than it allows: ids, client id and
// host over MaxIDBytes, subscriptions over MaxSubscribedTopics names or
// names over MaxTopicNameBytes (ErrInvalid); a join to a group of
// MaxMembers (ErrGroupMaxSize); a new group past MaxGroups for the whole
// broker, a member whose entry would pass MaxMemberBytes or a record that
// would pass MaxGroupBytes, at most half the log's batch bound
// (ErrLimitExceeded). The byte bounds are estimates that reserve room for
// each subscribed topic's assignment and owned entries, which the
// coordinator itself writes later; reporting owned partitions the member
// was handed out never counts as growth. Only growth is refused: what
// Load replays is never checked, so a group stored over a limit loads,
// and its members may heartbeat, leave and shrink it. Refusals are
// counted in strata_broker_group_requests_refused_total{reason}.
//
// Offsets of a group without members expire after OffsetsRetention
// (KIP-211; tombstones in the log), and an empty group goes with them.
// Not done: static membership (epoch -2), client-side assignors.
package group
