package segfile

import (
	"encoding/binary"
	"hash/crc32"
	"math"

	"github.com/strata-log/strata/recordbatch"
)

// Layout constants (see doc.go).
const (
	// HeaderSize is the size of the header at the start of every object;
	// the first batch starts here.
	HeaderSize = 32
	// IndexEntrySize is the size of one index entry.
	IndexEntrySize = 24
	// TrailerSize is the size of the trailer at the end of every object.
	TrailerSize = 48
	// Version is the format version written in the header and trailer.
	Version = 1
	// DefaultIndexIntervalBytes is the default index spacing, the same as
	// broker/partlog's LedgerIndex.
	DefaultIndexIntervalBytes = 1 << 20
	// TailProbeBytes is how much of an object's end FindTail reads first.
	// A 256 MiB segment at the default interval has a ~6 KiB index, so
	// one read is enough unless the footer holds a large producer list.
	TailProbeBytes = 64 << 10
	// MaxTailBytes bounds index + footer + trailer, so that a corrupt
	// trailer cannot make a reader allocate without limit (2.7 TiB of
	// data at the default interval). Writers refuse to exceed it.
	MaxTailBytes = 64 << 20

	// FlagCompacted (header flags bit 0): offsets may have holes.
	FlagCompacted = 1
)

// Magic numbers at the start and end of every object.
const (
	headerMagic  = "STRATSEG"
	trailerMagic = "STRATEND"
)

// Header field offsets.
const (
	hdrMagic      = 0
	hdrVersion    = 8
	hdrFlags      = 10
	hdrLen        = 12
	hdrBaseOffset = 16
	hdrReserved   = 24
)

// Trailer field offsets, relative to the trailer's start (size - 48).
const (
	trIndexPos   = 0
	trIndexCount = 8
	trFooterPos  = 12
	trFooterLen  = 20
	trDataCRC    = 24
	trVersion    = 28
	trReserved   = 30
	trMetaCRC    = 36 // covers [index_pos, size-12): index, footer, trailer[0:36)
	trMagic      = 40
)

// attrDeleteHorizon is Kafka's batch attribute bit 6 (KIP-534): the
// batch's baseTimestamp holds its delete horizon. recordbatch does not
// export it because nothing else needs it yet.
const attrDeleteHorizon = 0x40

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var be = binary.BigEndian

func appendHeader(dst []byte, baseOffset int64, compacted bool) []byte {
	var h [HeaderSize]byte
	copy(h[hdrMagic:], headerMagic)
	be.PutUint16(h[hdrVersion:], Version)
	if compacted {
		be.PutUint16(h[hdrFlags:], FlagCompacted)
	}
	be.PutUint32(h[hdrLen:], HeaderSize)
	be.PutUint64(h[hdrBaseOffset:], uint64(baseOffset))
	return append(dst, h[:]...)
}

// header is a decoded header.
type header struct {
	baseOffset int64
	compacted  bool
}

func parseHeader(b []byte) (header, error) {
	if len(b) < HeaderSize {
		return header{}, corruptf(0, "header", "%d bytes, want %d", len(b), HeaderSize)
	}
	if string(b[hdrMagic:hdrMagic+8]) != headerMagic {
		return header{}, corruptf(hdrMagic, "header", "magic %q, want %q", b[hdrMagic:hdrMagic+8], headerMagic)
	}
	if v := be.Uint16(b[hdrVersion:]); v != Version {
		return header{}, corruptf(hdrVersion, "header", "version %d, want %d", v, Version)
	}
	flags := be.Uint16(b[hdrFlags:])
	if flags&^FlagCompacted != 0 {
		return header{}, corruptf(hdrFlags, "header", "unknown flags 0x%04x", flags)
	}
	if n := be.Uint32(b[hdrLen:]); n != HeaderSize {
		return header{}, corruptf(hdrLen, "header", "header_len %d, want %d", n, HeaderSize)
	}
	base := int64(be.Uint64(b[hdrBaseOffset:]))
	if base < 0 {
		return header{}, corruptf(hdrBaseOffset, "header", "negative base offset %d", base)
	}
	for i := hdrReserved; i < HeaderSize; i++ {
		if b[i] != 0 {
			return header{}, corruptf(int64(i), "header", "reserved byte is 0x%02x", b[i])
		}
	}
	return header{baseOffset: base, compacted: flags&FlagCompacted != 0}, nil
}

