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

// Commit serves CommitOffsets (gRPC, KIP-848 members). A member commit
// (member_id set) must carry the member's current epoch or the one before
// it (a commit racing the heartbeat that bumped it), and may commit only
// partitions the member holds (assigned or still owned while being
// revoked); other partitions are refused one by one in the response
// (Config.PartitionError renders the refusals: ErrInvalid,
// ErrPartitionNotHeld, ErrUnknownPartition). An admin commit (member_id
// empty, e.g. a reset) is allowed only while the group has no members.
// The accepted partitions are written as one batch, in the group's lane:
// checked when the batch is formed, applied to memory once durable, in the
// order of the lane (doc.go W2, W3).
func (c *Coordinator) Commit(ctx context.Context, req *brokerpb.CommitOffsetsRequest) (*brokerpb.CommitOffsetsResponse, error) {
	in := commitInput{group: req.GetGroupId(), memberID: req.GetMemberId(), generation: req.GetMemberEpoch()}
	if in.group == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	if in.memberID == "" {
		in.generation = -1
	} else if in.generation <= 0 {
		return nil, fmt.Errorf("%w: member_epoch %d with member_id %q", ErrInvalid, req.GetMemberEpoch(), req.GetMemberId())
	}
	for _, o := range req.GetOffsets() {
		in.offsets = append(in.offsets, OffsetCommit{Topic: o.GetTopic(), Partition: o.GetPartition(), Offset: o.GetOffset(), LeaderEpoch: -1, Metadata: o.GetMetadata()})
	}
	results, err := c.commit(ctx, in)
	if err != nil {
		return nil, err
	}
	resp := &brokerpb.CommitOffsetsResponse{}
	for _, r := range results {
		res := &brokerpb.CommitResult{Topic: r.Topic, Partition: r.Partition}
		if r.Err != nil {
			res.Error = c.cfg.PartitionError(r.Err)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

// OffsetCommit serves a Kafka OffsetCommit, to a group of either kind (C9):
//
//   - A standalone commit (Generation < 0, no member) needs a group
//     without members; it creates the group if none exists.
//   - A classic member commit needs the member (ErrUnknownMember,
//     ErrFencedInstanceID) and the group's generation
//     (ErrIllegalGeneration), and not while the group waits for the
//     leader's assignments (ErrRebalanceInProgress).
//   - A KIP-848 member commit carries its member epoch in Generation, as
//     for Commit (ErrUnknownMember, ErrFencedMemberEpoch,
//     ErrStaleMemberEpoch; partitions it does not hold are refused with
//     ErrPartitionNotHeld).
//   - A member commit to a group that does not exist: ErrNotFound (Kafka
//     tells GROUP_ID_NOT_FOUND from OffsetCommit v9, ILLEGAL_GENERATION
//     before).
//
// Per partition: ErrInvalid (topic, partition or offset),
// ErrOffsetMetadataTooLarge, ErrUnknownPartition (no such partition;
// classic and standalone commits), ErrPartitionNotHeld. The checks are
// made when the write's batch is formed, against the group as it is then
// (W3): a member of an older generation never commits over a newer one.
func (c *Coordinator) OffsetCommit(ctx context.Context, req OffsetCommitRequest) ([]PartitionResult, error) {
	if req.GroupID == "" {
		return nil, fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	return c.commit(ctx, commitInput{
		group: req.GroupID, memberID: req.MemberID, instanceID: req.InstanceID,
		generation: req.Generation, offsets: req.Offsets, kafka: true,
	})
}

// commitInput is a commit from either API.
type commitInput struct {
	group, memberID, instanceID string
	// generation: the member epoch (KIP-848) or generation (classic);
	// < 0 with no member id: a standalone commit.
	generation int32
	offsets    []OffsetCommit
	// kafka: Kafka's rules for whole-request errors (OffsetCommit); else
	// CommitOffsets' (an admin commit to a group with members is
	// ErrGroupNotEmpty).
	kafka bool
}

func (in commitInput) standalone() bool { return in.memberID == "" && in.generation < 0 }

// commit decides and writes a commit (W3).
func (c *Coordinator) commit(ctx context.Context, in commitInput) ([]PartitionResult, error) {
	var counts map[string]int32
	if in.kafka || in.standalone() {
		var topics []string
		for _, o := range in.offsets {
			topics = append(topics, o.Topic)
		}
		var err error
		if counts, err = c.partitionCounts(ctx, topics); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	g := c.mu.groups[in.group]
	if g == nil {
		// A standalone commit creates the group, when it commits anything.
		d := decideCommit(nil, in, counts, c.cfg.Now())
		if d.err != nil || len(d.records) == 0 {
			c.mu.Unlock()
			return d.results, d.err
		}
		var err error
		if g, _, err = c.groupLocked(in.group, true); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		// Forgotten again if the write fails (dropIfEmptyLocked).
		c.reportLocked(g)
	} else {
		c.expireLocked(g, c.cfg.Now())
	}
	var results []PartitionResult
	w := newWrite(g, func() prepared {
		d := decideCommit(g, in, counts, c.cfg.Now())
		results = d.results
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
	c.w.enqueueLocked(w)
	c.mu.Unlock()
	if err := c.w.wait(ctx, w); err != nil {
		return nil, err
	}
	return results, nil
}

// commitDecision is what a commit does to a group as it is now.
type commitDecision struct {
	results []PartitionResult
	records []recordbatch.Record
	values  map[TopicPartition]*brokerpb.GroupOffsetValue
	err     error
}

// committer is who commits: the partitions a KIP-848 member may commit
// (held; nil: any), and whether partitions must exist.
type committer struct {
	held        tpSet
	checkExists bool
}

// checkCommitter fences a commit against g (nil: no such group); it
// changes nothing.
func checkCommitter(g *group, in commitInput) (committer, error) {
	switch {
	case g != nil && g.classic != nil && in.kafka:
		return committer{checkExists: true}, g.classic.checkCommit(in.memberID, in.instanceID, in.generation)
	case g != nil && g.classic != nil && !in.standalone():
		return committer{}, fmt.Errorf("%w: %q in group %q (a classic group)", ErrUnknownMember, in.memberID, in.group)
	case in.standalone() && (g == nil || g.members() == 0):
		return committer{checkExists: true}, nil
	case in.standalone() && !in.kafka:
		return committer{}, fmt.Errorf("%w: %q has %d members: admin commits need an empty group", ErrGroupNotEmpty, in.group, g.members())
	case g == nil && in.kafka:
		return committer{}, fmt.Errorf("%w: group %q", ErrNotFound, in.group)
	case g == nil || g.consumer.members[in.memberID] == nil:
		return committer{}, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, in.memberID, in.group)
	}
	m := g.consumer.members[in.memberID]
	switch e := in.generation; {
	case e > m.epoch:
		return committer{}, fmt.Errorf("%w: commit with epoch %d, member %q is at %d", ErrFencedMemberEpoch, e, m.id, m.epoch)
	case e != m.epoch && e != m.prevEpoch:
		return committer{}, fmt.Errorf("%w: commit with epoch %d, member %q is at %d", ErrStaleMemberEpoch, e, m.id, m.epoch)
	}
	return committer{held: m.held(), checkExists: in.kafka}, nil
}

// decideCommit checks a commit against g (nil: no such group) at now and
// returns the records to write, or why it is refused; it changes nothing.
// counts holds the partition counts of the committed topics when
// partitions must exist.
// REQUIRES: c.mu held.
func decideCommit(g *group, in commitInput, counts map[string]int32, now time.Time) commitDecision {
	who, err := checkCommitter(g, in)
	if err != nil {
		return commitDecision{err: err}
	}
	d := commitDecision{values: map[TopicPartition]*brokerpb.GroupOffsetValue{}}
	for _, o := range in.offsets {
		tp := TopicPartition{o.Topic, o.Partition}
		var refusal error
		switch {
		case tp.Topic == "" || tp.Partition < 0:
			refusal = fmt.Errorf("%w: invalid topic or partition", ErrInvalid)
		case o.Offset < 0:
			refusal = fmt.Errorf("%w: offset %d < 0", ErrInvalid, o.Offset)
		case len(o.Metadata) > MaxMetadataBytes:
			refusal = fmt.Errorf("%w (%w): metadata longer than %d bytes", ErrOffsetMetadataTooLarge, ErrInvalid, MaxMetadataBytes)
		case who.held != nil && !who.held.has(tp):
			refusal = fmt.Errorf("%w: %s/%d is not assigned to member %q", ErrPartitionNotHeld, tp.Topic, tp.Partition, in.memberID)
		case who.checkExists && counts[tp.Topic] <= tp.Partition:
			refusal = fmt.Errorf("%w: no partition %s/%d", ErrUnknownPartition, tp.Topic, tp.Partition)
		}
		d.results = append(d.results, PartitionResult{Topic: tp.Topic, Partition: tp.Partition, Err: refusal})
		if refusal != nil {
			continue
		}
		v := &brokerpb.GroupOffsetValue{
			Offset: o.Offset, Metadata: o.Metadata, CommitTimestampMs: now.UnixMilli(), MemberEpoch: in.generation,
		}
		if in.standalone() {
			v.MemberEpoch = -1
		}
		if o.LeaderEpoch >= 0 {
			v.LeaderEpoch = &o.LeaderEpoch
		}
		r, err := offsetRecord(in.group, tp, v, now.UnixMilli())
		if err != nil {
			return commitDecision{err: err}
		}
		d.records = append(d.records, r)
		d.values[tp] = v
	}
	return d
}

func committedOffset(tp TopicPartition, v *brokerpb.GroupOffsetValue) CommittedOffset {
	if v == nil {
		return CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: -1, LeaderEpoch: -1}
	}
	epoch := int32(-1)
	if v.LeaderEpoch != nil {
		epoch = v.GetLeaderEpoch()
	}
	return CommittedOffset{
		Topic: tp.Topic, Partition: tp.Partition, Offset: v.GetOffset(), LeaderEpoch: epoch,
		Metadata: v.GetMetadata(), CommitTimestampMs: v.GetCommitTimestampMs(),
	}
}

// allOffsets returns the group's committed offsets sorted by partition.
func (g *group) allOffsets() []CommittedOffset {
	tps := slices.SortedFunc(func(yield func(TopicPartition) bool) {
		for tp := range g.offsets {
			if !yield(tp) {
				return
			}
		}
	}, compareTP)
	out := make([]CommittedOffset, 0, len(tps))
	for _, tp := range tps {
		out = append(out, committedOffset(tp, g.offsets[tp]))
	}
	return out
}

func grpcOffsets(in []CommittedOffset) []*brokerpb.CommittedOffset {
	out := make([]*brokerpb.CommittedOffset, 0, len(in))
	for _, o := range in {
		out = append(out, &brokerpb.CommittedOffset{
			Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata, CommitTimestampMs: o.CommitTimestampMs,
		})
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
	in := OffsetFetchRequest{GroupID: req.GetGroupId()}
	for _, t := range req.GetPartitions() {
		for _, p := range t.GetPartitions() {
			in.Partitions = append(in.Partitions, TopicPartition{t.GetTopic(), p})
		}
	}
	offsets, err := c.OffsetFetch(ctx, in)
	if err != nil {
		return nil, err
	}
	return &brokerpb.FetchOffsetsResponse{Offsets: grpcOffsets(offsets)}, nil
}

// OffsetFetch serves a Kafka OffsetFetch of one group: the requested
// partitions in request order (offset and leader epoch -1 when nothing is
// committed), or every committed partition when none is named. An unknown
// group has no offsets (not an error). With a MemberID, a KIP-848 member
// fetches (OffsetFetch v9+): ErrUnknownMember, or ErrStaleMemberEpoch when
// MemberEpoch is not its epoch.
func (c *Coordinator) OffsetFetch(ctx context.Context, req OffsetFetchRequest) ([]CommittedOffset, error) {
	if req.GroupID == "" {
		return nil, fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	g := c.mu.groups[req.GroupID]
	if req.MemberID != "" && (g == nil || g.classic == nil) {
		var m *member
		if g != nil {
			m = g.consumer.members[req.MemberID]
		}
		switch {
		case m == nil:
			return nil, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, req.MemberID, req.GroupID)
		case m.epoch != req.MemberEpoch:
			return nil, fmt.Errorf("%w: fetch with epoch %d, member %q is at %d", ErrStaleMemberEpoch, req.MemberEpoch, m.id, m.epoch)
		}
	}
	if req.Partitions == nil {
		if g == nil {
			return nil, nil
		}
		return g.allOffsets(), nil
	}
	out := make([]CommittedOffset, 0, len(req.Partitions))
	for _, tp := range req.Partitions {
		var v *brokerpb.GroupOffsetValue
		if g != nil {
			v = g.offsets[tp]
		}
		out = append(out, committedOffset(tp, v))
	}
	return out, nil
}

// DeleteOffsets serves a Kafka OffsetDelete: the group's committed
// offsets of partitions are deleted (tombstones, in the group's lane),
// except those of topics the group's members subscribe to
// (ErrGroupSubscribedToTopic, per partition). ErrNotFound: no such group;
// ErrGroupNotEmpty: a classic group with members whose protocol type is
// not "consumer" (its subscriptions cannot be read). A partition without
// offset is not an error. Checked when each write's batch is formed.
func (c *Coordinator) DeleteOffsets(ctx context.Context, groupID string, partitions []TopicPartition) ([]PartitionResult, error) {
	if groupID == "" {
		return nil, fmt.Errorf("%w: empty group id", ErrInvalidGroupID)
	}
	var out []PartitionResult
	for len(partitions) > 0 || out == nil {
		results, rest, err := c.deleteOffsetsStep(ctx, groupID, partitions)
		if err != nil {
			return nil, err
		}
		out, partitions = append(out, results...), rest
		if out == nil {
			out = []PartitionResult{}
		}
	}
	return out, nil
}

// deleteOffsetsStep deletes as many of partitions as one write holds
// (tombstonePrefix) and returns the rest.
func (c *Coordinator) deleteOffsetsStep(ctx context.Context, groupID string, partitions []TopicPartition) (results []PartitionResult, rest []TopicPartition, err error) {
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return nil, nil, err
	}
	g := c.mu.groups[groupID]
	if g == nil {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: group %q", ErrNotFound, groupID)
	}
	c.expireLocked(g, c.cfg.Now())
	n := c.w.tombstonePrefix(g, partitions)
	step := partitions[:n]
	w := newWrite(g, func() prepared {
		subscribed, err := subscribedTopics(g)
		if err != nil {
			return prepared{refusal: err}
		}
		results = results[:0]
		var p prepared
		var deleted []TopicPartition
		for _, tp := range step {
			r := PartitionResult{Topic: tp.Topic, Partition: tp.Partition}
			if subscribed == nil || subscribed[tp.Topic] {
				r.Err = fmt.Errorf("%w: group %q subscribes to %q", ErrGroupSubscribedToTopic, g.id, tp.Topic)
			} else if g.offsets[tp] != nil {
				rec, err := offsetRecord(g.id, tp, nil, c.cfg.Now().UnixMilli())
				if err != nil {
					return prepared{refusal: err}
				}
				p.records = append(p.records, rec)
				deleted = append(deleted, tp)
			}
			results = append(results, r)
		}
		p.apply = func() {
			for _, tp := range deleted {
				delete(g.offsets, tp)
			}
		}
		return p
	})
	c.w.enqueueLocked(w)
	c.mu.Unlock()
	if err := c.w.wait(ctx, w); err != nil {
		return nil, nil, err
	}
	return results, partitions[n:], nil
}

// subscribedTopics returns the topics g's members subscribe to, whose
// offsets may not be deleted; nil: every topic (a subscription that cannot
// be read). It refuses with ErrGroupNotEmpty for a classic group with
// members of another protocol type than "consumer".
func subscribedTopics(g *group) (map[string]bool, error) {
	if cg := g.classic; cg != nil && len(cg.members) > 0 {
		if cg.protocolType != "consumer" {
			return nil, fmt.Errorf("%w: group %q (protocol type %q) has %d members", ErrGroupNotEmpty, g.id, cg.protocolType, len(cg.members))
		}
		topics, ok := cg.subscribedTopics()
		if !ok {
			return nil, nil
		}
		return topics, nil
	}
	topics := map[string]bool{}
	for _, t := range g.consumer.subscribedTopics() {
		topics[t] = true
	}
	return topics, nil
}
