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
// Every change is written to the OffsetsLog before it is answered (see
// Writes for when memory changes). Key: brokerpb.GroupRecordKey
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
// (KIP-211; Tick writes tombstones), and an empty group goes with them.
// Not done: static membership (epoch -2), client-side assignors.
//
// # Writes (no I/O under the mutex; pipeline.go)
//
// The coordinator's mutex guards memory only: no append (a quorum write,
// milliseconds) and no TopicSource call happens under it. Each write is
// decided under the mutex, appended without it, and its outcome applied
// under it again. The invariants, cited by the tests:
//
//   - W1 Versions. A heartbeat, a session or rebalance timeout changes a
//     group's metadata in memory at once; each change is a new version.
//     The group remembers the version the log holds (persisted) and that
//     metadata (durable). A metadata record is the whole group as memory
//     has it when its batch is formed, never an older copy.
//   - W2 One lane per group. At most one batch of a group's records is
//     in flight (and, next to a formed batch of offsets only, at most one
//     of its metadata alone: W6; the two share no key, so their order does
//     not matter, and the lane's next batch waits for both). So at most one
//     metadata record of a group is in flight. Writes that
//     arrive meanwhile queue, in arrival order, and the next batch takes
//     as many as fit in the log's batch bound (a group commit), preparing
//     each when the batch is formed, that is after every earlier write of
//     the group was applied or failed. So the log's order of a group's
//     records of one key is the order memory applies them. Lanes of
//     different groups append in parallel: a replay of one
//     group reads only its own keys, so records of different groups
//     commute and the partition's log is an interleaving of per-group
//     sequences, each in the order memory assumed. No goroutine is
//     started: the lane is led by a request waiting for it anyway (woken
//     to lead the next batch when the one before completes), or by Tick.
//   - W3 Offsets change after the append, in lane order. A commit is
//     checked (member, epoch, held partitions; or, for an admin commit, an
//     empty group) when its batch is formed, against the group as it is
//     then, and applied once durable, before it is answered. Commits of
//     one group are applied in the order they are acknowledged; a commit
//     that waited behind a rebalance, a leave or a fencing is checked
//     against it and refused, so a stale commit is never written.
//   - W4 A failed append changes nothing. No offset is applied. If the
//     batch carried the group's metadata, the group reverts to its durable
//     metadata (members that stay keep their sessions; targets are
//     recomputed) and every heartbeat waiting on a version it undoes fails
//     with the append's error. An error is an unknown outcome: the records
//     may yet be in the log, which the client was told. So the reverted
//     metadata is a new version, ahead of the log, and the group's next
//     batch writes it after them: the log never keeps a change that
//     memory undid.
//   - W5 Deletes and expiry are built when their batch is formed: a
//     tombstone for every offset memory then holds (every commit before
//     them in the lane applied), applied once durable. A member that
//     joined meanwhile keeps the group; its metadata is written next.
//   - W6 No answer reveals what is not durable. Every batch carries the
//     group's metadata when memory is ahead of the log, and a write is
//     answered only once its batch is durable: a commit is never accepted
//     against metadata the log might lose. A heartbeat waits until the
//     version it saw is durable: a heartbeat that changes nothing of a
//     group whose log is up to date (the steady state) never waits for an
//     append. One that changes its group's metadata waits for its own
//     append only: when the group's batch in flight holds offsets only
//     (commits, decided on metadata the log already holds), the metadata
//     goes at once in a batch of its own next to it (the two share no
//     key); only a batch in flight that carries the group's metadata
//     itself, a change the heartbeat builds on, is waited for. Heartbeats
//     and commits of other groups never wait for a group's append. Not
//     covered: DescribeGroup and ListGroups show memory, which may be a
//     moment ahead of the log (Kafka reads them at the last committed
//     offset).
//
// A caller whose context ends while its write is queued leaves the lane
// (nothing of it is written); one whose write is being appended gets its
// context's error and an unknown outcome. The append itself serves the
// whole batch, so it is bounded by WriteTimeout, not by the leader's
// context. The queue holds one entry per request waiting for its answer,
// and a batch at most the log's batch bound. After Close, appends in
// flight complete and are answered, but nothing more is applied.
package group
