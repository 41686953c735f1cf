package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// partition is one partition assigned to this broker: being taken over,
// served, or being released.
type partition struct {
	tp     tp
	epoch  int64
	cancel context.CancelFunc
	done   chan struct{}

	// Set (under Broker.mu) while serving.
	log   *partlog.Log
	coord *group.Coordinator
}

// owner is the half of a Broker that takes partitions over, serves them
// and releases them: one goroutine per partition assigned here, run by
// reconcileOwnership for as long as the broker's session lasts.
type owner struct{ *Broker }

// reconcileOwnership follows the assignments (O1, planOwnership):
// partitions assigned here (at their current epoch) are taken over,
// partitions assigned elsewhere are released. Every partition goroutine is
// a child of ctx (the session): when the session ends they all stop.
//
// A round decides only for the partitions whose assignment changed since
// the last one (recordMap) and those whose goroutine ended, so a
// failover's stream of assignment changes costs what it changes. Every
// idleRoundInterval a round decides for every partition, which bounds
// what a missed change could cost.
func (b owner) reconcileOwnership(ctx context.Context, sess *metaclient.Session) {
	mine := newPartitionMap(assignmentsPrefix, assignedHere(b.cfg.ID))
	var lastFull time.Time
	for {
		began := time.Now()
		touched, full, changed := mine.update(b.assignments, began.Sub(lastFull) >= idleRoundInterval)
		b.mu.Lock()
		if full {
			lastFull = began
			for k := range b.parts {
				touched[k] = true
			}
		}
		for _, k := range b.endedParts {
			touched[k] = true
		}
		b.endedParts = nil
		assigned, held := make(map[tp]int64), make(map[tp]int64)
		for k := range touched {
			if e, ok := mine.vals[k]; ok {
				assigned[k] = e
			}
			if p, ok := b.parts[k]; ok {
				held[k] = p.epoch
			}
		}
		plan := planOwnership(assigned, held)
		for _, k := range plan.release {
			b.parts[k].cancel() // its goroutine releases it and removes it from parts
		}
		for k, e := range plan.claim {
			pctx, cancel := context.WithCancel(ctx)
			p := &partition{tp: k, epoch: e, cancel: cancel, done: make(chan struct{})}
			b.parts[k] = p
			go b.runPartition(pctx, sess, p)
		}
		b.mu.Unlock()
		settle := roundSettle(time.Since(began))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-b.partsChanged:
		case <-time.After(idleRoundInterval):
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(settle):
		}
	}
}

// dropAll stops every partition and waits until each is released.
func (b owner) dropAll() {
	b.mu.Lock()
	var ps []*partition
	for _, p := range b.parts {
		p.cancel()
		ps = append(ps, p)
	}
	b.mu.Unlock()
	for _, p := range ps {
		<-p.done
	}
}

// runPartition takes the partition over, serves it until it is released
// (ctx ends) or fails, and takes it over again after a failure while it is
// still assigned here. While the partition is served no goroutine waits
// for its end: the release (context.AfterFunc) or the log's failure
// (partlog.Log.AfterFail) starts one (partitionRun.serve). A goroutine
// parked per served partition was 40% of what an idle partition cost.
func (b owner) runPartition(ctx context.Context, sess *metaclient.Session, p *partition) {
	r := &partitionRun{b: b, ctx: ctx, sess: sess, p: p, backoff: 200 * time.Millisecond,
		log: b.log.With("topic", p.tp.topic, "partition", p.tp.partition, "epoch", p.epoch)}
	r.loop()
}

// partitionRun is one partition's run: its goroutine while it is taken
// over, retried or released, and the state its end needs while it is
// served.
type partitionRun struct {
	b       owner
	ctx     context.Context
	sess    *metaclient.Session
	p       *partition
	log     *slog.Logger
	backoff time.Duration
}