// Trailer is the fixed-size end of an object: where the index and the
// footer are, and the checksums.
type Trailer struct {
	IndexPos   int64 // position of the index: the end of the data section
	IndexCount int   // number of index entries
	FooterPos  int64
	FooterLen  int
	// DataCRC is the CRC-32C of bytes [0, IndexPos): header and batches.
	DataCRC uint32
	// MetaCRC is the CRC-32C of bytes [IndexPos, Size-12): index, footer
	// and the trailer up to MetaCRC itself.
	MetaCRC uint32
	Size    int64 // the object's size
}

// appendTrailer appends the trailer; meta is the index and footer bytes
// (to compute MetaCRC).
func appendTrailer(dst []byte, t Trailer, meta []byte) []byte {
	var b [TrailerSize]byte
	be.PutUint64(b[trIndexPos:], uint64(t.IndexPos))
	be.PutUint32(b[trIndexCount:], uint32(t.IndexCount))
	be.PutUint64(b[trFooterPos:], uint64(t.FooterPos))
	be.PutUint32(b[trFooterLen:], uint32(t.FooterLen))
	be.PutUint32(b[trDataCRC:], t.DataCRC)
	be.PutUint16(b[trVersion:], Version)
	crc := crc32.Update(crc32.Checksum(meta, castagnoli), castagnoli, b[:trMetaCRC])
	be.PutUint32(b[trMetaCRC:], crc)
	copy(b[trMagic:], trailerMagic)
	return append(dst, b[:]...)
}

// ParseTrailer decodes and checks the trailer: b is the last TrailerSize
// bytes of an object of size bytes. It checks the magic, the version, the
// reserved bytes and that the positions and lengths fit together exactly
// (index, footer and trailer back to back, within MaxTailBytes). It cannot
// check MetaCRC, which covers bytes before the trailer: ParseTail does.
func ParseTrailer(b []byte, size int64) (Trailer, error) {
	start := size - TrailerSize
	if len(b) != TrailerSize {
		return Trailer{}, corruptf(start, "trailer", "%d bytes, want %d", len(b), TrailerSize)
	}
	if size < HeaderSize+recordbatch.HeaderSize+IndexEntrySize+TrailerSize {
		return Trailer{}, corruptf(-1, "object", "%d bytes is smaller than any segment", size)
	}
	if string(b[trMagic:]) != trailerMagic {
		return Trailer{}, corruptf(start+trMagic, "trailer", "magic %q, want %q", b[trMagic:], trailerMagic)
	}
	if v := be.Uint16(b[trVersion:]); v != Version {
		return Trailer{}, corruptf(start+trVersion, "trailer", "version %d, want %d", v, Version)
	}
	for i := trReserved; i < trMetaCRC; i++ {
		if b[i] != 0 {
			return Trailer{}, corruptf(start+int64(i), "trailer", "reserved byte is 0x%02x", b[i])
		}
	}
	t := Trailer{
		DataCRC: be.Uint32(b[trDataCRC:]),
		MetaCRC: be.Uint32(b[trMetaCRC:]),
		Size:    size,
	}
	indexPos, count := be.Uint64(b[trIndexPos:]), uint64(be.Uint32(b[trIndexCount:]))
	footerPos, footerLen := be.Uint64(b[trFooterPos:]), uint64(be.Uint32(b[trFooterLen:]))
	// Every check below is on unsigned values bounded by size, so none
	// overflows; together they pin all four fields to one layout.
	switch {
	case indexPos < HeaderSize+recordbatch.HeaderSize || indexPos > uint64(start):
		return Trailer{}, corruptf(start+trIndexPos, "trailer", "index_pos %d outside [%d, %d]", indexPos, HeaderSize+recordbatch.HeaderSize, start)
	case count == 0:
		return Trailer{}, corruptf(start+trIndexCount, "trailer", "index_count 0")
	case count > uint64(start)/IndexEntrySize || indexPos+count*IndexEntrySize != footerPos:
		return Trailer{}, corruptf(start+trFooterPos, "trailer", "index_pos %d + %d entries * %d != footer_pos %d", indexPos, count, IndexEntrySize, footerPos)
	case footerPos > uint64(start) || footerPos+footerLen != uint64(start):
		return Trailer{}, corruptf(start+trFooterLen, "trailer", "footer_pos %d + footer_len %d != trailer position %d", footerPos, footerLen, start)
	case uint64(size)-indexPos > MaxTailBytes:
		return Trailer{}, corruptf(start+trIndexPos, "trailer", "tail of %d bytes exceeds %d", uint64(size)-indexPos, MaxTailBytes)
	}
	t.IndexPos, t.IndexCount = int64(indexPos), int(count)
	t.FooterPos, t.FooterLen = int64(footerPos), int(footerLen)
	return t, nil
}

