package compaction

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/compact"
)

// pieceNames names pieces for comparison: "o:<key>" or "l:<ledger id>".
func pieceNames(pieces []piece) []string {
	var out []string
	for _, p := range pieces {
		if p.object != nil {
			out = append(out, "o:"+p.object.ObjectKey)
		} else {
			out = append(out, fmt.Sprintf("l:%d", p.ledger.LedgerId))
		}
	}
	return out
}

// TestPlan: the plan stage is a pure decision over a snapshot of the list
// (P7, P11): which pieces a pass may rewrite (objects first when the log
// has a store for them, never a local copy of tiered data, never the
// open ledger), from where the dirty section starts, whether to run and
// the cleaner lag it reports.
func TestPlan(t *testing.T) {
	const now = 1_000_000
	obj := func(key string, base, last, ts int64) *brokerpb.TieredSegment {
		return &brokerpb.TieredSegment{ObjectKey: key, BaseOffset: base, LastOffset: last, DataBytes: 100, MaxTimestampMs: ts}
	}
	led := func(id uint64, first, last, ts int64, closed bool) *brokerpb.LedgerSegment {
		return &brokerpb.LedgerSegment{LedgerId: id, FirstOffset: first, LastOffset: last, Bytes: 100, MaxTimestampMs: ts, Closed: closed}
	}
	compacted := func(ratio float64, lagMs int64) partlog.Policy {
		return partlog.Policy{Compact: true, Compaction: compact.Policy{MinCleanableDirtyRatio: ratio, MinCompactionLagMs: lagMs,
			MaxCompactionLagMs: math.MaxInt64}}
	}
	tiered := &brokerpb.PartitionLog{
		Tiered:   []*brokerpb.TieredSegment{obj("o1", 0, 9, now-500)},
		Segments: []*brokerpb.LedgerSegment{led(1, 0, 9, now-500, true), led(2, 10, 19, now-400, true), led(3, 20, 19, -1, false)},
	}
	ledgers := &brokerpb.PartitionLog{
		Segments: []*brokerpb.LedgerSegment{led(1, 0, 9, now-500, true), led(2, 10, 19, now-400, true),
			led(3, 20, 29, now-300, true), led(4, 30, 29, -1, false)},
	}
	withCleaned := func(pl *brokerpb.PartitionLog, cleaned, horizonMs int64) *brokerpb.PartitionLog {
		c := partlog.Snapshot{List: pl}.Edit()
		c.CleanedOffset, c.TombstoneHorizonMs = cleaned, horizonMs
		return c
	}
	for _, tc := range []struct {
		name          string
		list          *brokerpb.PartitionLog
		policy        partlog.Policy
		objects       bool
		run           bool
		reason        compact.Reason
		cleanable     []string
		cleaned       int64
		oldestDirtyMs int64
	}{
		{"a topic that does not compact", ledgers, partlog.KeepEverything, false, false, compact.ReasonNothingCleanable, nil, 0, -1},
		{"every closed ledger, never the open one", ledgers, compacted(0.5, 0), false, true, compact.ReasonDirtyRatio,
			[]string{"l:1", "l:2", "l:3"}, 0, now - 500},
		{"without a store: objects and their local copies left alone", tiered, compacted(0.5, 0), false, true,
			compact.ReasonDirtyRatio, []string{"l:2"}, 10, now - 400},
		{"with a store: objects first, local copies skipped", tiered, compacted(0.5, 0), true, true,
			compact.ReasonDirtyRatio, []string{"o:o1", "l:2"}, 0, now - 500},
		{"min.compaction.lag.ms holds back the young ledgers", ledgers, compacted(0.5, 350), false, true,
			compact.ReasonDirtyRatio, []string{"l:1", "l:2"}, 0, now - 500},
		{"cleaned up to 20: below the ratio", withCleaned(ledgers, 20, 0), compacted(0.5, 0), false, false,
			compact.ReasonBelowRatio, []string{"l:1", "l:2", "l:3"}, 20, now - 300},
		{"all clean: nothing to do", withCleaned(ledgers, 30, 0), compacted(0, 0), false, false,
			compact.ReasonNothingCleanable, []string{"l:1", "l:2", "l:3"}, 30, -1},
		{"all clean, a kept tombstone expired: a pass for it", withCleaned(ledgers, 30, now-1), compacted(0, 0), false, true,
			compact.ReasonTombstonesExpired, []string{"l:1", "l:2", "l:3"}, 30, -1},
		{"a kept tombstone not expired yet", withCleaned(ledgers, 30, now+1), compacted(0, 0), false, false,
			compact.ReasonNothingCleanable, []string{"l:1", "l:2", "l:3"}, 30, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := partlog.Snapshot{List: tc.list, Policy: tc.policy, Now: time.UnixMilli(now)}
			before := partlog.Snapshot{List: tc.list}.Edit()
			got := plan(snap, tc.objects)
			if got.run != tc.run || got.decision.Reason != tc.reason || !slices.Equal(pieceNames(got.cleanable), tc.cleanable) ||
				got.cleaned != tc.cleaned || got.oldestDirtyMs != tc.oldestDirtyMs {
				t.Fatalf("plan = run %v (%v), cleanable %v, cleaned %d, oldest dirty %d; want run %v (%v), %v, %d, %d",
					got.run, got.decision.Reason, pieceNames(got.cleanable), got.cleaned, got.oldestDirtyMs,
					tc.run, tc.reason, tc.cleanable, tc.cleaned, tc.oldestDirtyMs)
			}
			if d := DirtyRatio(snap, tc.objects); d != got.decision.DirtyRatio {
				t.Fatalf("DirtyRatio %v, the plan's %v", d, got.decision.DirtyRatio)
			}
			if fmt.Sprint(snap.List) != fmt.Sprint(before) {
				t.Fatal("plan changed the snapshot's list")
			}
		})
	}
}

