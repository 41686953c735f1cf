package broker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// controller is the broker's controller role: it campaigns for the
// controller key and, while it holds it, assigns partitions (placement.go
// decides), creates __consumer_offsets, finishes topic deletions and
// sweeps orphan ledgers (sweeper.go).
type controller struct {
	b *Broker
}

// campaign tries to become the controller: the one broker whose session
// holds the controller key. It retries whenever the key is deleted (its
// holder's session ended) until ctx ends.
func (c *controller) campaign(ctx context.Context, sess *metaclient.Session) {
	b := c.b
	value, _ := proto.Marshal(&brokerpb.ControllerRecord{BrokerId: b.cfg.ID, ElectedAtMs: b.clock.Now().UnixMilli()})
	for ctx.Err() == nil {
		changed := b.controller.changes()
		if b.controller.get(controllerKey) == nil {
			pctx, cancel := context.WithTimeout(ctx, b.cfg.SessionTTL)
			_, err := b.meta.Put(pctx, controllerKey, value, metaclient.WithExpectedVersion(0), metaclient.WithLease(sess.Lease()))
			cancel()
			if err == nil {
				b.log.Info("elected controller")
				b.isCtrl.Store(true)
				b.metrics.controller.Set(1)
				b.ctrl.control(ctx)
				b.isCtrl.Store(false)
				b.metrics.controller.Set(0)
				return
			}
			if !errors.Is(err, metaclient.ErrVersionConflict) {
				b.log.Warn("controller election attempt failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-time.After(b.cfg.SessionTTL):
		}
	}
}

// control is the controller's loop: reconcile on every change of brokers,
// topics, assignments, owners or drain requests, at least every
// idleRoundInterval, and a second after a round that failed.
func (c *controller) control(ctx context.Context) {
	b := c.b
	// No round on a partial view: a topics mirror not loaded yet (its first
	// list failed, or is slower than the assignments') would have every
	// assignment deleted as belonging to no topic, and re-created at epoch
	// 1, below the epochs the partitions' logs hold (their owners' Open
	// then refuses them for ever).
	for _, m := range []*mirror{b.brokers, b.topics, b.assignments, b.owners, b.drains} {
		select {
		case <-m.ready:
		case <-ctx.Done():
			return
		}
	}
	if err := b.ctrl.ensureOffsetsTopic(ctx); err != nil {
		b.log.Warn("creating "+OffsetsTopic, "err", err)
	}
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		b.ctrl.sweepOrphanLedgers(ctx)
	}()
	defer func() { <-sweepDone }()
	cache := newPlacementCache()
	for ctx.Err() == nil {
		bc, tc, ac, oc, dc := b.brokers.changes(), b.topics.changes(), b.assignments.changes(), b.owners.changes(), b.drains.changes()
		began := time.Now()
		wait := idleRoundInterval
		if err := b.ctrl.reconcile(ctx, cache); err != nil && ctx.Err() == nil {
			b.log.Warn("controller round failed", "err", err)
			wait = time.Second
		}
		settle := roundSettle(time.Since(began))
		select {
		case <-ctx.Done():
		case <-bc:
		case <-tc:
		case <-ac:
		case <-oc:
		case <-dc:
		case <-time.After(wait):
		}
		// Let a burst of changes settle into one round, and keep rounds
		// (which read every mirror) to at most a third of a core.
		select {
		case <-ctx.Done():
		case <-time.After(settle):
		}
	}
}

// idleRoundInterval: with nothing changing, the controller and every
// owner still make a round this often (every decision they act on arrives
// as a change of a mirror; this only bounds how long a missed one waits).
// At 50,000 partitions, a round a second was most of the CPU an idle
// cluster used.
const idleRoundInterval = 30 * time.Second

// roundSettle is the pause after a round that took took before the next
// one: at least 20 ms, so a burst of changes is taken in one round, and
// twice the round itself, so rounds over a large cluster in a storm of
// changes (a failover: every takeover changes an owner record) use at
// most a third of a core. At 20,000 partitions a round took 50-100 ms.
func roundSettle(took time.Duration) time.Duration {
	return max(20*time.Millisecond, 2*took)
}

// offsetsTopicConfigs: compacted, in 100 MiB segments (Kafka's
// offsets.topic.segment.bytes). Compaction never touches the open
// segment, and a busy partition never idles long enough to roll: with the
// 1 GiB default, a million commits (55 MB) stayed in the open ledger and
// every coordinator load replayed all of them.
var offsetsTopicConfigs = map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600"}

func (c *controller) ensureOffsetsTopic(ctx context.Context) error {
	b := c.b
	rec := &brokerpb.TopicRecord{Name: OffsetsTopic, Id: newID(), Partitions: b.cfg.OffsetsPartitions,
		Configs: maps.Clone(offsetsTopicConfigs), CreatedAtMs: b.clock.Now().UnixMilli(), Internal: true}
	value, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = b.meta.Put(ctx, topicKey(OffsetsTopic), value, metaclient.WithExpectedVersion(0))
	if errors.Is(err, metaclient.ErrVersionConflict) {
		return nil
	}
	return err
}

// reconcile makes one round: follow what changed in the mirrors, decide
// (placer.plan, placement.go) and write the decisions in order, stopping
// at the first write that fails.
func (c *controller) reconcile(ctx context.Context, cache *placementCache) error {
	b := c.b
	drained := b.drainedBrokers()
	plan := cache.follow(b).plan(b.liveBrokers(), drained)
	gone := map[string]int32{} // topic -> partitions it still has (-1: none), as metad says
	for _, k := range plan.deleteAssignments {
		if err := b.ctrl.deleteAssignment(ctx, k, cache.assigns.vals[k].version, gone); err != nil {
			return err
		}
	}
	for _, name := range plan.finishDeletes {
		if err := b.ctrl.finishDelete(ctx, name); err != nil {
			b.log.Warn("deleting topic", "topic", name, "err", err)
		}
	}
	for ds := plan.assigns; len(ds) > 0; {
		n := min(len(ds), assignBatch)
		if err := b.ctrl.assignAll(ctx, ds[:n], drained); err != nil {
			return err
		}
		ds = ds[n:]
	}
	return nil
}

// assignBatch is how many assignments one metad transaction writes, below
// metad's default --max-txn-ops (128): a topic of 10,000 partitions, or
// the failover of a broker that served them, takes a hundred round trips
// instead of ten thousand.
const assignBatch = 100

// assignAll writes ds (PL2: each by CAS on the version decided on) in one
// transaction. When it does not succeed as a whole (one of them changed
// since the round began, or a metad configured with a smaller
// --max-txn-ops refuses its size) each is written on its own, so a
// conflict on one holds back none of the others. An error of unknown
// outcome is returned: the next round decides again from what it sees.
// drained names the drained brokers (for the log).
func (c *controller) assignAll(ctx context.Context, ds []assignDecision, drained map[string]bool) error {
	b := c.b
	if len(ds) > 1 {
		compares := make([]*metadpb.Compare, 0, len(ds))
		ops := make([]*metadpb.Op, 0, len(ds))
		for _, d := range ds {
			value, err := proto.Marshal(&brokerpb.Assignment{BrokerId: d.broker, Epoch: d.epoch})
			if err != nil {
				return err
			}
			if d.version >= 0 {
				compares = append(compares, &metadpb.Compare{Key: assignmentKey(d.tp), Version: d.version})
			}
			ops = append(ops, &metadpb.Op{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: assignmentKey(d.tp), Value: value}}})
		}
		resp, err := b.meta.Txn(ctx, compares, ops)
		switch {
		case err == nil && resp.GetSucceeded():
			for _, d := range ds {
				b.ctrl.assigned(d, drained)
			}
			return nil
		case err != nil && status.Code(err) != codes.InvalidArgument:
			return err
		}
	}
	for _, d := range ds {
		if err := b.ctrl.assign(ctx, d, drained); err != nil {
			return err
		}
	}
	return nil
}

