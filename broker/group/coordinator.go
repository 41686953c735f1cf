package group

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

type loadState int

const (
	stateLoading loadState = iota
	stateLoaded
	stateClosed
)

// Coordinator coordinates the groups of one __consumer_offsets partition.
// It is safe for concurrent use.
//
// Lock discipline: one mutex guards all state and is held across the log
// appends that persist a change, so the log's order of records is the order
// the changes were applied in memory (a replay rebuilds the same state).
// The TopicSource is called without it.
type Coordinator struct {
	cfg    Config
	log    *slog.Logger
	lim    limits
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once

	mu struct {
		sync.Mutex
		state  loadState
		groups map[string]*group
	}
}

// New returns a coordinator that answers ErrLoading until Load succeeds.
// Call Validate on the config first: New assumes a valid one.
func New(cfg Config) *Coordinator {
	cfg.setDefaults()
	c := &Coordinator{
		cfg: cfg,
		log: cfg.Logger.With("component", "group-coordinator", "partition", cfg.Partition),
		lim: limits{
			sessionTimeout:    cfg.SessionTimeout,
			minSessionTimeout: cfg.MinSessionTimeout,
			maxSessionTimeout: cfg.MaxSessionTimeout,
			rebalanceTimeout:  cfg.RebalanceTimeout,
			Limits:            cfg.Limits,
			maxGroupBytes:     cfg.Limits.MaxGroupBytes,
		},
		stop: make(chan struct{}),
	}
	c.mu.groups = map[string]*group{}
	return c
}

// Load replays the partition into memory and starts serving (and, unless
// TickInterval is negative, the background loop that expires sessions).
// Groups whose members were persisted keep their epochs and assignments;
// their sessions start at Load. A record that cannot be decoded is logged
// and skipped (the records are independent: one bad key loses one offset);
// so is a batch that cannot be decoded, counted in
// strata_broker_group_replay_batches_skipped_total.
func (c *Coordinator) Load(ctx context.Context) error {
	start := time.Now()
	c.mu.Lock()
	state := c.mu.state
	c.mu.Unlock()
	switch state {
	case stateClosed:
		return ErrClosed
	case stateLoaded:
		return nil
	}

	now := c.cfg.Now()
	groups := map[string]*group{}
	skipped := 0
	apply := func(r recordbatch.Record) error {
		d, err := decodeRecord(r)
		if err != nil {
			skipped++
			c.log.Error("skipping undecodable __consumer_offsets record", "offset", r.Offset, "err", err)
			return nil
		}
		g := groups[d.key.GroupId]
		if g == nil {
			g = newGroup(d.key.GroupId)
			groups[g.id] = g
		}
		switch {
		case d.key.Topic == "" && d.tombstone:
			g.restore(&brokerpb.GroupMetadataValue{}, now, c.lim)
			g.epoch = 0
		case d.key.Topic == "":
			g.restore(d.metadata, now, c.lim)
		case d.tombstone:
			delete(g.offsets, TopicPartition{d.key.Topic, d.key.Partition})
		default:
			g.offsets[TopicPartition{d.key.Topic, d.key.Partition}] = d.offset
		}
		return nil
	}
	var err error
	if s, ok := c.cfg.Log.(SkippingReplayer); ok {
		err = s.ReplaySkipping(ctx, apply, func(offset int64, err error) {
			c.cfg.Metrics.skippedBatches.Inc()
			c.log.Error("skipping undecodable __consumer_offsets batch", "offset", offset, "err", err)
		})
	} else {
		err = c.cfg.Log.Replay(ctx, apply)
	}
	if err != nil {
		return fmt.Errorf("group: load partition %d: %w", c.cfg.Partition, err)
	}
	members := 0
	for id, g := range groups {
		if len(g.members) == 0 && len(g.offsets) == 0 && g.epoch == 0 {
			delete(groups, id)
			continue
		}
		members += len(g.members)
		if len(g.members) > 0 {
			counts, err := c.partitionCounts(ctx, g.subscribedTopics())
			if err != nil {
				return fmt.Errorf("group: load partition %d: %w", c.cfg.Partition, err)
			}
			g.computeTarget(counts, now)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.mu.state {
	case stateClosed:
		return ErrClosed
	case stateLoaded: // a concurrent Load won
		return nil
	}
	c.mu.groups = groups
	c.mu.state = stateLoaded
	// Stored groups count even past MaxGroups: they are never refused.
	c.cfg.Metrics.groups.add(len(groups))
	for _, g := range groups {
		c.cfg.Metrics.members.WithLabelValues(g.id).Set(float64(len(g.members)))
	}
	c.cfg.Metrics.loadDuration.Observe(time.Since(start).Seconds())
	c.log.Info("loaded", "groups", len(groups), "members", members, "skipped", skipped, "duration", time.Since(start))
	if c.cfg.TickInterval > 0 {
		c.wg.Add(1)
		go c.tickLoop()
	}
	return nil
}

// Close stops the coordinator (its partition moved or the broker stops):
// later calls return ErrClosed. It waits for the background loop.
func (c *Coordinator) Close() error {
	c.closed.Do(func() {
		c.mu.Lock()
		c.mu.state = stateClosed
		for id := range c.mu.groups {
			c.cfg.Metrics.members.DeleteLabelValues(id)
		}
		c.cfg.Metrics.groups.add(-len(c.mu.groups))
		c.mu.groups = map[string]*group{}
		c.mu.Unlock()
		close(c.stop)
	})
	c.wg.Wait()
	return nil
}

func (c *Coordinator) tickLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
			if err := c.Tick(ctx, c.cfg.Now()); err != nil && !errors.Is(err, ErrClosed) {
				c.log.Warn("persisting expired members failed", "err", err)
			}
			cancel()
		}
	}
}

