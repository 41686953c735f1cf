package group

import (
	"fmt"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

// group is one group id of a coordinator: which kind of group it is, its
// members (in the machine of its kind), its committed offsets, and how far
// the log has its metadata. One namespace holds both kinds: a group is a
// classic group while classic is set, a KIP-848 group otherwise, and a
// group without members may change kind (K1).
type group struct {
	id string
	// consumer is the KIP-848 machine: never nil, without members while
	// the group is classic.
	consumer *consumerGroup
	// classic is the classic machine (JoinGroup/SyncGroup); nil unless
	// the group is classic.
	classic *classicGroup
	offsets map[TopicPartition]*brokerpb.GroupOffsetValue
	// version counts the metadata's changes in memory; persisted is the
	// version the log holds, durable that metadata (nil: none, or a
	// tombstone). The coordinator's write path (pipeline.go) keeps them.
	version, persisted int64
	durable            *brokerpb.GroupMetadataValue
	// durableCounts: the partition counts durable's targets were computed
	// with (a revert recomputes targets with them: the failed change may
	// have dropped the count of a topic only a leaving member subscribed).
	durableCounts map[string]int32
	// lane: the group's writes to the log, one append at a time.
	lane lane
	// emptySince: when the coordinator first saw the group without
	// members (zero while it has some); in memory only, so it restarts at
	// a coordinator change, which only delays expiry.
	emptySince time.Time
}

func newGroup(id string) *group {
	return &group{
		id:       id,
		consumer: newConsumerGroup(id),
		offsets:  map[TopicPartition]*brokerpb.GroupOffsetValue{},
	}
}

// members counts the group's members, of either kind (a static KIP-848
// member away counts).
func (g *group) members() int {
	n := len(g.consumer.members)
	if g.classic != nil {
		n += len(g.classic.members)
	}
	return n
}

// blank: nothing of the group would survive a replay (no member, no
// offset, no metadata ever written).
func (g *group) blank() bool {
	return g.members() == 0 && len(g.offsets) == 0 && g.consumer.epoch == 0 &&
		(g.classic == nil || (g.classic.generation == 0 && len(g.classic.pending) == 0))
}

// asClassic makes the group a classic group, or refuses with
// ErrInconsistentGroupProtocol while it has KIP-848 members (K1).
func (g *group) asClassic() (*classicGroup, error) {
	if g.classic != nil {
		return g.classic, nil
	}
	if n := len(g.consumer.members); n > 0 {
		return nil, fmt.Errorf("%w: group %q is a consumer group (KIP-848) with %d members", ErrInconsistentGroupProtocol, g.id, n)
	}
	g.classic = newClassicGroup(g.id)
	g.classic.dirty = true
	return g.classic, nil
}

// asConsumer makes the group a KIP-848 group, or refuses with
// ErrInconsistentGroupProtocol while it has classic members (K1).
func (g *group) asConsumer() error {
	if g.classic == nil {
		return nil
	}
	if n := len(g.classic.members); n > 0 {
		return fmt.Errorf("%w: group %q is a classic group with %d members", ErrInconsistentGroupProtocol, g.id, n)
	}
	g.classic = nil
	g.consumer.dirty = true
	return nil
}

// takeDirty reports whether a machine changed the metadata since the last
// call (W1).
func (g *group) takeDirty() bool {
	d := g.consumer.dirty
	g.consumer.dirty = false
	if g.classic != nil {
		d = d || g.classic.dirty
		g.classic.dirty = false
	}
	return d
}

// takeRebalances returns the rounds (epoch bumps, completed barriers)
// since the last call, for the metrics.
func (g *group) takeRebalances() int {
	n := g.consumer.rebalances
	g.consumer.rebalances = 0
	if g.classic != nil {
		n += g.classic.rebalances
		g.classic.rebalances = 0
	}
	return n
}

// metadata renders the group's metadata record.
func (g *group) metadata() *brokerpb.GroupMetadataValue {
	if g.classic != nil {
		return &brokerpb.GroupMetadataValue{Classic: g.classic.record}
	}
	return g.consumer.metadata()
}

// restore replaces the group's metadata with a replayed (or durable)
// record: nil is none (a tombstone, or nothing written yet).
func (g *group) restore(v *brokerpb.GroupMetadataValue, now time.Time, lim limits) {
	if v.GetClassic() != nil {
		if g.classic == nil {
			g.classic = newClassicGroup(g.id)
		}
		g.classic.restore(v.GetClassic(), now)
		g.consumer.restore(&brokerpb.GroupMetadataValue{}, now, lim)
		return
	}
	g.classic = nil
	if v == nil {
		v = &brokerpb.GroupMetadataValue{}
	}
	g.consumer.restore(v, now, lim)
}

// revert puts the group's metadata back to durable after a write of newer
// metadata failed (W4): calls parked on the undone state are answered
// with err.
func (g *group) revert(err error, now time.Time, lim limits) {
	if g.classic != nil {
		g.classic.failParked(err)
	}
	if g.durable.GetClassic() != nil {
		g.restore(g.durable, now, lim)
		return
	}
	g.classic = nil
	g.consumer.revert(g.durable, g.durableCounts, now, lim)
}

// listing tells what List shows of the group.
func (g *group) listing() GroupListing {
	if g.classic != nil {
		return GroupListing{GroupID: g.id, Type: TypeClassic, ProtocolType: g.classic.protocolType, State: g.classic.state.String()}
	}
	if g.consumer.epoch == 0 && len(g.consumer.members) == 0 {
		// Offsets only (a standalone commit's group): Kafka lists it as
		// an empty classic group without a protocol type.
		return GroupListing{GroupID: g.id, Type: TypeClassic, State: classicEmpty.String()}
	}
	return GroupListing{GroupID: g.id, Type: TypeConsumer, ProtocolType: "consumer", State: kafkaConsumerState(g.consumer.state())}
}

// kafkaConsumerState names a KIP-848 state as Kafka does.
func kafkaConsumerState(s string) string {
	switch s {
	case "EMPTY":
		return "Empty"
	case "STABLE":
		return "Stable"
	}
	return "Reconciling"
}

// grpcState is the state the gRPC API reports (upper case).
func (g *group) grpcState() string {
	if g.classic == nil {
		return g.consumer.state()
	}
	switch g.classic.state {
	case classicPreparingRebalance:
		return "PREPARING_REBALANCE"
	case classicCompletingRebalance:
		return "COMPLETING_REBALANCE"
	case classicStable:
		return "STABLE"
	}
	return "EMPTY"
}
