package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/retention"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/bytebudget"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Service is the broker's protocol-independent front (DESIGN §8): every
// client call's validation, authorization, budgets and limits, ownership
// routing, idempotence and metrics happen here, once. The gRPC API
// (grpc.go) and the Kafka protocol (package broker/kafka) are adapters
// over it: they translate requests, results and errors, nothing else.
//
// Calls take the caller's principal from ctx (WithPrincipal; the adapters
// authenticate). Errors are the package's sentinels (errors.go), partlog's
// and group's; per-partition outcomes carry their error in the result.
type Service struct {
	b *Broker
}

// Service returns the broker's service layer.
func (b *Broker) Service() *Service { return &Service{b: b} }

// BrokerID is the broker's id in metad.
func (s *Service) BrokerID() string { return s.b.cfg.ID }

// ProduceRequest is one call's batches: Records of each partition is one
// Kafka v2 record batch (partlog.Log.Append's input).
type ProduceRequest struct {
	Acks partlog.Acks
	// Timeout bounds the wait for acks; 0: --produce-timeout. At most
	// MaxProduceTimeout.
	Timeout    time.Duration
	Partitions []ProducePartition
}

// ProducePartition is one partition's batch.
type ProducePartition struct {
	Topic     string
	Partition int32
	Records   []byte
}

// ProduceResult is one partition's outcome: its offsets, or Err.
type ProduceResult struct {
	BaseOffset, LogStartOffset int64
	// Duplicate: an idempotent producer's retry, answered with the
	// original offsets.
	Duplicate bool
	Err       error
}

// Produce appends every partition's batch and returns, in request order,
// each one's outcome once acks is reached. The error is for the whole call
// (nothing was stored): a request too large, refused by the ACLs, or that
// found no room in the produce budget.
func (s *Service) Produce(ctx context.Context, req *ProduceRequest) ([]ProduceResult, error) {
	wait, err := s.StartProduce(ctx, req)
	if err != nil {
		return nil, err
	}
	return wait(), nil
}

// StartProduce is Produce in two halves: it checks the call and gives
// every batch its place in its partition's log, then returns; wait (which
// the caller must call once) waits for the acks and returns the results.
// Two StartProduce calls made one after the other place their batches in
// that order, so an adapter that must answer a connection's requests in
// order (Kafka's) starts them in order and waits concurrently.
func (s *Service) StartProduce(ctx context.Context, req *ProduceRequest) (wait func() []ProduceResult, err error) {
	b := s.b
	start := time.Now()
	if n := len(req.Partitions); n > MaxProducePartitions {
		return nil, invalidf("produce request names %d partitions, at most %d", n, MaxProducePartitions)
	}
	if req.Acks < partlog.AcksQuorum || req.Acks > partlog.AcksAll {
		return nil, invalidf("acks %d: want quorum, none, one or all", req.Acks)
	}
	if err := authorizeTopics(ctx, b.sec, acl.Write, req.Partitions, func(p ProducePartition) string { return p.Topic }); err != nil {
		return nil, err
	}
	timeout := b.cfg.ProduceTimeout
	if req.Timeout > 0 {
		timeout = min(req.Timeout, MaxProduceTimeout)
	}
	// The acks' deadline is the call's, not ctx's alone: wait runs after
	// StartProduce returned, so its context outlives this frame.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	hold, err := s.holdProduceBytes(ctx, req.Partitions)
	if err != nil {
		cancel()
		return nil, err
	}
	out := make([]ProduceResult, len(req.Partitions))
	placed := make([]*partlog.Appending, len(req.Partitions))
	forEachBounded(len(req.Partitions), produceWorkers, func(i int) {
		placed[i], out[i].Err = s.enqueue(ctx, req.Partitions[i], req.Acks)
		hold.validated(i)
	})
	return func() []ProduceResult {
		defer cancel()
		defer hold.release()
		for i, a := range placed {
			res := &out[i]
			if a != nil {
				r, err := a.Wait(ctx)
				res.BaseOffset, res.LogStartOffset, res.Duplicate, res.Err = r.BaseOffset, r.LogStartOffset, r.Duplicate, err
			}
			if res.Err != nil {
				res.BaseOffset = -1
			}
			b.metrics.produced(len(req.Partitions[i].Records), res.Err)
		}
		b.metrics.observe("produce", start)
		return out
	}, nil
}