// TestCover: the pass rewrites the leading cleanable pieces that end below
// the indexed end, whole (P7), merging what the read stage noted of the
// producers' last batches; a map that cannot reach past the first piece,
// or into the dirty section when there is one, is compact.ErrMapTooSmall.
func TestCover(t *testing.T) {
	pieces := []piece{
		{object: &brokerpb.TieredSegment{ObjectKey: "o1", BaseOffset: 0, LastOffset: 9}},
		{ledger: &brokerpb.LedgerSegment{LedgerId: 2, FirstOffset: 10, LastOffset: 19}},
		{ledger: &brokerpb.LedgerSegment{LedgerId: 3, FirstOffset: 20, LastOffset: 29}},
	}
	lasts := []map[int64]int64{{7: 5}, {7: 15, 8: 12}, {8: 25}}
	for _, tc := range []struct {
		name       string
		cleaned    int64
		dirtyBytes int64
		indexedEnd int64
		objects    []string
		ledgers    []uint64
		end        int64
		lastOf     map[int64]int64
		err        error
	}{
		{"everything indexed", 0, 300, 30, []string{"o1"}, []uint64{2, 3}, 30, map[int64]int64{7: 15, 8: 25}, nil},
		{"indexed into the last: whole pieces only", 0, 300, 25, []string{"o1"}, []uint64{2}, 20, map[int64]int64{7: 15, 8: 12}, nil},
		{"the clean section and some dirty", 10, 200, 20, []string{"o1"}, []uint64{2}, 20, map[int64]int64{7: 15, 8: 12}, nil},
		{"not past the first piece", 0, 300, 5, nil, nil, 0, nil, compact.ErrMapTooSmall},
		{"not into the dirty section", 20, 100, 20, nil, nil, 0, nil, compact.ErrMapTooSmall},
		{"tombstones alone: up to cleaned", 30, 0, 30, []string{"o1"}, []uint64{2, 3}, 30, map[int64]int64{7: 15, 8: 25}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := passPlan{cleanable: pieces, cleaned: tc.cleaned, decision: compact.Decision{DirtyBytes: tc.dirtyBytes}}
			in, err := cover(pl, indexed{end: tc.indexedEnd, lastOfPiece: lasts}, 100)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("cover: %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			var objects []string
			for _, o := range in.objects {
				objects = append(objects, o.ObjectKey)
			}
			var ledgers []uint64
			for _, l := range in.ledgers {
				ledgers = append(ledgers, l.LedgerId)
			}
			if !slices.Equal(objects, tc.objects) || !slices.Equal(ledgers, tc.ledgers) || in.end != tc.end ||
				fmt.Sprint(in.lastOf) != fmt.Sprint(tc.lastOf) {
				t.Fatalf("cover = objects %v, ledgers %v, end %d, lastOf %v; want %v, %v, %d, %v",
					objects, ledgers, in.end, in.lastOf, tc.objects, tc.ledgers, tc.end, tc.lastOf)
			}
		})
	}
}
