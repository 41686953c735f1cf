package group

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/commonpb"
	"github.com/strata-log/strata/recordbatch"
)

// MaxMetadataBytes bounds the metadata string of a commit (Kafka's
// offset.metadata.max.bytes).
const MaxMetadataBytes = 4096

// Commit serves CommitOffsets. A member commit (member_id set) must carry
// the member's current epoch or the one before it (a commit racing the
// heartbeat that bumped it), and may commit only partitions the member holds
// (assigned or still owned while being revoked); other partitions are
// refused one by one in the response. An admin commit (member_id empty,
// e.g. a reset) is allowed only while the group has no members. The accepted
// partitions are written as one batch and applied to memory once durable.
func (c *Coordinator) Commit(ctx context.Context, req *brokerpb.CommitOffsetsRequest) (*brokerpb.CommitOffsetsResponse, error) {
	id := req.GetGroupId()
	if id == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	admin := req.GetMemberId() == ""
	var counts map[string]int32
	if admin {
		var topics []string
		for _, o := range req.GetOffsets() {
			topics = append(topics, o.GetTopic())
		}
		var err error
		if counts, err = c.partitionCounts(ctx, topics); err != nil {
			return nil, err
		}
	} else if req.GetMemberEpoch() <= 0 {
		return nil, fmt.Errorf("%w: member_epoch %d with member_id %q", ErrInvalid, req.GetMemberEpoch(), req.GetMemberId())
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	g := c.mu.groups[id]
	var m *member
	if g != nil {
		c.expireLocked(g, now)
		if err := c.persistLocked(ctx, id); err != nil {
			return nil, err
		}
	}
	switch {
	case admin && g != nil && len(g.members) > 0:
		return nil, fmt.Errorf("%w: %q has %d members: admin commits need an empty group", ErrGroupNotEmpty, id, len(g.members))
	case admin:
	case g == nil || g.members[req.GetMemberId()] == nil:
		return nil, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, req.GetMemberId(), id)
	default:
		m = g.members[req.GetMemberId()]
		switch e := req.GetMemberEpoch(); {
		case e > m.epoch:
			return nil, fmt.Errorf("%w: commit with epoch %d, member %q is at %d", ErrFencedMemberEpoch, e, m.id, m.epoch)
		case e != m.epoch && e != m.prevEpoch:
			return nil, fmt.Errorf("%w: commit with epoch %d, member %q is at %d", ErrStaleMemberEpoch, e, m.id, m.epoch)
		}
	}

	resp := &brokerpb.CommitOffsetsResponse{}
	var held tpSet
	if m != nil {
		held = m.held()
	}
	var records []recordbatch.Record
	values := map[TopicPartition]*brokerpb.GroupOffsetValue{}
	for _, o := range req.GetOffsets() {
		tp := TopicPartition{o.GetTopic(), o.GetPartition()}
		res := &brokerpb.CommitResult{Topic: tp.Topic, Partition: tp.Partition}
		resp.Results = append(resp.Results, res)
		switch {
		case tp.Topic == "" || tp.Partition < 0:
			res.Error = partitionError(codes.InvalidArgument, rpcerror.ReasonInvalid, "invalid topic or partition")
		case o.GetOffset() < 0:
			res.Error = partitionError(codes.InvalidArgument, rpcerror.ReasonInvalid, fmt.Sprintf("offset %d < 0", o.GetOffset()))
		case len(o.GetMetadata()) > MaxMetadataBytes:
			res.Error = partitionError(codes.InvalidArgument, rpcerror.ReasonInvalid, fmt.Sprintf("metadata longer than %d bytes", MaxMetadataBytes))
		case m != nil && !held.has(tp):
			res.Error = partitionError(codes.FailedPrecondition, rpcerror.ReasonStaleMemberEpoch, fmt.Sprintf("%s/%d is not assigned to member %q", tp.Topic, tp.Partition, m.id))
		case admin && (counts[tp.Topic] <= tp.Partition):
			res.Error = partitionError(codes.NotFound, rpcerror.ReasonNotFound, fmt.Sprintf("no partition %s/%d", tp.Topic, tp.Partition))
		default:
			v := &brokerpb.GroupOffsetValue{
				Offset:            o.GetOffset(),
				Metadata:          o.GetMetadata(),
				CommitTimestampMs: now.UnixMilli(),
				MemberEpoch:       req.GetMemberEpoch(),
			}
			if admin {
				v.MemberEpoch = -1
			}
			r, err := offsetRecord(id, tp, v, now.UnixMilli())
			if err != nil {
				return nil, err
			}
			records = append(records, r)
			values[tp] = v
		}
	}
	if len(records) == 0 {
		return resp, nil
	}
	if g == nil { // an admin commit creates the group
		if err := checkGroupID(id, c.lim.Limits); err != nil {
			return nil, c.refused(err)
		}
		if !c.cfg.Metrics.groups.reserve(c.lim.MaxGroups) {
			return nil, c.refused(refuse(refusedMaxGroups, ErrLimitExceeded, "this broker coordinates %d groups, the most it may (group %q)", c.lim.MaxGroups, id))
		}
	}
	if err := c.cfg.Log.Append(ctx, records); err != nil {
		if g == nil {
			c.cfg.Metrics.groups.add(-1)
		}
		return nil, fmt.Errorf("group: commit offsets of %q: %w", id, err)
	}
	if g == nil {
		g = newGroup(id)
		c.mu.groups[id] = g
		c.reportLocked(g)
	}
	for tp, v := range values {
		g.offsets[tp] = v
	}
	c.cfg.Metrics.commits.Add(float64(len(records)))
	return resp, nil
}

