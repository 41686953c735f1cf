package segfile

import (
	"context"
	"hash/crc32"
	"slices"

	"github.com/strata-log/strata/recordbatch"
)

// dataReader reads exactly [off, off+n) of the data section through r:
// Tail.readData, or a plain read where the caller authenticates.
type dataReader func(ctx context.Context, r RangeReader, off, n int64) ([]byte, error)

// scanChunkBytes is the size of the reads after the first when a scan
// must go on past the range it started with (and of Verify's reads).
const scanChunkBytes = 4 << 20

// ReadFetch returns whole batches from offset on, concatenated: the batch
// holding offset (or the first one after it) and those after it while
// the total stays within maxBytes; the first batch is returned whatever
// its size, as a Kafka fetch does. Every batch is checked (Batches), and
// authenticated when the object is (readData). For a well-formed segment
// it is one read, of FetchRange's range (widened to whole blocks when
// authenticated). It returns nil when offset is beyond the segment.
func (t *Tail) ReadFetch(ctx context.Context, r RangeReader, offset, maxBytes int64) ([]byte, error) {
	rng, ok := t.FetchRange(offset, maxBytes)
	if !ok {
		return nil, nil
	}
	var buf []byte
	if rng.End > rng.Start {
		var err error
		if buf, err = t.readData(ctx, r, rng.Start, rng.End-rng.Start); err != nil {
			return nil, err
		}
	}
	// The batches returned are adjacent in buf: return them in place, not
	// copied. Only a first batch the range does not hold whole needs the
	// general scan (a batch larger than maxBytes after an index entry).
	it := t.batchesFrom(r, buf, rng.Start)
	first, end := int64(-1), int64(-1)
	for it.Next() {
		b := it.Batch()
		if b.Header.LastOffset() < offset {
			continue
		}
		at := b.Pos - rng.Start
		if first < 0 {
			first = at
		} else if at+int64(len(b.Bytes))-first > maxBytes {
			break
		}
		end = at + int64(len(b.Bytes))
		if end-first >= maxBytes {
			break
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	if first >= 0 {
		return buf[first:end:end], nil
	}
	if it.Done() {
		return nil, nil
	}
	var out []byte
	// A batch that the range does not hold whole, once out has one, would
	// take out past maxBytes (the range holds maxBytes after the first
	// batch's start), so reading on is needed only while out is empty.
	readOn := func() bool { return len(out) == 0 }
	err := t.scan(ctx, r, t.readData, buf, rng.Start, rng.End, readOn, func(b Batch) (bool, error) {
		if b.Header.LastOffset() < offset {
			return true, nil
		}
		if len(out) > 0 && int64(len(out)+len(b.Bytes)) > maxBytes {
			return false, nil
		}
		out = append(out, b.Bytes...)
		return int64(len(out)) < maxBytes, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadOffsetForTime is Kafka ListOffsets over this segment: the first
// record at an offset >= minOffset (the log start) whose timestamp is >=
// ts, and its timestamp. found is false when the segment has none. It is
// one read, of TimeRange's range, unless the batch headers' max
// timestamps do not match their records or minOffset is above the record
// the time index leads to; it then reads on.
func (t *Tail) ReadOffsetForTime(ctx context.Context, r RangeReader, ts, minOffset int64, maxDecompressed int) (offset, timestampMs int64, found bool, err error) {
	rng, ok := t.TimeRange(ts)
	if !ok || minOffset > t.Footer.GetLastOffset() {
		return 0, 0, false, nil
	}
	if from, _ := t.FetchRange(minOffset, 0); from.Start > rng.Start {
		rng = Range{Start: from.Start, End: max(rng.End, from.End)}
	}
	err = t.scan(ctx, r, t.readData, nil, rng.Start, rng.End, nil, func(b Batch) (bool, error) {
		o, bts, ok, err := OffsetForTime(b, ts, minOffset, maxDecompressed)
		if err != nil || ok {
			offset, timestampMs, found = o, bts, ok
			return false, err
		}
		return true, nil
	})
	return offset, timestampMs, found, err
}

// Verify checks a whole object of the given size: the tail (FindTail,
// with its MAC as auth says), the header, every batch (CRC-32C, sizes,
// offsets following each other and the footer's range), the data CRC,
// every block tag of an authenticated object, that the index is
// exactly the one the batches call for, and that every computed footer
// field matches the batches. It reads the object in 4 MiB reads (plus
// the tail; a batch cut by a read is read again whole by the next),
// holding one read in memory. It returns the segment's summary; the
// caller compares it with what metad recorded. Errors: ErrCorrupt,
// ErrNoKey, or the RangeReader's errors.
func Verify(ctx context.Context, r RangeReader, size int64, auth Auth) (Summary, error) {
	t, err := FindTail(ctx, r, size, auth)
	if err != nil {
		return Summary{}, err
	}
	f := t.Footer
	first := min(t.DataEnd(), scanChunkBytes)
	buf, err := readExact(ctx, r, 0, first, "data")
	if err != nil {
		return Summary{}, err
	}
	h, err := parseHeader(buf)
	if err != nil {
		return Summary{}, err
	}
	switch {
	case h.version != t.Trailer.Version:
		return Summary{}, corruptf(hdrVersion, "header", "version %d, the trailer says %d", h.version, t.Trailer.Version)
	case h.baseOffset != f.GetBaseOffset():
		return Summary{}, corruptf(hdrBaseOffset, "header", "base offset %d, the footer says %d", h.baseOffset, f.GetBaseOffset())
	case h.compacted != f.GetCompacted():
		return Summary{}, corruptf(hdrFlags, "header", "compacted flag %t, the footer says %t", h.compacted, f.GetCompacted())
	}
	crc := crc32.Checksum(buf[:HeaderSize], castagnoli)
	// The bytes are authenticated as they stream by, so the reads need
	// not be (and are not read twice).
	blocks := t.NewBlockChecker(0)
	if err := blocks.Write(buf[:HeaderSize]); err != nil {
		return Summary{}, err
	}
	raw := func(ctx context.Context, r RangeReader, off, n int64) ([]byte, error) {
		return readExact(ctx, r, off, n, "data")
	}
	st := newStats(f.GetIndexIntervalBytes())
	err = t.scan(ctx, r, raw, buf[HeaderSize:], HeaderSize, first, nil, func(b Batch) (bool, error) {
		if st.batches == 0 {
			if msg := checkFirst(h.baseOffset, b.Header.BaseOffset, h.compacted); msg != "" {
				return false, corruptf(b.Pos, "data", "%s: batch base %d, segment base %d", msg, b.Header.BaseOffset, h.baseOffset)
			}
		}
		crc = crc32.Update(crc, castagnoli, b.Bytes)
		if err := blocks.Write(b.Bytes); err != nil {
			return false, err
		}
		st.add(b.Header, b.Pos, len(b.Bytes))
		return true, nil
	})
	if err != nil {
		return Summary{}, err
	}
	if _, to := blocks.Verified(); to != t.DataEnd() {
		return Summary{}, corruptf(to, "data", "authenticated to %d of %d", to, t.DataEnd())
	}
	if crc != t.Trailer.DataCRC {
		return Summary{}, corruptf(0, "data", "data crc mismatch over [0, %d): stored 0x%08x computed 0x%08x", t.DataEnd(), t.Trailer.DataCRC, crc)
	}
	if !slices.Equal(st.index, t.Index) {
		return Summary{}, corruptf(t.DataEnd(), "index", "differs from the batches' index (%d entries stored, %d expected)", len(t.Index), len(st.index))
	}
	type field struct {
		name       string
		stored, is int64
	}
	for _, c := range []field{
		{"last_offset", f.GetLastOffset(), st.lastOffset},
		{"records", f.GetRecords(), st.records},
		{"batches", f.GetBatches(), st.batches},
		{"data_bytes", f.GetDataBytes(), st.dataBytes},
		{"min_timestamp_ms", f.GetMinTimestampMs(), st.minTs},
		{"max_timestamp_ms", f.GetMaxTimestampMs(), st.maxTs},
		{"min_tombstone_horizon_ms", f.GetMinTombstoneHorizonMs(), st.minHorizon},
	} {
		if c.stored != c.is {
			return Summary{}, corruptf(t.Trailer.FooterPos, "footer", "%s %d, the batches say %d", c.name, c.stored, c.is)
		}
	}
	return t.Summary(), nil
}

// scan reads the data section from pos on, with read, and calls fn with
// each batch until fn returns false or the data ends. buf holds bytes
// already read from pos on (may be nil) and readEnd is where the first
// read ends (at least pos+len(buf)). When a batch continues past what was read, the
// next read starts at that batch and holds it whole and at least
// scanChunkBytes: re-reading a batch's first part costs less than copying
// every read to carry it over. When readOn is not nil and returns false,
// scan stops there instead.
func (t *Tail) scan(ctx context.Context, r RangeReader, read dataReader, buf []byte, pos, readEnd int64, readOn func() bool, fn func(Batch) (bool, error)) error {
	have := pos + int64(len(buf))
	readEnd = min(max(readEnd, have), t.DataEnd())
	if readEnd > have {
		more, err := read(ctx, r, have, readEnd-have)
		if err != nil {
			return err
		}
		if len(buf) == 0 {
			buf = more
		} else {
			buf = append(buf, more...)
		}
	}
	it := t.batchesFrom(r, buf, pos)
	for {
		for it.Next() {
			if more, err := fn(it.Batch()); err != nil || !more {
				return err
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		if it.Done() || (readOn != nil && !readOn()) {
			return nil
		}
		// The partial batch is shorter than its size, or than a header
		// (< scanChunkBytes), so next > readEnd: every round progresses.
		from, need := it.Pos(), int64(scanChunkBytes)
		if h, err := recordbatch.ParseHeader(buf[from-(readEnd-int64(len(buf))):]); err == nil {
			need = max(need, int64(h.Size()))
		}
		next := min(from+need, t.DataEnd())
		var err error
		if buf, err = read(ctx, r, from, next-from); err != nil {
			return err
		}
		it.Continue(buf)
		readEnd = next
	}
}