// assigned counts and logs an assignment metad took.
func (c *controller) assigned(d assignDecision, drained map[string]bool) {
	b := c.b
	b.metrics.assignments.Inc()
	switch {
	case d.from != "" && drained[d.from]:
		b.log.Info("moved partition off a drained broker", "topic", d.tp.topic, "partition", d.tp.partition, "from", d.from, "to", d.broker, "epoch", d.epoch)
		return
	case d.from != "":
		b.log.Info("moved partition to balance", "topic", d.tp.topic, "partition", d.tp.partition, "from", d.from, "to", d.broker, "epoch", d.epoch)
		return
	}
	b.log.Debug("assigned partition", "topic", d.tp.topic, "partition", d.tp.partition, "broker", d.broker, "epoch", d.epoch)
}

// deleteAssignment deletes the assignment of k, a partition of no live
// topic as the mirrors say, once metad confirms it (the topics mirror may
// trail the assignments one: a topic created a moment ago) and only if the
// assignment is still the one decided on (version). partitions caches
// metad's answer per topic for the round.
func (c *controller) deleteAssignment(ctx context.Context, k tp, version int64, partitions map[string]int32) error {
	b := c.b
	n, ok := partitions[k.topic]
	if !ok {
		n = -1
		kv, err := b.meta.Get(ctx, topicKey(k.topic))
		switch {
		case errors.Is(err, metaclient.ErrNotFound):
		case err != nil:
			return err
		default:
			if rec, err := unmarshalled[brokerpb.TopicRecord](kv.Value); err == nil && !rec.Deleting {
				n = rec.Partitions
			}
		}
		partitions[k.topic] = n
	}
	if k.partition < n {
		return nil // the mirror is behind: the next round sees the topic
	}
	_, err := b.meta.Delete(ctx, assignmentKey(k), metaclient.WithExpectedVersion(version))
	if errors.Is(err, metaclient.ErrVersionConflict) || errors.Is(err, metaclient.ErrNotFound) {
		return nil // changed since: the next round decides again
	}
	return err
}

