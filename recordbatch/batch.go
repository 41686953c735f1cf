package recordbatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
)

// Compression is the codec of a batch's records section: attribute bits 0-2.
type Compression int8

// Kafka's codec numbers.
const (
	CompressionNone   Compression = 0
	CompressionGzip   Compression = 1
	CompressionSnappy Compression = 2
	CompressionLZ4    Compression = 3
	CompressionZstd   Compression = 4
)

// String returns Kafka's name of the codec ("none", "gzip", "snappy", "lz4",
// "zstd").
func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionGzip:
		return "gzip"
	case CompressionSnappy:
		return "snappy"
	case CompressionLZ4:
		return "lz4"
	case CompressionZstd:
		return "zstd"
	}
	return "compression(" + strconv.Itoa(int(c)) + ")"
}

func (c Compression) valid() bool { return c >= CompressionNone && c <= CompressionZstd }

// Header is a record header. Header keys are never null; a nil Value is a
// null value.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record of a batch.
type Record struct {
	// OffsetDelta: on encode, Encode sets it to the record's index in the
	// batch; on decode, read from the record.
	OffsetDelta int32
	// Offset: on decode, BaseOffset + OffsetDelta. Ignored on encode.
	Offset      int64
	TimestampMs int64
	Key, Value  []byte // nil = null
	Headers     []Header
}

// BatchHeader is the fixed 61-byte header of a batch.
type BatchHeader struct {
	BaseOffset           int64
	BatchLength          int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	RecordCount          int32
}

// Attribute bits.
const (
	attrCompressionMask = 0x07
	attrLogAppendTime   = 0x08
	attrTransactional   = 0x10
	attrControl         = 0x20
)

// Compression is the codec of the records section.
func (h BatchHeader) Compression() Compression {
	return Compression(h.Attributes & attrCompressionMask)
}

