// Package group is the consumer group coordinator (DESIGN §6): KIP-848
// groups (server-side assignment), classic groups (Kafka's JoinGroup,
// SyncGroup, Heartbeat and LeaveGroup, the leader assigning on the client
// side), and committed offsets, kept durably in the internal topic
// __consumer_offsets.
//
// The Coordinator's methods are the entry points: Heartbeat, Commit,
// FetchOffsets, ListGroups, DescribeGroup and DeleteGroup take the gRPC
// API's messages (brokerpb); Join, Sync, ClassicHeartbeat, Leave,
// OffsetCommit, OffsetFetch, DeleteOffsets, Describe, List and Delete take
// this package's types (requests.go), for the Kafka listener. Every error
// they return wraps one sentinel (errors.go), one per Kafka error code.
//
// The decisions are state machines without I/O or clock: consumer.go (a
// KIP-848 group), classic.go and classic_calls.go (a classic group),
// assignor.go; the Coordinator feeds them requests, the time and topic
// metadata, and writes what changed through its writer (pipeline.go).
//
// # One namespace (K1)
//
// A group id names one group, classic or KIP-848 ("consumer"): while it
// has members of one kind, a member of the other kind is refused with
// ErrInconsistentGroupProtocol (Kafka's INCONSISTENT_GROUP_PROTOCOL). A
// group without members (offsets only, or every member gone) is taken over
// by either kind; its offsets stay.
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
// Writes for when memory changes). The records of __consumer_offsets
// (proto/broker/v1/meta.proto, protobuf with deterministic encoding; the
// topic is compacted on the key, so the last record of a key is its
// value; a nil value is a tombstone):
//
//	key   GroupRecordKey{group_id, topic, partition}
//	      topic set:   an offset of (topic, partition)
//	      topic empty: the group's metadata (partition 0)
//	value of an offset: GroupOffsetValue
//	      offset, metadata (the commit's string), commit_timestamp_ms,
//	      member_epoch (KIP-848 member epoch or classic generation; -1 for
//	      a standalone commit), leader_epoch (absent: unknown)
//	value of the metadata: GroupMetadataValue, one of
//	      KIP-848: group_epoch, members[] GroupMember{member_id,
//	        member_epoch (-2: a static member away), client_id,
//	        client_host, subscribed_topics (by name), assignment (last
//	        told), owned (last reported), instance_id,
//	        subscribed_topic_regex, rebalance_timeout_ms}
//	      classic: classic ClassicGroupValue{protocol_type, generation,
//	        protocol, leader, state (EMPTY, COMPLETING_REBALANCE, STABLE),
//	        members[] ClassicGroupMember{member_id, instance_id,
//	        client_id, client_host, session_timeout_ms,
//	        rebalance_timeout_ms, subscription (metadata for protocol),
//	        assignment}}
//
// A group's kind is the kind of its last metadata record (K1). Delete
// writes a tombstone for each offset and for the metadata; OffsetsRetention
// and DeleteOffsets write offset tombstones.
//
// After a failover Load restores KIP-848 members with their epochs,
// assignments and owned partitions, so the hand-over invariant survives;
// their sessions restart at Load with the default session timeout, regexes
// are resolved again, and targets are recomputed using the persisted
// assignments as the sticky base. The previous epoch of a member is not
// persisted: a heartbeat that relies on it after a failover is fenced.
// Classic groups: C8.
//
// # Classic groups
//
// States (Kafka's ClassicGroupState): Empty -> PreparingRebalance (a
// member joins, changes its protocols, leaves, or its session ends) ->
// CompletingRebalance (the join barrier passed) -> Stable (the leader's
// SyncGroup); a change in CompletingRebalance or Stable goes back to
// PreparingRebalance, and a barrier that ends with no member to Empty. A
// group that is deleted is gone (Kafka's Dead). Heartbeats get
// ErrRebalanceInProgress in PreparingRebalance, so members rejoin; Join
// and Sync calls park (a channel each, answered by the machine; no
// goroutine but the caller's) until their round gets there. Timers are
// deadlines the machine compares with the time it is given: Tick applies
// them, and a parked call wakes at its group's next deadline to apply it
// at once. The invariants, cited by the tests:
//
//   - C1 Protocols. A member joins with a protocol type and at least one
//     protocol, and only when the group's other members all support one
//     of its protocols and use its protocol type; otherwise
//     ErrInconsistentGroupProtocol. So while the group has members, some
//     protocol is supported by all of them.
//   - C2 Member ids are the coordinator's. A join without member id gets
//     one: a dynamic member that asked for it (JoinGroup v4+, KIP-394) is
//     answered ErrMemberIDRequired with the id, which stays pending for its
//     session timeout; otherwise it is added at once. An unknown id is
//     ErrUnknownMember. A follower repeating its join with the same
//     protocols in CompletingRebalance or Stable is answered at once with
//     the current generation; any other join of a known member waits in
//     the round (starting one).
//   - C3 The barrier. A round completes when every member and every
//     pending id has joined, but for a group that was Empty not before
//     the initial delay (InitialRebalanceDelay, pushed by each new member,
//     bounded by the rebalance deadline); and in any case at the rebalance
//     deadline: the largest rebalance timeout of the members when the
//     round started. Members that did not rejoin are removed then.
//   - C4 Generations. Each barrier bumps the generation by one, chooses the
//     protocol (among those every member supports, the one most members
//     list first; ties: the smaller name) and a leader (the previous one if
//     it rejoined, else the first to join), and answers every parked join;
//     only the leader gets the members and their metadata. The leader's
//     SyncGroup for the generation makes the group Stable: every member
//     gets exactly the bytes the leader gave it (none: empty), which the
//     coordinator never reads. A Sync of another generation is
//     ErrIllegalGeneration, one naming another protocol type or protocol
//     ErrInconsistentGroupProtocol, one in PreparingRebalance
//     ErrRebalanceInProgress; a Sync in Stable is answered at once.
//   - C5 Removal. A LeaveGroup (by member id, or by instance id), a
//     session that ends (not while the member waits in a Join or Sync),
//     and, at the sync deadline (the largest rebalance timeout after the
//     barrier), every member that has not synced, remove members; their
//     parked calls get ErrUnknownMember. A Stable or completing group then
//     prepares a new round; a round being prepared may complete.
//   - C6 Persistence. The group's record is the group as of its last
//     completed step: a barrier (CompletingRebalance, no assignments), the
//     leader's sync (Stable, with assignments), a static member's
//     takeover without a round, or the group becoming Empty.
//     PreparingRebalance is never written: a failover restarts the round.
//     A join or sync answered with a result is answered once that record
//     is durable (W6); its wait is handed out under the mutex that
//     answered it, so a failed write (W4) fails it. Hence a generation is
//     never revealed and then lost, and never reused.
//   - C7 Static members (KIP-345). An instance id maps to one member id. A
//     join with the instance id and no member id takes the instance over
//     under a new member id: the old id's parked calls, and its later
//     calls, get ErrFencedInstanceID. In a Stable group a follower whose
//     protocols did not change keeps its assignment without a round; a
//     leader, or changed protocols, start one.
//   - C8 Failover. Load restores the record: generation, protocol type and
//     protocol, leader, state, and members with their ids, timeouts,
//     subscription (their one protocol) and assignment. Sessions restart
//     at Load; a CompletingRebalance group waits for its leader's sync
//     until a sync deadline that restarts at Load. Members keep
//     heartbeating and committing with their generation.
//   - C9 Commits (OffsetCommit). A standalone commit (generation < 0, no
//     member) needs a group without members. A classic member's commit
//     needs the member (ErrUnknownMember; a static member's instance id
//     must be its: ErrFencedInstanceID) and the group's generation
//     (ErrIllegalGeneration), and not CompletingRebalance
//     (ErrRebalanceInProgress; PreparingRebalance is allowed, as Kafka
//     does). The check is made when the write's batch is formed (W3), so a
//     commit of a generation older than one a join revealed is never
//     written.
//
// # KIP-848 additions
//
// A member may subscribe by regular expression (subscribed_topic_regex,
// RE2 matched against whole topic names; regex.go), resolved against
// TopicSource.TopicNames when first seen, at Load, and every
// RegexRefreshInterval by Tick: a created or deleted topic changes the
// subscriptions, and starts an epoch. A static member (instance_id) may
// leave for a while with epoch -2: it keeps what it was assigned, nothing
// is rebalanced, until a join with its instance id (and any member id)
// takes its assignment over, or its session ends; a join with the
// instance id of an active member is ErrUnreleasedInstanceID. A heartbeat
// may leave owned out (owned_omitted: Kafka's null Topics): the member
// owns what it last reported. Two assignors: UniformAssignor (sticky,
// counts within one of each other, the default) and RangeAssignor
// (Kafka's range); a group uses the one most of its members ask for.
//
// # Limits
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
// A classic member's budget counts its ids, every protocol's metadata and
// its assignment; a join, or a leader's sync, that would pass a bound is
// refused (ErrLimitExceeded, nothing changed).
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
//     with the append's error. An append waits for its outcome (the
//     OffsetsLog holds a batch its bookies have not acknowledged until
//     they do or the log fails) and is unknown only when the coordinator
//     closes; a caller whose deadline passes first is told the outcome is
//     unknown, and the lane waits on. Were an append that lands later
//     taken for failed, memory would hold offsets behind the log, and a
//     member handed the partition would start from them and commit below
//     the landed commit. A record reported failed may be in the log all
//     the same, so the reverted metadata is a new version, ahead of the
//     log, and the group's next batch writes it after them: the log never
//     keeps a change that memory undid.
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
//     itself, a change the heartbeat builds on, is waited for. A side
//     batch that completes while the lane's batch is still in flight is
//     answered once that batch is applied (a failed one at once): a member
//     told of the new metadata (an assignment, a revocation) then reads
//     offsets holding every commit decided before it. In a log that
//     acknowledges in order this costs nothing beyond the side batch's own
//     append. Heartbeats and commits of other groups never wait for a
//     group's append. A classic call answers the same way (C6). Not covered: DescribeGroup,
//     Describe, ListGroups and List show memory, which may be a moment
//     ahead of the log (Kafka reads them at the last committed offset).
//
// A caller whose context ends while its write is queued leaves the lane
// (nothing of it is written); one whose write is being appended gets its
// context's error and an unknown outcome. The append itself serves the
// whole batch, so it is not bounded by the leader's context: it ends with
// its outcome, or when the coordinator closes. The queue holds one entry
// per request waiting for its answer, and a batch at most the log's batch
// bound. After Close, appends in flight end with an unknown outcome and
// are answered, but nothing more is applied.
package group
