package partlog_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

// storedTombstoneHorizon is the tombstone horizon the partition's list in
// metad holds (what a new owner reads).
func storedTombstoneHorizon(t *testing.T, f *partlog.Fixture) int64 {
	t.Helper()
	pl, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	return pl.GetTombstoneHorizonMs()
}

// keysFromStart is every record a consumer reads from the log start
// (consumeAll: a compacted range may end with an empty batch), as
// "offset:key=value".
func keysFromStart(t *testing.T, l *partlog.Log) string {
	t.Helper()
	return strings.Join(partlog.DescribeAll(consumeAll(t, l, l.LogStartOffset())), " ")
}

// TestCompactDropsExpiredTombstonesWithoutNewWrites: a tombstone kept by a
// pass goes at the first compaction check once its delete horizon passes,
// although nothing new was written (the gap: Decide only ever ran a pass
// for dirty bytes, so the key's tombstone stayed forever). The list stores
// the earliest horizon the last pass kept; a pass for expired tombstones
// alone keeps the offsets, keeps the tombstones not yet expired and
// stores their horizon, and clears it when none is left, after which no
// pass runs (compact C11, P7). When the range's last records go, it ends
// with an empty batch: consumeAll fails on a fetch below the high
// watermark that returns nothing.
func TestCompactDropsExpiredTombstonesWithoutNewWrites(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := compactConfig(f, 1) // delete.retention.ms: 1 h
	l := f.Open(cfg)
	var m keyedModel
	m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "1", "c", "1") // 0-2
	partlog.RollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "a", "") // 3: a's tombstone
	partlog.RollByAge(t, f, l)

	// Pass 1 keeps a's tombstone and stamps its horizon.
	res := compactNow(t, l, 1<<20)
	horizonA := f.Clock.Now().UnixMilli() + compactPolicy.DeleteRetentionMs
	if !res.Ran || res.Stats.TombstoneHorizonMs != horizonA {
		t.Fatalf("pass 1 %+v, want a kept tombstone with horizon %d", res, horizonA)
	}
	if got := keysFromStart(t, l); got != "1:b=1 2:c=1 3:a=<tombstone>" {
		t.Fatalf("after pass 1: %s", got)
	}
	if h := storedTombstoneHorizon(t, f); h != horizonA {
		t.Fatalf("stored horizon %d, want %d", h, horizonA)
	}

	// Pass 2, over new dirty data half an hour later: c's tombstone gets a
	// later horizon, a's stays, and the stored one is still the earliest.
	f.Clock.Advance(30 * time.Minute)
	m.appendKeyed(t, f, l, -1, 0, "c", "") // 4
	partlog.RollByAge(t, f, l)
	res = compactNow(t, l, 1<<20)
	horizonC := f.Clock.Now().UnixMilli() + compactPolicy.DeleteRetentionMs
	if !res.Ran || res.Reason != compact.ReasonDirtyRatio || res.Stats.TombstonesDropped != 0 {
		t.Fatalf("pass 2 %+v", res)
	}
	if h := storedTombstoneHorizon(t, f); h != horizonA {
		t.Fatalf("stored horizon %d after pass 2, want a's %d (c's is %d)", h, horizonA, horizonC)
	}
	if got := keysFromStart(t, l); got != "1:b=1 3:a=<tombstone> 4:c=<tombstone>" {
		t.Fatalf("after pass 2: %s", got)
	}
	hw, cleaned := l.HighWatermark(), l.Describe().CleanedOffset

	// No new writes from here on. Just before a's horizon: nothing to do.
	f.Clock.Advance(time.Duration(horizonA-1-f.Clock.Now().UnixMilli()) * time.Millisecond)
	if again := compactNow(t, l, 1<<20); again.Ran || again.Reason != compact.ReasonNothingCleanable {
		t.Fatalf("a pass before the horizon: %+v", again)
	}
	// On it: a's tombstone goes, c's (not expired) stays with its horizon.
	f.Clock.Advance(time.Millisecond)
	before := l.Describe().Segments
	res = compactNow(t, l, 1<<20)
	if !res.Ran || res.Reason != compact.ReasonTombstonesExpired || res.Stats.TombstonesDropped != 1 ||
		res.Stats.TombstoneHorizonMs != horizonC {
		t.Fatalf("tombstone pass %+v, want a's tombstone dropped and c's horizon %d kept", res, horizonC)
	}
	if got := keysFromStart(t, l); got != "1:b=1 4:c=<tombstone>" {
		t.Fatalf("after a's horizon: %s", got)
	}
	d := l.Describe()
	if l.HighWatermark() != hw || d.CleanedOffset != cleaned || d.TombstoneHorizonMs != horizonC || storedTombstoneHorizon(t, f) != horizonC {
		t.Fatalf("hw %d (was %d), cleaned %d (was %d), horizon %d / stored %d, want %d",
			l.HighWatermark(), hw, d.CleanedOffset, cleaned, d.TombstoneHorizonMs, storedTombstoneHorizon(t, f), horizonC)
	}
	checkFetchEveryOffset(t, l, consumeAll(t, l, 0))
	checkNoLeftovers(t, f, l, before)
	if again := compactNow(t, l, 1<<20); again.Ran {
		t.Fatalf("a second pass before c's horizon: %+v", again)
	}

	// c's horizon: the last tombstone goes and the horizon is cleared.
	f.Clock.Advance(time.Duration(horizonC-f.Clock.Now().UnixMilli()) * time.Millisecond)
	res = compactNow(t, l, 1<<20)
	if !res.Ran || res.Reason != compact.ReasonTombstonesExpired || res.Stats.TombstonesDropped != 1 || res.Stats.TombstoneHorizonMs != 0 {
		t.Fatalf("second tombstone pass %+v", res)
	}
	if got := keysFromStart(t, l); got != "1:b=1" {
		t.Fatalf("after c's horizon: %s", got)
	}
	if h := storedTombstoneHorizon(t, f); h != 0 || l.HighWatermark() != hw {
		t.Fatalf("stored horizon %d, want none; hw %d, want %d", h, l.HighWatermark(), hw)
	}
	checkFetchEveryOffset(t, l, consumeAll(t, l, 0))
	f.Clock.Advance(30 * 24 * time.Hour)
	if again := compactNow(t, l, 1<<20); again.Ran {
		t.Fatalf("a pass with no tombstone and nothing dirty: %+v", again)
	}
}

