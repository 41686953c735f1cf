package group

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// MaxMetadataBytes bounds the metadata string of a commit (Kafka's
// offset.metadata.max.bytes).
const MaxMetadataBytes = 4096

// Commit serves CommitOffsets. A member commit (member_id set) must carry
// the member's current epoch or the one before it (a commit racing the
// heartbeat that bumped it), and may commit only partitions the member holds
// (assigned or still owned while being revoked); other partitions are
// refused one by one in the response (Config.PartitionError renders the
// refusals: ErrInvalid, ErrPartitionNotHeld, ErrUnknownPartition). An admin
// commit (member_id empty, e.g. a reset) is allowed only while the group
// has no members. The accepted partitions are written as one batch, in the
// group's lane: checked when the batch is formed, applied to memory once
// durable, in the order of the lane (doc.go W2, W3).
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
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	g := c.mu.groups[id]
	if g == nil {
		// An admin commit creates the group, when it commits anything.
		d := c.decideCommit(nil, req, counts, c.cfg.Now())
		if d.err == nil && len(d.records) > 0 {
			if err := checkGroupID(id, c.lim.Limits); err != nil {
				d.resp, d.err = nil, c.refused(err)
			} else if !c.cfg.Metrics.groups.reserve(c.lim.MaxGroups) {
				d.resp, d.err = nil, c.refused(refuse(refusedMaxGroups, ErrLimitExceeded, "this broker coordinates %d groups, the most it may (group %q)", c.lim.MaxGroups, id))
			}
		}
		if d.err != nil || len(d.records) == 0 {
			c.mu.Unlock()
			return d.resp, d.err
		}
		// Forgotten again if the write fails (dropIfEmptyLocked).
		g = newGroup(id)
		c.mu.groups[id] = g
		c.reportLocked(g)
	} else {
		c.expireLocked(g, c.cfg.Now())
	}
	var resp *brokerpb.CommitOffsetsResponse
	w := c.newWrite(g, func() prepared {
		d := c.decideCommit(g, req, counts, c.cfg.Now())
		resp = d.resp
		if d.err != nil {
			return prepared{refusal: d.err}
		}
		return prepared{records: d.records, apply: func() {
			for tp, v := range d.values {
				g.offsets[tp] = v
			}
			c.cfg.Metrics.commits.Add(float64(len(d.values)))
		}}
	})
	c.enqueueLocked(w)
	c.mu.Unlock()
	if err := c.wait(ctx, w); err != nil {
		return nil, err
	}
	return resp, nil
}

// commitDecision is what a commit request does to a group as it is now.
type commitDecision struct {
	resp    *brokerpb.CommitOffsetsResponse
	records []recordbatch.Record
	values  map[TopicPartition]*brokerpb.GroupOffsetValue
	err     error
}

// decideCommit checks a commit against g (nil: no such group) at now and
// returns the records to write, or why it is refused; it changes nothing.
// REQUIRES: c.mu held.
func (c *Coordinator) decideCommit(g *group, req *brokerpb.CommitOffsetsRequest, counts map[string]int32, now time.Time) commitDecision {
	id := req.GetGroupId()
	admin := req.GetMemberId() == ""
	var m *member
	switch {
	case admin && g != nil && len(g.members) > 0:
		return commitDecision{err: fmt.Errorf("%w: %q has %d members: admin commits need an empty group", ErrGroupNotEmpty, id, len(g.members))}
	case admin:
	case g == nil || g.members[req.GetMemberId()] == nil:
		return commitDecision{err: fmt.Errorf("%w: %q in group %q", ErrUnknownMember, req.GetMemberId(), id)}
	default:
		m = g.members[req.GetMemberId()]
		switch e := req.GetMemberEpoch(); {
		case e > m.epoch:
			return commitDecision{err: fmt.Errorf("%w: commit with epoch %d, member %q is at %d", ErrFencedMemberEpoch, e, m.id, m.epoch)}
		case e != m.epoch && e != m.prevEpoch:
			return commitDecision{err: fmt.Errorf("%w: commit with epoch %d, member %q is at %d", ErrStaleMemberEpoch, e, m.id, m.epoch)}
		}
	}

	d := commitDecision{resp: &brokerpb.CommitOffsetsResponse{}, values: map[TopicPartition]*brokerpb.GroupOffsetValue{}}
	var held tpSet
	if m != nil {
		held = m.held()
	}
	for _, o := range req.GetOffsets() {
		tp := TopicPartition{o.GetTopic(), o.GetPartition()}
		res := &brokerpb.CommitResult{Topic: tp.Topic, Partition: tp.Partition}
		d.resp.Results = append(d.resp.Results, res)
		var refusal error
		switch {
		case tp.Topic == "" || tp.Partition < 0:
			refusal = fmt.Errorf("%w: invalid topic or partition", ErrInvalid)
		case o.GetOffset() < 0:
			refusal = fmt.Errorf("%w: offset %d < 0", ErrInvalid, o.GetOffset())
		case len(o.GetMetadata()) > MaxMetadataBytes:
			refusal = fmt.Errorf("%w: metadata longer than %d bytes", ErrInvalid, MaxMetadataBytes)
		case m != nil && !held.has(tp):
			refusal = fmt.Errorf("%w: %s/%d is not assigned to member %q", ErrPartitionNotHeld, tp.Topic, tp.Partition, m.id)
		case admin && (counts[tp.Topic] <= tp.Partition):
			refusal = fmt.Errorf("%w: no partition %s/%d", ErrUnknownPartition, tp.Topic, tp.Partition)
		}
		if refusal != nil {
			res.Error = c.cfg.PartitionError(refusal)
			continue
		}
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
			return commitDecision{err: err}
		}
		d.records = append(d.records, r)
		d.values[tp] = v
	}
	return d
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
// metadata, written in the group's lane (so after every commit before it),
// then forgotten. A group with more offsets than one write holds is
// deleted in several writes, the metadata's tombstone with the last; a
// member that joins in between stops it (ErrGroupNotEmpty), with the
// offsets deleted so far gone.
func (c *Coordinator) DeleteGroup(ctx context.Context, req *brokerpb.DeleteGroupRequest) (*brokerpb.DeleteGroupResponse, error) {
	id := req.GetGroupId()
	if id == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	for first := true; ; first = false {
		more, err := c.deleteGroupStep(ctx, id, first)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	return &brokerpb.DeleteGroupResponse{}, nil
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
	w := c.newWrite(g, func() prepared {
		more = false
		if len(g.members) > 0 {
			return prepared{refusal: fmt.Errorf("%w: %q has %d members", ErrGroupNotEmpty, g.id, len(g.members))}
		}
		nowMs := c.cfg.Now().UnixMilli()
		var p prepared
		tps := make([]TopicPartition, 0, len(g.offsets))
		for _, o := range g.allOffsets() {
			tps = append(tps, TopicPartition{o.Topic, o.Partition})
		}
		if n := c.tombstonePrefix(g, tps); n < len(tps) {
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
				c.deletedLocked(g)
			}
		}
		return p
	})
	c.enqueueLocked(w)
	c.mu.Unlock()
	if err := c.wait(ctx, w); err != nil {
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
	for _, id := range c.sortedGroupIDsLocked() {
		for _, o := range c.mu.groups[id].allOffsets() {
			out = append(out, GroupOffset{Group: id, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, CommitTimestampMs: o.CommitTimestampMs})
		}
	}
	return out
}
