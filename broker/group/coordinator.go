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

	"github.com/strata-log/strata/recordbatch"
)

type loadState int

const (
	stateLoading loadState = iota
	stateLoaded
	stateClosed
)

// Coordinator coordinates the groups of one __consumer_offsets partition:
// KIP-848 groups (Heartbeat) and classic groups (Join, Sync,
// ClassicHeartbeat, Leave) in one namespace, their offsets, and the admin
// calls. It is safe for concurrent use.
//
// Lock discipline: one mutex (mu) guards all in-memory state, and is never
// held across a call that can block: neither the OffsetsLog's appends
// (pipeline.go: each group's writes go through its lane, decided under mu,
// appended without it, applied under it again; doc.go W1-W6) nor the
// TopicSource, nor a parked Join or Sync (which waits on its channel).
type Coordinator struct {
	cfg Config
	log *slog.Logger
	lim limits
	w   *writer
	// life ends at Close: the background loop stops, and appends wait for
	// their outcome until then.
	life    context.Context
	endLife context.CancelFunc
	wg      sync.WaitGroup
	closed  sync.Once

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
			sessionTimeout:        cfg.SessionTimeout,
			minSessionTimeout:     cfg.MinSessionTimeout,
			maxSessionTimeout:     cfg.MaxSessionTimeout,
			rebalanceTimeout:      cfg.RebalanceTimeout,
			initialRebalanceDelay: max(cfg.InitialRebalanceDelay, 0),
			Limits:                cfg.Limits,
			maxGroupBytes:         cfg.Limits.MaxGroupBytes,
		},
	}
	c.w = &writer{c: c}
	c.life, c.endLife = context.WithCancel(context.Background())
	c.mu.groups = map[string]*group{}
	return c
}

// Load replays the partition into memory and starts serving (and, unless
// TickInterval is negative, the background loop that expires sessions).
// Groups whose members were persisted keep their epochs, generations and
// assignments; their sessions start at Load. A record that cannot be
// decoded is logged and skipped (the records are independent: one bad key
// loses one offset); so is a batch that cannot be decoded, counted in
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
	groups, skipped, err := c.replay(ctx, now)
	if err == nil {
		err = c.resolveLoaded(ctx, groups, now)
	}
	if err != nil {
		return fmt.Errorf("group: load partition %d: %w", c.cfg.Partition, err)
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
	members := 0
	for _, g := range groups {
		members += g.members()
		c.cfg.Metrics.members.WithLabelValues(g.id).Set(float64(g.members()))
	}
	c.cfg.Metrics.loadDuration.Observe(time.Since(start).Seconds())
	c.log.Info("loaded", "groups", len(groups), "members", members, "skipped", skipped, "duration", time.Since(start))
	if c.cfg.TickInterval > 0 {
		c.wg.Add(1)
		go c.tickLoop()
	}
	return nil
}