func partitionError(code codes.Code, reason, msg string) *brokerpb.PartitionError {
	return &brokerpb.PartitionError{
		Code:    int32(code),
		Info:    &commonpb.ErrorInfo{Reason: reason},
		Message: msg,
	}
}

func committedOffset(tp TopicPartition, v *brokerpb.GroupOffsetValue) *brokerpb.CommittedOffset {
	if v == nil {
		return &brokerpb.CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: -1}
	}
	return &brokerpb.CommittedOffset{
		Topic: tp.Topic, Partition: tp.Partition,
		Offset: v.GetOffset(), Metadata: v.GetMetadata(), CommitTimestampMs: v.GetCommitTimestampMs(),
	}
}

// allOffsets returns the group's committed offsets sorted by partition.
func (g *group) allOffsets() []*brokerpb.CommittedOffset {
	tps := make([]TopicPartition, 0, len(g.offsets))
	for tp := range g.offsets {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, compareTP)
	out := make([]*brokerpb.CommittedOffset, 0, len(tps))
	for _, tp := range tps {
		out = append(out, committedOffset(tp, g.offsets[tp]))
	}
	return out
}

// FetchOffsets serves FetchOffsets: the requested partitions in request
// order (offset -1 when nothing is committed), or every committed partition
// when none is named. An unknown group has no offsets (not an error).
func (c *Coordinator) FetchOffsets(ctx context.Context, req *brokerpb.FetchOffsetsRequest) (*brokerpb.FetchOffsetsResponse, error) {
	if req.GetGroupId() == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	g := c.mu.groups[req.GetGroupId()]
	resp := &brokerpb.FetchOffsetsResponse{}
	if len(req.GetPartitions()) == 0 {
		if g != nil {
			resp.Offsets = g.allOffsets()
		}
		return resp, nil
	}
	for _, t := range req.GetPartitions() {
		for _, p := range t.GetPartitions() {
			tp := TopicPartition{t.GetTopic(), p}
			var v *brokerpb.GroupOffsetValue
			if g != nil {
				v = g.offsets[tp]
			}
			resp.Offsets = append(resp.Offsets, committedOffset(tp, v))
		}
	}
	return resp, nil
}

// ListGroups lists the groups of this coordinator, by id.
func (c *Coordinator) ListGroups(ctx context.Context, _ *brokerpb.ListGroupsRequest) (*brokerpb.ListGroupsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	resp := &brokerpb.ListGroupsResponse{}
	for _, id := range c.sortedGroupIDsLocked() {
		g := c.mu.groups[id]
		resp.Groups = append(resp.Groups, &brokerpb.GroupSummary{
			GroupId: id, State: g.state(), Members: int32(len(g.members)), CoordinatorId: c.cfg.CoordinatorID,
		})
	}
	return resp, nil
}

// REQUIRES: c.mu held.
func (c *Coordinator) sortedGroupIDsLocked() []string {
	ids := make([]string, 0, len(c.mu.groups))
	for id := range c.mu.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// DescribeGroup serves DescribeGroup: state, epoch, members (assignment =
// what each was last told it may own, owned = what it last reported) and
// committed offsets.
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
	return &brokerpb.DescribeGroupResponse{
		GroupId:       g.id,
		State:         g.state(),
		GroupEpoch:    g.epoch,
		CoordinatorId: c.cfg.CoordinatorID,
		Members:       g.metadata().GetMembers(),
		Offsets:       g.allOffsets(),
	}, nil
}

// DeleteGroup deletes an empty group: tombstones for its offsets and its
// metadata, written as one batch, then forgotten.
func (c *Coordinator) DeleteGroup(ctx context.Context, req *brokerpb.DeleteGroupRequest) (*brokerpb.DeleteGroupResponse, error) {
	id := req.GetGroupId()
	if id == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	g := c.mu.groups[id]
	if g == nil {
		return nil, fmt.Errorf("%w: group %q", ErrNotFound, id)
	}
	c.expireLocked(g, c.cfg.Now())
	if len(g.members) > 0 {
		if err := c.persistLocked(ctx, id); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %q has %d members", ErrGroupNotEmpty, id, len(g.members))
	}
	nowMs := c.cfg.Now().UnixMilli()
	var records []recordbatch.Record
	for _, o := range g.allOffsets() {
		r, err := offsetRecord(id, TopicPartition{o.Topic, o.Partition}, nil, nowMs)
		if err != nil {
			return nil, err
		}
		records = append(records, r)
	}
	r, err := metadataRecord(id, nil, nowMs)
	if err != nil {
		return nil, err
	}
	records = append(records, r)
	if err := c.cfg.Log.Append(ctx, records); err != nil {
		return nil, fmt.Errorf("group: delete %q: %w", id, err)
	}
	delete(c.mu.groups, id)
	c.cfg.Metrics.groups.add(-1)
	c.cfg.Metrics.members.DeleteLabelValues(id)
	c.cfg.Metrics.rebalances.DeleteLabelValues(id)
	return &brokerpb.DeleteGroupResponse{}, nil
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
	for _, id := range c.sortedGroupIDsLocked() {
		for _, o := range c.mu.groups[id].allOffsets() {
			out = append(out, GroupOffset{Group: id, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, CommitTimestampMs: o.CommitTimestampMs})
		}
	}
	return out
}
