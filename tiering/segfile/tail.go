package segfile

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/tieringpb"
	"github.com/strata-log/strata/recordbatch"
)

// RangeReader reads byte ranges of one object: a ranged GET on an object
// store, or a file. ReadAt returns exactly n bytes from off, or an error;
// a range beyond the end of the object yields fewer bytes, io.EOF or
// io.ErrUnexpectedEOF, which segfile reports as corruption (a truncated
// object), never as a short read. Other errors (network, not found) are
// passed through wrapped. The slice returned is the caller's: segfile
// may hand parts of it on (ReadFetch returns a sub-slice of it rather
// than a copy).
type RangeReader interface {
	ReadAt(ctx context.Context, off, n int64) ([]byte, error)
}

// A CheckedReader is a RangeReader that knows which of the bytes it
// returned were already checked: split into batches by following their
// sizes from a batch start, each passing recordbatch.Verify, on these
// very bytes (CheckBatches). Fetches through it skip the CRC of a batch
// that lies wholly in a checked range; every other check still runs. A
// reader that checks bytes while they are still in the CPU's caches
// saves reading them from memory twice.
type CheckedReader interface {
	RangeReader
	// Checked reports whether [pos, pos+size) lies in a checked range.
	Checked(pos, size int64) bool
}

// CheckBatches checks the whole batches of buf, the bytes at absolute
// position pos (a batch start) of an object whose data ends at dataEnd,
// one after another, as Iterator does their CRCs and sizes, and returns
// the position after the last one that passed: buf's bytes in [pos, end)
// are checked batches. It stops at the first batch that does not fit in
// buf or before dataEnd (ok: more bytes may complete it), or that is
// whole but does not pass (not ok; reading it through an Iterator reports
// what is wrong with it).
func CheckBatches(buf []byte, pos, dataEnd int64) (end int64, ok bool) {
	end = pos
	rest := buf[:max(min(int64(len(buf)), dataEnd-pos), 0)]
	for len(rest) >= recordbatch.HeaderSize {
		h, err := recordbatch.ParseHeader(rest)
		if err != nil {
			return end, false
		}
		if h.Size() > len(rest) {
			return end, end+int64(h.Size()) <= dataEnd
		}
		if _, err := recordbatch.Verify(rest[:h.Size()]); err != nil {
			return end, false
		}
		end += int64(h.Size())
		rest = rest[h.Size():]
	}
	return end, true
}

// FromReaderAt adapts an io.ReaderAt (an *os.File, a *bytes.Reader) to a
// RangeReader. The context is checked before each read.
func FromReaderAt(r io.ReaderAt) RangeReader { return readerAt{r} }

type readerAt struct{ r io.ReaderAt }

func (r readerAt) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	m, err := r.r.ReadAt(b, off)
	if m == len(b) {
		return b, nil
	}
	return b[:m], err
}

// Bytes is a whole object in memory, as a RangeReader.
type Bytes []byte

// ReadAt returns a copy of b[off:off+n], or fewer bytes and io.EOF past
// the end.
func (b Bytes) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("segfile: invalid range [%d, +%d)", off, n)
	}
	if off >= int64(len(b)) {
		return nil, io.EOF
	}
	end := min(off+n, int64(len(b)))
	out := append([]byte(nil), b[off:end]...)
	if end-off < n {
		return out, io.EOF
	}
	return out, nil
}

// readExact reads exactly [off, off+n) or fails; a short object is
// corruption.
func readExact(ctx context.Context, r RangeReader, off, n int64, section string) ([]byte, error) {
	b, err := r.ReadAt(ctx, off, n)
	switch {
	case err == nil && int64(len(b)) == n:
		return b, nil
	case err == nil && int64(len(b)) > n:
		return nil, fmt.Errorf("segfile: reading [%d, %d): got %d bytes", off, off+n, len(b))
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		cause := err
		if cause == nil || errors.Is(cause, io.EOF) {
			cause = io.ErrUnexpectedEOF
		}
		return nil, corruptWrap(off+int64(len(b)), section, cause, "object truncated: read %d of %d bytes at %d", len(b), n, off)
	}
	return nil, fmt.Errorf("segfile: reading [%d, %d): %w", off, off+n, err)
}

