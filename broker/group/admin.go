package group

import (
	"context"
	"fmt"

	"github.com/strata-log/strata/proto/brokerpb"
)

// ListGroups lists the groups of this coordinator, by id (gRPC).
func (c *Coordinator) ListGroups(ctx context.Context, _ *brokerpb.ListGroupsRequest) (*brokerpb.ListGroupsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	resp := &brokerpb.ListGroupsResponse{}
	for _, id := range sortedIDs(c.mu.groups) {
		g := c.mu.groups[id]
		resp.Groups = append(resp.Groups, &brokerpb.GroupSummary{
			GroupId: id, State: g.grpcState(), Members: int32(g.members()), CoordinatorId: c.cfg.CoordinatorID,
		})
	}
	return resp, nil
}

// List lists the groups of this coordinator, by id, with their type,
// protocol type and state (Kafka's ListGroups).
func (c *Coordinator) List(ctx context.Context) ([]GroupListing, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	out := make([]GroupListing, 0, len(c.mu.groups))
	for _, id := range sortedIDs(c.mu.groups) {
		out = append(out, c.mu.groups[id].listing())
	}
	return out, nil
}

// DescribeGroup serves DescribeGroup (gRPC): state, epoch (a classic
// group's generation), members (assignment = what each was last told it
// may own, owned = what it last reported, target = its target; a classic
// member shows its ids only) and committed offsets.
func (c *Coordinator) DescribeGroup(ctx context.Context, req *brokerpb.DescribeGroupRequest) (*brokerpb.DescribeGroupResponse, error) {
	if req.GetGroupId() == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	g := c.mu.groups[req.GetGroupId()]
	if g == nil {
		return nil, fmt.Errorf("%w: group %q", ErrNotFound, req.GetGroupId())
	}
	resp := &brokerpb.DescribeGroupResponse{
		GroupId:       g.id,
		State:         g.grpcState(),
		GroupEpoch:    g.consumer.epoch,
		CoordinatorId: c.cfg.CoordinatorID,
		Members:       g.consumer.describeMembers(),
		Offsets:       grpcOffsets(g.allOffsets()),
	}
	if cg := g.classic; cg != nil {
		resp.GroupEpoch, resp.Members = cg.generation, nil
		for _, m := range cg.membersByJoin() {
			resp.Members = append(resp.Members, &brokerpb.GroupMember{
				MemberId: m.id, MemberEpoch: cg.generation, InstanceId: m.instanceID, ClientId: m.clientID, ClientHost: m.clientHost,
			})
		}
	}
	return resp, nil
}

// Describe describes a group of either kind (Kafka's DescribeGroups for a
// classic group, ConsumerGroupDescribe for a KIP-848 one): ErrNotFound
// when there is none. A group with only offsets is an Empty classic group
// without protocol type.
func (c *Coordinator) Describe(ctx context.Context, groupID string) (GroupDescription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return GroupDescription{}, err
	}
	g := c.mu.groups[groupID]
	if g == nil {
		return GroupDescription{}, fmt.Errorf("%w: group %q", ErrNotFound, groupID)
	}
	if g.classic != nil {
		return g.classic.describe(), nil
	}
	d := GroupDescription{GroupListing: g.listing()}
	if d.Type != TypeConsumer {
		return d, nil
	}
	cg := g.consumer
	d.GroupEpoch, d.AssignmentEpoch, d.AssignorName = cg.epoch, cg.epoch, cg.assignor()
	for _, m := range cg.sortedMembers() {
		epoch := m.epoch
		if m.away {
			epoch = -2
		}
		d.ConsumerMembers = append(d.ConsumerMembers, ConsumerMemberDescription{
			MemberID: m.id, InstanceID: m.instanceID, MemberEpoch: epoch, ClientID: m.clientID, ClientHost: m.clientHost,
			SubscribedTopicNames: m.names, SubscribedTopicRegex: m.regex,
			Assignment: m.assigned.sorted(), Target: m.target.sorted(),
		})
	}
	return d, nil
}

