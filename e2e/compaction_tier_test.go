package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/miniotest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// TestCompactionTiered: a compacted topic with tiering on, against a real
// MinIO. Keyed records overwritten over many small ledgers are tiered
// (compacted ledgers upload as compacted objects) and compacted where they
// live: passes over the objects write new objects, swapped in by the
// pass's CAS, and the replaced objects leave the bucket. A consumer from
// the earliest offset then sees exactly the latest value of each live key
// at its original offset (tombstones inside delete.retention.ms), read
// from the objects alone (local.retention.ms 0).
func TestCompactionTiered(t *testing.T) {
	skipShort(t)
	m := miniotest.Start(t)
	// Compaction every 200 ms with a 64 KiB key map (about 2,200 keys);
	// passes must finish within half of the orphan graces (5 s). Objects
	// of 64 KiB: many of them, and compaction outputs merge them.
	c := startTierClusterAt(t, m, m.Endpoint, "--compaction-check-interval", "200ms", "--compaction-map-bytes", "65536",
		"--orphan-ledger-grace", "10s", "--tier-orphan-grace", "10s", "--tier-segment-bytes", "65536")
	cl := c.client(t)
	const topic = "compact-tiered"
	createTopic(t, cl, topic, 1, map[string]string{"cleanup.policy": "compact", "segment.bytes": "16384",
		"min.cleanable.dirty.ratio": "0", "delete.retention.ms": "3600000", "local.retention.ms": "0"})
	rng := rand.New(rand.NewPCG(21, 22))
	var model compactionModel

	// settled waits until everything written is tiered (no closed ledger
	// left on the bookies) and a pass after since cleaned it all.
	settled := func(since int64) (cleanedAtMs int64) {
		t.Helper()
		testwait.UntilNil(t, 120*time.Second, topic+" tiered and compacted to its end", func() error {
			p := describePartition0(t, cl, topic)
			switch {
			case p.TieredEndOffset != p.HighWatermark || hasClosedLedger(p):
				return fmt.Errorf("tiered to %d of %d; %d ledgers", p.TieredEndOffset, p.HighWatermark, len(p.Ledgers))
			case p.CleanedOffset != p.HighWatermark || p.LastCompactionMs <= since:
				return fmt.Errorf("cleaned to %d at %d, high watermark %d", p.CleanedOffset, p.LastCompactionMs, p.HighWatermark)
			}
			cleanedAtMs = p.LastCompactionMs
			return nil
		})
		return cleanedAtMs
	}

	model.produceKeyed(t, cl, topic, rng, 3000, 300, 200, 10)
	first := settled(0)
	before := storedPartitionLog(t, c.strataCluster, topic)
	if len(before.Tiered) == 0 {
		t.Fatal("nothing tiered")
	}
	checkAgainstModel(t, readCompacted(t, cl, topic), model.latest(true))

	// Overwrite every key again: the next passes rewrite the objects that
	// hold the old values.
	model.produceKeyed(t, cl, topic, rng, 3000, 300, 200, 10)
	settled(first)
	after := storedPartitionLog(t, c.strataCluster, topic)
	replaced := 0
	for _, o := range before.Tiered {
		if !slices.ContainsFunc(after.Tiered, func(n *brokerpb.TieredSegment) bool { return n.ObjectKey == o.ObjectKey }) {
			replaced++
		}
	}
	if replaced == 0 {
		t.Fatalf("no object of the first round was replaced by compaction (%d objects before, %d after)", len(before.Tiered), len(after.Tiered))
	}
	got := readCompacted(t, cl, topic)
	checkAgainstModel(t, got, model.latest(true))

	// The replaced objects leave the bucket (garbage queue, then the
	// orphan sweep for anything a stale pass left): the bucket holds
	// exactly the listed objects.
	testwait.UntilNil(t, 60*time.Second, "the bucket holds only the listed objects", func() error {
		listed := []string{}
		for _, o := range storedPartitionLog(t, c.strataCluster, topic).Tiered {
			listed = append(listed, o.ObjectKey)
		}
		slices.Sort(listed)
		var inBucket []string
		for _, k := range c.objects(t) {
			inBucket = append(inBucket, strings.TrimPrefix(k, c.prefix+"/")) // the store URL's prefix is not in the keys
		}
		slices.Sort(inBucket)
		if !slices.Equal(listed, inBucket) {
			return fmt.Errorf("bucket %d objects, listed %d", len(inBucket), len(listed))
		}
		return nil
	})
	admin := "http://" + c.brokers[0].AdminAddr + "/metrics"
	runs, err1 := metricValue(admin, "strata_broker_compaction_runs_total")
	garbage, err2 := metricValue(admin, "strata_broker_tier_garbage_deleted_objects_total")
	if err := errors.Join(err1, err2); err != nil || runs < 2 || garbage < float64(replaced) {
		t.Fatalf("metrics: %v passes, %v garbage objects deleted (%d replaced): %v", runs, garbage, replaced, err)
	}
	t.Logf("%d records written over 300 keys; %d read back at their offsets from %d objects (%d of the first round's %d replaced); %v passes, %v objects deleted through the garbage queue",
		len(model.recs), len(got), len(after.Tiered), replaced, len(before.Tiered), runs, garbage)
}
