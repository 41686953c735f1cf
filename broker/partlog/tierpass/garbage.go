package tierpass

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/objstore"
)

// CollectGarbage deletes the log's queued garbage objects (T6) unlinked at
// least Tier.DeleteDelay ago and, once the store confirms, removes them
// from the queue by one swap. Objects whose deletion fails stay queued
// for the next check. Retention and compaction call it after a swap that
// queued objects; a log without a Tier has none to delete.
func CollectGarbage(ctx context.Context, l *partlog.Log) error {
	if l.Config().Tier == nil {
		return nil
	}
	return newPass(l).collectGarbage(ctx)
}

func (p *pass) collectGarbage(ctx context.Context) error {
	snap := p.l.Snapshot()
	horizon := snap.Now.Add(-p.tier.DeleteDelay).UnixMilli()
	var keys []string
	for _, g := range snap.List.GetGarbage() {
		if g.SinceMs <= horizon {
			keys = append(keys, g.ObjectKey)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, p.tier.RequestTimeout)
	failed, err := p.tier.Store.Delete(dctx, keys)
	cancel()
	if err != nil {
		return fmt.Errorf("partlog: deleting %d garbage objects: %w", len(keys), err)
	}
	deleted := make(map[string]bool, len(keys))
	for _, k := range keys {
		deleted[k] = true
	}
	for _, f := range failed {
		delete(deleted, f.Key)
	}
	_, err = partlog.Update(ctx, p.l, func(s partlog.Snapshot) (*brokerpb.PartitionLog, error) {
		if !slices.ContainsFunc(s.List.GetGarbage(), func(g *brokerpb.GarbageObject) bool { return deleted[g.ObjectKey] }) {
			return nil, partlog.ErrNoChange
		}
		next := s.Edit()
		next.Garbage = slices.DeleteFunc(next.Garbage, func(g *brokerpb.GarbageObject) bool { return deleted[g.ObjectKey] })
		return next, nil
	})
	if err != nil {
		return err
	}
	p.metrics.TierGarbageDeleted.Add(float64(len(keys) - len(failed)))
	if len(failed) > 0 {
		return fmt.Errorf("partlog: %d of %d garbage objects not deleted (first: %s: %v)", len(failed), len(keys), failed[0].Key, failed[0].Err)
	}
	return nil
}

// sweepOrphanObjects deletes objects under this partition's prefix that
// the PartitionLog names neither as tiered nor as queued garbage and that
// are older than OrphanGrace
// (T1: the listing never decides what is readable, only what is garbage).
func (p *pass) sweepOrphanObjects(ctx context.Context) error {
	tier := p.tier
	if tier.CanDestroy != nil {
		if err := tier.CanDestroy(ctx); err != nil {
			return fmt.Errorf("partlog: orphan sweep skipped: %w", err)
		}
	}
	var orphans []string
	horizon := time.Now().Add(-tier.OrphanGrace)
	lctx, cancel := context.WithTimeout(ctx, tier.RequestTimeout)
	defer cancel()
	err := tier.Store.List(lctx, tier.KeyPrefix, "", func(o objstore.ObjectInfo) bool {
		if strings.HasSuffix(o.Key, ".seg") && o.LastModified.Before(horizon) {
			orphans = append(orphans, o.Key)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("partlog: listing %s: %w", tier.KeyPrefix, err)
	}
	// Read the list from metad after the listing, so an object committed
	// meanwhile is named by it, and sweep only if it is still the version
	// this log wrote: a stale owner (paused past its lease) would otherwise
	// take the new owner's objects for orphans (T1, T7).
	stored, version, err := partlog.ReadPartitionLog(ctx, p.cfg.Store, p.cfg.Topic, p.cfg.Partition)
	if err != nil {
		return fmt.Errorf("partlog: orphan sweep: %w", err)
	}
	if ours := p.l.Snapshot().Version; version != ours {
		return fmt.Errorf("partlog: orphan sweep skipped: the partition's list is at version %d, this owner wrote %d", version, ours)
	}
	live := map[string]bool{}
	for _, s := range stored.GetTiered() {
		live[s.ObjectKey] = true
	}
	// Queued garbage is not an orphan: the queue deletes it once
	// DeleteDelay has passed, for the reads that chose it before its
	// unlinking (T6).
	for _, g := range stored.GetGarbage() {
		live[g.ObjectKey] = true
	}
	orphans = slices.DeleteFunc(orphans, func(k string) bool { return live[k] })
	p.abortOldUploads(ctx, horizon)
	if len(orphans) == 0 {
		return nil
	}
	p.objects.Delete(ctx, orphans)
	p.metrics.TierOrphansDeleted.Add(float64(len(orphans)))
	p.log.Info("deleted orphan objects", "objects", len(orphans))
	return nil
}

// abortOldUploads aborts multipart uploads under the partition's prefix
// begun before horizon: a crash mid-upload leaves one behind (an upload
// in progress is younger). Stores that cannot list them by prefix (MinIO)
// expire them on their own.
func (p *pass) abortOldUploads(ctx context.Context, horizon time.Time) {
	tier := p.tier
	ctx, cancel := context.WithTimeout(ctx, tier.RequestTimeout)
	defer cancel()
	var old []objstore.UploadInfo
	err := tier.Store.ListIncompleteUploads(ctx, tier.KeyPrefix, func(u objstore.UploadInfo) bool {
		if u.Initiated.Before(horizon) {
			old = append(old, u)
		}
		return true
	})
	if err != nil {
		p.log.Warn("listing incomplete uploads", "err", err)
		return
	}
	for _, u := range old {
		if err := tier.Store.AbortIncompleteUpload(ctx, u.Key, u.UploadID); err != nil {
			p.log.Warn("aborting an abandoned upload", "key", u.Key, "err", err)
			continue
		}
		p.log.Info("aborted an abandoned upload", "key", u.Key, "initiated", u.Initiated)
	}
}

// SweepOrphans runs the orphan sweep alone (Run does it with sweep): it
// deletes the objects under the log's prefix that its list names neither
// as tiered nor as queued garbage and that are older than
// Tier.OrphanGrace, unless the list in metad is no longer the version
// this log wrote.
func SweepOrphans(ctx context.Context, l *partlog.Log) error {
	if l.Config().Tier == nil {
		return nil
	}
	return newPass(l).sweepOrphanObjects(ctx)
}