// Tail is a segment's parsed, checked tail: the index, the footer and
// the trailer. It is immutable and safe for concurrent use, so it can be
// cached per object (keys are immutable, so a cache never invalidates).
type Tail struct {
	Trailer Trailer
	// Index is sorted by BaseOffset and Position; Index[0] is the first
	// batch at HeaderSize.
	Index  []IndexEntry
	Footer *tieringpb.SegmentFooter
	// Tags are the tags of the blocks of [0, DataEnd()), in order, as the
	// MAC authenticated them (version 2; nil in version 1).
	Tags []Tag

	tagger blockTagger // version 2: the object's block tagger
}

// ReadTail reads and checks the tail of an object whose index position
// and size are known (from metad): one read of [indexPos, size). auth
// says how to authenticate it (ParseTail).
func ReadTail(ctx context.Context, r RangeReader, indexPos, size int64, auth Auth) (*Tail, error) {
	if indexPos < HeaderSize || size-indexPos < IndexEntrySize+TrailerSize || size-indexPos > MaxTailBytes {
		return nil, corruptf(-1, "object", "index_pos %d and size %d cannot be a segment's", indexPos, size)
	}
	b, err := readExact(ctx, r, indexPos, size-indexPos, "tail")
	if err != nil {
		return nil, err
	}
	t, err := ParseTail(b, size, auth)
	if err != nil {
		if errors.Is(err, ErrIncompleteTail) {
			return nil, corruptWrap(size-TrailerSize, "trailer", err, "index_pos disagrees with the expected %d", indexPos)
		}
		return nil, err
	}
	if t.Trailer.IndexPos != indexPos {
		return nil, corruptf(size-TrailerSize+trIndexPos, "trailer", "index_pos %d, expected %d", t.Trailer.IndexPos, indexPos)
	}
	return t, nil
}

// FindTail reads and checks the tail of an object of a known size whose
// index position is not known (recovery, scrub): it reads the last
// TailProbeBytes and, only if the tail is longer, the rest of it. auth
// says how to authenticate it (ParseTail).
func FindTail(ctx context.Context, r RangeReader, size int64, auth Auth) (*Tail, error) {
	if size < TrailerSize {
		return nil, corruptf(-1, "object", "%d bytes is smaller than any segment", size)
	}
	n := min(size, TailProbeBytes)
	b, err := readExact(ctx, r, size-n, n, "tail")
	if err != nil {
		return nil, err
	}
	tr, err := ParseTrailer(b, size)
	if err != nil {
		return nil, err
	}
	if start := size - n; tr.IndexPos < start {
		more, err := readExact(ctx, r, tr.IndexPos, start-tr.IndexPos, "tail")
		if err != nil {
			return nil, err
		}
		b = append(more, b...)
	}
	return ParseTail(b, size, auth)
}