// replay reads the partition into groups: the last record of each key
// wins (the log is compacted on the key).
func (c *Coordinator) replay(ctx context.Context, now time.Time) (map[string]*group, int, error) {
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
		tp := TopicPartition{d.key.Topic, d.key.Partition}
		switch {
		case d.key.Topic == "":
			g.restore(d.metadata, now, c.lim) // nil for a tombstone
			g.durable = d.metadata
		case d.tombstone:
			delete(g.offsets, tp)
		default:
			g.offsets[tp] = d.offset
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
	for id, g := range groups {
		if g.blank() {
			delete(groups, id)
		}
	}
	return groups, skipped, err
}

// resolveLoaded resolves the loaded KIP-848 groups' regexes and computes
// their targets with the topics' partition counts as of now.
func (c *Coordinator) resolveLoaded(ctx context.Context, groups map[string]*group, now time.Time) error {
	var names []string
	listed := false
	for _, g := range groups {
		if len(g.consumer.members) == 0 {
			continue
		}
		if len(g.consumer.regexes()) > 0 && !listed {
			var err error
			if names, err = c.cfg.Topics.TopicNames(ctx); err != nil {
				return err
			}
			listed = true
		}
		if listed {
			g.consumer.resolve(names, now)
		}
		counts, err := c.partitionCounts(ctx, g.consumer.subscribedTopics())
		if err != nil {
			return err
		}
		g.consumer.computeTarget(counts, now)
		g.durableCounts = maps.Clone(g.consumer.partitionCounts)
	}
	return nil
}

// Close stops the coordinator (its partition moved or the broker stops):
// later calls return ErrClosed, and so do parked Joins and Syncs. It
// waits for the background loop.
func (c *Coordinator) Close() error {
	c.closed.Do(func() {
		c.mu.Lock()
		c.mu.state = stateClosed
		for id, g := range c.mu.groups {
			if g.classic != nil {
				g.classic.failParked(ErrClosed)
			}
			c.cfg.Metrics.members.DeleteLabelValues(id)
		}
		c.cfg.Metrics.groups.add(-len(c.mu.groups))
		c.mu.groups = map[string]*group{}
		c.mu.Unlock()
		c.endLife()
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
		case <-c.life.Done():
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

// Tick expires sessions and rebalance timeouts as of now in every group
// (completing classic rounds whose deadline passed), re-resolves KIP-848
// regex subscriptions every RegexRefreshInterval, expires the offsets of
// groups without members (OffsetsRetention), and writes the groups that
// changed, as many to a batch as the OffsetsLog's bound allows (each
// group's records in one batch). A group whose lane is busy is left to its
// lane's next batch or to the next Tick. The background loop calls it
// every TickInterval; tests with a fake clock call it directly.
func (c *Coordinator) Tick(ctx context.Context, now time.Time) error {
	if err := c.refreshRegexes(ctx, now); err != nil {
		return err
	}
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	var ids []string
	for id, g := range c.mu.groups {
		c.expireLocked(g, now)
		if g.members() > 0 {
			g.emptySince = time.Time{}
		} else if g.emptySince.IsZero() {
			g.emptySince = now
		}
		if g.version > g.persisted || c.w.offsetsExpiryLocked(g, now).any() {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	slices.Sort(ids)
	return c.w.writeGroups(ids, now)
}

// refreshRegexes re-resolves the regex subscriptions of the KIP-848
// groups whose resolution is older than RegexRefreshInterval against the
// topics that exist now (topics created or deleted change what members
// subscribe to, and start a new epoch). The TopicSource is asked without
// the mutex held.
func (c *Coordinator) refreshRegexes(ctx context.Context, now time.Time) error {
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	var due []*group
	var regexes []string
	for _, g := range c.mu.groups {
		if r := g.consumer.regexes(); len(r) > 0 && !now.Before(g.consumer.resolvedAt.Add(c.cfg.RegexRefreshInterval)) {
			due = append(due, g)
			regexes = append(regexes, r...)
		}
	}
	c.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	names, err := c.cfg.Topics.TopicNames(ctx)
	if err != nil {
		c.log.Warn("listing topics for regex subscriptions failed", "err", err)
		return nil
	}
	var matched []string
	for _, r := range regexes {
		if re, err := compileRegex(r); err == nil {
			matched = append(matched, matchTopics(re, names)...)
		}
	}
	counts, err := c.partitionCounts(ctx, matched)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range due {
		if c.mu.groups[g.id] == g {
			g.consumer.refreshRegexes(names, counts, now)
			c.reportLocked(g)
		}
	}
	return nil
}

// REQUIRES: c.mu held.
func (c *Coordinator) checkStateLocked() error {
	switch {
	case c.mu.state == stateClosed:
		return ErrClosed
	case c.cfg.Authority != nil && !c.cfg.Authority():
		return fmt.Errorf("%w: its broker's metad session may have expired", ErrClosed)
	case c.mu.state == stateLoading:
		return ErrLoading
	}
	return nil
}

// groupLocked returns group id, creating it when create is set (counted
// against MaxGroups; created reports it, so that a first request that
// fails can drop it again).
// REQUIRES: c.mu held.
func (c *Coordinator) groupLocked(id string, create bool) (g *group, created bool, err error) {
	if g = c.mu.groups[id]; g != nil || !create {
		return g, false, nil
	}
	if err := checkGroupID(id, c.lim.Limits); err != nil {
		return nil, false, c.refused(err)
	}
	if !c.cfg.Metrics.groups.reserve(c.lim.MaxGroups) {
		return nil, false, c.refused(refuse(refusedMaxGroups, ErrLimitExceeded, "this broker coordinates %d groups, the most it may (group %q)", c.lim.MaxGroups, id))
	}
	g = newGroup(id)
	c.mu.groups[id] = g
	return g, true, nil
}

// expireLocked applies session and rebalance timeouts to g.
// REQUIRES: c.mu held.
func (c *Coordinator) expireLocked(g *group, now time.Time) {
	expired, fenced := g.consumer.expire(now)
	if g.classic != nil {
		expired += g.classic.advance(now, c.limitsNow())
	}
	if expired+fenced > 0 {
		c.log.Info("removed members", "group", g.id, "session_expired", expired, "rebalance_timeout", fenced)
		c.cfg.Metrics.expired.Add(float64(expired))
		c.cfg.Metrics.fenced.Add(float64(fenced))
	}
	c.w.changedLocked(g)
	c.w.flushAnsweredLocked(g)
	c.reportLocked(g)
}

// reportLocked updates the metrics of g.
// REQUIRES: c.mu held.
func (c *Coordinator) reportLocked(g *group) {
	if n := g.takeRebalances(); n > 0 {
		c.cfg.Metrics.rebalances.WithLabelValues(g.id).Add(float64(n))
	}
	c.cfg.Metrics.members.WithLabelValues(g.id).Set(float64(g.members()))
}

// limitsNow returns the limits with maxGroupBytes at most half the
// OffsetsLog's current batch bound (the topic's max.message.bytes may
// change at any time).
func (c *Coordinator) limitsNow() limits {
	lim := c.lim
	lim.maxGroupBytes = min(lim.MaxGroupBytes, c.w.maxBatchBytes()/2)
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

// sortedIDs returns the ids of groups, sorted.
func sortedIDs(groups map[string]*group) []string {
	return slices.Sorted(maps.Keys(groups))
}