// Tick expires sessions and rebalance timeouts as of now in every group and
// persists the groups that changed. The background loop calls it every
// TickInterval; tests with a fake clock call it directly.
func (c *Coordinator) Tick(ctx context.Context, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return err
	}
	ids := make([]string, 0, len(c.mu.groups))
	for id, g := range c.mu.groups {
		c.expireLocked(g, now)
		if g.dirty {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if err := c.persistLocked(ctx, ids...); err != nil {
		return err
	}
	return c.expireOffsetsLocked(ctx, now)
}

// expireOffsetsLocked deletes (with tombstones) the offsets of groups
// without members that are older than OffsetsRetention, and the groups
// left with nothing.
// REQUIRES: c.mu held.
func (c *Coordinator) expireOffsetsLocked(ctx context.Context, now time.Time) error {
	horizon := now.Add(-c.cfg.OffsetsRetention).UnixMilli()
	nowMs := now.UnixMilli()
	var records []recordbatch.Record
	type expired struct {
		g     *group
		tps   []TopicPartition
		whole bool
	}
	var drop []expired
	for _, id := range c.sortedGroupIDsLocked() {
		g := c.mu.groups[id]
		if len(g.members) > 0 {
			g.emptySince = time.Time{}
			continue
		}
		if g.emptySince.IsZero() {
			g.emptySince = now
		}
		var e expired
		for tp, v := range g.offsets {
			if v.GetCommitTimestampMs() < horizon {
				e.tps = append(e.tps, tp)
			}
		}
		// The group goes when nothing of it is left and it has been empty
		// for the whole retention (or its last offsets expire now).
		e.whole = len(e.tps) == len(g.offsets) && (len(e.tps) > 0 || !now.Before(g.emptySince.Add(c.cfg.OffsetsRetention)))
		if len(e.tps) == 0 && !e.whole {
			continue
		}
		for _, tp := range e.tps {
			r, err := offsetRecord(id, tp, nil, nowMs)
			if err != nil {
				return err
			}
			records = append(records, r)
		}
		if e.whole {
			r, err := metadataRecord(id, nil, nowMs)
			if err != nil {
				return err
			}
			records = append(records, r)
		}
		e.g = g
		drop = append(drop, e)
	}
	if len(records) == 0 {
		return nil
	}
	if err := c.cfg.Log.Append(ctx, records); err != nil {
		return fmt.Errorf("group: expire offsets: %w", err)
	}
	for _, e := range drop {
		for _, tp := range e.tps {
			delete(e.g.offsets, tp)
		}
		if e.whole {
			delete(c.mu.groups, e.g.id)
			c.cfg.Metrics.groups.add(-1)
			c.cfg.Metrics.members.DeleteLabelValues(e.g.id)
			c.cfg.Metrics.rebalances.DeleteLabelValues(e.g.id)
		}
		c.log.Info("expired offsets of an empty group", "group", e.g.id, "offsets", len(e.tps), "group_deleted", e.whole)
	}
	return nil
}

// REQUIRES: c.mu held.
func (c *Coordinator) checkStateLocked() error {
	switch c.mu.state {
	case stateLoading:
		return ErrLoading
	case stateClosed:
		return ErrClosed
	}
	return nil
}

// expireLocked applies session and rebalance timeouts to g.
// REQUIRES: c.mu held.
func (c *Coordinator) expireLocked(g *group, now time.Time) {
	expired, fenced := g.expire(now)
	if expired+fenced > 0 {
		c.log.Info("removed members", "group", g.id, "session_expired", expired, "rebalance_timeout", fenced, "group_epoch", g.epoch)
		c.cfg.Metrics.expired.Add(float64(expired))
		c.cfg.Metrics.fenced.Add(float64(fenced))
	}
	c.reportLocked(g)
}

// reportLocked updates the metrics of g.
// REQUIRES: c.mu held.
func (c *Coordinator) reportLocked(g *group) {
	if g.rebalances > 0 {
		c.cfg.Metrics.rebalances.WithLabelValues(g.id).Add(float64(g.rebalances))
		g.rebalances = 0
	}
	c.cfg.Metrics.members.WithLabelValues(g.id).Set(float64(len(g.members)))
}

// persistLocked writes the metadata of the named dirty groups, in as few
// batches as the OffsetsLog's batch bound allows (each record is a whole
// group: many large groups changed by one Tick must not make one batch too
// large for all of them). On failure the groups not yet written stay dirty
// (the next change or tick writes them again).
// REQUIRES: c.mu held.
func (c *Coordinator) persistLocked(ctx context.Context, ids ...string) error {
	var records []recordbatch.Record
	var written []*group
	nowMs := c.cfg.Now().UnixMilli()
	for _, id := range ids {
		g := c.mu.groups[id]
		if g == nil || !g.dirty {
			continue
		}
		r, err := metadataRecord(id, g.metadata(), nowMs)
		if err != nil {
			return err
		}
		records = append(records, r)
		written = append(written, g)
	}
	for len(records) > 0 {
		n := batchPrefix(records, c.maxBatchBytes())
		if err := c.cfg.Log.Append(ctx, records[:n]); err != nil {
			return fmt.Errorf("group: persist group metadata: %w", err)
		}
		for _, g := range written[:n] {
			g.dirty = false
		}
		records, written = records[n:], written[n:]
	}
	return nil
}

// maxBatchBytes is the OffsetsLog's batch bound, or the default
// max.message.bytes when it does not say.
func (c *Coordinator) maxBatchBytes() int {
	if b, ok := c.cfg.Log.(BatchLimiter); ok && b.MaxBatchBytes() > 0 {
		return b.MaxBatchBytes()
	}
	return defaultMaxBatchBytes
}

// defaultMaxBatchBytes is Kafka's (and Strata's) default max.message.bytes.
const defaultMaxBatchBytes = 1048588

// batchPrefix returns how many of records (at least one) fit in a batch of
// maxBytes: the batch header, and per record its key, value and at most
// recordOverhead bytes of lengths, deltas and attributes.
func batchPrefix(records []recordbatch.Record, maxBytes int) int {
	const batchHeader, recordOverhead = 61, 32
	size := batchHeader
	for i, r := range records {
		size += len(r.Key) + len(r.Value) + recordOverhead
		if size > maxBytes && i > 0 {
			return i
		}
	}
	return len(records)
}

// limitsNow returns the limits with maxGroupBytes at most half the
// OffsetsLog's current batch bound (the topic's max.message.bytes may
// change at any time).
func (c *Coordinator) limitsNow() limits {
	lim := c.lim
	lim.maxGroupBytes = min(lim.MaxGroupBytes, c.maxBatchBytes()/2)
	return lim
}

// refused counts err in strata_broker_group_requests_refused_total when a
// limit refused the request, and returns it.
func (c *Coordinator) refused(err error) error {
	if reason := refusalReason(err); reason != "" {
		c.cfg.Metrics.refused.WithLabelValues(reason).Inc()
		c.log.Debug("request refused by a limit", "reason", reason, "err", err)
	}
	return err
}

// Heartbeat serves GroupHeartbeat (KIP-848): join with epoch 0, leave with
// -1, otherwise report owned partitions and get the assignment. See doc.go
// for the epochs and the hand-over rule. The response is sent only once the
// group's changed state is durable in the log.
func (c *Coordinator) Heartbeat(ctx context.Context, req *brokerpb.GroupHeartbeatRequest) (*brokerpb.GroupHeartbeatResponse, error) {
	id := req.GetGroupId()
	if id == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	if err := checkHeartbeat(req, c.lim.Limits); err != nil {
		return nil, c.refused(err)
	}
	// Partition counts of the topics involved, fetched without the lock.
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	topics := slices.Clone(req.GetSubscribedTopics())
	if g := c.mu.groups[id]; g != nil {
		topics = append(topics, g.subscribedTopics()...)
	}
	c.mu.Unlock()
	if req.GetMemberEpoch() == -1 {
		topics = nil // a leave needs no fresh counts
	}
	counts, err := c.partitionCounts(ctx, topics)
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStateLocked(); err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	g := c.mu.groups[id]
	created := false
	if g == nil {
		if req.GetMemberEpoch() != 0 {
			if req.GetMemberEpoch() == -1 {
				return &brokerpb.GroupHeartbeatResponse{MemberId: req.GetMemberId(), MemberEpoch: -1}, nil
			}
			return nil, fmt.Errorf("%w: %q (no group %q)", ErrUnknownMember, req.GetMemberId(), id)
		}
		if !c.cfg.Metrics.groups.reserve(c.lim.MaxGroups) {
			return nil, c.refused(refuse(refusedMaxGroups, ErrLimitExceeded, "this broker coordinates %d groups, the most it may (group %q)", c.lim.MaxGroups, id))
		}
		g, created = newGroup(id), true
		c.mu.groups[id] = g
	}
	c.expireLocked(g, now)
	resp, hbErr := g.heartbeat(req, counts, now, c.limitsNow(), newMemberID)
	hbErr = c.refused(hbErr)
	if created && hbErr != nil {
		delete(c.mu.groups, id)
		c.cfg.Metrics.groups.add(-1)
		c.cfg.Metrics.members.DeleteLabelValues(id)
		return nil, hbErr
	}
	c.reportLocked(g)
	if err := c.persistLocked(ctx, id); err != nil {
		return nil, err
	}
	if hbErr != nil {
		return nil, hbErr
	}
	resp.HeartbeatIntervalMs = int32(c.cfg.HeartbeatInterval.Milliseconds())
	return resp, nil
}

// partitionCounts asks the TopicSource for each topic's partition count. An
// unknown topic counts 0 partitions; another error fails the call unless it
// is only the TopicSource's (then the topic is left out and keeps its last
// known count).
func (c *Coordinator) partitionCounts(ctx context.Context, topics []string) (map[string]int32, error) {
	counts := map[string]int32{}
	for _, t := range topics {
		if _, done := counts[t]; done || t == "" {
			continue
		}
		n, err := c.cfg.Topics.Partitions(ctx, t)
		switch {
		case err == nil:
			counts[t] = max(n, 0)
		case errors.Is(err, ErrUnknownTopic):
			counts[t] = 0
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			c.log.Warn("topic partition count unavailable", "topic", t, "err", err)
		}
	}
	return counts, nil
}

// newMemberID returns a random UUID (version 4) string.
func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
