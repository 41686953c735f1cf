package segfile

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/strata-log/strata/recordbatch"
)

// Layout constants (see doc.go).
const (
	// HeaderSize is the size of the header at the start of every object;
	// the first batch starts here.
	HeaderSize = 32
	// IndexEntrySize is the size of one index entry.
	IndexEntrySize = 24
	// TrailerSize is the size of a version 1 trailer (no MAC), the
	// smallest trailer.
	TrailerSize = 48
	// TrailerSizeV2 is the size of a version 2 trailer (block tags and
	// a MAC).
	TrailerSizeV2 = 96
	// MACSize is the size of the tail's MAC (HMAC-SHA256) and TagSize of
	// a block's tag (AES-GMAC).
	MACSize = sha256.Size
	TagSize = 16
	// Version is the format version a Writer without a key writes: no
	// MAC. VersionAuthenticated is the one it writes with a key.
	Version              = 1
	VersionAuthenticated = 2
	// DefaultIndexIntervalBytes is the default index spacing, the same as
	// broker/partlog's LedgerIndex.
	DefaultIndexIntervalBytes = 1 << 20
	// DefaultBlockBytes is the default size of an authenticated block: a
	// divisor of the tier reader's 8 MiB chunks, so that each chunk is
	// authenticated as it arrives; a fetch read directly (compaction,
	// scrub) reads at most one block more on each side than it needs.
	DefaultBlockBytes = 1 << 20
	// MinBlockBytes and MaxBlockBytes bound a block's size (a power of
	// two). Blocks below a few KiB only make the tag table large; the
	// bound is low so that tests can cut tiny objects into many blocks.
	MinBlockBytes = 64
	MaxBlockBytes = 64 << 20
	// TailProbeBytes is how much of an object's end FindTail reads first.
	// A 256 MiB segment at the default interval has a ~6 KiB index and
	// 4 KiB of block tags, so one read is enough unless the footer
	// holds a large producer list.
	TailProbeBytes = 64 << 10
	// MaxTailBytes bounds index + block tags + footer + trailer, so that a
	// corrupt trailer cannot make a reader allocate without limit (2.7 TiB
	// of data at the default interval). Writers refuse to exceed it.
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

// Trailer field offsets, relative to the trailer's start (size - 48 in
// version 1, size - 96 in version 2). The first 28 bytes are the same in
// both versions, and so are the last 20 (trEnd*, from the object's end:
// in version 1 they start at 28), so the version is found before the
// trailer's size is known.
const (
	trIndexPos   = 0
	trIndexCount = 8
	trFooterPos  = 12
	trFooterLen  = 20
	trDataCRC    = 24
	// Version 2.
	trBlockBytes = 28
	trBlockCount = 32
	trKeyID      = 36
	trMAC        = 44 // covers the name and [index_pos, size-52); the end follows

	// From the object's end, in both versions.
	trEndLen      = 20
	trEndVersion  = 0
	trEndReserved = 2
	trEndMetaCRC  = 8 // covers [index_pos, size-12)
	trEndMagic    = 12
)

// attrDeleteHorizon is Kafka's batch attribute bit 6 (KIP-534): the
// batch's baseTimestamp holds its delete horizon. recordbatch does not
// export it because nothing else needs it yet.
const attrDeleteHorizon = 0x40

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var be = binary.BigEndian

func appendHeader(dst []byte, version int, baseOffset int64, compacted bool) []byte {
	var h [HeaderSize]byte
	copy(h[hdrMagic:], headerMagic)
	be.PutUint16(h[hdrVersion:], uint16(version))
	if compacted {
		be.PutUint16(h[hdrFlags:], FlagCompacted)
	}
	be.PutUint32(h[hdrLen:], HeaderSize)
	be.PutUint64(h[hdrBaseOffset:], uint64(baseOffset))
	return append(dst, h[:]...)
}

// header is a decoded header.
type header struct {
	version    int
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
	v := int(be.Uint16(b[hdrVersion:]))
	if v != Version && v != VersionAuthenticated {
		return header{}, corruptf(hdrVersion, "header", "version %d, want %d or %d", v, Version, VersionAuthenticated)
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
	return header{version: v, baseOffset: base, compacted: flags&FlagCompacted != 0}, nil
}

// Trailer is the fixed-size end of an object: where the index, the block
// tags and the footer are, the checksums and, in version 2, the MAC.
type Trailer struct {
	// Version is 1 (no MAC) or 2 (VersionAuthenticated).
	Version    int
	IndexPos   int64 // position of the index: the end of the data section
	IndexCount int   // number of index entries
	FooterPos  int64
	FooterLen  int
	// DataCRC is the CRC-32C of bytes [0, IndexPos): header and batches.
	DataCRC uint32
	// MetaCRC is the CRC-32C of bytes [IndexPos, Size-12): the tail up to
	// MetaCRC itself.
	MetaCRC uint32
	Size    int64 // the object's size
	// Version 2 only (zero in version 1): the block size, the number of
	// block tags (ceil(IndexPos / BlockBytes)), the id of the key of the
	// MAC and the tags, and the MAC.
	BlockBytes int64
	BlockCount int
	KeyID      uint64
	MAC        [MACSize]byte
}

// Len is the trailer's size: TrailerSize or TrailerSizeV2.
func (t Trailer) Len() int64 {
	if t.Version == VersionAuthenticated {
		return TrailerSizeV2
	}
	return TrailerSize
}

// tagsPos is where the block tags start (version 2).
func (t Trailer) tagsPos() int64 { return t.IndexPos + int64(t.IndexCount)*IndexEntrySize }

// appendTrailer appends the trailer of version t.Version; meta is the
// index, the block tags and the footer (to compute MetaCRC), and key, for
// version 2, the key to compute the MAC with over name, meta and the
// trailer before the MAC.
func appendTrailer(dst []byte, t Trailer, meta []byte, key *Key, name string) []byte {
	b := make([]byte, t.Len())
	be.PutUint64(b[trIndexPos:], uint64(t.IndexPos))
	be.PutUint32(b[trIndexCount:], uint32(t.IndexCount))
	be.PutUint64(b[trFooterPos:], uint64(t.FooterPos))
	be.PutUint32(b[trFooterLen:], uint32(t.FooterLen))
	be.PutUint32(b[trDataCRC:], t.DataCRC)
	end := b[len(b)-trEndLen:]
	be.PutUint16(end[trEndVersion:], uint16(t.Version))
	copy(end[trEndMagic:], trailerMagic)
	if t.Version == VersionAuthenticated {
		be.PutUint32(b[trBlockBytes:], uint32(t.BlockBytes))
		be.PutUint32(b[trBlockCount:], uint32(t.BlockCount))
		be.PutUint64(b[trKeyID:], key.id)
		mac := key.mac(name, meta, b[:trMAC])
		copy(b[trMAC:], mac[:])
	}
	crc := crc32.Update(crc32.Checksum(meta, castagnoli), castagnoli, b[:len(b)-trEndLen+trEndMetaCRC])
	be.PutUint32(end[trEndMetaCRC:], crc)
	return append(dst, b...)
}

// ParseTrailer decodes and checks the trailer: b is the end of an object
// of size bytes (the last TrailerSize bytes at least; the last
// TrailerSizeV2 when the version read from its end is 2). It checks the
// magic, the version, the reserved bytes and that the positions and
// lengths fit together exactly (index, block tags, footer and trailer
// back to back, within MaxTailBytes). It cannot check MetaCRC and the
// MAC, which cover bytes before the trailer: ParseTail does.
func ParseTrailer(b []byte, size int64) (Trailer, error) {
	if len(b) < trEndLen || size < int64(len(b)) {
		return Trailer{}, corruptf(size-int64(len(b)), "trailer", "%d bytes of a %d-byte object, want %d", len(b), size, TrailerSize)
	}
	end := b[len(b)-trEndLen:]
	endPos := size - trEndLen
	if string(end[trEndMagic:]) != trailerMagic {
		return Trailer{}, corruptf(endPos+trEndMagic, "trailer", "magic %q, want %q", end[trEndMagic:], trailerMagic)
	}
	t := Trailer{Version: int(be.Uint16(end[trEndVersion:])), MetaCRC: be.Uint32(end[trEndMetaCRC:]), Size: size}
	if t.Version != Version && t.Version != VersionAuthenticated {
		return Trailer{}, corruptf(endPos+trEndVersion, "trailer", "version %d, want %d or %d", t.Version, Version, VersionAuthenticated)
	}
	for i := trEndReserved; i < trEndMetaCRC; i++ {
		if end[i] != 0 {
			return Trailer{}, corruptf(endPos+int64(i), "trailer", "reserved byte is 0x%02x", end[i])
		}
	}
	n := t.Len()
	start := size - n
	if int64(len(b)) < n {
		return Trailer{}, corruptf(start, "trailer", "%d bytes, want %d", len(b), n)
	}
	if size < HeaderSize+recordbatch.HeaderSize+IndexEntrySize+n {
		return Trailer{}, corruptf(-1, "object", "%d bytes is smaller than any segment", size)
	}
	b = b[int64(len(b))-n:]
	t.DataCRC = be.Uint32(b[trDataCRC:])
	indexPos, count := be.Uint64(b[trIndexPos:]), uint64(be.Uint32(b[trIndexCount:]))
	footerPos, footerLen := be.Uint64(b[trFooterPos:]), uint64(be.Uint32(b[trFooterLen:]))
	var blockBytes, blocks uint64
	if t.Version == VersionAuthenticated {
		blockBytes, blocks = uint64(be.Uint32(b[trBlockBytes:])), uint64(be.Uint32(b[trBlockCount:]))
		t.KeyID = be.Uint64(b[trKeyID:])
		copy(t.MAC[:], b[trMAC:])
	}
	// Every check below is on unsigned values bounded by size, so none
	// overflows; together they pin every field to one layout.
	switch {
	case indexPos < HeaderSize+recordbatch.HeaderSize || indexPos > uint64(start):
		return Trailer{}, corruptf(start+trIndexPos, "trailer", "index_pos %d outside [%d, %d]", indexPos, HeaderSize+recordbatch.HeaderSize, start)
	case count == 0:
		return Trailer{}, corruptf(start+trIndexCount, "trailer", "index_count 0")
	case count > uint64(start)/IndexEntrySize:
		return Trailer{}, corruptf(start+trIndexCount, "trailer", "index_count %d exceeds the object", count)
	case t.Version == VersionAuthenticated && (blockBytes < MinBlockBytes || blockBytes > MaxBlockBytes || bits.OnesCount64(blockBytes) != 1):
		return Trailer{}, corruptf(start+trBlockBytes, "trailer", "block_bytes %d is not a power of two in [%d, %d]", blockBytes, MinBlockBytes, MaxBlockBytes)
	case t.Version == VersionAuthenticated && blocks != (indexPos+blockBytes-1)/blockBytes:
		return Trailer{}, corruptf(start+trBlockCount, "trailer", "block_count %d, %d bytes of %d-byte blocks make %d", blocks, indexPos, blockBytes, (indexPos+blockBytes-1)/blockBytes)
	case indexPos+count*IndexEntrySize+blocks*TagSize != footerPos:
		return Trailer{}, corruptf(start+trFooterPos, "trailer", "index_pos %d + %d entries * %d + %d tags * %d != footer_pos %d",
			indexPos, count, IndexEntrySize, blocks, TagSize, footerPos)
	case footerPos > uint64(start) || footerPos+footerLen != uint64(start):
		return Trailer{}, corruptf(start+trFooterLen, "trailer", "footer_pos %d + footer_len %d != trailer position %d", footerPos, footerLen, start)
	case uint64(size)-indexPos > MaxTailBytes:
		return Trailer{}, corruptf(start+trIndexPos, "trailer", "tail of %d bytes exceeds %d", uint64(size)-indexPos, MaxTailBytes)
	}
	t.IndexPos, t.IndexCount = int64(indexPos), int(count)
	t.FooterPos, t.FooterLen = int64(footerPos), int(footerLen)
	t.BlockBytes, t.BlockCount = int64(blockBytes), int(blocks)
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
