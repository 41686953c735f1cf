package partlog

import (
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
