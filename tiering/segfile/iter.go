package segfile

import (
	"fmt"

	"github.com/strata-log/strata/recordbatch"
)

// Batch is one batch of a segment's data section.
type Batch struct {
	Pos    int64 // absolute byte position in the object
	Header recordbatch.BatchHeader
	// Bytes is the whole batch as stored (capacity-limited sub-slice of
	// the iterator's buffer).
	Bytes []byte
}

// Iterator walks the batches in a byte range of a segment's data section,
// checking each: header, size within the data section, CRC-32C, record
// count, and offsets following the previous batch (dense, or increasing
// in a compacted segment). An Iterator made by Tail.Batches also checks
// every batch that starts at an index position against the index entry
// (the base offset is outside the batch CRC, so this is what catches a
// damaged one there), that no batch straddles an index position, and that
// the batch ending the data ends at the footer's last offset.
//
// The range may end in the middle of a batch, as ranged reads do: Next
// then returns false with Err nil and Pos at that batch's start; give the
// bytes from Pos on to Continue to go on. Done reports the end of data.
// An Iterator is not safe for concurrent use.
type Iterator struct {
	buf       []byte
	bufPos    int64 // absolute position of buf[0]
	off       int   // bytes of buf consumed
	dataEnd   int64
	compacted bool
	// From a Tail: the index, the next entry to match, the last offset.
	index      []IndexEntry
	nextEntry  int
	lastOffset int64 // -1: unknown
	prevLast   int64 // -1: no batch seen yet
	// checked, when set, says which batches' CRCs are known good.
	checked func(pos, size int64) bool
	batch   Batch
	err     error
}

// NewIterator returns an Iterator over buf, the bytes at absolute
// position pos of a segment whose data section ends at dataEnd. pos must
// be a batch start in [HeaderSize, dataEnd]; bytes of buf beyond dataEnd
// are ignored.
func NewIterator(buf []byte, pos, dataEnd int64, compacted bool) *Iterator {
	it := &Iterator{dataEnd: dataEnd, compacted: compacted, lastOffset: -1, prevLast: -1}
	if pos < HeaderSize || pos > dataEnd {
		it.err = fmt.Errorf("segfile: iterator position %d outside the data section [%d, %d]", pos, HeaderSize, dataEnd)
		return it
	}
	it.reset(buf, pos)
	return it
}

// Batches returns an Iterator over buf, the bytes at absolute position
// pos (a batch start, e.g. a Range's Start) of this tail's object, with
// the index checks described at Iterator.
func (t *Tail) Batches(buf []byte, pos int64) *Iterator {
	return t.batchesFrom(nil, buf, pos)
}

// batchesFrom is Batches over bytes r returned: when r is a
// CheckedReader, the CRCs of the batches it checked are not computed
// again.
func (t *Tail) batchesFrom(r RangeReader, buf []byte, pos int64) *Iterator {
	it := NewIterator(buf, pos, t.DataEnd(), t.Footer.GetCompacted())
	it.index, it.lastOffset = t.Index, t.Footer.GetLastOffset()
	for it.nextEntry < len(it.index) && it.index[it.nextEntry].Position < pos {
		it.nextEntry++
	}
	if c, ok := r.(CheckedReader); ok {
		it.checked = c.Checked
	}
	return it
}

func (it *Iterator) reset(buf []byte, pos int64) {
	if rest := it.dataEnd - pos; int64(len(buf)) > rest {
		buf = buf[:rest]
	}
	it.buf, it.bufPos, it.off = buf, pos, 0
}

// Continue replaces the iterator's buffer with buf, the bytes from Pos()
// on, keeping its checks' state.
func (it *Iterator) Continue(buf []byte) { it.reset(buf, it.Pos()) }

// Pos is the absolute position of the first byte not consumed: the next
// batch's start.
func (it *Iterator) Pos() int64 { return it.bufPos + int64(it.off) }

// Done reports whether every batch up to the end of data was returned.
func (it *Iterator) Done() bool { return it.err == nil && it.Pos() == it.dataEnd }

// Err is the error that stopped the iteration: ErrCorrupt, or a bad
// position given to NewIterator.
func (it *Iterator) Err() error { return it.err }