// enqueue places one partition's batch (the first half of an append).
func (s *Service) enqueue(ctx context.Context, pp ProducePartition, acks partlog.Acks) (*partlog.Appending, error) {
	b := s.b
	if internalTopic(pp.Topic) {
		// Only the broker writes internal topics (the group coordinator
		// appends to __consumer_offsets directly): a client's batch there
		// could forge any group's offsets or poison its coordinator.
		return nil, invalidf("topic %q is internal: clients may not produce to it", pp.Topic)
	}
	l, err := b.partitionLog(pp.Topic, pp.Partition)
	if err != nil {
		return nil, err
	}
	return l.Enqueue(ctx, pp.Records, acks)
}

// holdProduceBytes takes the batches' decompressed bounds from the
// broker-wide produce budget (produceCharges), waiting at most
// produceBudgetWait: beyond, the request is refused as busy (retryable) so
// its memory is freed and the client backs off, instead of requests piling
// up on partitions' append queues each holding its batches.
func (s *Service) holdProduceBytes(ctx context.Context, parts []ProducePartition) (*produceHold, error) {
	sizes := make([]int, len(parts))
	for i, pp := range parts {
		sizes[i] = len(pp.Records)
	}
	return s.holdBytes(ctx, sizes, produceCharges(parts, s.servedLimits))
}

// servedLimits are the limits a partition this broker serves applies to
// its batches (false: not served here, so its batch is refused unread).
func (s *Service) servedLimits(pp ProducePartition) (partlog.Limits, bool) {
	if internalTopic(pp.Topic) {
		return partlog.Limits{}, false
	}
	l := s.b.serving(tp{pp.Topic, pp.Partition})
	if l == nil {
		return partlog.Limits{}, false
	}
	return l.Limits(), true
}

// produceCharges is what each batch holds of the produce budget while it
// is validated: what its records may decompress to
// (partlog.DecompressedBound under its partition's limits), or its size
// when it is refused before its records are read (limitsOf false).
// Decompressed bytes are what validation works through: a 1 KiB zstd
// batch may make it decompress 100 KiB under the default
// max.compression.ratio, and counting the 1 KiB would let 100 times the
// budget's worth of decompression run at once. The size is not known
// before the validation that decompresses, so the bound is what is held
// (a pure function).
func produceCharges(parts []ProducePartition, limitsOf func(ProducePartition) (partlog.Limits, bool)) []int64 {
	charges := make([]int64, len(parts))
	for i, pp := range parts {
		charges[i] = int64(len(pp.Records))
		if lim, ok := limitsOf(pp); ok {
			charges[i] = int64(partlog.DecompressedBound(pp.Records, lim))
		}
	}
	return charges
}

// holdBytes takes charges (one per batch of sizes bytes) from the produce
// budget.
func (s *Service) holdBytes(ctx context.Context, sizes []int, charges []int64) (*produceHold, error) {
	b := s.b
	var n int64
	for _, c := range charges {
		n += c
	}
	hold := &produceHold{budget: b.produceBudget, held: charges, sizes: sizes}
	if b.produceBudget.TryAcquire(n) { // the common case: no timer
		return hold, nil
	}
	wctx, cancel := context.WithTimeout(ctx, produceBudgetWait)
	defer cancel()
	if err := b.produceBudget.Acquire(wctx, n); err != nil {
		b.metrics.produceBusy.Inc()
		return nil, fmt.Errorf("%w: produce requests holding %d bytes (--max-inflight-produce-bytes) left no room for %d more within %s", ErrBusy, b.cfg.MaxInflightProduceBytes, n, produceBudgetWait)
	}
	return hold, nil
}

// produceHold is one Produce request's share of the produce budget: each
// batch's decompressed bound until it is validated, then its size until
// its acks are in (the batch is all the request still holds: validation
// streams, and keeps no decompressed bytes).
type produceHold struct {
	budget *bytebudget.Budget
	// held is each batch's share. validated writes element i from the
	// worker of batch i; release reads them all after every worker ended.
	held  []int64
	sizes []int
}

// validated lowers batch i's share to its size: its validation is over.
func (h *produceHold) validated(i int) {
	if excess := h.held[i] - int64(h.sizes[i]); excess > 0 {
		h.budget.Release(excess)
		h.held[i] -= excess
	}
}

// release gives back everything the request still holds.
func (h *produceHold) release() {
	var n int64
	for _, c := range h.held {
		n += c
	}
	h.budget.Release(n)
}

// servedAt is partitionLog with the client's view of the owner epoch
// checked (Kafka's CurrentLeaderEpoch; < 0: not checked).
func (s *Service) servedAt(topic string, partition int32, epoch int32) (*partlog.Log, error) {
	b := s.b
	l, err := b.partitionLog(topic, partition)
	if err != nil || epoch < 0 {
		return l, err
	}
	switch own := l.Epoch(); {
	case int64(epoch) < own:
		return nil, fmt.Errorf("%w: %s/%d is at epoch %d, the client's %d", ErrFencedLeaderEpoch, topic, partition, own, epoch)
	case int64(epoch) > own:
		return nil, fmt.Errorf("%w: %s/%d is at epoch %d here, the client's %d", ErrUnknownLeaderEpoch, topic, partition, own, epoch)
	}
	return l, nil
}

