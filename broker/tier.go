package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering"
	"github.com/strata-log/strata/tiering/diskcache"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/storeurl"
	"github.com/strata-log/strata/tiering/segfile"
	"github.com/strata-log/strata/vfs"
)

// tierClusterIDKey holds the id that prefixes this cluster's object keys,
// so clusters can share a bucket and a re-created metad never mistakes
// another cluster's objects for its own. tierCookieKey holds the bucket
// cookie as written to the store: once it exists, the store must hold the
// same cookie (T9).
const (
	tierClusterIDKey = "/strata/tier/cluster-id"
	tierCookieKey    = "/strata/tier/bucket-cookie"
)

// tierState is the broker's object-store tier (nil without --tier-store;
// its methods are safe on nil).
type tierState struct {
	cfg     Config
	log     *slog.Logger
	meta    *metaclient.Client
	metrics *metrics

	store     objstore.Store
	reader    *tiering.Reader
	clusterID string
	key       *segfile.Key // the cluster's tier key (tiering T11)
	cookie    []byte
	// uploads bounds concurrent uploads over all partitions.
	uploads chan struct{}

	mu struct {
		sync.Mutex
		checkedAt time.Time // the cookie last matched
	}
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
	id, err := b.clusterID(ctx)
	if err != nil {
		closeStore(store)
		return err
	}
	key, err := b.tierKey(ctx)
	if err != nil {
		closeStore(store)
		return err
	}
	rc := tiering.ReaderConfig{CacheBytes: b.cfg.TierCacheBytes, RequestTimeout: b.cfg.TierRequestTimeout, Key: key}
	if b.cfg.TierCacheDir != "" {
		rc.DiskCache, err = diskcache.Open(vfs.Default(), diskcache.Config{Dir: b.cfg.TierCacheDir, CapBytes: b.cfg.TierDiskCacheBytes}, b.tierMetrics.DiskCache)
		if err != nil {
			closeStore(store)
			return fmt.Errorf("--tier-cache-dir: %w", err)
		}
	}
	t := &tierState{
		cfg: b.cfg, log: b.log, meta: b.meta, metrics: b.metrics,
		store: store, clusterID: id, key: key, uploads: make(chan struct{}, b.cfg.TierUploads),
		reader: tiering.NewReader(store, rc, b.tierMetrics),
	}
	if err := t.ensureCookie(ctx); err != nil {
		// Not fatal: the broker serves and reads; it deletes nothing
		// until the identity is confirmed (canDestroy says why).
		b.log.Error("tiered storage: the bucket's identity is not confirmed; no local copy or object will be deleted", "err", err)
	}
	b.tier = t
	b.log.Info("tiered storage", "store", b.cfg.TierStore, "cluster_id", id, "reader", rc.String())
	return nil
}

// cookieObjectKey is the bucket cookie's key in the store.
func (t *tierState) cookieObjectKey() string {
	return fmt.Sprintf("strata/%s/bucket.json", t.clusterID)
}

// ensureCookie makes sure the store holds this cluster's bucket cookie:
// the first broker ever creates it in the store, then records it in metad
// (both create-only); later, metad's copy is what the store must hold. A
// store that lost it (wiped, or another bucket) is never given a new one
// by a broker: an operator must look.
func (t *tierState) ensureCookie(ctx context.Context) error {
	kv, err := t.meta.Get(ctx, tierCookieKey)
	switch {
	case err == nil:
		t.cookie = kv.Value
	case errors.Is(err, metaclient.ErrNotFound):
		cookie := fmt.Appendf(nil, `{"cluster_id":%q,"created_at_ms":%d}`, t.clusterID, time.Now().UnixMilli())
		if err := t.store.PutIfAbsent(ctx, t.cookieObjectKey(), cookie); err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
			return fmt.Errorf("writing the bucket cookie: %w", err)
		}
		stored, err := readObject(ctx, t.store, t.cookieObjectKey())
		if err != nil {
			return fmt.Errorf("reading the bucket cookie back: %w", err)
		}
		if _, err := t.meta.Put(ctx, tierCookieKey, stored, metaclient.WithExpectedVersion(0)); err != nil &&
			!errors.Is(err, metaclient.ErrVersionConflict) {
			return fmt.Errorf("recording the bucket cookie: %w", err)
		}
		if kv, err = t.meta.Get(ctx, tierCookieKey); err != nil {
			return err
		}
		t.cookie = kv.Value
	default:
		return err
	}
	return t.checkCookie(ctx)
}

// checkCookie confirms the store holds the recorded cookie.
func (t *tierState) checkCookie(ctx context.Context) error {
	if t.cookie == nil {
		return errors.New("tiered storage: no bucket cookie recorded in metad yet")
	}
	got, err := readObject(ctx, t.store, t.cookieObjectKey())
	if err != nil {
		return fmt.Errorf("tiered storage: the bucket cookie %s: %w (was the bucket wiped or swapped?)", t.cookieObjectKey(), err)
	}
	if !bytes.Equal(got, t.cookie) {
		return fmt.Errorf("tiered storage: the bucket cookie %s is %q, metad recorded %q (another bucket?)", t.cookieObjectKey(), got, t.cookie)
	}
	t.mu.Lock()
	t.mu.checkedAt = time.Now()
	t.mu.Unlock()
	return nil
}

