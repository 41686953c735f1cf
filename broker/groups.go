package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// Groups is the service layer's consumer-group front (see Service): it
// routes each call to the group's coordinator after checking the ACLs.
type Groups struct {
	b *Broker
}

// Groups returns the broker's consumer-group service.
func (b *Broker) Groups() *Groups { return &Groups{b: b} }

// offsetsLog is a __consumer_offsets partition as a group coordinator sees
// it: batches appended with quorum acks, and a replay of everything up to
// the high watermark.
type offsetsLog struct{ l *partlog.Log }

// Append waits for the batch's settled outcome (partlog's WaitSettled):
// while its bookies are away the writer holds the batch, which lands if
// they come back, and the coordinator must not go on as if it had failed.
func (o offsetsLog) Append(ctx context.Context, records []recordbatch.Record) error {
	buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: records})
	if err != nil {
		return err
	}
	a, err := o.l.Enqueue(ctx, buf, partlog.AcksQuorum)
	if err != nil {
		return err
	}
	_, err = a.WaitSettled(ctx)
	return err
}

// MaxBatchBytes implements group.BatchLimiter: max.message.bytes of
// __consumer_offsets, which bounds a group's metadata record.
func (o offsetsLog) MaxBatchBytes() int { return o.l.Limits().MaxBatchBytes }

func (o offsetsLog) Replay(ctx context.Context, fn func(recordbatch.Record) error) error {
	var undecodable error
	err := o.ReplaySkipping(ctx, fn, func(offset int64, err error) {
		if undecodable == nil {
			undecodable = fmt.Errorf("batch at offset %d: %w", offset, err)
		}
	})
	if err != nil {
		return err
	}
	return undecodable
}

// ReplaySkipping implements group.SkippingReplayer: the coordinator counts
// and logs what is skipped.
func (o offsetsLog) ReplaySkipping(ctx context.Context, fn func(recordbatch.Record) error, skip func(int64, error)) error {
	end := o.l.HighWatermark()
	// Decompression is bounded like a produced batch's: the coordinator
	// writes uncompressed batches, so only a hostile one would inflate.
	maxDecompressed := o.l.Limits().MaxBatchBytes
	for off := o.l.LogStartOffset(); off < end; {
		r, err := o.l.Fetch(ctx, off, 4<<20, 0)
		if err != nil {
			return err
		}
		var batches [][]byte
		for _, part := range r.Batches {
			split, err := recordbatch.Split(part)
			if err != nil {
				return err
			}
			batches = append(batches, split...)
		}
		if len(batches) == 0 {
			return fmt.Errorf("replaying %s: no data at offset %d below the high watermark %d", OffsetsTopic, off, end)
		}
		for _, raw := range batches {
			h, recs, err := recordbatch.DecodeLimit(raw, maxDecompressed)
			if err != nil {
				// Split parsed the header, so the batch's offsets are
				// known: step over it (the log assigned them).
				h, _ = recordbatch.ParseHeader(raw)
				skip(h.BaseOffset, err)
				off = max(off, h.LastOffset()+1)
				continue
			}
			for _, rec := range recs {
				if rec.Offset < off || rec.Offset >= end {
					continue
				}
				if err := fn(rec); err != nil {
					return err
				}
			}
			off = max(off, h.LastOffset()+1)
		}
	}
	return nil
}

// topicSource answers coordinators' questions about topics from the mirror
// (and metad, for a topic the mirror does not hold yet).
type topicSource struct{ b *Broker }

func (t topicSource) Partitions(ctx context.Context, topic string) (int32, error) {
	rec, err := t.b.currentTopicRecord(ctx, topic)
	if err != nil {
		return 0, group.ErrUnknownTopic
	}
	return rec.Partitions, nil
}

// TopicNames lists the live topics (internal ones excluded), which KIP-848
// regex subscriptions are matched against.
func (t topicSource) TopicNames(ctx context.Context) ([]string, error) {
	return t.b.topicNames(false), nil
}