// Special timestamps of ListOffsets (Kafka's).
const (
	// ListLatest: the high watermark. ListEarliest: the log start.
	ListLatest   int64 = -1
	ListEarliest int64 = -2
	// ListMaxTimestamp: the first record with the log's largest
	// timestamp (offset -1 in an empty log).
	ListMaxTimestamp int64 = -3
	// ListEarliestLocal: the first offset still on the bookies (the high
	// watermark when all is in the object store).
	ListEarliestLocal int64 = -4
)

// ListOffsetResult is an offset found by ListOffsets, with the partition's
// bounds and owner epoch.
type ListOffsetResult struct {
	Offset, Timestamp             int64
	LogStartOffset, HighWatermark int64
	Epoch                         int64
}

// ListOffsets resolves timestamp (one of the special values above, or a
// time in ms: the first record at or after it, (HW, -1) when there is
// none) in one partition. leaderEpoch as in FetchPartition.
func (s *Service) ListOffsets(ctx context.Context, topic string, partition int32, timestamp int64, leaderEpoch int32) (ListOffsetResult, error) {
	if err := s.b.sec.authorize(ctx, acl.Read, acl.TopicResource(topic)); err != nil {
		return ListOffsetResult{}, err
	}
	if timestamp < ListEarliestLocal {
		return ListOffsetResult{}, invalidf("timestamp %d: want -4 (earliest local), -3 (max timestamp), -2 (earliest), -1 (latest) or a time in ms", timestamp)
	}
	l, err := s.servedAt(topic, partition, leaderEpoch)
	if err != nil {
		return ListOffsetResult{}, err
	}
	res := ListOffsetResult{LogStartOffset: l.LogStartOffset(), HighWatermark: l.HighWatermark(), Epoch: l.Epoch()}
	switch timestamp {
	case ListEarliestLocal:
		res.Offset, res.Timestamp = earliestLocal(l.Describe(), res.HighWatermark), -1
		return res, nil
	case ListMaxTimestamp:
		maxTs, ok := maxTimestamp(l.Describe())
		if !ok {
			res.Offset, res.Timestamp = -1, -1
			return res, nil
		}
		timestamp = maxTs
	}
	res.Offset, res.Timestamp, err = l.ListOffset(ctx, timestamp)
	return res, err
}

// earliestLocal is the first offset of the first ledger segment (hw when
// the log holds none).
func earliestLocal(pl *brokerpb.PartitionLog, hw int64) int64 {
	for _, seg := range pl.Segments {
		if seg.LastOffset >= seg.FirstOffset {
			return max(seg.FirstOffset, pl.LogStartOffset)
		}
	}
	return hw
}

// maxTimestamp is the largest record timestamp of the log's segments and
// objects; ok false when it holds no record.
func maxTimestamp(pl *brokerpb.PartitionLog) (ts int64, ok bool) {
	ts = -1
	for _, seg := range pl.Segments {
		if seg.LastOffset >= seg.FirstOffset && seg.LastOffset >= pl.LogStartOffset {
			ts, ok = max(ts, seg.MaxTimestampMs), true
		}
	}
	for _, t := range pl.Tiered {
		if t.LastOffset >= pl.LogStartOffset {
			ts, ok = max(ts, t.MaxTimestampMs), true
		}
	}
	return ts, ok
}

// EpochEnd answers Kafka's OffsetForLeaderEpoch for one partition (see
// partlog.Log.EpochEnd). leaderEpoch as in FetchPartition.
func (s *Service) EpochEnd(ctx context.Context, topic string, partition int32, requested, leaderEpoch int32) (epoch int32, end int64, err error) {
	if err := s.b.sec.authorize(ctx, acl.Describe, acl.TopicResource(topic)); err != nil {
		return 0, 0, err
	}
	l, err := s.servedAt(topic, partition, leaderEpoch)
	if err != nil {
		return 0, 0, err
	}
	e, end := l.EpochEnd(int64(requested))
	return int32(e), end, nil
}

// producerIDBlock: producer ids are taken from metad's counter in blocks,
// one metad write per block.
const producerIDBlock = 100

// InitProducerID gives an idempotent producer a new id (epoch 0).
func (s *Service) InitProducerID(ctx context.Context) (id int64, epoch int16, err error) {
	b := s.b
	b.pidMu.Lock()
	defer b.pidMu.Unlock()
	if b.pidNext >= b.pidLimit {
		next, err := b.takeFromCounter(ctx, producerIDKey, 0, producerIDBlock)
		if err != nil {
			return 0, 0, err
		}
		b.pidNext, b.pidLimit = next, next+producerIDBlock
	}
	id = b.pidNext
	b.pidNext++
	return id, 0, nil
}

