package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/storeurl"
)

// tierClusterIDKey holds the id that prefixes this cluster's object keys,
// so clusters can share a bucket and a re-created metad never mistakes
// another cluster's objects for its own.
const tierClusterIDKey = "/strata/tier/cluster-id"

// tierState is the broker's object-store tier (nil without --tier-store).
type tierState struct {
	store     objstore.Store
	reader    *tiering.Reader
	clusterID string
	// uploads bounds concurrent uploads over all partitions.
	uploads chan struct{}
}

// openTier opens --tier-store and learns (or makes) the cluster id.
func (b *Broker) openTier(ctx context.Context) error {
	if b.cfg.TierStore == "" {
		return nil
	}
	store, err := storeurl.Open(ctx, b.cfg.TierStore, storeurl.Options{})
	if err != nil {
		return fmt.Errorf("--tier-store: %w", err)
	}
	id, err := b.tierClusterID(ctx)
	if err != nil {
		closeStore(store)
		return err
	}
	b.tier = &tierState{
		store: store, clusterID: id, uploads: make(chan struct{}, b.cfg.TierUploads),
		reader: tiering.NewReader(store, tiering.ReaderConfig{CacheBytes: b.cfg.TierCacheBytes}, b.tierMetrics),
	}
	b.log.Info("tiered storage", "store", b.cfg.TierStore, "cluster_id", id)
	return nil
}

// tierClusterID reads the cluster id from metad, creating it the first
// time (create-only: every broker ends up with the same one).
func (b *Broker) tierClusterID(ctx context.Context) (string, error) {
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	_, err := b.meta.Put(ctx, tierClusterIDKey, []byte(hex.EncodeToString(raw[:])), metaclient.WithExpectedVersion(0))
	if err != nil && !errors.Is(err, metaclient.ErrVersionConflict) {
		return "", fmt.Errorf("tier cluster id: %w", err)
	}
	kv, err := b.meta.Get(ctx, tierClusterIDKey)
	if err != nil {
		return "", fmt.Errorf("tier cluster id: %w", err)
	}
	return string(kv.Value), nil
}

func (b *Broker) closeTier() {
	if b.tier != nil {
		_ = b.tier.reader.Close()
		closeStore(b.tier.store)
	}
}

func closeStore(s objstore.Store) {
	if c, ok := s.(io.Closer); ok {
		_ = c.Close()
	}
}

// topicPrefix is where a topic's objects live in the store.
func (t *tierState) topicPrefix(topicID string) string {
	return fmt.Sprintf("strata/%s/t/%s/", t.clusterID, topicID)
}

// partitionTier is the partlog tier of a partition (nil without a store).
func (b *Broker) partitionTier(rec *brokerpb.TopicRecord, partition int32) *partlog.Tier {
	if b.tier == nil {
		return nil
	}
	return &partlog.Tier{
		Store: b.tier.store, Reader: tierReader{b.tier.reader},
		KeyPrefix: fmt.Sprintf("%s%d/", b.tier.topicPrefix(rec.Id), partition), TopicID: rec.Id,
		SegmentBytes: b.cfg.TierSegmentBytes, MaxDelay: b.cfg.TierMaxDelay, CheckInterval: b.cfg.TierCheckInterval,
		OrphanGrace: b.cfg.TierOrphanGrace, Uploads: b.tier.uploads,
	}
}

// deleteTopicObjects deletes every object of a deleted topic.
func (b *Broker) deleteTopicObjects(ctx context.Context, rec *brokerpb.TopicRecord) error {
	if b.tier == nil || rec.Id == "" {
		return nil
	}
	var keys []string
	err := b.tier.store.List(ctx, b.tier.topicPrefix(rec.Id), "", func(o objstore.ObjectInfo) bool {
		keys = append(keys, o.Key)
		return true
	})
	if err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		failed, err := b.tier.store.Delete(ctx, keys[:n])
		if err != nil {
			return err
		}
		if len(failed) > 0 {
			return fmt.Errorf("deleting %d objects of topic %s: %v", len(failed), rec.Name, failed[0])
		}
		keys = keys[n:]
	}
	return nil
}

// tierReader adapts tiering.Reader to partlog.TierReader.
type tierReader struct{ r *tiering.Reader }

func segmentRef(t *brokerpb.TieredSegment) tiering.SegmentRef {
	return tiering.SegmentRef{Key: t.ObjectKey, Size: t.SizeBytes, IndexPos: t.IndexPos, BaseOffset: t.BaseOffset, LastOffset: t.LastOffset}
}

func (a tierReader) Fetch(ctx context.Context, t *brokerpb.TieredSegment, offset int64, maxBytes int) ([]byte, error) {
	return a.r.Fetch(ctx, segmentRef(t), offset, maxBytes)
}

func (a tierReader) OffsetForTime(ctx context.Context, t *brokerpb.TieredSegment, ts int64) (int64, int64, bool, error) {
	return a.r.OffsetForTime(ctx, segmentRef(t), ts)
}
