package partlog

import (
	"context"
	"sort"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// entryInfo describes one entry (one batch) of a segment; the entry id is
// its index in the segment's slice.
type entryInfo struct {
	base, last int64
	size       int32
	maxTs      int64 // the batch's MaxTimestamp
	runMaxTs   int64 // max over this entry and every lower one
}

func newEntryInfo(h recordbatch.BatchHeader, size int, prev []entryInfo) entryInfo {
	e := entryInfo{base: h.BaseOffset, last: h.LastOffset(), size: int32(size), maxTs: h.MaxTimestamp, runMaxTs: h.MaxTimestamp}
	if n := len(prev); n > 0 {
		e.runMaxTs = max(e.runMaxTs, prev[n-1].runMaxTs)
	}
	return e
}

// segmentProto is the LedgerSegment of a segment holding entries.
func segmentProto(ledgerID uint64, first, createdAtMs int64, entries []entryInfo, closed bool) *brokerpb.LedgerSegment {
	s := &brokerpb.LedgerSegment{
		LedgerId: ledgerID, FirstOffset: first, LastOffset: first - 1, LastEntryId: int64(len(entries)) - 1,
		MaxTimestampMs: -1, CreatedAtMs: createdAtMs, Closed: closed,
	}
	for _, e := range entries {
		s.Bytes += int64(e.size)
	}
	if n := len(entries); n > 0 {
		s.LastOffset = entries[n-1].last
		s.MaxTimestampMs = entries[n-1].runMaxTs
	}
	return s
}

// buildIndex is the sparse index of a closed segment: a point for entry 0,
// then one at the first entry at least interval bytes after the previous
// point.
func buildIndex(entries []entryInfo, interval int64) *brokerpb.LedgerIndex {
	idx := &brokerpb.LedgerIndex{}
	var since int64
	for i, e := range entries {
		if i == 0 || since >= interval {
			idx.Points = append(idx.Points, &brokerpb.IndexPoint{EntryId: int64(i), BaseOffset: e.base, MaxTimestampMs: e.runMaxTs})
			since = 0
		}
		since += int64(e.size)
	}
	return idx
}

// entryForOffset is the entry of entries holding offset (entries sorted by
// offset), or the first one after it.
func entryForOffset(entries []entryInfo, offset int64) int {
	return sort.Search(len(entries), func(i int) bool { return entries[i].last >= offset })
}

// indexStartForOffset is the entry to start reading from for offset: the
// last index point at or below it.
func indexStartForOffset(idx *brokerpb.LedgerIndex, offset int64) int64 {
	pts := idx.GetPoints()
	i := sort.Search(len(pts), func(i int) bool { return pts[i].GetBaseOffset() > offset })
	if i == 0 {
		return 0
	}
	return pts[i-1].GetEntryId()
}

// indexStartForTime is the entry to start scanning from for the first
// batch with a timestamp >= ts: the last point whose running max is below
// ts (every entry up to it is below ts), else 0.
func indexStartForTime(idx *brokerpb.LedgerIndex, ts int64) int64 {
	pts := idx.GetPoints()
	i := sort.Search(len(pts), func(i int) bool { return pts[i].GetMaxTimestampMs() >= ts })
	if i == 0 {
		return 0
	}
	return pts[i-1].GetEntryId()
}

// segmentFor is the index of the segment holding offset: the last one
// whose first offset is at or below it (segments in offset order).
func segmentFor(segs []segRef, offset int64) int {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > offset })
	return i - 1
}

// SegmentEntries builds a closed ledger's list entry and index from its
// batches, added in entry order, as a roll records its segment: for the
// ledgers written outside the log's writer (compaction's outputs).
type SegmentEntries struct {
	entries []entryInfo
	bytes   int64
}

// Add records the next entry: a batch with header h of size bytes.
func (s *SegmentEntries) Add(h recordbatch.BatchHeader, size int) {
	s.entries = append(s.entries, newEntryInfo(h, size, s.entries))
	s.bytes += int64(size)
}

// Len is the number of entries added; Bytes their size.
func (s *SegmentEntries) Len() int     { return len(s.entries) }
func (s *SegmentEntries) Bytes() int64 { return s.bytes }

// LastOffset is the last offset of the last entry (-1: none).
func (s *SegmentEntries) LastOffset() int64 {
	if n := len(s.entries); n > 0 {
		return s.entries[n-1].last
	}
	return -1
}

// Seal writes the index of ledger ledgerID holding the entries (a point at
// least every interval bytes) and returns its closed list entry from
// offset first.
func (s *SegmentEntries) Seal(ctx context.Context, store Store, ledgerID uint64, first, createdAtMs, interval int64) (*brokerpb.LedgerSegment, error) {
	if err := writeIndex(ctx, store, ledgerID, buildIndex(s.entries, interval)); err != nil {
		return nil, err
	}
	return segmentProto(ledgerID, first, createdAtMs, s.entries, true), nil
}