// Metadata is the cluster as a client routes by it.
type Metadata struct {
	Brokers []*brokerpb.BrokerInfo
	// ControllerID: the controller's broker id ("" when none).
	ControllerID string
	Topics       []TopicMetadata
}

// TopicMetadata is one topic's routing, or Err.
type TopicMetadata struct {
	Name       string
	ID         string
	Internal   bool
	Partitions []PartitionMetadata
	Err        error
}

// PartitionMetadata is a partition's serving owner (Owner nil: none).
type PartitionMetadata struct {
	Partition int32
	Owner     *brokerpb.Ownership
}

// Metadata describes topics (nil: every topic the principal may describe,
// internal ones included; empty: none) and the live brokers.
func (s *Service) Metadata(ctx context.Context, topics []string) (*Metadata, error) {
	b := s.b
	md := &Metadata{Brokers: b.liveBrokers(), ControllerID: b.controllerID()}
	names, err := metadataTopics(topics)
	if err != nil {
		return nil, err
	}
	listAll := topics == nil
	if listAll {
		names = b.topicNames(true)
	}
	for _, name := range names {
		if listAll && !b.sec.allowed(ctx, acl.Describe, acl.TopicResource(name)) {
			continue // a listing shows only what the principal may describe
		}
		md.Topics = append(md.Topics, s.topicMetadata(ctx, name))
	}
	return md, nil
}

// topicMetadata is one topic's routing.
func (s *Service) topicMetadata(ctx context.Context, name string) TopicMetadata {
	b := s.b
	tm := TopicMetadata{Name: name}
	if tm.Err = b.sec.authorize(ctx, acl.Describe, acl.TopicResource(name)); tm.Err != nil {
		return tm
	}
	rec, err := b.currentTopicRecord(ctx, name)
	if err != nil {
		tm.Err = err
		return tm
	}
	tm.ID, tm.Internal = rec.Id, rec.Internal
	tm.Partitions = make([]PartitionMetadata, rec.Partitions)
	for p := range rec.Partitions {
		tm.Partitions[p].Partition = p
		// One key at a time: a request costs what its topics hold, not
		// what the cluster holds.
		tm.Partitions[p].Owner = b.owner(tp{name, p})
	}
	return tm
}

// owner is a partition's ownership record as mirrored, nil when it has
// no owner.
func (b *Broker) owner(k tp) *brokerpb.Ownership {
	kv := b.owners.get(ownerKey(k))
	if kv == nil {
		return nil
	}
	o, err := unmarshalled[brokerpb.Ownership](kv.Value)
	if err != nil {
		return nil
	}
	return o
}

// controllerID is the controller's broker id as mirrored, "" when none.
func (b *Broker) controllerID() string {
	if kv := b.controller.get(controllerKey); kv != nil {
		if c, err := unmarshalled[brokerpb.ControllerRecord](kv.Value); err == nil {
			return c.BrokerId
		}
	}
	return ""
}

// Brokers are the live brokers, sorted by id.
func (s *Service) Brokers() []*brokerpb.BrokerInfo { return s.b.liveBrokers() }

// Owner is the serving owner of a partition as mirrored (nil: none).
func (s *Service) Owner(topic string, partition int32) *brokerpb.Ownership {
	return s.b.owner(tp{topic, partition})
}

// ControllerID is the controller's broker id as mirrored ("" when none).
func (s *Service) ControllerID() string { return s.b.controllerID() }

// DeleteRecords moves a partition's log start to offset (-1: the high
// watermark), as retention does (Kafka's DeleteRecords; DELETE on the
// topic), and returns the log start after it.
func (s *Service) DeleteRecords(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	if err := s.b.sec.authorize(ctx, acl.Delete, acl.TopicResource(topic)); err != nil {
		return 0, err
	}
	if internalTopic(topic) {
		// Kafka answers INVALID_TOPIC_EXCEPTION here too.
		return 0, invalidKindf(ErrInvalidTopicName, "topic %q is internal: its records cannot be deleted", topic)
	}
	l, err := s.b.partitionLog(topic, partition)
	if err != nil {
		return 0, err
	}
	return retention.DeleteBefore(ctx, l, offset)
}

// TopicID is a live topic's id ("" when there is no such topic).
func (s *Service) TopicID(name string) string {
	rec, err := s.b.topicRecord(name)
	if err != nil {
		return ""
	}
	return rec.Id
}