// loop takes the partition over until it serves it (then serve arranges
// the rest) or must stop (then it ends the run).
func (r *partitionRun) loop() {
	for r.ctx.Err() == nil {
		s, err := r.b.openPartition(r.ctx, r.sess, r.p, r.log)
		if err == nil {
			r.serve(s)
			return
		}
		if !r.retry(err) {
			break
		}
	}
	r.ended()
}

// retry decides after a failure (err) whether to take the partition
// again, after a backoff: only while the assignment still names this
// broker at the partition's epoch (O3).
func (r *partitionRun) retry(err error) bool {
	b, ctx, p, log := r.b, r.ctx, r.p, r.log
	if ctx.Err() != nil {
		return false
	}
	log.Warn("partition failed; dropped it", "err", err)
	var behind *partlog.EpochBehindError
	if errors.As(err, &behind) {
		// The assignment's epoch is below one the log already had: it
		// was deleted and made again (epochs restart at 1). Retrying
		// at this epoch would fail for ever; raise it instead.
		b.raiseAssignmentEpoch(ctx, p, behind.Recorded+1, log)
	}
	// Take it again only if it is still ours at the same epoch: a fenced
	// ledger usually means another broker was assigned the partition.
	if !b.stillAssigned(ctx, p) {
		log.Info("partition is assigned elsewhere now; not taking it back")
		<-ctx.Done() // the reconciler cancels us when it sees the change
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(r.backoff):
	}
	r.backoff = nextBackoff(r.backoff, 5*time.Second)
	return true
}

// ended removes the partition from the broker's and wakes the reconciler,
// which claims it again if it is still assigned here.
func (r *partitionRun) ended() {
	b, p := r.b, r.p
	b.mu.Lock()
	if b.parts[p.tp] == p {
		delete(b.parts, p.tp)
		b.endedParts = append(b.endedParts, p.tp)
	}
	b.mu.Unlock()
	close(p.done)
	select {
	case b.partsChanged <- struct{}{}:
	default:
	}
}

// serve arranges for the partition's end to run, on a goroutine of its
// own, once when ctx ends or the log fails, and returns.
func (r *partitionRun) serve(s servedPart) {
	afterEither(r.ctx, s.log, func() { r.end(s) })
}

// afterEither calls f once, on a goroutine of its own, when ctx ends or
// the log fails, whichever comes first (either may have already). Nothing
// waits meanwhile.
func afterEither(ctx context.Context, log interface{ AfterFail(func()) func() bool }, f func()) {
	var (
		once    sync.Once
		mu      sync.Mutex
		stopCtx func() bool
	)
	fire := func() {
		once.Do(func() {
			go func() {
				mu.Lock() // until both are registered: stopCtx is set
				stopCtx() // drops the registration when the log failed first
				mu.Unlock()
				f()
			}()
		})
	}
	// Held while registering: fire may run at once (the log failed, or
	// ctx ended, already), and its goroutine must find stopCtx set.
	mu.Lock()
	defer mu.Unlock()
	log.AfterFail(fire)
	stopCtx = context.AfterFunc(ctx, fire)
}

// end releases a served partition (its log closed cleanly when ctx ended,
// left as it is when it failed; our ownership record removed) and goes on
// with the run: a failure is retried (retry), a release ends it.
func (r *partitionRun) end(s servedPart) {
	b, p := r.b, r.p
	failed := s.log.Err()
	b.mu.Lock()
	p.log, p.coord = nil, nil
	b.mu.Unlock()
	if s.coord != nil {
		s.coord.Close()
	}
	if failed == nil {
		b.closeLog(s.log)
		r.log.Info("released partition")
	}
	// Remove our ownership record, but never a successor's. The compare
	// names the record's mod revision, not only its version: when ours
	// vanished with our lease and a successor created the key again, the
	// successor's record is at version 1 too, and a version-only delete
	// removed it (partitions served with no ownership record, found by
	// the container tests' broker cut-off).
	dctx, dcancel := context.WithTimeout(context.Background(), b.cfg.SessionTTL)
	_, err := b.meta.Txn(dctx,
		[]*metadpb.Compare{{Key: s.claim.GetKey(), Version: s.claim.GetVersion(), ModRevision: s.claim.GetModRevision()}},
		[]*metadpb.Op{{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: s.claim.GetKey()}}}})
	dcancel()
	if err != nil && sessionAlive(r.sess) {
		r.log.Warn("could not remove the ownership record", "err", err)
	}
	if failed == nil || !r.retry(failed) {
		r.ended()
		return
	}
	r.loop()
}