// canDestroy is partlog.Tier.CanDestroy: nil when the bucket's identity
// was confirmed within --tier-cookie-check-interval (checked again if
// not).
func (t *tierState) canDestroy(ctx context.Context) error {
	t.mu.Lock()
	fresh := time.Since(t.mu.checkedAt) < t.cfg.TierCookieCheckInterval
	t.mu.Unlock()
	if fresh {
		return nil
	}
	if t.cookie == nil {
		if err := t.ensureCookie(ctx); err != nil {
			t.metrics.tierIdentityErrors.Inc()
			return err
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.TierRequestTimeout)
	defer cancel()
	if err := t.checkCookie(ctx); err != nil {
		t.metrics.tierIdentityErrors.Inc()
		t.log.Error("tiered storage: deletions stopped", "err", err)
		return err
	}
	return nil
}

func readObject(ctx context.Context, s objstore.Store, key string) ([]byte, error) {
	rc, err := s.GetRange(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// clusterID reads the cluster id from metad, creating it the first
// time (create-only: every broker ends up with the same one).
func (b *Broker) clusterID(ctx context.Context) (string, error) {
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id, err := b.sharedValue(ctx, tierClusterIDKey, []byte(hex.EncodeToString(raw[:])))
	if err != nil {
		return "", fmt.Errorf("tier cluster id: %w", err)
	}
	return string(id), nil
}

// tierKey reads the cluster's tier key from metad, creating it the first
// time (32 random bytes, create-only: every broker ends up with the same
// one). Objects are written and read authenticated with it (tiering T11).
func (b *Broker) tierKey(ctx context.Context) (*segfile.Key, error) {
	secret := make([]byte, segfile.KeySize)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	value, err := b.sharedValue(ctx, brokerpb.TierSegmentMACKey, secret)
	if err != nil {
		return nil, fmt.Errorf("tier key: %w", err)
	}
	key, err := segfile.NewKey(value)
	if err != nil {
		return nil, fmt.Errorf("tier key %s: %w", brokerpb.TierSegmentMACKey, err)
	}
	return key, nil
}

// sharedValue returns key's value in metad, creating it as value the first
// time (create-only: every broker ends up with the same one). Errors that
// say metad could not serve now (no leader, an election, a create whose
// outcome is unknown, which the next round reads back) are retried until
// ctx ends: a broker starting during a metad election waits for it rather
// than exiting.
func (b *Broker) sharedValue(ctx context.Context, key string, value []byte) ([]byte, error) {
	wait := 50 * time.Millisecond
	for {
		kv, err := b.meta.Get(ctx, key)
		if err == nil {
			return kv.Value, nil
		}
		if errors.Is(err, metaclient.ErrNotFound) {
			_, err = b.meta.Put(ctx, key, value, metaclient.WithExpectedVersion(0))
			if err == nil {
				return value, nil
			}
			if errors.Is(err, metaclient.ErrVersionConflict) {
				continue // another broker made it first: read theirs
			}
		}
		if !errors.Is(err, metaclient.ErrUnavailable) && !errors.Is(err, metaclient.ErrUnknownOutcome) {
			return nil, err
		}
		b.log.Warn("metad unavailable; retrying", "key", key, "err", err)
		if ctxtime.Sleep(ctx, wait) != nil {
			return nil, err
		}
		wait = min(2*wait, time.Second)
	}
}

func (t *tierState) close() {
	if t != nil {
		_ = t.reader.Close()
		closeStore(t.store)
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
func (t *tierState) partitionTier(rec *brokerpb.TopicRecord, partition int32) *partlog.Tier {
	if t == nil {
		return nil
	}
	return &partlog.Tier{
		Store: t.store, Reader: tierReader{t.reader},
		KeyPrefix: fmt.Sprintf("%s%d/", t.topicPrefix(rec.Id), partition), TopicID: rec.Id,
		SegmentBytes: t.cfg.TierSegmentBytes, MaxDelay: t.cfg.TierMaxDelay,
		OrphanGrace: t.cfg.TierOrphanGrace, DeleteDelay: t.cfg.TierDeleteDelay, Uploads: t.uploads, CanDestroy: t.canDestroy,
		RequestTimeout: t.cfg.TierRequestTimeout, UploadTimeout: t.cfg.TierUploadTimeout, VerifyFull: t.cfg.TierVerifyFull,
		Key: t.key,
	}
}

// deleteTopicObjects deletes every object of a deleted topic.
func (t *tierState) deleteTopicObjects(ctx context.Context, rec *brokerpb.TopicRecord) error {
	if t == nil || rec.Id == "" {
		return nil
	}
	var keys []string
	err := t.store.List(ctx, t.topicPrefix(rec.Id), "", func(o objstore.ObjectInfo) bool {
		keys = append(keys, o.Key)
		return true
	})
	if err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		failed, err := t.store.Delete(ctx, keys[:n])
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
	return tiering.SegmentRef{Key: t.ObjectKey, Size: t.SizeBytes, IndexPos: t.IndexPos, BaseOffset: t.BaseOffset, LastOffset: t.LastOffset,
		Authenticated: t.Authenticated}
}

func (a tierReader) Fetch(ctx context.Context, t *brokerpb.TieredSegment, offset int64, maxBytes int) ([]byte, error) {
	return a.r.Fetch(ctx, segmentRef(t), offset, maxBytes)
}

func (a tierReader) OffsetForTime(ctx context.Context, t *brokerpb.TieredSegment, ts int64, maxDecompressed int) (int64, int64, bool, error) {
	return a.r.OffsetForTime(ctx, segmentRef(t), ts, maxDecompressed)
}