// startCoordinator starts the coordinator of the groups that hash to an
// offsets partition this broker now serves; it loads in the background and
// answers "loading, retry" until then, and "not the coordinator" while
// authority (the broker's metad session) may have lapsed.
func (b *Broker) startCoordinator(ctx context.Context, partition int32, l *partlog.Log, authority func() bool) *group.Coordinator {
	c := group.New(group.Config{
		Partition:         partition,
		CoordinatorID:     b.cfg.ID,
		Log:               offsetsLog{l},
		Topics:            topicSource{b},
		SessionTimeout:    b.cfg.GroupSessionTimeout,
		MinSessionTimeout: b.cfg.GroupMinSessionTimeout,
		MaxSessionTimeout: b.cfg.GroupMaxSessionTimeout,
		HeartbeatInterval: b.cfg.GroupHeartbeatInterval,
		TickInterval:      b.cfg.GroupTickInterval,
		OffsetsRetention:  b.cfg.OffsetsRetention,
		Limits: group.Limits{
			MaxGroups:     b.cfg.GroupMaxGroups,
			MaxMembers:    b.cfg.GroupMaxSize,
			MaxGroupBytes: b.cfg.GroupMaxMetadataBytes,
		},
		Logger:         b.log.With("coordinator", partition),
		Metrics:        b.gm,
		PartitionError: partitionError,
		Authority:      authority,
	})
	go func() {
		start := time.Now()
		if err := c.Load(ctx); err != nil {
			if ctx.Err() == nil {
				b.log.Warn("coordinator load failed", "partition", partition, "err", err)
			}
			return
		}
		b.log.Info("coordinator loaded", "partition", partition, "took", time.Since(start).Round(time.Millisecond))
	}()
	return c
}

// coordinator returns the local coordinator of a group, or a redirect to
// the broker that serves it.
func (g *Groups) coordinator(groupID string) (*group.Coordinator, error) {
	b := g.b
	if groupID == "" {
		return nil, invalidf("group id is empty")
	}
	k, err := g.coordinatorPartition(groupID)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	p := b.parts[k]
	var c *group.Coordinator
	if p != nil {
		c = p.coord
	}
	b.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return nil, b.redirect(ErrNotCoordinator, k, "group "+groupID)
}

func (g *Groups) coordinatorPartition(groupID string) (tp, error) {
	b := g.b
	rec, err := b.topicRecord(OffsetsTopic)
	if err != nil {
		return tp{}, &RedirectError{err: ErrNotCoordinator, detail: "group " + groupID + ": " + OffsetsTopic + " does not exist yet"}
	}
	return tp{OffsetsTopic, group.PartitionFor(groupID, rec.Partitions)}, nil
}

func (g *Groups) FindCoordinator(ctx context.Context, req *brokerpb.FindCoordinatorRequest) (*brokerpb.FindCoordinatorResponse, error) {
	if err := g.b.sec.authorize(ctx, acl.Describe, acl.GroupResource(req.GroupId)); err != nil {
		return nil, err
	}
	if req.GroupId == "" {
		return nil, invalidf("group id is empty")
	}
	k, err := g.coordinatorPartition(req.GroupId)
	if err != nil {
		return nil, err
	}
	kv := g.b.owners.get(ownerKey(k))
	if kv == nil {
		return nil, &RedirectError{err: ErrNotCoordinator, detail: "group " + req.GroupId}
	}
	o, err := unmarshalled[brokerpb.Ownership](kv.Value)
	if err != nil {
		return nil, err
	}
	return &brokerpb.FindCoordinatorResponse{BrokerId: o.BrokerId, Address: o.Address}, nil
}

func (g *Groups) GroupHeartbeat(ctx context.Context, req *brokerpb.GroupHeartbeatRequest) (*brokerpb.GroupHeartbeatResponse, error) {
	if err := g.b.sec.authorize(ctx, acl.Read, acl.GroupResource(req.GroupId)); err != nil {
		return nil, err
	}
	c, err := g.coordinator(req.GroupId)
	if err != nil {
		return nil, err
	}
	resp, err := c.Heartbeat(ctx, req)
	return resp, err
}

func (g *Groups) CommitOffsets(ctx context.Context, req *brokerpb.CommitOffsetsRequest) (*brokerpb.CommitOffsetsResponse, error) {
	if err := g.b.sec.authorize(ctx, acl.Read, acl.GroupResource(req.GroupId)); err != nil {
		return nil, err
	}
	if err := authorizeTopics(ctx, g.b.sec, acl.Read, req.Offsets, (*brokerpb.OffsetCommit).GetTopic); err != nil {
		return nil, err
	}
	c, err := g.coordinator(req.GroupId)
	if err != nil {
		return nil, err
	}
	resp, err := c.Commit(ctx, req)
	if err == nil && req.MemberId == "" {
		// Not a member's commit: an administrator setting the group's
		// offsets (strata group reset-offsets).
		g.b.log.Info("committed group offsets without membership", "group", req.GroupId, "partitions", len(req.Offsets), "principal", actor(ctx))
	}
	return resp, err
}