// servedPart is a partition being served: its log, its ownership record as
// the takeover wrote it, and its group coordinator (__consumer_offsets).
type servedPart struct {
	log   *partlog.Log
	claim *metadpb.KeyValue
	coord *group.Coordinator
}

// openPartition takes the partition over (after the previous owner, O2)
// and publishes its log for requests.
func (b owner) openPartition(ctx context.Context, sess *metaclient.Session, p *partition, log *slog.Logger) (servedPart, error) {
	b.waitOwnerGone(ctx, p)
	if err := ctx.Err(); err != nil {
		return servedPart{}, err
	}
	tcfg, internal, err := b.topicConfig(p.tp.topic)
	if err != nil {
		return servedPart{}, err
	}
	start := time.Now()
	l, kv, err := b.takeOver(ctx, sess, p, tcfg)
	if err != nil {
		return servedPart{}, err
	}
	var coord *group.Coordinator
	if internal && p.tp.topic == OffsetsTopic {
		coord = b.startCoordinator(ctx, p.tp.partition, l, sess.Valid)
	}
	b.mu.Lock()
	p.log, p.coord = l, coord
	b.mu.Unlock()
	// A config change that arrived during the takeover found no log to
	// update (followTopicConfigs): apply what is current now.
	if tc, _, err := b.topicConfig(p.tp.topic); err == nil {
		applyTopicConfig(l, tc)
	}
	// One line at Info per takeover (the ledger and log layers log theirs at
	// Debug): at 500 takeovers a second, four lines each were 5% of the
	// broker's CPU.
	log.Info("serving partition", "took", time.Since(start).Round(time.Millisecond), "high_watermark", l.HighWatermark())
	return servedPart{log: l, claim: kv, coord: coord}, nil
}

// raiseAssignmentEpoch moves p's assignment, if it still names this broker
// at p's epoch, to epoch (a CAS on its version): the reconciler then
// restarts the partition at that epoch, above every epoch its log
// recorded. Epochs only grow, so no other owner can hold one above it.
func (b owner) raiseAssignmentEpoch(ctx context.Context, p *partition, epoch int64, log interface {
	Info(string, ...any)
	Warn(string, ...any)
}) {
	gctx, cancel := context.WithTimeout(ctx, b.cfg.SessionTTL)
	defer cancel()
	kv, err := b.meta.Get(gctx, assignmentKey(p.tp))
	if err != nil {
		return
	}
	a, err := unmarshalled[brokerpb.Assignment](kv.Value)
	if err != nil || a.BrokerId != b.cfg.ID || a.Epoch != p.epoch {
		return
	}
	value, err := proto.Marshal(&brokerpb.Assignment{BrokerId: b.cfg.ID, Epoch: epoch})
	if err != nil {
		return
	}
	if _, err := b.meta.Put(gctx, assignmentKey(p.tp), value, metaclient.WithExpectedVersion(kv.Version)); err != nil {
		log.Warn("raising the assignment's epoch failed", "to", epoch, "err", err)
		return
	}
	log.Info("assignment epoch was below the partition log's; raised it", "to", epoch)
}

// stillAssigned reads the partition's assignment from metad and decides O3.
func (b owner) stillAssigned(ctx context.Context, p *partition) bool {
	gctx, cancel := context.WithTimeout(ctx, b.cfg.SessionTTL)
	defer cancel()
	kv, err := b.meta.Get(gctx, assignmentKey(p.tp))
	var a *brokerpb.Assignment
	if err == nil {
		a = &brokerpb.Assignment{}
		if proto.Unmarshal(kv.Value, a) != nil {
			a = nil
		}
	}
	return retakeAfterFailure(b.cfg.ID, p.epoch, a, err)
}