// placementCache is what the controller keeps decoded and indexed between
// rounds, updated from the mirrors' changes. Records that do not decode
// are left out (an owner record still counts as present).
type placementCache struct {
	topics  *recordMap[string, *brokerpb.TopicRecord]
	assigns *recordMap[tp, current]
	owners  *recordMap[tp, ownerSeen]
	placer  *placer
}

func newPlacementCache() *placementCache {
	return &placementCache{
		topics: newRecordMap(func(key string) (string, bool) {
			name, ok := strings.CutPrefix(key, topicsPrefix)
			return name, ok && name != ""
		}, func(kv *metadpb.KeyValue) (*brokerpb.TopicRecord, bool) {
			rec, err := unmarshalled[brokerpb.TopicRecord](kv.Value)
			return rec, err == nil
		}),
		assigns: newPartitionMap(assignmentsPrefix, func(kv *metadpb.KeyValue) (current, bool) {
			var a brokerpb.Assignment
			err := proto.Unmarshal(kv.Value, &a)
			return current{broker: a.BrokerId, epoch: a.Epoch, version: kv.Version}, err == nil
		}),
		owners: newPartitionMap(ownersPrefix, func(kv *metadpb.KeyValue) (ownerSeen, bool) {
			var o brokerpb.Ownership
			if proto.Unmarshal(kv.Value, &o) != nil {
				return ownerSeen{}, true // present, whatever it holds
			}
			return ownerSeen{ok: true, broker: o.BrokerId, epoch: o.Epoch}, true
		}),
	}
}

// follow brings the records and the placer up to date with the mirrors:
// it indexes again only what changed, or everything after a mirror was
// read whole (its first round, a new listing).
func (c *placementCache) follow(b *Broker) *placer {
	topics, tfull, _ := c.topics.update(b.topics, false)
	assigns, afull, _ := c.assigns.update(b.assignments, false)
	owners, ofull, _ := c.owners.update(b.owners, false)
	if c.placer == nil || tfull || afull || ofull {
		c.placer = newPlacer(c.topics.vals, c.assigns.vals, c.owners.vals)
		return c.placer
	}
	for name := range topics {
		c.placer.topicChanged(name)
	}
	for k := range assigns {
		c.placer.refresh(k)
	}
	for k := range owners {
		c.placer.refresh(k)
	}
	return c.placer
}

// assign writes one assignment by CAS on the version the controller saw,
// so it never overwrites a change it did not see (version 0: must not
// exist; -1: unconditionally).
func (c *controller) assign(ctx context.Context, d assignDecision, drained map[string]bool) error {
	b := c.b
	value, err := proto.Marshal(&brokerpb.Assignment{BrokerId: d.broker, Epoch: d.epoch})
	if err != nil {
		return err
	}
	opts := []metaclient.WriteOption{}
	if d.version >= 0 {
		opts = append(opts, metaclient.WithExpectedVersion(d.version))
	}
	_, err = b.meta.Put(ctx, assignmentKey(d.tp), value, opts...)
	if errors.Is(err, metaclient.ErrVersionConflict) {
		return nil // someone changed it; the next round sees the change
	}
	if err == nil {
		b.ctrl.assigned(d, drained)
	}
	return err
}

// finishDelete removes a deleting topic's data (the placer asks for it
// once no broker serves any of its partitions, PL4): every segment's ledger, the partition records, the
// topic's objects (a broker without a store cannot: it leaves the topic
// for one that has), and last the topic record.
func (c *controller) finishDelete(ctx context.Context, name string) error {
	b := c.b
	kv, err := b.meta.Get(ctx, topicKey(name))
	if err != nil {
		return err
	}
	var rec brokerpb.TopicRecord
	if err := proto.Unmarshal(kv.Value, &rec); err != nil {
		return err
	}
	for p := int32(0); p < rec.Partitions; p++ {
		pl, _, err := partlog.ReadPartitionLog(ctx, b.store, name, p)
		if errors.Is(err, partlog.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		for segs := range slices.Chunk(pl.Segments, ledger.DeleteBatch) {
			errs, err := partlog.DeleteLedgers(ctx, b.env, b.store, segs)
			for _, err := range errs {
				if err != nil && !errors.Is(err, ledger.ErrNoSuchLedger) && !errors.Is(err, ledger.ErrDeleteIncomplete) {
					return err
				}
			}
			if err != nil {
				return err
			}
		}
		if _, err := b.meta.Delete(ctx, partlog.PartitionKey(name, p)); err != nil {
			return err
		}
	}
	// Every object of the topic, committed or not, is under its id.
	if err := b.tier.deleteTopicObjects(ctx, &rec); err != nil {
		return err
	}
	if _, err := b.meta.Delete(ctx, topicKey(name), metaclient.WithExpectedVersion(kv.Version)); err != nil {
		return err
	}
	b.log.Info("deleted topic", "topic", name, "partitions", rec.Partitions)
	return nil
}