// LastOffset is the offset of the batch's last record: BaseOffset +
// LastOffsetDelta.
func (h BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Size is the batch's size in bytes: 12 + BatchLength.
func (h BatchHeader) Size() int { return batchLengthEnd + int(h.BatchLength) }

// IsTransactional reports attribute bit 4.
func (h BatchHeader) IsTransactional() bool { return h.Attributes&attrTransactional != 0 }

// IsControl reports attribute bit 5: the batch holds transaction markers,
// not application records.
func (h BatchHeader) IsControl() bool { return h.Attributes&attrControl != 0 }

// LogAppendTime reports attribute bit 3: record timestamps are the
// broker's (MaxTimestamp), not the producer's.
func (h BatchHeader) LogAppendTime() bool { return h.Attributes&attrLogAppendTime != 0 }

// Header layout (see doc.go).
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	// HeaderSize is the size of the fixed batch header: the smallest batch.
	HeaderSize = 61

	batchLengthEnd = offBatchLength + 4 // BatchLength counts the bytes after it
	minBatchLength = HeaderSize - batchLengthEnd
	magicV2        = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ParseHeader decodes the header of the batch at the start of buf. It needs
// only the first HeaderSize bytes, not the whole batch; it checks the magic
// and that batchLength is at least the header's.
func ParseHeader(buf []byte) (BatchHeader, error) {
	if len(buf) <= offMagic {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes, a batch header needs %d", ErrShort, len(buf), HeaderSize)
	}
	if m := int8(buf[offMagic]); m != magicV2 {
		return BatchHeader{}, fmt.Errorf("%w: magic %d, want %d", ErrMagic, m, magicV2)
	}
	if len(buf) < HeaderSize {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes, a batch header needs %d", ErrShort, len(buf), HeaderSize)
	}
	be := binary.BigEndian
	h := BatchHeader{
		BaseOffset:           int64(be.Uint64(buf[offBaseOffset:])),
		BatchLength:          int32(be.Uint32(buf[offBatchLength:])),
		PartitionLeaderEpoch: int32(be.Uint32(buf[offLeaderEpoch:])),
		Magic:                magicV2,
		CRC:                  be.Uint32(buf[offCRC:]),
		Attributes:           int16(be.Uint16(buf[offAttributes:])),
		LastOffsetDelta:      int32(be.Uint32(buf[offLastOffsetDelta:])),
		BaseTimestamp:        int64(be.Uint64(buf[offBaseTimestamp:])),
		MaxTimestamp:         int64(be.Uint64(buf[offMaxTimestamp:])),
		ProducerID:           int64(be.Uint64(buf[offProducerID:])),
		ProducerEpoch:        int16(be.Uint16(buf[offProducerEpoch:])),
		BaseSequence:         int32(be.Uint32(buf[offBaseSequence:])),
		RecordCount:          int32(be.Uint32(buf[offRecordCount:])),
	}
	if h.BatchLength < minBatchLength {
		return BatchHeader{}, fmt.Errorf("%w: batchLength %d below the minimum %d", ErrCorrupt, h.BatchLength, minBatchLength)
	}
	return h, nil
}

// Verify checks that buf is exactly one batch: its header (ParseHeader), its
// size and its CRC. It does not look at the records.
func Verify(buf []byte) (BatchHeader, error) {
	h, err := checkFraming(buf)
	if err != nil {
		return BatchHeader{}, err
	}
	if crc := crc32.Checksum(buf[offAttributes:], castagnoli); crc != h.CRC {
		return BatchHeader{}, fmt.Errorf("%w: crc mismatch: stored 0x%08x computed 0x%08x", ErrCorrupt, h.CRC, crc)
	}
	return h, nil
}

// checkFraming is Verify without the CRC: the header, the size and the
// record count.
func checkFraming(buf []byte) (BatchHeader, error) {
	h, err := ParseHeader(buf)
	if err != nil {
		return BatchHeader{}, err
	}
	if size := h.Size(); len(buf) < size {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes of a %d-byte batch", ErrShort, len(buf), size)
	} else if len(buf) > size {
		return BatchHeader{}, fmt.Errorf("%w: %d trailing bytes after a %d-byte batch", ErrCorrupt, len(buf)-size, size)
	}
	if h.RecordCount < 0 {
		return BatchHeader{}, fmt.Errorf("%w: negative record count %d", ErrCorrupt, h.RecordCount)
	}
	return h, nil
}

// SetBaseOffset stamps the base offset in place. The CRC does not cover it.
// buf must hold at least the first 8 bytes of a batch.
func SetBaseOffset(buf []byte, off int64) {
	binary.BigEndian.PutUint64(buf[offBaseOffset:], uint64(off))
}

// SetPartitionLeaderEpoch stamps the partition leader epoch in place. The
// CRC does not cover it. buf must hold at least the first 16 bytes of a
// batch.
func SetPartitionLeaderEpoch(buf []byte, e int32) {
	binary.BigEndian.PutUint32(buf[offLeaderEpoch:], uint32(e))
}

// Split cuts concatenated batches into single batches, checking only their
// headers (not their CRCs). The results are capacity-limited sub-slices of
// buf. A partial trailing batch is an error (ErrShort); the complete
// batches before it are returned with the error.
func Split(buf []byte) ([][]byte, error) {
	var out [][]byte
	for off := 0; off < len(buf); {
		h, err := ParseHeader(buf[off:])
		if err != nil {
			return out, fmt.Errorf("%w (batch at byte %d)", err, off)
		}
		size := h.Size()
		if len(buf)-off < size {
			return out, fmt.Errorf("%w: partial batch at byte %d: %d bytes of a %d-byte batch", ErrShort, off, len(buf)-off, size)
		}
		out = append(out, buf[off:off+size:off+size])
		off += size
	}
	return out, nil
}

// AddSequence is the producer sequence n records after seq: sequences
// wrap from MaxInt32 to 0 (Kafka's DefaultRecordBatch.incrementSequence),
// so an idempotent producer's sequence is never negative.
func AddSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}