// takeOver opens p's log and publishes this broker's ownership of it, at
// most cfg.MaxConcurrentTakeovers at once: the others wait their turn.
func (b owner) takeOver(ctx context.Context, sess *metaclient.Session, p *partition, tcfg TopicConfig) (*partlog.Log, *metadpb.KeyValue, error) {
	select {
	case b.takeovers <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-b.takeovers }()
	owner, err := proto.Marshal(&brokerpb.Ownership{BrokerId: b.cfg.ID, Address: b.cfg.AdvertiseAddress(), Epoch: p.epoch})
	if err != nil {
		return nil, nil, err
	}
	cfg := b.partlogConfig(p, tcfg)
	cfg.Authority = sess.Valid
	// The ownership record goes in the takeover's own metad transaction
	// (with the list CAS and the recovered segments' indexes): one Raft
	// commit where there were two, in a failover of 25,000 partitions.
	cfg.Claim = &partlog.Record{Key: ownerKey(p.tp), Value: owner, Lease: sess.Lease()}
	l, err := partlog.Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return l, l.Claimed(), nil
}

// closeLog closes a log cleanly (ledger closed, list written), bounded.
func (b owner) closeLog(l *partlog.Log) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.SessionTTL)
	defer cancel()
	if err := l.Close(ctx); err != nil && !errors.Is(err, partlog.ErrClosed) {
		b.log.Warn("closing partition log", "err", err)
	}
}

// waitOwnerGone waits until the claim may take over (O2, handover): no
// other broker holds the partition's ownership record (a live previous
// owner releases it when it sees the assignment move; a dead one's vanishes
// with its lease), or two session TTLs passed: fencing keeps a stuck
// previous owner from writing. The wait is a duration, measured on the
// runtime's monotonic clock, not the broker's clock seam: a jump of the
// wall clock must not end it early.
func (b owner) waitOwnerGone(ctx context.Context, p *partition) {
	h := newHandover(b.cfg.ID, time.Now(), b.cfg.SessionTTL)
	deadline := time.NewTimer(time.Until(h.deadline))
	defer deadline.Stop()
	for {
		changed := b.owners.changes()
		var seen *ownerSeen
		if kv := b.owners.get(ownerKey(p.tp)); kv != nil {
			seen = &ownerSeen{}
			var o brokerpb.Ownership
			if proto.Unmarshal(kv.Value, &o) == nil {
				*seen = ownerSeen{ok: true, broker: o.BrokerId, epoch: o.Epoch}
			}
		}
		switch h.step(seen, time.Now()) {
		case takeOver:
			return
		case takeOverFenced:
			b.log.Warn("previous owner still holds the partition; taking over with fencing",
				"topic", p.tp.topic, "partition", p.tp.partition, "previous", seen.broker)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-deadline.C:
		}
	}
}

func (b owner) partlogConfig(p *partition, tc TopicConfig) partlog.Config {
	var tier *partlog.Tier
	if b.tier != nil { // the record is decoded only for the tier (1.5% of a failover's CPU)
		if rec, err := b.topicRecord(p.tp.topic); err == nil && !rec.Internal {
			tier = b.tier.partitionTier(rec, p.tp.partition)
		}
	}
	return partlog.Config{
		Topic: p.tp.topic, Partition: p.tp.partition, Epoch: p.epoch,
		Env: b.env, Store: b.store,
		Ensemble: tc.Ensemble, WriteQuorum: tc.WriteQuorum, AckQuorum: tc.AckQuorum,
		SegmentBytes:        tc.SegmentBytes,
		SegmentAge:          time.Duration(tc.SegmentMs) * time.Millisecond,
		IdleRoll:            b.cfg.IdleRoll,
		Digest:              ledgerDigests[b.cfg.LedgerDigest],
		MaxBatchBytes:       tc.MaxMessageBytes,
		MaxCompressionRatio: tc.MaxCompressionRatio,
		Policy:              tc.Policy(),
		Tier:                tier,
		Cache:               b.cache,
		ReadAhead:           b.fetchBudget.readAhead,
		Logger:              b.log.With("topic", p.tp.topic, "partition", p.tp.partition),
		Metrics:             b.plm,
	}
}

