package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/compaction"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Admin is the service layer's topic and cluster administration (see
// Service): the gRPC and Kafka adapters call it.
type Admin struct {
	b *Broker
}

// Admin returns the broker's administration service.
func (b *Broker) Admin() *Admin { return &Admin{b: b} }

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (a *Admin) CreateTopic(ctx context.Context, req *brokerpb.CreateTopicRequest) (*brokerpb.CreateTopicResponse, error) {
	// CREATE on the cluster, or on the topic's name.
	if !a.b.sec.allowed(ctx, acl.Create, acl.ClusterResource) {
		if err := a.b.sec.authorize(ctx, acl.Create, acl.TopicResource(req.Name)); err != nil {
			return nil, err
		}
	}
	if err := ValidateTopicName(req.Name); err != nil {
		return nil, invalidKindf(ErrInvalidTopicName, "%v", err)
	}
	if strings.HasPrefix(req.Name, "__") {
		return nil, invalidKindf(ErrInvalidTopicName, "topic names starting with \"__\" are reserved for internal topics")
	}
	if req.Partitions < 1 || req.Partitions > a.b.cfg.MaxPartitionsPerTopic {
		return nil, invalidKindf(ErrInvalidPartitions, "partitions: want 1..%d (--max-partitions-per-topic), got %d", a.b.cfg.MaxPartitionsPerTopic, req.Partitions)
	}
	if err := a.checkClusterLimits(1, int(req.Partitions)); err != nil {
		return nil, err
	}
	tc, err := ParseTopicConfig(req.Configs)
	if err != nil {
		return nil, invalidKindf(ErrInvalidConfig, "%v", err)
	}
	if err := a.checkBookies(ctx, tc); err != nil {
		return nil, err
	}
	rec := &brokerpb.TopicRecord{Name: req.Name, Id: newID(), Partitions: req.Partitions,
		Configs: req.Configs, CreatedAtMs: a.b.clock.Now().UnixMilli()}
	if !req.ValidateOnly {
		put, err := a.b.meta.Put(ctx, topicKey(req.Name), topicMarshal(rec), metaclient.WithExpectedVersion(0))
		if errors.Is(err, metaclient.ErrVersionConflict) {
			return nil, fmt.Errorf("%w: %q", ErrTopicExists, req.Name)
		}
		if err != nil {
			return nil, err
		}
		a.b.topics.await(ctx, put.GetModRevision())
		a.b.log.Info("created topic", "topic", req.Name, "partitions", req.Partitions, "configs", req.Configs, "principal", actor(ctx))
	}
	return &brokerpb.CreateTopicResponse{Topic: a.describe(ctx, rec)}, nil
}

// checkClusterLimits refuses to add topics topics and partitions
// partitions beyond --max-topics and --max-cluster-partitions (each
// partition costs a ledger, metad keys and a goroutine
// on its owner). It counts the topics this broker's mirror holds (being
// deleted ones too, until they are gone), so brokers creating at the same
// moment can overshoot by what they create together.
func (a *Admin) checkClusterLimits(topics, partitions int) error {
	b := a.b
	snap, _ := b.topics.snapshot()
	total := 0
	for _, kv := range snap {
		if rec, err := unmarshalled[brokerpb.TopicRecord](kv.Value); err == nil {
			total += int(rec.Partitions)
		}
	}
	if topics > 0 && len(snap)+topics > b.cfg.MaxTopics {
		return fmt.Errorf("%w: the cluster has %d topics, --max-topics is %d", ErrLimit, len(snap), b.cfg.MaxTopics)
	}
	if total+partitions > b.cfg.MaxClusterPartitions {
		return fmt.Errorf("%w: the cluster has %d partitions, %d more would pass --max-cluster-partitions %d", ErrLimit, total, partitions, b.cfg.MaxClusterPartitions)
	}
	return nil
}

// checkBookies rejects a replication setting the cluster cannot meet now.
func (a *Admin) checkBookies(ctx context.Context, tc TopicConfig) error {
	b := a.b
	writable, err := b.env.Registry.Writable(ctx)
	if err != nil {
		return err
	}
	if len(writable) < tc.Ensemble {
		return invalidKindf(ErrInvalidConfig, "ensemble %d needs %d writable bookies; %d are registered and writable", tc.Ensemble, tc.Ensemble, len(writable))
	}
	return nil
}