func (g *Groups) FetchOffsets(ctx context.Context, req *brokerpb.FetchOffsetsRequest) (*brokerpb.FetchOffsetsResponse, error) {
	if err := g.b.sec.authorize(ctx, acl.Read, acl.GroupResource(req.GroupId)); err != nil {
		return nil, err
	}
	if err := authorizeTopics(ctx, g.b.sec, acl.Describe, req.Partitions, (*brokerpb.TopicPartitions).GetTopic); err != nil {
		return nil, err
	}
	c, err := g.coordinator(req.GroupId)
	if err != nil {
		return nil, err
	}
	resp, err := c.FetchOffsets(ctx, req)
	if resp != nil {
		resp.Offsets = g.describableOffsets(ctx, resp.Offsets)
	}
	return resp, err
}

// describableOffsets keeps the offsets of topics the call's principal may
// describe: a group's offsets name every topic its members committed,
// and READ on the group must not show topics the principal may not see.
func (g *Groups) describableOffsets(ctx context.Context, offsets []*brokerpb.CommittedOffset) []*brokerpb.CommittedOffset {
	b := g.b
	visible := map[string]bool{}
	return slices.DeleteFunc(offsets, func(o *brokerpb.CommittedOffset) bool {
		ok, seen := visible[o.Topic]
		if !seen {
			ok = b.sec.allowed(ctx, acl.Describe, acl.TopicResource(o.Topic))
			visible[o.Topic] = ok
		}
		return !ok
	})
}

func (g *Groups) DescribeGroup(ctx context.Context, req *brokerpb.DescribeGroupRequest) (*brokerpb.DescribeGroupResponse, error) {
	if err := g.b.sec.authorize(ctx, acl.Describe, acl.GroupResource(req.GroupId)); err != nil {
		return nil, err
	}
	c, err := g.coordinator(req.GroupId)
	if err != nil {
		return nil, err
	}
	resp, err := c.DescribeGroup(ctx, req)
	if resp != nil {
		resp.CoordinatorId = g.b.cfg.ID
		resp.Offsets = g.describableOffsets(ctx, resp.Offsets)
		g.classicAssignments(ctx, c, resp)
	}
	return resp, err
}