// ParseTail parses and checks a tail: b is the last len(b) bytes of an
// object of size bytes and must reach back at least to the trailer's
// IndexPos (extra leading bytes are ignored). It checks the trailer
// (ParseTrailer), MetaCRC, the MAC (as auth says: see Auth), the footer
// and the index: entries strictly increasing in offset and position, the
// first at HeaderSize, all within the data section and the footer's
// offset range, running max timestamps non-decreasing and not above the
// footer's. Nothing but the trailer is decoded before the MAC is checked.
// Errors: ErrCorrupt (with cause ErrMACMismatch or ErrUnauthenticated
// when authentication fails); ErrNoKey; ErrIncompleteTail when b starts
// after IndexPos.
func ParseTail(b []byte, size int64, auth Auth) (*Tail, error) {
	if len(b) < TrailerSize || int64(len(b)) > size {
		return nil, corruptf(-1, "object", "%d tail bytes of a %d-byte object", len(b), size)
	}
	tr, err := ParseTrailer(b, size)
	if err != nil {
		return nil, err
	}
	bStart := size - int64(len(b))
	if tr.IndexPos < bStart {
		return nil, fmt.Errorf("%w: the index starts at %d, the bytes given at %d", ErrIncompleteTail, tr.IndexPos, bStart)
	}
	meta := b[tr.IndexPos-bStart:]
	if crc := crc32.Checksum(meta[:len(meta)-trEndLen+trEndMetaCRC], castagnoli); crc != tr.MetaCRC {
		return nil, corruptf(tr.IndexPos, "tail", "meta crc mismatch: stored 0x%08x computed 0x%08x", tr.MetaCRC, crc)
	}
	if err := tr.authenticate(meta, auth); err != nil {
		return nil, err
	}
	footer := &tieringpb.SegmentFooter{}
	fb := meta[tr.FooterPos-tr.IndexPos : tr.FooterPos-tr.IndexPos+int64(tr.FooterLen)]
	if err := proto.Unmarshal(fb, footer); err != nil {
		return nil, corruptWrap(tr.FooterPos, "footer", err, "cannot decode")
	}
	t := &Tail{Trailer: tr, Footer: footer, Index: make([]IndexEntry, tr.IndexCount)}
	for i := range t.Index {
		t.Index[i] = parseIndexEntry(meta[i*IndexEntrySize:])
	}
	if tr.Version == VersionAuthenticated {
		tags := meta[tr.tagsPos()-tr.IndexPos:]
		t.Tags = make([]Tag, tr.BlockCount)
		for i := range t.Tags {
			copy(t.Tags[i][:], tags[i*TagSize:])
		}
		t.tagger = auth.Key.blocks(auth.Name)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return t, nil
}

// check checks the footer and the index against each other and the
// trailer.
func (t *Tail) check() error {
	tr, f := &t.Trailer, t.Footer
	fail := func(format string, args ...any) error { return corruptf(tr.FooterPos, "footer", format, args...) }
	switch {
	case f.GetBaseOffset() < 0 || f.GetLastOffset() < f.GetBaseOffset():
		return fail("offset range [%d, %d]", f.GetBaseOffset(), f.GetLastOffset())
	case f.GetDataBytes() != tr.IndexPos-HeaderSize:
		return fail("data_bytes %d, the data section holds %d", f.GetDataBytes(), tr.IndexPos-HeaderSize)
	case f.GetBatches() < int64(tr.IndexCount):
		return fail("%d batches, fewer than the %d index entries", f.GetBatches(), tr.IndexCount)
	case f.GetIndexIntervalBytes() <= 0:
		return fail("index_interval_bytes %d", f.GetIndexIntervalBytes())
	case f.GetRecords() < 0:
		return fail("records %d", f.GetRecords())
	case f.GetRecords() > f.GetLastOffset()-f.GetBaseOffset()+1:
		return fail("%d records for offsets [%d, %d]", f.GetRecords(), f.GetBaseOffset(), f.GetLastOffset())
	}
	prev := IndexEntry{BaseOffset: -1, Position: -1, MaxTimestampMs: -1}
	for i, e := range t.Index {
		pos := tr.IndexPos + int64(i)*IndexEntrySize
		switch {
		case i == 0 && e.Position != HeaderSize:
			return corruptf(pos, "index", "first entry at position %d, want %d", e.Position, HeaderSize)
		case i == 0 && e.BaseOffset != f.GetBaseOffset() && !f.GetCompacted():
			return corruptf(pos, "index", "first entry at offset %d, the segment starts at %d", e.BaseOffset, f.GetBaseOffset())
		case e.BaseOffset <= prev.BaseOffset || e.Position <= prev.Position:
			return corruptf(pos, "index", "entry %d (offset %d, position %d) does not follow (offset %d, position %d)",
				i, e.BaseOffset, e.Position, prev.BaseOffset, prev.Position)
		case e.BaseOffset < f.GetBaseOffset() || e.BaseOffset > f.GetLastOffset():
			return corruptf(pos, "index", "entry %d offset %d outside [%d, %d]", i, e.BaseOffset, f.GetBaseOffset(), f.GetLastOffset())
		case e.Position > tr.IndexPos-recordbatch.HeaderSize:
			return corruptf(pos, "index", "entry %d position %d too close to the end of data %d", i, e.Position, tr.IndexPos)
		case e.MaxTimestampMs < prev.MaxTimestampMs || e.MaxTimestampMs > f.GetMaxTimestampMs():
			return corruptf(pos, "index", "entry %d max timestamp %d outside [%d, %d]", i, e.MaxTimestampMs, prev.MaxTimestampMs, f.GetMaxTimestampMs())
		}
		prev = e
	}
	return nil
}

// DataEnd is the end of the data section (= Trailer.IndexPos).
func (t *Tail) DataEnd() int64 { return t.Trailer.IndexPos }

// Summary is the segment's summary as the tail states it.
func (t *Tail) Summary() Summary { return summarize(t.Trailer, t.Footer) }

// Range is a byte range [Start, End) of an object.
type Range struct{ Start, End int64 }

// Len is End - Start.
func (r Range) Len() int64 { return r.End - r.Start }

// FetchRange is the byte range to read to fetch from offset on: it starts
// at a batch boundary at or before the batch holding offset (or the first
// batch after it, in a compacted segment's hole), and holds that whole
// batch plus at least maxBytes after its start (less at the end of the
// data). ok is false when offset is beyond the segment's last offset.
// Parse the range with Batches and skip the batches whose last offset is
// below offset.
func (t *Tail) FetchRange(offset, maxBytes int64) (r Range, ok bool) {
	if offset > t.Footer.GetLastOffset() {
		return Range{}, false
	}
	maxBytes = max(maxBytes, 0)
	// i: the last entry at or below offset (entry 0 if none).
	i := max(sort.Search(len(t.Index), func(i int) bool { return t.Index[i].BaseOffset > offset })-1, 0)
	// In a dense segment the batch holding offset ends by the next entry;
	// in a compacted one offset may be in a hole before the next entry's
	// batch, whose size only the entry after bounds.
	next, limit := t.entryPos(i+1), t.DataEnd()
	end := next
	if t.Footer.GetCompacted() {
		end = t.entryPos(i + 2)
	}
	// The batch sought starts by next: maxBytes after that, capped
	// without overflowing.
	if maxBytes < limit-next {
		end = max(end, next+maxBytes)
	} else {
		end = limit
	}
	return Range{Start: t.Index[i].Position, End: end}, true
}

// TimeRange is the byte range holding the first batch whose max timestamp
// is >= ts (Kafka ListOffsets: that batch holds the first record with a
// timestamp >= ts). ok is false when no batch of the segment has one.
// Parse the range with Batches, skip batches whose MaxTimestamp < ts, and
// find the record with OffsetForTime.
func (t *Tail) TimeRange(ts int64) (r Range, ok bool) {
	if t.Footer.GetMaxTimestampMs() < ts {
		return Range{}, false
	}
	// j: the first entry whose running max reaches ts; the batch sought is
	// after entry j-1's batch and at or before entry j's, so it ends by
	// entry j+1. Past the last entry, it is after the last entry.
	j := sort.Search(len(t.Index), func(i int) bool { return t.Index[i].MaxTimestampMs >= ts })
	return Range{Start: t.Index[max(j-1, 0)].Position, End: t.entryPos(j + 1)}, true
}

// entryPos is entry i's position, or the end of data past the last entry.
func (t *Tail) entryPos(i int) int64 {
	if i < len(t.Index) {
		return t.Index[i].Position
	}
	return t.DataEnd()
}
