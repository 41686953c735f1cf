package broker

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// sweepOrphanLedgers runs on the controller: it deletes ledgers that a
// partition log created but never listed, or stopped listing, so a roll or
// takeover whose list CAS failed (or whose outcome was unknown) does not
// leak bookie space. A ledger is an orphan when its properties name a
// topic and partition, it is older than --orphan-ledger-grace (a roll or
// takeover lists its new ledger within milliseconds), the partition's
// current list (read after the ledger list) does not name it, and this
// controller has seen it unlisted at every sweep for the grace, by its own
// monotonic clock. The last rule keeps a controller whose clock runs ahead
// of another broker's by more than the grace from taking the ledger that
// broker has just created, and not yet listed, for an old one. Ledgers
// without those properties (strata ledger simpletest --keep, other users)
// are never touched.
func (c *controller) sweepOrphanLedgers(ctx context.Context) {
	b := c.b
	t := time.NewTicker(b.cfg.OrphanLedgerInterval)
	defer t.Stop()
	// unlisted: when this controller first saw each partition ledger that
	// no list names (and has not seen listed since).
	unlisted := map[uint64]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := b.ctrl.sweepOnce(ctx, b.clock.Now(), unlisted)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("orphan ledger sweep failed", "err", err)
		}
		if n > 0 {
			b.log.Info("deleted orphan ledgers", "ledgers", n)
		}
	}
}

// sweepOnce deletes the orphans of one sweep. now is the broker's clock,
// against which ledgers' creation stamps are aged; unlisted (updated)
// holds when this controller first saw each unlisted ledger, aged with
// the runtime's monotonic clock.
func (c *controller) sweepOnce(ctx context.Context, now time.Time, unlisted map[uint64]time.Time) (int, error) {
	b := c.b
	all, err := ledger.ListAll(ctx, b.env.Meta)
	if err != nil {
		return 0, err
	}
	at := time.Now()
	horizon := now.Add(-b.cfg.OrphanLedgerGrace).UnixMilli()
	listed := map[tp]map[uint64]bool{}
	type orphan struct {
		md *ledgerpb.LedgerMetadata
		tp tp
	}
	var orphans []orphan
	stillUnlisted := map[uint64]bool{}
	defer func() {
		for id := range unlisted {
			if !stillUnlisted[id] {
				delete(unlisted, id) // listed since, or gone
			}
		}
	}()
	for _, md := range all {
		k, ok := ledgerPartition(md)
		if !ok {
			continue
		}
		ids, seen := listed[k]
		if !seen {
			if ids, err = c.listedLedgers(ctx, k); err != nil {
				return 0, err
			}
			listed[k] = ids
		}
		if ids == nil || ids[md.Id] {
			continue
		}
		stillUnlisted[md.Id] = true
		first, ok := unlisted[md.Id]
		if !ok {
			unlisted[md.Id], first = at, at
		}
		if md.CreatedAtMs <= horizon && at.Sub(first) >= b.cfg.OrphanLedgerGrace {
			orphans = append(orphans, orphan{md, k})
		}
	}
	// Deleted as retention deletes: metadata, then indexes, a metad
	// transaction per ledger.DeleteBatch of each.
	deleted := 0
	var first error
	for chunk := range slices.Chunk(orphans, ledger.DeleteBatch) {
		ids := make([]uint64, len(chunk))
		for i, o := range chunk {
			ids[i] = o.md.Id
		}
		errs, indexErr := partlog.DeleteLedgerIDs(ctx, b.env, b.store, ids)
		for i, err := range errs {
			if err != nil && !errors.Is(err, ledger.ErrNoSuchLedger) && !errors.Is(err, ledger.ErrDeleteIncomplete) {
				first = cmp.Or(first, err)
				continue
			}
			o := chunk[i]
			b.metrics.orphans.Inc()
			b.log.Info("deleted orphan ledger", "ledger", o.md.Id, "topic", o.tp.topic, "partition", o.tp.partition,
				"created", time.UnixMilli(o.md.CreatedAtMs).UTC().Format(time.RFC3339))
			deleted++
		}
		if first = cmp.Or(first, indexErr); first != nil {
			return deleted, first
		}
	}
	return deleted, nil
}

// listedLedgers returns the ledgers partition k's log lists: none when its
// topic is gone, nil when the partition exists but has no list yet (its
// ledgers are left alone).
func (c *controller) listedLedgers(ctx context.Context, k tp) (map[uint64]bool, error) {
	pl, _, err := partlog.ReadPartitionLog(ctx, c.b.store, k.topic, k.partition)
	switch {
	case errors.Is(err, partlog.ErrNotFound):
		if _, terr := c.b.topicRecord(k.topic); terr == nil {
			return nil, nil
		}
		return map[uint64]bool{}, nil
	case err != nil:
		return nil, err
	}
	ids := map[uint64]bool{}
	for _, s := range pl.Segments {
		ids[s.LedgerId] = true
	}
	return ids, nil
}

// ledgerPartition is the partition a partition log's ledger belongs to,
// from the properties partlog gives its ledgers.
func ledgerPartition(md *ledgerpb.LedgerMetadata) (tp, bool) {
	topic, ok := md.Properties["topic"]
	if !ok || topic == "" {
		return tp{}, false
	}
	p, err := strconv.ParseInt(md.Properties["partition"], 10, 32)
	if err != nil || p < 0 {
		return tp{}, false
	}
	return tp{topic, int32(p)}, true
}
