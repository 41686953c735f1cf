package group

import "errors"

// Sentinel errors of the coordinator. Match them with errors.Is: the package
// wraps them with %w to add the group, the member or the reason. Each is
// one Kafka error code (named with it below); where two apply the error
// wraps both, the specific one first (ErrInvalidSessionTimeout with
// ErrInvalid): test the specific one first.
//
// Which call returns which (the broker maps them to rpcerror reasons, the
// Kafka listener to error codes):
//
//	every call     ErrLoading (COORDINATOR_LOADING, retryable) before Load
//	               has finished; ErrClosed (NOT_COORDINATOR) after Close
//	               and while Config.Authority says false.
//	Heartbeat      ErrInvalid (malformed request, or an id, a topic name
//	               or a subscription over Limits), ErrInvalidSessionTimeout,
//	               ErrInvalidRegularExpression, ErrUnsupportedAssignor,
//	               ErrInconsistentGroupProtocol (a classic group with
//	               members), ErrGroupMaxSize (a join
//	               to a full group), ErrLimitExceeded (a new group past
//	               MaxGroups, a member or group record that would grow past
//	               MaxMemberBytes or MaxGroupBytes), ErrUnknownMember
//	               (UNKNOWN_MEMBER_ID: rejoin with an empty member id and
//	               epoch 0), ErrFencedMemberEpoch (FENCED_MEMBER_EPOCH: drop
//	               every partition, rejoin with epoch 0),
//	               ErrUnreleasedInstanceID, ErrFencedInstanceID, or the
//	               OffsetsLog's error when the group's new state could not
//	               be persisted (the group is back to what the log holds:
//	               retry the heartbeat with the same epoch).
//	Commit         ErrInvalid, ErrLimitExceeded (an admin commit that
//	               would create a group past MaxGroups), ErrUnknownMember, ErrFencedMemberEpoch (an
//	               epoch newer than the member's), ErrStaleMemberEpoch
//	               (STALE_MEMBER_EPOCH: an older epoch; heartbeat, then
//	               retry), ErrGroupNotEmpty (an admin commit to a group with
//	               members), or the OffsetsLog's error (outcome unknown).
//	               Per-partition refusals travel in the response instead,
//	               rendered by Config.PartitionError: ErrInvalid (topic,
//	               partition, offset or metadata), ErrPartitionNotHeld (a
//	               member commit of a partition it does not hold),
//	               ErrUnknownPartition (an admin commit of a partition that
//	               does not exist).
//	OffsetCommit   the call: ErrInvalidGroupID, ErrNotFound, ErrUnknownMember,
//	               ErrFencedInstanceID, ErrIllegalGeneration,
//	               ErrRebalanceInProgress, ErrFencedMemberEpoch,
//	               ErrStaleMemberEpoch, ErrLimitExceeded; per partition:
//	               ErrInvalid, ErrOffsetMetadataTooLarge,
//	               ErrUnknownPartition, ErrPartitionNotHeld.
//	OffsetFetch    ErrInvalidGroupID, ErrUnknownMember, ErrStaleMemberEpoch.
//	DeleteOffsets  ErrInvalidGroupID, ErrNotFound, ErrGroupNotEmpty; per
//	               partition ErrGroupSubscribedToTopic.
//	Join, Sync, ClassicHeartbeat, Leave: see each method.
//	DescribeGroup, Describe: ErrInvalid, ErrNotFound.
//	Heartbeat, Commit, OffsetCommit, DeleteGroup, Delete, DeleteOffsets,
//	Join, Sync: when the caller's context ends while its write waits for
//	               its group's lane, ctx's error (nothing of it was
//	               written); while its write is being appended, ctx's error
//	               too, and the outcome is unknown.
//	DeleteGroup, Delete: ErrInvalid (ErrInvalidGroupID), ErrNotFound,
//	               ErrGroupNotEmpty, or the OffsetsLog's error.
//	Load           the OffsetsLog's or the TopicSource's error, or ctx's.
var (
	// ErrLoading: the coordinator is still replaying its __consumer_offsets
	// partition. Retryable.
	ErrLoading = errors.New("group: coordinator loading")
	// ErrClosed: the coordinator was closed (its partition moved away).
	ErrClosed = errors.New("group: coordinator closed")
	// ErrUnknownMember: the group has no member with that id (it left, its
	// session expired, or it was fenced for not revoking in time).
	ErrUnknownMember = errors.New("group: unknown member id")
	// ErrFencedMemberEpoch: the member's epoch is not one the coordinator
	// accepts; the member must give up its partitions and rejoin with epoch 0.
	ErrFencedMemberEpoch = errors.New("group: fenced member epoch")
	// ErrStaleMemberEpoch: a commit carried an epoch older than the
	// member's; the member should heartbeat and retry with its new epoch.
	ErrStaleMemberEpoch = errors.New("group: stale member epoch")
	// ErrGroupNotEmpty: the group has members (delete, admin commit)
	// (NON_EMPTY_GROUP).
	ErrGroupNotEmpty = errors.New("group: group not empty")
	// ErrNotFound: no such group (GROUP_ID_NOT_FOUND).
	ErrNotFound = errors.New("group: not found")
	// ErrInvalid: a malformed request; the message says what
	// (INVALID_REQUEST).
	ErrInvalid = errors.New("group: invalid request")
	// ErrGroupMaxSize: a join to a group that has Limits.MaxMembers members
	// (Kafka's GROUP_MAX_SIZE_REACHED). Nothing changed; not retryable
	// until members leave.
	ErrGroupMaxSize = errors.New("group: group max size reached")
	// ErrLimitExceeded: the request would make the coordinator hold more
	// than a Limit allows (groups, or bytes of a member or a group's
	// record). Nothing changed.
	ErrLimitExceeded = errors.New("group: limit exceeded")
	// ErrPartitionNotHeld refuses one partition of a member commit: the
	// member does not hold it (not assigned, or already revoked). The
	// broker tells it as STALE_MEMBER_EPOCH, not retryable.
	ErrPartitionNotHeld = errors.New("group: partition not held by the member")
	// ErrUnknownPartition refuses one partition of a standalone or classic
	// commit: the topic has no such partition (UNKNOWN_TOPIC_OR_PARTITION).
	ErrUnknownPartition = errors.New("group: unknown partition")
	// ErrUnknownTopic may be returned by a TopicSource for a missing topic
	// (returning 0 partitions and nil means the same).
	ErrUnknownTopic = errors.New("group: unknown topic")

	// ErrInvalidGroupID: an empty group id where a group is joined,
	// synced, heartbeated or left (Kafka's INVALID_GROUP_ID).
	ErrInvalidGroupID = errors.New("group: invalid group id")
	// ErrInvalidSessionTimeout: a session timeout outside
	// [MinSessionTimeout, MaxSessionTimeout] (INVALID_SESSION_TIMEOUT). It
	// is returned wrapped together with ErrInvalid.
	ErrInvalidSessionTimeout = errors.New("group: invalid session timeout")
	// ErrInconsistentGroupProtocol: a member of the other kind of group
	// (classic or KIP-848), a protocol type that is not the group's, no
	// protocol in common with the members, or a SyncGroup naming another
	// protocol (INCONSISTENT_GROUP_PROTOCOL).
	ErrInconsistentGroupProtocol = errors.New("group: inconsistent group protocol")
	// ErrMemberIDRequired: a first JoinGroup that asked for it (v4+,
	// KIP-394); the result carries the member id to rejoin with
	// (MEMBER_ID_REQUIRED).
	ErrMemberIDRequired = errors.New("group: member id required")
	// ErrIllegalGeneration: a classic member's generation is not the
	// group's (ILLEGAL_GENERATION): rejoin.
	ErrIllegalGeneration = errors.New("group: illegal generation")
	// ErrRebalanceInProgress: a classic group is rebalancing
	// (REBALANCE_IN_PROGRESS): rejoin.
	ErrRebalanceInProgress = errors.New("group: rebalance in progress")
	// ErrFencedInstanceID: a static member's instance id now belongs to
	// another member id (FENCED_INSTANCE_ID): the old one must stop.
	ErrFencedInstanceID = errors.New("group: fenced instance id")
	// ErrUnreleasedInstanceID: a KIP-848 join with an instance id whose
	// member is still active (UNRELEASED_INSTANCE_ID).
	ErrUnreleasedInstanceID = errors.New("group: unreleased instance id")
	// ErrUnsupportedAssignor: a KIP-848 server assignor other than
	// UniformAssignor and RangeAssignor (UNSUPPORTED_ASSIGNOR).
	ErrUnsupportedAssignor = errors.New("group: unsupported assignor")
	// ErrInvalidRegularExpression: a subscription regex that does not
	// compile (INVALID_REGULAR_EXPRESSION). Returned wrapped together with
	// ErrInvalid.
	ErrInvalidRegularExpression = errors.New("group: invalid regular expression")
	// ErrGroupSubscribedToTopic refuses one partition of DeleteOffsets: the
	// group's members subscribe to its topic (GROUP_SUBSCRIBED_TO_TOPIC).
	ErrGroupSubscribedToTopic = errors.New("group: group subscribed to topic")
	// ErrOffsetMetadataTooLarge refuses one partition of a commit: its
	// metadata is longer than MaxMetadataBytes (OFFSET_METADATA_TOO_LARGE).
	// Returned wrapped together with ErrInvalid.
	ErrOffsetMetadataTooLarge = errors.New("group: offset metadata too large")
)

// UniformAssignor is the name of the coordinator's KIP-848 assignor (the
// only one): per topic, partitions split evenly among the subscribers,
// sticky.
const UniformAssignor = "uniform"

// RangeAssignor is the name of the coordinator's other KIP-848 assignor:
// each topic's partitions in contiguous ranges, by member id (Kafka's
// "range").
const RangeAssignor = "range"