// classicAssignments fills in the partitions the members of a classic
// group of protocol type "consumer" were assigned: the coordinator only
// relays the leader's assignment bytes, which are Kafka's consumer
// protocol, decoded here for display. Other protocol types (Kafka
// Connect's) are shown without.
func (g *Groups) classicAssignments(ctx context.Context, c *group.Coordinator, resp *brokerpb.DescribeGroupResponse) {
	d, err := c.Describe(ctx, resp.GroupId)
	if err != nil || d.Type != group.TypeClassic || d.ProtocolType != "consumer" {
		return
	}
	byID := map[string][]byte{}
	for _, m := range d.Members {
		byID[m.MemberID] = m.Assignment
	}
	for _, m := range resp.Members {
		var a kmsg.ConsumerMemberAssignment
		if b := byID[m.MemberId]; len(b) == 0 || a.ReadFrom(b) != nil {
			continue
		}
		for _, t := range a.Topics {
			m.Assignment = append(m.Assignment, &brokerpb.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
		}
	}
}

func (g *Groups) DeleteGroup(ctx context.Context, req *brokerpb.DeleteGroupRequest) (*brokerpb.DeleteGroupResponse, error) {
	if err := g.b.sec.authorize(ctx, acl.Delete, acl.GroupResource(req.GroupId)); err != nil {
		return nil, err
	}
	c, err := g.coordinator(req.GroupId)
	if err != nil {
		return nil, err
	}
	resp, err := c.DeleteGroup(ctx, req)
	if err == nil {
		g.b.log.Info("deleted group", "group", req.GroupId, "principal", actor(ctx))
	}
	return resp, err
}

// ListGroups lists the groups whose coordinator is this broker; a client
// asks every broker for the whole list.
func (g *Groups) ListGroups(ctx context.Context, req *brokerpb.ListGroupsRequest) (*brokerpb.ListGroupsResponse, error) {
	g.b.mu.Lock()
	var coords []*group.Coordinator
	for _, p := range g.b.parts {
		if p.coord != nil {
			coords = append(coords, p.coord)
		}
	}
	g.b.mu.Unlock()
	resp := &brokerpb.ListGroupsResponse{}
	for _, c := range coords {
		r, err := c.ListGroups(ctx, req)
		if err != nil {
			continue // loading: its groups appear once loaded
		}
		for _, sum := range r.Groups {
			if !g.b.sec.allowed(ctx, acl.Describe, acl.GroupResource(sum.GroupId)) {
				continue // only what the principal may describe
			}
			sum.CoordinatorId = g.b.cfg.ID
			resp.Groups = append(resp.Groups, sum)
		}
	}
	return resp, nil
}

// Join is a classic member's JoinGroup (READ on the group), answered by
// the group's coordinator once the join round completes.
func (g *Groups) Join(ctx context.Context, req group.JoinRequest) (group.JoinResult, error) {
	c, err := g.authorized(ctx, acl.Read, req.GroupID)
	if err != nil {
		return group.JoinResult{}, err
	}
	return c.Join(ctx, req)
}

// Sync is a classic member's SyncGroup (READ on the group).
func (g *Groups) Sync(ctx context.Context, req group.SyncRequest) (group.SyncResult, error) {
	c, err := g.authorized(ctx, acl.Read, req.GroupID)
	if err != nil {
		return group.SyncResult{}, err
	}
	return c.Sync(ctx, req)
}

// ClassicHeartbeat is a classic member's Heartbeat (READ on the group).
func (g *Groups) ClassicHeartbeat(ctx context.Context, req group.HeartbeatRequest) error {
	c, err := g.authorized(ctx, acl.Read, req.GroupID)
	if err != nil {
		return err
	}
	return c.ClassicHeartbeat(ctx, req)
}

// Leave removes classic members (READ on the group).
func (g *Groups) Leave(ctx context.Context, req group.LeaveRequest) ([]group.LeaveResult, error) {
	c, err := g.authorized(ctx, acl.Read, req.GroupID)
	if err != nil {
		return nil, err
	}
	return c.Leave(ctx, req)
}

// OffsetCommit commits offsets (READ on the group; a partition of a topic
// the principal may not READ is refused alone, with a *DeniedError): one
// result per partition.
func (g *Groups) OffsetCommit(ctx context.Context, req group.OffsetCommitRequest) ([]group.PartitionResult, error) {
	c, err := g.authorized(ctx, acl.Read, req.GroupID)
	if err != nil {
		return nil, err
	}
	denied := deniedTopics(ctx, g.b.sec, acl.Read, req.Offsets, func(o group.OffsetCommit) string { return o.Topic })
	if len(denied) == 0 {
		return c.OffsetCommit(ctx, req)
	}
	allowed := req
	allowed.Offsets = nil
	for _, o := range req.Offsets {
		if denied[o.Topic] == nil {
			allowed.Offsets = append(allowed.Offsets, o)
		}
	}
	var done []group.PartitionResult
	if len(allowed.Offsets) > 0 {
		if done, err = c.OffsetCommit(ctx, allowed); err != nil {
			return nil, err
		}
	}
	for _, o := range req.Offsets {
		if d := denied[o.Topic]; d != nil {
			done = append(done, group.PartitionResult{Topic: o.Topic, Partition: o.Partition, Err: d})
		}
	}
	return done, nil
}

// OffsetFetch returns committed offsets (DESCRIBE on the group). Asked for
// every partition, it shows only topics the principal may DESCRIBE; a
// named partition of another topic is answered with a *DeniedError in
// denied (keyed by topic).
func (g *Groups) OffsetFetch(ctx context.Context, req group.OffsetFetchRequest) (offsets []group.CommittedOffset, denied map[string]error, err error) {
	c, err := g.authorized(ctx, acl.Describe, req.GroupID)
	if err != nil {
		return nil, nil, err
	}
	if req.Partitions != nil {
		denied = deniedTopics(ctx, g.b.sec, acl.Describe, req.Partitions, func(p group.TopicPartition) string { return p.Topic })
		req.Partitions = slices.DeleteFunc(slices.Clone(req.Partitions), func(p group.TopicPartition) bool { return denied[p.Topic] != nil })
		if len(req.Partitions) == 0 {
			return nil, denied, nil
		}
	}
	offsets, err = c.OffsetFetch(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	visible := map[string]bool{}
	return slices.DeleteFunc(offsets, func(o group.CommittedOffset) bool {
		ok, seen := visible[o.Topic]
		if !seen {
			ok = g.b.sec.allowed(ctx, acl.Describe, acl.TopicResource(o.Topic))
			visible[o.Topic] = ok
		}
		return !ok
	}), denied, nil
}

// DeleteOffsets deletes committed offsets (DELETE on the group, READ on
// the topics, as Kafka's OffsetDelete).
func (g *Groups) DeleteOffsets(ctx context.Context, groupID string, partitions []group.TopicPartition) ([]group.PartitionResult, error) {
	c, err := g.authorized(ctx, acl.Delete, groupID)
	if err != nil {
		return nil, err
	}
	if err := authorizeTopics(ctx, g.b.sec, acl.Read, partitions, func(p group.TopicPartition) string { return p.Topic }); err != nil {
		return nil, err
	}
	results, err := c.DeleteOffsets(ctx, groupID, partitions)
	if err == nil {
		g.b.log.Info("deleted group offsets", "group", groupID, "partitions", len(partitions), "principal", actor(ctx))
	}
	return results, err
}

// Describe describes a group of either kind (DESCRIBE on the group).
func (g *Groups) Describe(ctx context.Context, groupID string) (group.GroupDescription, error) {
	c, err := g.authorized(ctx, acl.Describe, groupID)
	if err != nil {
		return group.GroupDescription{}, err
	}
	return c.Describe(ctx, groupID)
}

// Delete deletes an empty group and its offsets (DELETE on the group).
func (g *Groups) Delete(ctx context.Context, groupID string) error {
	c, err := g.authorized(ctx, acl.Delete, groupID)
	if err != nil {
		return err
	}
	if err := c.Delete(ctx, groupID); err != nil {
		return err
	}
	g.b.log.Info("deleted group", "group", groupID, "principal", actor(ctx))
	return nil
}

// List lists the groups this broker coordinates that the principal may
// DESCRIBE (a client asks every broker for the whole list). A coordinator
// still loading is left out.
func (g *Groups) List(ctx context.Context) []group.GroupListing {
	var out []group.GroupListing
	for _, c := range g.localCoordinators() {
		gs, err := c.List(ctx)
		if err != nil {
			continue // loading: its groups appear once loaded
		}
		for _, l := range gs {
			if g.b.sec.allowed(ctx, acl.Describe, acl.GroupResource(l.GroupID)) {
				out = append(out, l)
			}
		}
	}
	return out
}

// localCoordinators are the coordinators of the offsets partitions this
// broker serves.
func (g *Groups) localCoordinators() []*group.Coordinator {
	g.b.mu.Lock()
	defer g.b.mu.Unlock()
	var coords []*group.Coordinator
	for _, p := range g.b.parts {
		if p.coord != nil {
			coords = append(coords, p.coord)
		}
	}
	return coords
}

// authorized checks op on the group, then finds its coordinator.
func (g *Groups) authorized(ctx context.Context, op acl.Operation, groupID string) (*group.Coordinator, error) {
	if err := g.b.sec.authorize(ctx, op, acl.GroupResource(groupID)); err != nil {
		return nil, err
	}
	return g.coordinator(groupID)
}

// deniedTopics is the refusal of op for each distinct topic of items the
// principal may not do it on (nil when all are allowed).
func deniedTopics[T any](ctx context.Context, sec *security, op acl.Operation, items []T, topic func(T) string) map[string]error {
	var denied map[string]error
	checked := map[string]bool{}
	for _, it := range items {
		name := topic(it)
		if checked[name] {
			continue
		}
		checked[name] = true
		if err := sec.authorize(ctx, op, acl.TopicResource(name)); err != nil {
			if denied == nil {
				denied = map[string]error{}
			}
			denied[name] = err
		}
	}
	return denied
}