// topicConfig returns a topic's parsed configuration from the mirror and
// whether the topic is internal. A record is decoded and parsed once per
// revision: a failover of 25,000 partitions asked for it 25,000 times,
// and the compactor and retention rounds ask for every served partition.
func (b *Broker) topicConfig(topic string) (TopicConfig, bool, error) {
	key := topicKey(topic)
	kv := b.topics.get(key)
	if kv == nil {
		return TopicConfig{}, false, fmt.Errorf("%w %q", ErrUnknownTopic, topic)
	}
	return b.topicConfigs.parse(key, kv, b.topics.size, func() (TopicConfig, bool, error) {
		rec, err := liveTopic(topic, kv)
		if err != nil {
			return TopicConfig{}, false, err
		}
		tc, err := ParseTopicConfig(rec.Configs)
		return tc, rec.Internal, err
	})
}

// parsedTopics remembers topicConfig's answers by key and mod revision.
// Safe for concurrent use; the zero value is empty.
type parsedTopics struct {
	mu      sync.Mutex
	entries map[string]parsedTopic
}

type parsedTopic struct {
	rev      int64
	tc       TopicConfig
	internal bool
	err      error
}

// parse returns what parseKV gives for kv, from memory when kv's revision
// was parsed before. live says how many records the mirror holds (asked
// on a miss only): entries of topics gone from it are dropped once there
// are twice as many.
func (c *parsedTopics) parse(key string, kv *metadpb.KeyValue, live func() int, parseKV func() (TopicConfig, bool, error)) (TopicConfig, bool, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && e.rev == kv.ModRevision {
		return e.tc, e.internal, e.err
	}
	e = parsedTopic{rev: kv.ModRevision}
	e.tc, e.internal, e.err = parseKV()
	n := live()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) > 2*n+16 {
		c.entries = map[string]parsedTopic{}
	}
	c.entries[key] = e
	return e.tc, e.internal, e.err
}

// serving returns the log of a partition this broker serves, or nil.
func (b *Broker) serving(k tp) *partlog.Log {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.parts[k]; p != nil {
		return p.log
	}
	return nil
}

// followTopicConfigs applies topic config changes to the partitions this
// broker serves (segment size and age, max batch size, retention and the
// timestamp bound at once; replication settings from the next ledger on).
func (b *Broker) followTopicConfigs(ctx context.Context) {
	for {
		changed := b.topics.changes()
		b.mu.Lock()
		var served []*partition
		for _, p := range b.parts {
			if p.log != nil {
				served = append(served, p)
			}
		}
		b.mu.Unlock()
		for _, p := range served {
			tc, _, err := b.topicConfig(p.tp.topic)
			if err != nil {
				continue
			}
			b.mu.Lock()
			l := p.log
			b.mu.Unlock()
			if l != nil {
				applyTopicConfig(l, tc)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// applyTopicConfig makes a served log follow its topic's config.
func applyTopicConfig(l *partlog.Log, tc TopicConfig) {
	l.SetLimits(partlog.Limits{SegmentBytes: tc.SegmentBytes, SegmentAge: time.Duration(tc.SegmentMs) * time.Millisecond,
		MaxBatchBytes: tc.MaxMessageBytes, MaxCompressionRatio: tc.MaxCompressionRatio,
		Ensemble: tc.Ensemble, WriteQuorum: tc.WriteQuorum, AckQuorum: tc.AckQuorum})
	l.SetPolicy(tc.Policy())
}
