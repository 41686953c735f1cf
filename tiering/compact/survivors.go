package compact

import "github.com/strata-log/strata/recordbatch"

// maxSurvivorOffsets bounds the range a Survivors covers (one bit per
// offset: 8 MiB). A pass whose indexed range is larger drops nothing by
// header; Rewrite decodes every batch, as without a Survivors.
const maxSurvivorOffsets = 64 << 20

// Survivors is the set of offsets of an indexed range [from, end) whose
// records a pass may keep: every record without a key, every control
// batch, and the offset the OffsetMap holds for each key. Any other
// record of a batch Plan indexed is superseded, because its key is in the
// map at a later offset (C1). So Rewrite drops a batch of the range that
// holds none of these offsets from its header alone, without decompressing
// or decoding it: in a log that compacts well that is most batches, and
// their decoding was most of a rewrite's CPU.
//
// A pass fills it in two steps: Plan marks keyless records and control
// batches as it indexes (Options.Survivors), then AddLatest marks the
// map's offsets and fixes end. One bit per offset, grown as offsets come;
// a range beyond maxSurvivorOffsets turns it off (Rewrite then decodes
// every batch). A nil *Survivors drops nothing.
type Survivors struct {
	from, end int64
	bits      []uint64 // bit i: offset from+i
	off       bool     // outgrew maxSurvivorOffsets
}

// NewSurvivors returns an empty set for a range that starts at from: the
// offset Plan's batches start at (the pass's cleaned offset; a batch
// straddling it is never dropped by header).
func NewSurvivors(from int64) *Survivors {
	return &Survivors{from: from, end: from}
}

// grow makes room for offsets below to; false when that is more than
// maxSurvivorOffsets (s is then off for good).
func (s *Survivors) grow(to int64) bool {
	if s.off {
		return false
	}
	if to-s.from > maxSurvivorOffsets {
		s.off, s.bits = true, nil
		return false
	}
	if words := int((to - s.from + 63) / 64); words > len(s.bits) {
		s.bits = append(s.bits, make([]uint64, words-len(s.bits))...)
	}
	return true
}

// mark adds offset o (in range and grown to).
func (s *Survivors) mark(o int64) {
	i := o - s.from
	s.bits[i/64] |= 1 << (i % 64)
}

// keep marks the offsets [first, last] that lie at or above from (Plan:
// a keyless record, a control batch).
func (s *Survivors) keep(first, last int64) {
	if s == nil {
		return
	}
	first = max(first, s.from)
	if last < first || !s.grow(last+1) {
		return
	}
	for o := first; o <= last; o++ {
		s.mark(o)
	}
}

// AddLatest marks the offset m holds for each key, where it lies in
// [from, end), and closes the range at end: the IndexedEnd of the Plan
// calls that indexed [from, end) into m with s. Call it once, after them.
func (s *Survivors) AddLatest(m *OffsetMap, end int64) {
	if !s.grow(end) {
		return
	}
	s.end = end
	add := func(sl *slot) {
		if o := sl.offsetPlusOne - 1; sl.offsetPlusOne != 0 && o >= s.from && o < end {
			s.mark(o)
		}
	}
	if !m.manyUsed {
		for _, i := range m.used {
			add(&m.slots[i])
		}
		return
	}
	for i := range m.slots {
		add(&m.slots[i])
	}
}

// any reports whether an offset in [first, last] is marked; the range
// lies within [from, end).
func (s *Survivors) any(first, last int64) bool {
	lo, hi := first-s.from, last-s.from // bit indexes, inclusive
	for w := lo / 64; w <= hi/64; w++ {
		word := s.bits[w]
		if w == lo/64 {
			word &= ^uint64(0) << (lo % 64)
		}
		if w == hi/64 {
			word &= ^uint64(0) >> (63 - hi%64)
		}
		if word != 0 {
			return true
		}
	}
	return false
}

// drop is Rewrite's result for batch when its header alone settles it:
// a data batch inside [from, end) holding no marked offset, that need not
// stay empty (KeepEmpty), is dropped whole, all its records counted as
// superseded. ok is false when the batch must be decoded.
func (s *Survivors) drop(batch []byte, opt Options) (st Stats, ok bool) {
	if s == nil || s.off || opt.KeepEmpty {
		return Stats{}, false
	}
	h, err := recordbatch.ParseHeader(batch)
	if err != nil || h.IsControl() || h.BaseOffset < s.from || h.LastOffset() >= s.end || h.Size() != len(batch) ||
		s.any(h.BaseOffset, h.LastOffset()) {
		return Stats{}, false
	}
	return Stats{BatchesIn: 1, BytesIn: int64(len(batch)), RecordsRemoved: int64(h.RecordCount), BatchesDroppedUnread: 1}, true
}