// IndexEntry is one entry of the sparse index.
type IndexEntry struct {
	BaseOffset int64 // the batch's base offset
	Position   int64 // absolute byte position of the batch in the object
	// MaxTimestampMs is the largest batch max timestamp of every batch up
	// to and including this one (-1 when none has a timestamp).
	MaxTimestampMs int64
}

func appendIndexEntry(dst []byte, e IndexEntry) []byte {
	dst = be.AppendUint64(dst, uint64(e.BaseOffset))
	dst = be.AppendUint64(dst, uint64(e.Position))
	return be.AppendUint64(dst, uint64(e.MaxTimestampMs))
}

func parseIndexEntry(b []byte) IndexEntry {
	return IndexEntry{
		BaseOffset:     int64(be.Uint64(b[0:])),
		Position:       int64(be.Uint64(b[8:])),
		MaxTimestampMs: int64(be.Uint64(b[16:])),
	}
}

// checkBatchHeader returns what is wrong with a verified batch's header
// beyond what recordbatch.Verify checks, or "". The rules are
// broker/partlog's produce checks, relaxed for compacted input, where a
// batch may have lost records (but keeps its last offset delta) or all of
// them (Kafka keeps such empty batches).
func checkBatchHeader(h recordbatch.BatchHeader, compacted bool) string {
	switch {
	case h.BaseOffset < 0:
		return "negative base offset"
	case h.LastOffsetDelta < 0:
		return "negative last offset delta"
	case h.BaseOffset > math.MaxInt64-int64(h.LastOffsetDelta):
		return "last offset overflows"
	case int64(h.RecordCount) > int64(h.LastOffsetDelta)+1:
		return "more records than offsets"
	case h.RecordCount == 0 && !compacted:
		return "no records"
	}
	return ""
}

// checkOrder returns what is wrong with a batch starting at base after a
// batch ending at prevLast, or "". Plain segments are dense; compacted
// ones only increase.
func checkOrder(prevLast, base int64, compacted bool) string {
	switch {
	case !compacted && base != prevLast+1:
		return "not dense"
	case compacted && base <= prevLast:
		return "not increasing"
	}
	return ""
}

// checkFirst returns what is wrong with a segment's first batch starting
// at base when the segment covers from segBase on, or "".
func checkFirst(segBase, base int64, compacted bool) string {
	switch {
	case !compacted && base != segBase:
		return "first batch does not start at the segment's base offset"
	case compacted && base < segBase:
		return "first batch starts below the segment's base offset"
	}
	return ""
}

// stats accumulates what a segment's index and footer say about its
// batches. The Writer builds a segment with it and Verify rebuilds it
// from the object, so the two cannot disagree on a rule.
type stats struct {
	interval   int64
	index      []IndexEntry
	since      int64 // bytes since the last index entry's position
	batches    int64
	records    int64
	dataBytes  int64
	lastOffset int64
	minTs      int64
	maxTs      int64
	minHorizon int64
}

func newStats(interval int64) stats {
	return stats{interval: interval, lastOffset: -1, minTs: -1, maxTs: -1, minHorizon: -1}
}

// add accounts for the batch h, of size bytes, at position pos.
func (s *stats) add(h recordbatch.BatchHeader, pos int64, size int) {
	s.maxTs = max(s.maxTs, h.MaxTimestamp)
	if ts, ok := firstTimestamp(h); ok && (s.minTs < 0 || ts < s.minTs) {
		s.minTs = ts
	}
	if h.Attributes&attrDeleteHorizon != 0 && (s.minHorizon < 0 || h.BaseTimestamp < s.minHorizon) {
		s.minHorizon = h.BaseTimestamp
	}
	if s.batches == 0 || s.since >= s.interval {
		s.index = append(s.index, IndexEntry{BaseOffset: h.BaseOffset, Position: pos, MaxTimestampMs: s.maxTs})
		s.since = 0
	}
	s.since += int64(size)
	s.batches++
	s.records += int64(h.RecordCount)
	s.dataBytes += int64(size)
	s.lastOffset = h.LastOffset()
}

// firstTimestamp is the batch's contribution to min_timestamp_ms: its
// first record's timestamp (the append time for LogAppendTime batches).
// A batch carrying a delete horizon has the horizon in baseTimestamp, so
// it contributes nothing; negative timestamps (-1: none) are ignored.
func firstTimestamp(h recordbatch.BatchHeader) (int64, bool) {
	ts := h.BaseTimestamp
	switch {
	case h.LogAppendTime():
		ts = h.MaxTimestamp
	case h.Attributes&attrDeleteHorizon != 0:
		return 0, false
	}
	return ts, ts >= 0
}