// Batch is the batch the last successful Next returned.
func (it *Iterator) Batch() Batch { return it.batch }

// Next advances to the next batch. It returns false at the end of data,
// at the end of the buffer (a partial batch; see Continue), or on error.
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	pos, rest := it.Pos(), it.buf[it.off:]
	if pos == it.dataEnd {
		return false
	}
	if len(rest) < recordbatch.HeaderSize {
		if pos+int64(len(rest)) == it.dataEnd {
			it.err = corruptf(pos, "data", "%d bytes left, less than a batch header", len(rest))
		}
		return false
	}
	h, err := recordbatch.ParseHeader(rest)
	if err != nil {
		it.err = corruptWrap(pos, "data", err, "bad batch header")
		return false
	}
	size := int64(h.Size())
	if size > it.dataEnd-pos {
		it.err = corruptf(pos, "data", "%d-byte batch crosses the end of data at %d", size, it.dataEnd)
		return false
	}
	if int64(len(rest)) < size {
		return false
	}
	b := rest[:size:size]
	if it.checked != nil && it.checked(pos, size) {
		if h.RecordCount < 0 { // the rest of what Verify checks, past the CRC
			it.err = corruptf(pos, "data", "batch at offset %d: negative record count %d", h.BaseOffset, h.RecordCount)
			return false
		}
	} else if _, err := recordbatch.Verify(b); err != nil {
		it.err = corruptWrap(pos, "data", err, "batch at offset %d", h.BaseOffset)
		return false
	}
	if msg := checkBatchHeader(h, it.compacted); msg != "" {
		it.err = corruptf(pos, "data", "batch at offset %d: %s", h.BaseOffset, msg)
		return false
	}
	if it.prevLast >= 0 {
		if msg := checkOrder(it.prevLast, h.BaseOffset, it.compacted); msg != "" {
			it.err = corruptf(pos, "data", "batch at offset %d after last offset %d: %s", h.BaseOffset, it.prevLast, msg)
			return false
		}
	}
	if err := it.checkIndex(h, pos, size); err != nil {
		it.err = err
		return false
	}
	it.off += int(size)
	it.prevLast = h.LastOffset()
	it.batch = Batch{Pos: pos, Header: h, Bytes: b}
	return true
}

// checkIndex checks the batch at pos against the tail's index and footer.
func (it *Iterator) checkIndex(h recordbatch.BatchHeader, pos, size int64) error {
	if it.nextEntry < len(it.index) {
		e := it.index[it.nextEntry]
		switch {
		case e.Position == pos && e.BaseOffset != h.BaseOffset:
			return corruptf(pos, "data", "batch at offset %d, index entry %d says %d", h.BaseOffset, it.nextEntry, e.BaseOffset)
		case e.Position == pos:
			it.nextEntry++
		case e.Position < pos+size:
			return corruptf(pos, "data", "index entry %d points at %d, inside the %d-byte batch at %d", it.nextEntry, e.Position, size, pos)
		}
	}
	if it.lastOffset >= 0 && pos+size == it.dataEnd && h.LastOffset() != it.lastOffset {
		return corruptf(pos, "data", "last batch ends at offset %d, the footer says %d", h.LastOffset(), it.lastOffset)
	}
	return nil
}

// OffsetForTime is the first record of b whose timestamp is >= ts and at
// an offset >= minOffset (the log start), with its timestamp: Kafka
// ListOffsets within one batch (recordbatch.OffsetForTime, decompressing
// at most maxDecompressed bytes; 0: recordbatch.MaxDecompressedBytes).
// found is false when the batch has no such record. A batch that does not
// decode is ErrCorrupt.
func OffsetForTime(b Batch, ts, minOffset int64, maxDecompressed int) (offset, timestampMs int64, found bool, err error) {
	if maxDecompressed <= 0 {
		maxDecompressed = recordbatch.MaxDecompressedBytes
	}
	offset, timestampMs, found, err = recordbatch.OffsetForTime(b.Bytes, b.Header, ts, minOffset, maxDecompressed)
	if err != nil {
		return 0, 0, false, corruptWrap(b.Pos, "data", err, "batch at offset %d does not decode", b.Header.BaseOffset)
	}
	return offset, timestampMs, found, nil
}