// DeleteGroup serves DeleteGroup (gRPC): see Delete.
func (c *Coordinator) DeleteGroup(ctx context.Context, req *brokerpb.DeleteGroupRequest) (*brokerpb.DeleteGroupResponse, error) {
	if req.GetGroupId() == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	if err := c.Delete(ctx, req.GetGroupId()); err != nil {
		return nil, err
	}
	return &brokerpb.DeleteGroupResponse{}, nil
}

// Delete deletes a group without members (Kafka's DeleteGroups): its
// offsets' tombstones and its metadata's, written in the group's lane (so
// after every commit before it), then forgotten. ErrNotFound: no such
// group; ErrGroupNotEmpty: it has members. A group with more offsets than
// one write holds is deleted in several writes, the metadata's tombstone
// with the last; a member that joins in between stops it
// (ErrGroupNotEmpty), with the offsets deleted so far gone.
func (c *Coordinator) Delete(ctx context.Context, groupID string) error {
	if groupID == "" {
		return fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	for first := true; ; first = false {
		more, err := c.deleteGroupStep(ctx, groupID, first)
		if err != nil || !more {
			return err
		}
	}
}

// deleteGroupStep writes the tombstones of as many of group id's offsets as
// one write holds (tombstonePrefix), and of the group itself with the last
// of them. more: offsets are left for the next step. A group gone by a
// later step was deleted.
func (c *Coordinator) deleteGroupStep(ctx context.Context, id string, first bool) (more bool, err error) {
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return false, err
	}
	g := c.mu.groups[id]
	if g == nil {
		c.mu.Unlock()
		if first {
			return false, fmt.Errorf("%w: group %q", ErrNotFound, id)
		}
		return false, nil
	}
	c.expireLocked(g, c.cfg.Now())
	w := newWrite(g, func() prepared {
		more = false
		if n := g.members(); n > 0 {
			return prepared{refusal: fmt.Errorf("%w: %q has %d members", ErrGroupNotEmpty, g.id, n)}
		}
		nowMs := c.cfg.Now().UnixMilli()
		var p prepared
		tps := make([]TopicPartition, 0, len(g.offsets))
		for _, o := range g.allOffsets() {
			tps = append(tps, TopicPartition{o.Topic, o.Partition})
		}
		if n := c.w.tombstonePrefix(g, tps); n < len(tps) {
			tps, more = tps[:n], true
		}
		for _, tp := range tps {
			r, err := offsetRecord(g.id, tp, nil, nowMs)
			if err != nil {
				return prepared{refusal: err}
			}
			p.records = append(p.records, r)
		}
		if !more {
			r, err := metadataRecord(g.id, nil, nowMs)
			if err != nil {
				return prepared{refusal: err}
			}
			p.records, p.metadata = append(p.records, r), true
		}
		p.apply = func() {
			for _, tp := range tps {
				delete(g.offsets, tp)
			}
			if !more {
				c.w.deletedLocked(g)
			}
		}
		return p
	})
	c.w.enqueueLocked(w)
	c.mu.Unlock()
	if err := c.w.wait(ctx, w); err != nil {
		return false, err
	}
	return more, nil
}

// GroupOffset is one committed offset, for lag reporting.
type GroupOffset struct {
	Group             string
	Topic             string
	Partition         int32
	Offset            int64
	CommitTimestampMs int64
}

// Offsets returns a snapshot of every committed offset of this coordinator's
// groups, sorted by group then partition (nil while loading or closed).
func (c *Coordinator) Offsets() []GroupOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state != stateLoaded {
		return nil
	}
	var out []GroupOffset
	for _, id := range sortedIDs(c.mu.groups) {
		for _, o := range c.mu.groups[id].allOffsets() {
			out = append(out, GroupOffset{Group: id, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, CommitTimestampMs: o.CommitTimestampMs})
		}
	}
	return out
}
