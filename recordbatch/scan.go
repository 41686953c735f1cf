package recordbatch

import (
	"errors"
	"fmt"
	"math"
)

// RecordInfo is what ScanRecords reports about one record.
type RecordInfo struct {
	// OffsetDelta and TimestampDelta as encoded.
	OffsetDelta    int32
	TimestampDelta int64
	// Size is the record's length prefix: the bytes of its body.
	Size int
}

// ScanRecords walks the records section of buf, a batch that passed Verify
// with header h, checking every record's framing as Decode does (lengths
// against the bytes, varint ranges, header counts, no bytes left over)
// without keeping anything: it is the cheap check a broker runs before it
// stores a batch. A compressed section streams out of its decompressor
// through a pooled window: the memory a scan takes is that window and the
// codec's state, whatever the records' size, and the decompressed output
// is limited to maxDecompressed bytes (ErrTooLarge beyond, as soon as it
// passes them).
//
// Unlike Decode it does not trust RecordCount: it decodes records until the
// bytes end and returns how many it found, calling fn for each (index from
// 0); fn's error stops the walk and is returned unwrapped. fn runs while
// the scan holds its decompressor: it must not decompress another batch.
// Framing errors are ErrCorrupt.
func ScanRecords(buf []byte, h BatchHeader, maxDecompressed int, fn func(i int, r RecordInfo) error) (int, error) {
	if len(buf) < HeaderSize {
		return 0, fmt.Errorf("%w: %d bytes, header is %d", ErrShort, len(buf), HeaderSize)
	}
	data := buf[HeaderSize:]
	s := section{win: data, w: len(data), end: math.MaxInt64}
	c := h.Compression()
	if c != CompressionNone {
		in, err := inflate(c, data, maxDecompressed)
		if err != nil {
			return 0, codecError(c, err)
		}
		defer in.close()
		win := getScratch()
		defer putScratch(win)
		s = section{win: win.b[:0], src: in.r, limit: int64(maxDecompressed), end: math.MaxInt64}
	}
	n := 0
	for ; s.more(); n++ {
		info := s.record(s.length("record length"))
		if s.err != nil {
			break
		}
		if err := fn(n, info); err != nil {
			return n, err
		}
	}
	if s.err != nil {
		return n, s.scanError(c, n)
	}
	return n, nil
}

// errFound stops OffsetForTime's scan at the record it looks for.
var errFound = errors.New("recordbatch: found")

// OffsetForTime is Kafka's ListOffsets by time within one batch (buf, with
// header h): the first record at an offset >= minOffset whose timestamp is
// >= ts, and that timestamp (with LogAppendTime every record has the
// batch's MaxTimestamp). found is false when no record qualifies. It walks
// the records as ScanRecords does, with at most maxDecompressed bytes of
// decompressed output and no allocation per record, so a stored
// decompression bomb costs a lookup the bound, not its inflated size
// (unbounded, one over a 300 MiB gzip bomb took a broker from 25 MB to
// 288 MB). Framing errors are ErrCorrupt.
func OffsetForTime(buf []byte, h BatchHeader, ts, minOffset int64, maxDecompressed int) (offset, timestampMs int64, found bool, err error) {
	if h.MaxTimestamp < ts || h.LastOffset() < minOffset {
		return 0, 0, false, nil
	}
	_, err = ScanRecords(buf, h, maxDecompressed, func(_ int, r RecordInfo) error {
		rts := h.RecordTimestamp(r)
		if o := h.BaseOffset + int64(r.OffsetDelta); rts >= ts && o >= minOffset {
			offset, timestampMs = o, rts
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return offset, timestampMs, true, nil
	}
	return 0, 0, false, err
}

// RecordTimestamp is the timestamp of record r of a batch with header h:
// MaxTimestamp with LogAppendTime, else BaseTimestamp plus its delta,
// saturating where a hostile delta would wrap.
func (h BatchHeader) RecordTimestamp(r RecordInfo) int64 {
	base, delta := h.BaseTimestamp, r.TimestampDelta
	switch {
	case h.LogAppendTime():
		return h.MaxTimestamp
	case delta > 0 && base > math.MaxInt64-delta:
		return math.MaxInt64
	case delta < 0 && base < math.MinInt64-delta:
		return math.MinInt64
	}
	return base + delta
}