// keepATombstone writes keys a and b, then a's tombstone, each in a
// ledger of its own, and compacts once: the pass keeps the tombstone with
// the horizon delete.retention.ms from now, which it returns.
func keepATombstone(t *testing.T, f *partlog.Fixture, l *partlog.Log, m *keyedModel) int64 {
	t.Helper()
	m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "1")
	partlog.RollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "a", "")
	partlog.RollByAge(t, f, l)
	res := compactNow(t, l, 1<<20)
	horizon := f.Clock.Now().UnixMilli() + compactPolicy.DeleteRetentionMs
	if !res.Ran || res.Stats.TombstoneHorizonMs != horizon {
		t.Fatalf("pass %+v, want horizon %d", res, horizon)
	}
	return horizon
}

// TestCompactTombstoneHorizonSurvivesTakeover: the horizon is stored with
// the list, so a new owner (failover) drops the expired tombstone at its
// first check with nothing written since.
func TestCompactTombstoneHorizonSurvivesTakeover(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := compactConfig(f, 1)
	l := f.Open(cfg)
	var m keyedModel
	horizon := keepATombstone(t, f, l, &m)
	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}

	cfg2 := f.Config(2)
	cfg2.SegmentAge = time.Minute
	cfg2.Policy = compactPolicy
	l2 := f.Open(cfg2)
	if h := l2.Describe().TombstoneHorizonMs; h != horizon {
		t.Fatalf("the new owner's horizon %d, want %d", h, horizon)
	}
	if h := storedTombstoneHorizon(t, f); h != horizon {
		t.Fatalf("stored horizon %d after the takeover, want %d", h, horizon)
	}
	if got := keysFromStart(t, l2); got != "1:b=1 2:a=<tombstone>" {
		t.Fatalf("the new owner reads %s", got)
	}
	f.Clock.Advance(time.Duration(horizon-f.Clock.Now().UnixMilli()) * time.Millisecond)
	res := compactNow(t, l2, 1<<20)
	if !res.Ran || res.Reason != compact.ReasonTombstonesExpired || res.Stats.TombstonesDropped != 1 {
		t.Fatalf("the new owner's pass %+v", res)
	}
	if got := keysFromStart(t, l2); got != "1:b=1" {
		t.Fatalf("after the horizon the new owner reads %s", got)
	}
	if h := storedTombstoneHorizon(t, f); h != 0 {
		t.Fatalf("stored horizon %d, want none", h)
	}
}

// TestCompactTieredDropsExpiredTombstones: the same over segment objects:
// a tombstone the pass kept is tiered with its horizon, and the pass for
// expired tombstones rewrites the objects into new ones without it.
func TestCompactTieredDropsExpiredTombstones(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, true)
	var m keyedModel
	horizon := keepATombstone(t, f, l, &m)
	tierAll(t, l)
	hw := l.HighWatermark()
	if got := strings.Join(partlog.DescribeAll(consumeAll(t, l, 0)), " "); got != "1:b=1 2:a=<tombstone>" {
		t.Fatalf("tiered: %s", got)
	}

	f.Clock.Advance(time.Duration(horizon-f.Clock.Now().UnixMilli()) * time.Millisecond)
	res := compactNow(t, l, 1<<20)
	if !res.Ran || res.Reason != compact.ReasonTombstonesExpired || res.InputObjects == 0 || res.Stats.TombstonesDropped != 1 {
		t.Fatalf("tombstone pass over objects %+v", res)
	}
	got := consumeAll(t, l, 0)
	if s := strings.Join(partlog.DescribeAll(got), " "); s != "1:b=1" {
		t.Fatalf("after the horizon: %s", s)
	}
	checkFetchEveryOffset(t, l, got)
	if l.HighWatermark() != hw || storedTombstoneHorizon(t, f) != 0 {
		t.Fatalf("hw %d (was %d), stored horizon %d", l.HighWatermark(), hw, storedTombstoneHorizon(t, f))
	}
	// The replaced objects were queued and deleted (T6).
	if keys := storedKeys(t, store); fmt.Sprint(keys) != fmt.Sprint(tieredKeys(l.Describe())) {
		t.Fatalf("objects in the store %v, listed %v", keys, tieredKeys(l.Describe()))
	}
}
