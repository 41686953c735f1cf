package group

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
// Lock discipline: one mutex (mu) guards all in-memory state, and is never
// held across a call that can block: neither the OffsetsLog's appends
// (pipeline.go: each group's writes go through its lane, decided under mu,
// appended without it, applied under it again; doc.go W1-W6) nor the
// TopicSource.
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
			g.durable = nil
		case d.key.Topic == "":
			g.restore(d.metadata, now, c.lim)
			g.durable = d.metadata
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
			g.durableCounts = maps.Clone(g.partitionCounts)
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

// Tick expires sessions and rebalance timeouts as of now in every group,
// expires the offsets of groups without members (OffsetsRetention), and
// writes the groups that changed, as many to a batch as the OffsetsLog's
// bound allows (each group's records in one batch). A group whose lane is
// busy is left to its lane's next batch or to the next Tick. The
// background loop calls it every TickInterval; tests with a fake clock
// call it directly.
func (c *Coordinator) Tick(ctx context.Context, now time.Time) error {
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	var ids []string
	for id, g := range c.mu.groups {
		c.expireLocked(g, now)
		if len(g.members) > 0 {
			g.emptySince = time.Time{}
		} else if g.emptySince.IsZero() {
			g.emptySince = now
		}
		if g.version > g.persisted || c.offsetsExpiryLocked(g, now).any() {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	slices.Sort(ids)

	var firstErr error
	for len(ids) > 0 {
		c.mu.Lock()
		if err := c.checkStateLocked(); err != nil {
			c.mu.Unlock()
			return err
		}
		b := newBatch()
		for len(ids) > 0 {
			g := c.mu.groups[ids[0]]
			if g == nil || g.lane.busy {
				ids = ids[1:]
				continue
			}
			if len(b.records) > 0 && b.bytes+c.groupWriteBytesLocked(g, now) > c.maxBatchBytes() {
				break // the next batch
			}
			ids = ids[1:]
			g.lane.busy = true
			c.addGroupLocked(b, g, c.expireOffsetsWrite(g, now))
		}
		c.mu.Unlock()
		err := c.appendBatch(ctx, b)
		c.mu.Lock()
		c.completeLocked(b, err)
		c.mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// offsetsExpiry is what OffsetsRetention removes of a group at one Tick:
// as many expired offsets as one write holds (tombstonePrefix); the next
// Tick takes the rest.
type offsetsExpiry struct {
	tps []TopicPartition
	// whole: the group goes too (nothing of it is left, and it has been
	// empty for the whole retention, or its last offsets expire now).
	whole bool
}

func (e offsetsExpiry) any() bool { return len(e.tps) > 0 || e.whole }

// offsetsExpiryLocked returns what expires of g at now: the offsets older
// than OffsetsRetention of a group without members, and the group with
// them when nothing is left.
// REQUIRES: c.mu held.
func (c *Coordinator) offsetsExpiryLocked(g *group, now time.Time) offsetsExpiry {
	var e offsetsExpiry
	if len(g.members) > 0 || g.emptySince.IsZero() {
		return e
	}
	horizon := now.Add(-c.cfg.OffsetsRetention).UnixMilli()
	for tp, v := range g.offsets {
		if v.GetCommitTimestampMs() < horizon {
			e.tps = append(e.tps, tp)
		}
	}
	slices.SortFunc(e.tps, compareTP)
	e.whole = len(e.tps) == len(g.offsets) && (len(e.tps) > 0 || !now.Before(g.emptySince.Add(c.cfg.OffsetsRetention)))
	if n := c.tombstonePrefix(g, e.tps); n < len(e.tps) {
		e.tps, e.whole = e.tps[:n], false
	}
	return e
}

// tombstoneBytes is what the tombstone of g's offset of tp adds to a
// batch, at most (recordBytes of its key: the group id, the topic, a
// partition and proto tags).
func tombstoneBytes(g *group, tp TopicPartition) int {
	return recordBytes(recordbatch.Record{Key: make([]byte, len(g.id)+len(tp.Topic)+16)})
}

// tombstonePrefix returns how many of tps (at least one) one write of g's
// offset tombstones takes: what fits in half the OffsetsLog's batch bound,
// beside the group's metadata (at most the other half: limitsNow) and its
// tombstone. A group with more offsets is deleted or expired in several
// writes: all of them in one batch would pass max.message.bytes (from
// about 13,000 offsets at the default), and the write could never succeed.
// REQUIRES: c.mu held.
func (c *Coordinator) tombstonePrefix(g *group, tps []TopicPartition) int {
	room := c.maxBatchBytes()/2 - batchHeaderBytes - tombstoneBytes(g, TopicPartition{})
	for i, tp := range tps {
		if room -= tombstoneBytes(g, tp); room < 0 && i > 0 {
			return i
		}
	}
	return len(tps)
}

// groupWriteBytesLocked estimates what Tick writes of g: its metadata if
// changed, and a tombstone per expiring offset.
// REQUIRES: c.mu held.
func (c *Coordinator) groupWriteBytesLocked(g *group, now time.Time) int {
	size := 0
	c.changedLocked(g)
	if g.version > g.persisted {
		if r, err := metadataRecord(g.id, g.metadata(), 0); err == nil {
			size += recordBytes(r)
		}
	}
	e := c.offsetsExpiryLocked(g, now)
	for _, tp := range e.tps {
		size += tombstoneBytes(g, tp)
	}
	return size
}

// expireOffsetsWrite is Tick's write of g: tombstones for its expired
// offsets, and for the group when nothing of it is left (W5).
func (c *Coordinator) expireOffsetsWrite(g *group, now time.Time) *write {
	return c.newWrite(g, func() prepared {
		e := c.offsetsExpiryLocked(g, now)
		if !e.any() {
			return prepared{}
		}
		var p prepared
		nowMs := now.UnixMilli()
		for _, tp := range e.tps {
			r, err := offsetRecord(g.id, tp, nil, nowMs)
			if err != nil {
				return prepared{refusal: err}
			}
			p.records = append(p.records, r)
		}
		if e.whole {
			r, err := metadataRecord(g.id, nil, nowMs)
			if err != nil {
				return prepared{refusal: err}
			}
			p.records, p.metadata = append(p.records, r), true
		}
		p.apply = func() {
			for _, tp := range e.tps {
				delete(g.offsets, tp)
			}
			if e.whole {
				c.deletedLocked(g)
			}
			c.log.Info("expired offsets of an empty group", "group", g.id, "offsets", len(e.tps), "group_deleted", e.whole)
		}
		return p
	})
}

// deletedLocked applies a metadata tombstone of g now durable: the log
// has no metadata of the group any more. Unless members joined since it
// was decided (their metadata is written next), the group is at epoch 0
// like after a replay, and goes once its lane is idle.
// REQUIRES: c.mu held.
func (c *Coordinator) deletedLocked(g *group) {
	g.durable, g.durableCounts = nil, nil
	if len(g.members) == 0 {
		g.epoch = 0
		g.partitionCounts = map[string]int32{}
	}
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
	c.changedLocked(g)
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
// group's state it reflects is durable in the log (W6): at once when the
// heartbeat changed nothing and the log is up to date, otherwise after
// the group's lane wrote the metadata.
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
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	now := c.cfg.Now()
	g := c.mu.groups[id]
	created := false
	if g == nil {
		var err error
		switch {
		case req.GetMemberEpoch() == -1:
			c.mu.Unlock()
			return &brokerpb.GroupHeartbeatResponse{MemberId: req.GetMemberId(), MemberEpoch: -1}, nil
		case req.GetMemberEpoch() != 0:
			err = fmt.Errorf("%w: %q (no group %q)", ErrUnknownMember, req.GetMemberId(), id)
		case !c.cfg.Metrics.groups.reserve(c.lim.MaxGroups):
			err = c.refused(refuse(refusedMaxGroups, ErrLimitExceeded, "this broker coordinates %d groups, the most it may (group %q)", c.lim.MaxGroups, id))
		}
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		g, created = newGroup(id), true
		c.mu.groups[id] = g
	}
	c.expireLocked(g, now)
	resp, hbErr := g.heartbeat(req, counts, now, c.limitsNow(), newMemberID)
	hbErr = c.refused(hbErr)
	if created && hbErr != nil {
		c.dropGroupLocked(g)
		c.mu.Unlock()
		return nil, hbErr
	}
	c.reportLocked(g)
	// Answered once what it saw of the group is durable: at once for a
	// heartbeat that changed nothing of a group whose log is up to date
	// (W6), after its lane's next batch otherwise.
	w := c.flushLocked(g)
	c.mu.Unlock()
	if w != nil {
		if err := c.wait(ctx, w); err != nil {
			return nil, err
		}
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
