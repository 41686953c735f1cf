package group

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/brokerpb"
)

// Limits bound what clients can make the coordinators hold. Each group's
// metadata is one record of __consumer_offsets, rewritten whole on every
// change, so it must stay well below the topic's
// max.message.bytes: past it, no change of the group could be persisted.
//
// Limits apply to requests, never to what Load replays: a group stored
// before (or under larger limits) still loads and keeps serving; only a
// request that would make it grow further is refused.
//
// Zero fields take the defaults of DefaultLimits.
type Limits struct {
	// MaxGroups: groups one broker coordinates, over all its coordinators
	// (they share the count through their Metrics). A join or admin commit that would create
	// one more is refused with ErrLimitExceeded. Default 10,000.
	MaxGroups int
	// MaxMembers: members of one group (Kafka's group.max.size). A join
	// beyond it is refused with ErrGroupMaxSize. Default 1000.
	MaxMembers int
	// MaxIDBytes: the group id, member id, client id and client host.
	// Default 255 (Kafka's bound on a group instance id).
	MaxIDBytes int
	// MaxSubscribedTopics: names in one heartbeat's subscription;
	// MaxTopicNameBytes: each name, and each topic of the owned
	// partitions (Kafka's topic names are at most 249 bytes). Defaults
	// 1000 and 249.
	MaxSubscribedTopics int
	MaxTopicNameBytes   int
	// MaxMemberBytes: what one member may count of the group's record
	// (budgetBytes: its ids, each subscribed topic three times, owned
	// partitions it was not assigned). Default 256 KiB.
	MaxMemberBytes int
	// MaxGroupBytes: what the members of a group may count together. A
	// heartbeat that would grow past it is refused with ErrLimitExceeded.
	// The coordinator uses at most half the OffsetsLog's batch bound
	// (BatchLimiter), so the partition numbers it hands out, not counted,
	// have the other half. Default 512 KiB (half of the default
	// max.message.bytes).
	MaxGroupBytes int
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxGroups:           10_000,
		MaxMembers:          1000,
		MaxIDBytes:          255,
		MaxSubscribedTopics: 1000,
		MaxTopicNameBytes:   249,
		MaxMemberBytes:      256 << 10,
		MaxGroupBytes:       512 << 10,
	}
}

func (l *Limits) setDefaults() {
	d := DefaultLimits()
	def := func(v *int, dv int) {
		if *v == 0 {
			*v = dv
		}
	}
	def(&l.MaxGroups, d.MaxGroups)
	def(&l.MaxMembers, d.MaxMembers)
	def(&l.MaxIDBytes, d.MaxIDBytes)
	def(&l.MaxSubscribedTopics, d.MaxSubscribedTopics)
	def(&l.MaxTopicNameBytes, d.MaxTopicNameBytes)
	def(&l.MaxMemberBytes, d.MaxMemberBytes)
	def(&l.MaxGroupBytes, d.MaxGroupBytes)
}

// validate says what is wrong with the limits (after defaults), or nil.
func (l Limits) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxGroups", l.MaxGroups}, {"MaxMembers", l.MaxMembers}, {"MaxIDBytes", l.MaxIDBytes},
		{"MaxSubscribedTopics", l.MaxSubscribedTopics}, {"MaxTopicNameBytes", l.MaxTopicNameBytes},
		{"MaxMemberBytes", l.MaxMemberBytes}, {"MaxGroupBytes", l.MaxGroupBytes},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: config: Limits.%s %d < 0", ErrInvalid, f.name, f.v)
		}
	}
	return nil
}

func (l Limits) String() string {
	return fmt.Sprintf("{MaxGroups: %d, MaxMembers: %d, MaxIDBytes: %d, MaxSubscribedTopics: %d, MaxTopicNameBytes: %d, MaxMemberBytes: %d, MaxGroupBytes: %d}",
		l.MaxGroups, l.MaxMembers, l.MaxIDBytes, l.MaxSubscribedTopics, l.MaxTopicNameBytes, l.MaxMemberBytes, l.MaxGroupBytes)
}

// BatchLimiter is an OffsetsLog that says how large a batch it accepts
// (max.message.bytes of __consumer_offsets). The coordinator keeps a
// group's record within half of it, and splits the batches of a Tick.
type BatchLimiter interface {
	MaxBatchBytes() int
}

// groupCount counts the groups of every Coordinator of a broker, for
// Limits.MaxGroups. It lives in Metrics, which the broker's coordinators
// share; safe for concurrent use.
type groupCount struct{ n atomic.Int64 }

func (gc *groupCount) load() int { return int(gc.n.Load()) }

