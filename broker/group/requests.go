package group

import "time"

// The requests and results of the classic protocol and of the Kafka-shaped
// offset and admin calls (the Kafka listener's adapter translates its wire
// messages to and from these). Absent Kafka fields take the zero value
// unless a field says otherwise.

// Protocol is one assignment protocol a classic member supports (for the
// "consumer" protocol type: an assignor name, and the subscription the
// client encodes for it). The coordinator never interprets Metadata.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinRequest is a classic JoinGroup.
type JoinRequest struct {
	GroupID string
	// MemberID is empty on a member's first join.
	MemberID string
	// InstanceID is group.instance.id (KIP-345 static membership), or "".
	InstanceID string
	ClientID   string
	ClientHost string
	// SessionTimeout must be within [MinSessionTimeout, MaxSessionTimeout].
	SessionTimeout time.Duration
	// RebalanceTimeout bounds the join barrier; 0 takes SessionTimeout
	// (JoinGroup v0 has none).
	RebalanceTimeout time.Duration
	ProtocolType     string
	// Protocols in the member's order of preference.
	Protocols []Protocol
	// RequireMemberID: a first join (empty MemberID) of a dynamic member
	// gets ErrMemberIDRequired with a member id to rejoin with (JoinGroup
	// v4+, KIP-394).
	RequireMemberID bool
}

// JoinResult is the answer to a JoinRequest.
type JoinResult struct {
	MemberID     string
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	// Members is set for the leader only: every member with its metadata
	// for Protocol, for the leader's assignor.
	Members []JoinMember
}

// JoinMember is one member as the leader sees it.
type JoinMember struct {
	MemberID   string
	InstanceID string
	Metadata   []byte
}

// SyncRequest is a classic SyncGroup.
type SyncRequest struct {
	GroupID    string
	MemberID   string
	InstanceID string
	Generation int32
	// ProtocolType and Protocol are checked against the group's when set
	// (SyncGroup v5+).
	ProtocolType string
	Protocol     string
	// Assignments: the leader's assignment for every member (followers
	// send none). A member without one gets empty bytes.
	Assignments []MemberAssignment
}

// MemberAssignment is the leader's assignment for one member: opaque
// bytes, relayed as they are.
type MemberAssignment struct {
	MemberID   string
	Assignment []byte
}

// SyncResult is the answer to a SyncRequest: the member's assignment.
type SyncResult struct {
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

// HeartbeatRequest is a classic Heartbeat.
type HeartbeatRequest struct {
	GroupID    string
	MemberID   string
	InstanceID string
	Generation int32
}

// LeaveRequest is a classic LeaveGroup: members by member id, or by
// instance id (LeaveGroup v3+; MemberID, when also set, must be the
// instance's).
type LeaveRequest struct {
	GroupID string
	Members []LeavingMember
}

// LeavingMember names one member that leaves.
type LeavingMember struct {
	MemberID   string
	InstanceID string
}

// LeaveResult is one member's outcome: Err is nil, ErrUnknownMember or
// ErrFencedInstanceID. MemberID is the member that left (resolved from
// the instance id when only that was given).
type LeaveResult struct {
	MemberID   string
	InstanceID string
	Err        error
}

// OffsetCommitRequest is a Kafka OffsetCommit: for a classic group,
// Generation is the generation; for a KIP-848 group, the member epoch.
// Generation -1 with an empty MemberID is a standalone commit (a group
// without members: admin tools, assign()-style consumers).
type OffsetCommitRequest struct {
	GroupID    string
	MemberID   string
	InstanceID string
	Generation int32
	Offsets    []OffsetCommit
}

// OffsetCommit is one partition's commit.
type OffsetCommit struct {
	Topic     string
	Partition int32
	Offset    int64
	// LeaderEpoch is the committed leader epoch (OffsetCommit v6+), -1
	// when unknown.
	LeaderEpoch int32
	Metadata    string
}

// PartitionResult is one partition's outcome of a commit or an offset
// delete: Err is nil or wraps one of the per-partition errors the call
// documents.
type PartitionResult struct {
	Topic     string
	Partition int32
	Err       error
}

// OffsetFetchRequest is a Kafka OffsetFetch for one group.
type OffsetFetchRequest struct {
	GroupID string
	// Partitions: nil for every committed partition.
	Partitions []TopicPartition
	// MemberID and MemberEpoch (OffsetFetch v9+, KIP-848 groups) are
	// checked when MemberID is set.
	MemberID    string
	MemberEpoch int32
}

// CommittedOffset is one partition's committed offset.
type CommittedOffset struct {
	Topic     string
	Partition int32
	// Offset is -1 when nothing is committed.
	Offset int64
	// LeaderEpoch is -1 when unknown.
	LeaderEpoch       int32
	Metadata          string
	CommitTimestampMs int64
}

// GroupType is a group's kind.
type GroupType string

// Group types, as Kafka names them (ListGroups v5).
const (
	TypeClassic  GroupType = "classic"
	TypeConsumer GroupType = "consumer"
)

// GroupListing is one group of List.
type GroupListing struct {
	GroupID string
	Type    GroupType
	// ProtocolType: a classic group's ("consumer", "connect", ...; "" for
	// a group with only offsets), "consumer" for a KIP-848 group.
	ProtocolType string
	// State in Kafka's names: Empty, PreparingRebalance,
	// CompletingRebalance, Stable (classic); Empty, Reconciling, Stable
	// (KIP-848).
	State string
}

// GroupDescription is what Describe tells of a group.
type GroupDescription struct {
	GroupListing
	// Classic groups.
	Protocol   string // the chosen protocol ("" while Empty)
	Generation int32
	Leader     string
	Members    []ClassicMemberDescription
	// KIP-848 groups.
	GroupEpoch int32
	// AssignmentEpoch is the epoch of the target assignment (computed
	// with every epoch bump, so the group epoch).
	AssignmentEpoch int32
	AssignorName    string
	ConsumerMembers []ConsumerMemberDescription
}

// ClassicMemberDescription is one classic member. Metadata and
// Assignment are set only while the group is Stable (as Kafka's
// DescribeGroups).
type ClassicMemberDescription struct {
	MemberID   string
	InstanceID string
	ClientID   string
	ClientHost string
	Metadata   []byte
	Assignment []byte
}

// ConsumerMemberDescription is one KIP-848 member (ConsumerGroupDescribe).
type ConsumerMemberDescription struct {
	MemberID   string
	InstanceID string
	// MemberEpoch is -2 while a static member is away.
	MemberEpoch          int32
	ClientID             string
	ClientHost           string
	SubscribedTopicNames []string
	SubscribedTopicRegex string
	// Assignment is what the member was last told it may own; Target its
	// target at the group epoch.
	Assignment []TopicPartition
	Target     []TopicPartition
}
