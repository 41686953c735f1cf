package compaction

import (
	"fmt"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/compact"
)

// piece is one part of the log compaction may rewrite: a segment object
// or a ledger no object covers (exactly one is set).
type piece struct {
	object *brokerpb.TieredSegment
	ledger *brokerpb.LedgerSegment
}

func (p piece) first() int64 {
	if p.object != nil {
		return p.object.BaseOffset
	}
	return p.ledger.FirstOffset
}

func (p piece) last() int64 {
	if p.object != nil {
		return p.object.LastOffset
	}
	return p.ledger.LastOffset
}

// bytes is the data size of a piece, as the pass buffer counts it.
func (p piece) bytes() int64 {
	if p.object != nil {
		return p.object.DataBytes
	}
	return p.ledger.Bytes
}

// maxTimestampMs is the newest record time of the piece (-1: none).
func (p piece) maxTimestampMs() int64 {
	if p.object != nil {
		return p.object.MaxTimestampMs
	}
	return p.ledger.MaxTimestampMs
}

func (p piece) String() string {
	if p.object != nil {
		return "object " + p.object.ObjectKey
	}
	return fmt.Sprintf("ledger %d", p.ledger.LedgerId)
}

// candidates is the part of the log compaction may touch (P7), in offset
// order, as SegmentSummaries for Decide: with objects (the log has a
// store to read and write them), every segment object, then the ledgers
// no object covers (the open one last, marked open so that Decide stops
// there). Ledgers an object covers are local copies, never candidates;
// without objects, the object part is left alone.
func candidates(pl *brokerpb.PartitionLog, objects bool) ([]piece, []compact.SegmentSummary) {
	end := partlog.TieredEnd(pl)
	var pieces []piece
	var sums []compact.SegmentSummary
	if objects {
		for _, o := range pl.GetTiered() {
			pieces = append(pieces, piece{object: o})
			sums = append(sums, compact.SegmentSummary{FirstOffset: o.BaseOffset, LastOffset: o.LastOffset,
				Bytes: o.DataBytes, MaxTimestampMs: o.MaxTimestampMs})
		}
	}
	for _, s := range pl.GetSegments() {
		if end >= 0 && s.FirstOffset < end {
			continue // a local copy of tiered data
		}
		pieces = append(pieces, piece{ledger: s})
		sums = append(sums, compact.SegmentSummary{FirstOffset: s.FirstOffset, LastOffset: s.LastOffset,
			Bytes: s.Bytes, MaxTimestampMs: s.MaxTimestampMs, Open: !s.Closed})
	}
	return pieces, sums
}

// passPlan is the plan stage's decision.
type passPlan struct {
	// run: a pass is due (the policy compacts and Decide says so).
	run      bool
	decision compact.Decision
	// cleaned: where the dirty section starts (the stored cleaned offset,
	// at least the first piece's first offset).
	cleaned int64
	// cleanable: the pieces Decide found cleanable, in offset order.
	cleanable []piece
	// oldestDirtyMs: the newest record time of the first cleanable piece
	// that holds dirty offsets (-1: none), for the cleaner lag.
	oldestDirtyMs int64
	// nowMs and the policy of the snapshot.
	nowMs  int64
	policy partlog.Policy
}

// plan is the scheduling decision for the log of snap (pure); objects as
// candidates. The stored tombstone horizon makes a pass run with nothing
// dirty once a kept tombstone expires (P7).
func plan(snap partlog.Snapshot, objects bool) passPlan {
	pl := passPlan{oldestDirtyMs: -1, nowMs: snap.Now.UnixMilli(), policy: snap.Policy}
	if !snap.Policy.Compact {
		return pl
	}
	pieces, sums := candidates(snap.List, objects)
	pl.cleaned = snap.List.GetCleanedOffset()
	if len(pieces) > 0 {
		pl.cleaned = max(pl.cleaned, pieces[0].first())
	}
	pl.decision = compact.Decide(sums, pl.cleaned, snap.List.GetTombstoneHorizonMs(), pl.nowMs, snap.Policy.Compaction)
	pl.cleanable = pieces[:pl.decision.Cleanable]
	for _, p := range pl.cleanable {
		if p.last() >= pl.cleaned {
			pl.oldestDirtyMs = p.maxTimestampMs()
			break
		}
	}
	pl.run = pl.decision.Compact
	return pl
}

// inputs are the pieces a pass rewrites (cover).
type inputs struct {
	objects []*brokerpb.TieredSegment
	ledgers []*brokerpb.LedgerSegment
	// end: one past the last offset they cover (the new cleaned offset).
	end int64
	// lastOf: producer id -> last offset of its last batch in them.
	lastOf map[int64]int64
}

// cover decides which pieces the pass rewrites once the read stage
// indexed up to ix.end (pure): the leading cleanable pieces that end below
// it, whole. Keys indexed beyond it only name records that exist later in
// the log, so dropping what they supersede is still "latest wins". It
// covers the whole clean section (where the tombstones it keeps, and the
// horizon it stores, lie) and some of the dirty one if there is any: a
// pass for expired tombstones alone (nothing dirty, Decide checked that
// the cleanable pieces reach cleaned) indexes nothing and ends at cleaned.
// A map too small to cover that is compact.ErrMapTooSmall.
func cover(pl passPlan, ix indexed, mapKeys int) (inputs, error) {
	cleanable := pl.cleanable
	n := 0
	for n < len(cleanable) && cleanable[n].last() < ix.end {
		n++
	}
	if n == 0 || cleanable[n-1].last()+1 < pl.cleaned || (pl.decision.DirtyBytes > 0 && cleanable[n-1].last() < pl.cleaned) {
		return inputs{}, fmt.Errorf("%w: partlog: the %d keys it holds do not cover %v; raise the compaction map memory",
			compact.ErrMapTooSmall, mapKeys, cleanable[min(n, len(cleanable)-1)])
	}
	in := inputs{end: cleanable[n-1].last() + 1, lastOf: map[int64]int64{}}
	for _, lasts := range ix.lastOfPiece[:n] {
		for id, last := range lasts {
			in.lastOf[id] = last
		}
	}
	for _, p := range cleanable[:n] {
		if p.object != nil {
			in.objects = append(in.objects, p.object)
		} else {
			in.ledgers = append(in.ledgers, p.ledger)
		}
	}
	return in, nil
}