// reserve counts one more group unless max are counted already.
func (gc *groupCount) reserve(max int) bool {
	for {
		n := gc.n.Load()
		if n >= int64(max) {
			return false
		}
		if gc.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// add counts delta more groups (negative: fewer). Load adds what it
// replayed whatever the limit: stored groups are never refused.
func (gc *groupCount) add(delta int) { gc.n.Add(int64(delta)) }

// Reasons of refusals, the label of strata_broker_group_requests_refused_total.
const (
	refusedIDTooLong    = "id_too_long"
	refusedTopics       = "too_many_topics"
	refusedTopicName    = "topic_name_too_long"
	refusedMemberBytes  = "member_too_large"
	refusedGroupBytes   = "group_too_large"
	refusedGroupMaxSize = "group_max_size"
	refusedMaxGroups    = "too_many_groups"
)

// refusal is a request refused by a limit: it wraps ErrInvalid,
// ErrGroupMaxSize or ErrLimitExceeded, and names the metric's reason.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(reason string, sentinel error, format string, args ...any) error {
	return &refusal{reason: reason, err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// refusalReason returns the reason of a refusal in err's chain, or "".
func refusalReason(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// checkHeartbeat applies the limits that need no group state, before the
// coordinator does any work for the request (in particular before it asks
// the TopicSource about every subscribed topic).
func checkHeartbeat(req *brokerpb.GroupHeartbeatRequest, lim Limits) error {
	for _, f := range []struct{ name, v string }{
		{"group_id", req.GetGroupId()}, {"member_id", req.GetMemberId()},
		{"client_id", req.GetClientId()}, {"client_host", req.GetClientHost()},
		{"instance_id", req.GetInstanceId()},
	} {
		if len(f.v) > lim.MaxIDBytes {
			return refuse(refusedIDTooLong, ErrInvalid, "%s is %d bytes, at most %d are allowed", f.name, len(f.v), lim.MaxIDBytes)
		}
	}
	if n := len(req.GetSubscribedTopicRegex()); n > MaxRegexBytes {
		return refuse(refusedTopicName, ErrInvalid, "subscribed_topic_regex is %d bytes, at most %d are allowed", n, MaxRegexBytes)
	}
	if n := len(req.GetSubscribedTopics()); n > lim.MaxSubscribedTopics {
		return refuse(refusedTopics, ErrInvalid, "%d subscribed topics, at most %d are allowed", n, lim.MaxSubscribedTopics)
	}
	for _, t := range req.GetSubscribedTopics() {
		if len(t) > lim.MaxTopicNameBytes {
			return refuse(refusedTopicName, ErrInvalid, "subscribed topic name of %d bytes, at most %d are allowed", len(t), lim.MaxTopicNameBytes)
		}
	}
	ownedBytes := 0
	for _, o := range req.GetOwned() {
		if len(o.GetTopic()) > lim.MaxTopicNameBytes {
			return refuse(refusedTopicName, ErrInvalid, "owned topic name of %d bytes, at most %d are allowed", len(o.GetTopic()), lim.MaxTopicNameBytes)
		}
		ownedBytes += proto.Size(o)
	}
	// Owned partitions are decoded into a set: bound them as sent, before
	// that work (the member's whole entry is checked against the group).
	if ownedBytes > lim.MaxMemberBytes {
		return refuse(refusedMemberBytes, ErrLimitExceeded, "owned partitions take %d bytes, a member may take at most %d", ownedBytes, lim.MaxMemberBytes)
	}
	return nil
}

// MaxRegexBytes bounds a KIP-848 subscription regex.
const MaxRegexBytes = 4096

// checkGroupID bounds a group id that may create a group.
func checkGroupID(id string, lim Limits) error {
	if len(id) > lim.MaxIDBytes {
		return refuse(refusedIDTooLong, ErrInvalid, "group_id is %d bytes, at most %d are allowed", len(id), lim.MaxIDBytes)
	}
	return nil
}

// budgetBytes is what a member counts against MaxMemberBytes and its
// group's MaxGroupBytes: the bytes the client decides in the group's
// record. Its ids (idBytes: member, instance and client ids, client
// host, subscription regex); each subscribed topic three times (in the subscription,
// and room for the assignment and owned entries of the topic the
// coordinator may give it); and each owned partition it was not assigned
// (a number, and its topic unless subscribed). The numbers of the
// partitions the coordinator hands out are not counted: they are bounded by
// the topics' partition counts, and left to the other half of
// max.message.bytes. subscribed is sorted.
func budgetBytes(idBytes int, subscribed []string, assigned, owned tpSet) int {
	n := memberOverhead + idBytes
	for _, t := range subscribed {
		n += 3 * (len(t) + topicEntryOverhead)
	}
	var extraTopics map[string]bool
	for tp := range owned {
		if assigned.has(tp) {
			continue
		}
		n += partitionBytes
		if _, subscribed := slices.BinarySearch(subscribed, tp.Topic); !subscribed && !extraTopics[tp.Topic] {
			if extraTopics == nil {
				extraTopics = map[string]bool{}
			}
			extraTopics[tp.Topic] = true
			n += len(tp.Topic) + topicEntryOverhead
		}
	}
	return n
}

// Sizes of the protobuf encoding (upper bounds): a GroupMember entry's
// tags, lengths and epoch; a topic's entry beyond its name; a partition
// number.
const (
	memberOverhead     = 32
	topicEntryOverhead = 8
	partitionBytes     = 5
)
