package compact

import (
	"fmt"
)

// PlanResult is what Plan indexed.
type PlanResult struct {
	// IndexedEnd: every batch with last offset < IndexedEnd was indexed,
	// none at or after it. It is endOffset unless the map filled or a
	// batch straddles endOffset, and then the base offset of the first
	// batch not indexed. The pass compacts [log start, IndexedEnd) and
	// records IndexedEnd as its cleaned-up-to offset; the next pass
	// starts there (C8).
	IndexedEnd int64
	// Full: Plan stopped because the next batch's keys did not fit.
	Full bool
	// Batches and Records indexed (keyed records only).
	Batches, Records int
}

// Plan indexes the dirty range into m: for every keyed record of batches
// (in increasing offset order) whose batch ends before endOffset, m gets
// key -> offset of its latest record. A batch is indexed whole or not at
// all: before a batch, Plan checks that m has room for all its keyed
// records (counted with repeats, a safe over-estimate), and stops when
// not, so m describes exactly [first,
// IndexedEnd). Control batches are skipped (they hold no keys).
//
// Of opt, Plan reads MaxDecompressedBytes and CRCChecked, and marks in
// Survivors (if set) every keyless record and control batch it indexes.
//
// Errors: ErrMapTooSmall when a batch does not fit in m while m is
// empty (no pass could make progress); ErrOrder when batches go
// backwards; recordbatch's errors for a batch that does not decode.
func Plan(m *OffsetMap, batches [][]byte, endOffset int64, opt Options) (PlanResult, error) {
	res := PlanResult{IndexedEnd: endOffset}
	prevLast := int64(-1)
	for i, b := range batches {
		h, recs, err := opt.decode(b)
		if err != nil {
			return res, fmt.Errorf("compact: plan: batch %d: %w", i, err)
		}
		if h.BaseOffset <= prevLast || h.LastOffset() < h.BaseOffset {
			return res, fmt.Errorf("%w: batch %d spans [%d, %d] after offset %d", ErrOrder, i, h.BaseOffset, h.LastOffset(), prevLast)
		}
		prevLast = h.LastOffset()
		if h.LastOffset() >= endOffset {
			res.IndexedEnd = min(h.BaseOffset, endOffset)
			return res, nil
		}
		if h.IsControl() {
			opt.Survivors.keep(h.BaseOffset, h.LastOffset())
			res.Batches++
			continue
		}
		keyed := 0
		for j := range recs {
			if recs[j].Key != nil {
				keyed++
			}
		}
		if keyed > m.Room() {
			if keyed > m.Capacity() && m.Len() == 0 {
				return res, fmt.Errorf("%w: batch at offset %d has %d keys, the map holds %d", ErrMapTooSmall, h.BaseOffset, keyed, m.Capacity())
			}
			res.IndexedEnd, res.Full = h.BaseOffset, true
			return res, nil
		}
		for j := range recs {
			if r := &recs[j]; r.Key != nil {
				// Room was checked for every keyed record: cannot fail.
				m.put(m.hash(r.Key), r.Offset)
			} else {
				opt.Survivors.keep(r.Offset, r.Offset) // C2
			}
		}
		res.Batches++
		res.Records += keyed
	}
	return res, nil
}