// updateTopic applies fn to a topic's record by compare-and-set, retrying
// on conflicts, and returns once this broker's mirror of topics holds the
// write (what it answers next includes the change); with validateOnly it
// returns what fn made of the record and writes nothing.
func (a *Admin) updateTopic(ctx context.Context, name string, fn func(*brokerpb.TopicRecord) error, validateOnly bool) (*brokerpb.TopicRecord, error) {
	b := a.b
	for {
		kv, err := b.meta.Get(ctx, topicKey(name))
		if errors.Is(err, metaclient.ErrNotFound) {
			return nil, fmt.Errorf("%w %q", ErrUnknownTopic, name)
		}
		if err != nil {
			return nil, err
		}
		rec, err := unmarshalled[brokerpb.TopicRecord](kv.Value)
		if err != nil {
			return nil, err
		}
		if rec.Deleting {
			return nil, fmt.Errorf("%w %q (being deleted)", ErrUnknownTopic, name)
		}
		if err := fn(rec); err != nil {
			return nil, err
		}
		if validateOnly {
			return rec, nil
		}
		put, err := b.meta.Put(ctx, topicKey(name), topicMarshal(rec), metaclient.WithExpectedVersion(kv.Version))
		if errors.Is(err, metaclient.ErrVersionConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		b.topics.await(ctx, put.GetModRevision())
		return rec, nil
	}
}

func (a *Admin) DeleteTopic(ctx context.Context, req *brokerpb.DeleteTopicRequest) (*brokerpb.DeleteTopicResponse, error) {
	if err := a.b.sec.authorize(ctx, acl.Delete, acl.TopicResource(req.Name)); err != nil {
		return nil, err
	}
	_, err := a.updateTopic(ctx, req.Name, func(rec *brokerpb.TopicRecord) error {
		if rec.Internal {
			return invalidf("topic %q is internal and cannot be deleted", rec.Name)
		}
		rec.Deleting = true
		return nil
	}, false)
	if err != nil {
		return nil, err
	}
	a.b.log.Info("deleting topic", "topic", req.Name, "principal", actor(ctx))
	return &brokerpb.DeleteTopicResponse{}, nil
}

func (a *Admin) ListTopics(ctx context.Context, req *brokerpb.ListTopicsRequest) (*brokerpb.ListTopicsResponse, error) {
	resp := &brokerpb.ListTopicsResponse{}
	for _, name := range a.b.topicNames(req.IncludeInternal) {
		if !a.b.sec.allowed(ctx, acl.Describe, acl.TopicResource(name)) {
			continue // only what the principal may describe
		}
		if rec, err := a.b.topicRecord(name); err == nil {
			resp.Topics = append(resp.Topics, &brokerpb.TopicSummary{Name: name, Partitions: rec.Partitions, Internal: rec.Internal})
		}
	}
	return resp, nil
}

func (a *Admin) DescribeTopic(ctx context.Context, req *brokerpb.DescribeTopicRequest) (*brokerpb.DescribeTopicResponse, error) {
	if err := a.b.sec.authorize(ctx, acl.Describe, acl.TopicResource(req.Name)); err != nil {
		return nil, err
	}
	rec, err := a.b.currentTopicRecord(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return &brokerpb.DescribeTopicResponse{Topic: a.describe(ctx, rec)}, nil
}

func (a *Admin) AlterTopicConfigs(ctx context.Context, req *brokerpb.AlterTopicConfigsRequest) (*brokerpb.AlterTopicConfigsResponse, error) {
	if err := a.b.sec.authorize(ctx, acl.Alter, acl.TopicResource(req.Name)); err != nil {
		return nil, err
	}
	rec, err := a.updateTopic(ctx, req.Name, func(rec *brokerpb.TopicRecord) error {
		next := maps.Clone(rec.Configs)
		if next == nil || req.Replace {
			next = map[string]string{}
		}
		maps.Copy(next, req.Set)
		for _, k := range req.Delete {
			delete(next, k)
		}
		if internalTopic(req.Name) {
			if err := checkInternalConfigChange(req.Name, maps.Clone(rec.Configs), maps.Clone(next)); err != nil {
				return err
			}
		}
		tc, err := ParseTopicConfig(next)
		if err != nil {
			return invalidKindf(ErrInvalidConfig, "%v", err)
		}
		if err := a.checkBookies(ctx, tc); err != nil {
			return err
		}
		rec.Configs = next
		return nil
	}, req.ValidateOnly)
	if err != nil {
		return nil, err
	}
	if !req.ValidateOnly {
		a.b.log.Info("altered topic configs", "topic", req.Name, "set", req.Set, "deleted", req.Delete, "replace", req.Replace, "principal", actor(ctx))
	}
	return &brokerpb.AlterTopicConfigsResponse{Topic: a.describe(ctx, rec)}, nil
}

// internalSafeConfigs are the settings of an internal topic a client may
// change: how its segments roll and how soon it is compacted. Any other
// change could lose what the brokers keep there (cleanup.policy=delete
// with retention.ms=0 on __consumer_offsets deletes every group's
// committed offsets; a smaller max.message.bytes leaves a large group
// unable to persist; a lower ack.quorum weakens its durability), so no
// client, a super-user included, makes it.
var internalSafeConfigs = map[string]bool{
	"segment.bytes":             true,
	"segment.ms":                true,
	"min.cleanable.dirty.ratio": true,
	"min.compaction.lag.ms":     true,
	"max.compaction.lag.ms":     true,
}

// checkInternalConfigChange refuses a change of an internal topic's
// configs from old to next that sets, changes or removes a setting
// outside internalSafeConfigs. It deletes those from both maps.
func checkInternalConfigChange(topic string, old, next map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(internalSafeConfigs)) {
		delete(old, k)
		delete(next, k)
	}
	if !maps.Equal(old, next) {
		return invalidKindf(ErrInvalidConfig, "topic %q is internal: only %s may be changed",
			topic, strings.Join(slices.Sorted(maps.Keys(internalSafeConfigs)), ", "))
	}
	return nil
}

func (a *Admin) AddPartitions(ctx context.Context, req *brokerpb.AddPartitionsRequest) (*brokerpb.AddPartitionsResponse, error) {
	if err := a.b.sec.authorize(ctx, acl.Alter, acl.TopicResource(req.Name)); err != nil {
		return nil, err
	}
	if internalTopic(req.Name) {
		// A group's coordinator is partition PartitionFor(group, count) of
		// __consumer_offsets: a new count sends every group to a
		// partition that holds none of its committed offsets.
		return nil, invalidf("topic %q is internal: its partition count cannot change", req.Name)
	}
	rec, err := a.updateTopic(ctx, req.Name, func(rec *brokerpb.TopicRecord) error {
		if req.Total <= rec.Partitions {
			return invalidKindf(ErrInvalidPartitions, "topic %q has %d partitions; the new count %d must be larger", rec.Name, rec.Partitions, req.Total)
		}
		if req.Total > a.b.cfg.MaxPartitionsPerTopic {
			return invalidKindf(ErrInvalidPartitions, "partitions: at most %d (--max-partitions-per-topic), got %d", a.b.cfg.MaxPartitionsPerTopic, req.Total)
		}
		if err := a.checkClusterLimits(0, int(req.Total-rec.Partitions)); err != nil {
			return err
		}
		rec.Partitions = req.Total
		return nil
	}, req.ValidateOnly)
	if err != nil {
		return nil, err
	}
	if !req.ValidateOnly {
		a.b.log.Info("added partitions", "topic", req.Name, "total", req.Total, "principal", actor(ctx))
	}
	return &brokerpb.AddPartitionsResponse{Topic: a.describe(ctx, rec)}, nil
}

// describe builds a topic's description: configs, and per partition its
// owner and log (live numbers when this broker serves it, otherwise the
// ledger list as last written to metad).
func (a *Admin) describe(ctx context.Context, rec *brokerpb.TopicRecord) *brokerpb.TopicDescription {
	b := a.b
	d := &brokerpb.TopicDescription{Name: rec.Name, Id: rec.Id, PartitionCount: rec.Partitions,
		Configs: effectiveConfigs(rec.Configs), Internal: rec.Internal, CreatedAtMs: rec.CreatedAtMs}
	stored := a.storedLogs(ctx, rec)
	for p := int32(0); p < rec.Partitions; p++ {
		k := tp{rec.Name, p}
		pd := &brokerpb.PartitionDescription{Partition: p, HighWatermark: -1, LogStartOffset: -1}
		if kv := b.owners.get(ownerKey(k)); kv != nil {
			if o, err := unmarshalled[brokerpb.Ownership](kv.Value); err == nil {
				pd.OwnerId, pd.OwnerAddress, pd.OwnerEpoch = o.BrokerId, o.Address, o.Epoch
			}
		}
		var pl *brokerpb.PartitionLog
		l := b.serving(k)
		if l != nil {
			pl = l.Describe()
		} else {
			pl = stored[p]
		}
		if pl != nil {
			pd.LogStartOffset, pd.HighWatermark = pl.LogStartOffset, pl.LogStartOffset
			for _, s := range pl.Segments {
				pd.Bytes += s.Bytes
				pd.Ledgers = append(pd.Ledgers, &brokerpb.LedgerDescription{LedgerId: s.LedgerId, FirstOffset: s.FirstOffset,
					LastOffset: s.LastOffset, Bytes: s.Bytes, MaxTimestampMs: s.MaxTimestampMs, Closed: s.Closed})
				pd.HighWatermark = max(pd.HighWatermark, s.LastOffset+1)
			}
			for _, t := range pl.Tiered {
				pd.TieredSegments++
				pd.TieredBytes += t.SizeBytes
				pd.TieredEndOffset = t.LastOffset + 1
			}
			pd.HighWatermark = max(pd.HighWatermark, pd.TieredEndOffset)
			pd.LastCompactionMs, pd.CleanedOffset = pl.LastCompactionMs, pl.CleanedOffset
		}
		if l != nil {
			pd.HighWatermark = l.HighWatermark()
			if t := l.LastRetention(); !t.IsZero() {
				pd.LastRetentionMs = t.UnixMilli()
			}
			pd.DirtyRatio = compaction.DirtyRatio(l.Snapshot(), l.Config().Tier != nil)
		}
		d.Partitions = append(d.Partitions, pd)
	}
	return d
}

// storedLogs reads the PartitionLogs of rec's partitions this broker does
// not serve, as last written to metad: one List of the topic's prefix, not
// a read per partition (a 10,000-partition topic's describe took minutes
// that way). Missing or undecodable ones are absent.
func (a *Admin) storedLogs(ctx context.Context, rec *brokerpb.TopicRecord) map[int32]*brokerpb.PartitionLog {
	b := a.b
	stored := map[int32]*brokerpb.PartitionLog{}
	served := 0
	for p := int32(0); p < rec.Partitions; p++ {
		if b.serving(tp{rec.Name, p}) != nil {
			served++
		}
	}
	if served == int(rec.Partitions) {
		return stored
	}
	prefix := partlog.PartitionPrefix + rec.Name + "/"
	kvs, _, err := b.meta.List(ctx, prefix)
	if err != nil {
		b.log.Warn("describe: reading partition logs", "topic", rec.Name, "err", err)
		return stored
	}
	for _, kv := range kvs {
		p, err := strconv.ParseInt(strings.TrimPrefix(kv.Key, prefix), 10, 32)
		if err != nil {
			continue
		}
		pl := &brokerpb.PartitionLog{}
		if proto.Unmarshal(kv.Value, pl) == nil {
			stored[int32(p)] = pl
		}
	}
	return stored
}

func (a *Admin) DescribeCluster(ctx context.Context, _ *brokerpb.DescribeClusterRequest) (*brokerpb.DescribeClusterResponse, error) {
	if err := a.b.sec.authorize(ctx, acl.Describe, acl.ClusterResource); err != nil {
		return nil, err
	}
	b := a.b
	resp := &brokerpb.DescribeClusterResponse{}
	if kv := b.controller.get(controllerKey); kv != nil {
		if c, err := unmarshalled[brokerpb.ControllerRecord](kv.Value); err == nil {
			resp.ControllerId = c.BrokerId
		}
	}
	assigns, _ := b.assignments.snapshot()
	owners, _ := b.owners.snapshot()
	assigned, owned := map[string]int32{}, map[string]int32{}
	for key, kv := range assigns {
		a, err := unmarshalled[brokerpb.Assignment](kv.Value)
		if err != nil {
			continue
		}
		assigned[a.BrokerId]++
		k, err := parseTP(key[len(assignmentsPrefix):])
		if err != nil {
			continue
		}
		o := owners[ownerKey(k)]
		if o == nil {
			resp.UnownedPartitions++
			continue
		}
		if own, err := unmarshalled[brokerpb.Ownership](o.Value); err == nil && own.BrokerId == a.BrokerId && own.Epoch == a.Epoch {
			owned[own.BrokerId]++
		} else {
			resp.UnownedPartitions++
		}
	}
	drained := b.drainedBrokers()
	for _, info := range b.liveBrokers() {
		resp.Brokers = append(resp.Brokers, &brokerpb.BrokerDescription{Info: info,
			PartitionsAssigned: assigned[info.Id], PartitionsOwned: owned[info.Id], Drained: drained[info.Id]})
	}
	for _, name := range b.topicNames(true) {
		if rec, err := b.topicRecord(name); err == nil {
			resp.Topics++
			resp.Partitions += rec.Partitions
		}
	}
	return resp, nil
}
