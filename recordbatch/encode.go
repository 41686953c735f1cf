package recordbatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"slices"
)

// Batch is a batch to encode.
type Batch struct {
	BaseOffset    int64 // clients send 0; the broker stamps the real one
	ProducerID    int64 // -1 = none (not idempotent)
	ProducerEpoch int16 // -1 with ProducerID -1
	BaseSequence  int32 // -1 with ProducerID -1
	Compression   Compression
	Records       []Record
}

// Encode encodes b as one v2 batch in a new buffer. It sets
// b.Records[i].OffsetDelta to i. BaseTimestamp is the first record's
// timestamp and MaxTimestamp the largest; the partition leader epoch is -1.
func Encode(b *Batch) ([]byte, error) {
	return AppendEncode(make([]byte, 0, HeaderSize+encodedRecordsSize(b.Records)), b)
}

// AppendEncode is Encode appending to dst, which lets the caller reuse a
// buffer. On error it returns dst unchanged.
func AppendEncode(dst []byte, b *Batch) ([]byte, error) {
	if len(b.Records) == 0 {
		return dst, fmt.Errorf("%w: no records", ErrInvalid)
	}
	if !b.Compression.valid() {
		return dst, fmt.Errorf("%w: unknown compression %d", ErrInvalid, b.Compression)
	}
	baseTs, maxTs := b.Records[0].TimestampMs, b.Records[0].TimestampMs
	for i := range b.Records {
		r := &b.Records[i]
		r.OffsetDelta = int32(i)
		maxTs = max(maxTs, r.TimestampMs)
	}
	h := BatchHeader{
		BaseOffset:           b.BaseOffset,
		PartitionLeaderEpoch: -1,
		Attributes:           int16(b.Compression),
		LastOffsetDelta:      int32(len(b.Records) - 1),
		BaseTimestamp:        baseTs,
		MaxTimestamp:         maxTs,
		ProducerID:           b.ProducerID,
		ProducerEpoch:        b.ProducerEpoch,
		BaseSequence:         b.BaseSequence,
		RecordCount:          int32(len(b.Records)),
	}
	return appendWithHeader(dst, h, b.Records)
}

// EncodeWithHeader encodes recs as one v2 batch under header h, as given:
// base offset and timestamp, attributes (compression included), last
// offset delta, max timestamp, producer fields and partition leader epoch
// are h's; each record keeps its OffsetDelta and is written with
// timestamp delta TimestampMs - h.BaseTimestamp; RecordCount, the batch
// length, the magic and the CRC are computed. recs may be empty (then
// nothing is compressed). It is what a rewrite of stored batches needs
// (compaction: offsets with gaps, a delete horizon in BaseTimestamp), which
// Encode, numbering records from 0, cannot do.
func EncodeWithHeader(h BatchHeader, recs []Record) ([]byte, error) {
	if !h.Compression().valid() {
		return nil, fmt.Errorf("%w: unknown compression %d", ErrInvalid, h.Compression())
	}
	h.RecordCount = int32(len(recs))
	return appendWithHeader(make([]byte, 0, HeaderSize+encodedRecordsSize(recs)), h, recs)
}

// appendWithHeader appends recs under h (RecordCount set) to dst.
func appendWithHeader(dst []byte, h BatchHeader, recs []Record) ([]byte, error) {
	start := len(dst)
	out := slices.Grow(dst, HeaderSize)[:start+HeaderSize]
	if c := h.Compression(); c == CompressionNone || len(recs) == 0 {
		for i := range recs {
			out = appendRecord(out, &recs[i], recs[i].OffsetDelta, recs[i].TimestampMs-h.BaseTimestamp)
		}
	} else {
		scratch := getScratch()
		for i := range recs {
			scratch.b = appendRecord(scratch.b, &recs[i], recs[i].OffsetDelta, recs[i].TimestampMs-h.BaseTimestamp)
		}
		var err error
		out, err = compress(out, c, scratch.b)
		putScratch(scratch)
		if err != nil {
			return dst, err
		}
	}
	finish(out[start:], &h)
	return out, nil
}

// finish writes h into batch[:HeaderSize], with batchLength from
// len(batch), magic 2 and the CRC of batch[21:].
func finish(batch []byte, h *BatchHeader) {
	be := binary.BigEndian
	be.PutUint64(batch[offBaseOffset:], uint64(h.BaseOffset))
	be.PutUint32(batch[offBatchLength:], uint32(len(batch)-batchLengthEnd))
	be.PutUint32(batch[offLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	batch[offMagic] = magicV2
	be.PutUint16(batch[offAttributes:], uint16(h.Attributes))
	be.PutUint32(batch[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	be.PutUint64(batch[offBaseTimestamp:], uint64(h.BaseTimestamp))
	be.PutUint64(batch[offMaxTimestamp:], uint64(h.MaxTimestamp))
	be.PutUint64(batch[offProducerID:], uint64(h.ProducerID))
	be.PutUint16(batch[offProducerEpoch:], uint16(h.ProducerEpoch))
	be.PutUint32(batch[offBaseSequence:], uint32(h.BaseSequence))
	be.PutUint32(batch[offRecordCount:], uint32(h.RecordCount))
	be.PutUint32(batch[offCRC:], crc32.Checksum(batch[offAttributes:], castagnoli))
}

// varintSize is the size of v as a zigzag varint.
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}

// bytesSize is the size of a length-prefixed nullable byte string.
func bytesSize(b []byte) int {
	if b == nil {
		return 1 // varint -1
	}
	return varintSize(int64(len(b))) + len(b)
}

// recordBodySize is the size of a record after its length prefix.
func recordBodySize(r *Record, offsetDelta int32, timestampDelta int64) int {
	n := 1 + varintSize(timestampDelta) + varintSize(int64(offsetDelta)) +
		bytesSize(r.Key) + bytesSize(r.Value) + varintSize(int64(len(r.Headers)))
	for i := range r.Headers {
		hd := &r.Headers[i]
		n += varintSize(int64(len(hd.Key))) + len(hd.Key) + bytesSize(hd.Value)
	}
	return n
}

// recordSize is the encoded size of a record, length prefix included.
func recordSize(r *Record, offsetDelta int32, timestampDelta int64) int {
	body := recordBodySize(r, offsetDelta, timestampDelta)
	return varintSize(int64(body)) + body
}

// encodedRecordsSize is the uncompressed size of the records section.
func encodedRecordsSize(recs []Record) int {
	if len(recs) == 0 {
		return 0
	}
	n, base := 0, recs[0].TimestampMs
	for i := range recs {
		n += recordSize(&recs[i], int32(i), recs[i].TimestampMs-base)
	}
	return n
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func appendRecord(dst []byte, r *Record, offsetDelta int32, timestampDelta int64) []byte {
	body := recordBodySize(r, offsetDelta, timestampDelta)
	dst = slices.Grow(dst, varintSize(int64(body))+body)
	dst = binary.AppendVarint(dst, int64(body))
	dst = append(dst, 0) // attributes
	dst = binary.AppendVarint(dst, timestampDelta)
	dst = binary.AppendVarint(dst, int64(offsetDelta))
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for i := range r.Headers {
		hd := &r.Headers[i]
		dst = binary.AppendVarint(dst, int64(len(hd.Key)))
		dst = append(dst, hd.Key...)
		dst = appendBytes(dst, hd.Value)
	}
	return dst
}

// Builder accumulates records into a batch for a producer: Append encodes
// each record at once (copying its key, value and headers, so the caller
// may reuse them), EstimatedSize tracks the batch's uncompressed size, and
// Build compresses and finishes the batch. The first record's timestamp is
// the batch's BaseTimestamp; a record's offset delta is its index.
// A Builder is not safe for concurrent use.
type Builder struct {
	compression Compression
	records     []byte // uncompressed records section
	count       int32
	baseTs      int64
	maxTs       int64
}

// NewBuilder returns an empty Builder for batches compressed with c.
func NewBuilder(c Compression) *Builder { return &Builder{compression: c} }

// Append adds r (its OffsetDelta and Offset are ignored).
func (b *Builder) Append(r Record) {
	if b.count == 0 {
		b.baseTs, b.maxTs = r.TimestampMs, r.TimestampMs
	}
	b.maxTs = max(b.maxTs, r.TimestampMs)
	b.records = appendRecord(b.records, &r, b.count, r.TimestampMs-b.baseTs)
	b.count++
}

// Len is the number of records appended.
func (b *Builder) Len() int { return int(b.count) }

// EstimatedSize is the size the batch would have uncompressed: an upper
// bound, in practice, on the compressed size too.
func (b *Builder) EstimatedSize() int { return HeaderSize + len(b.records) }

// EstimatedSizeWith is EstimatedSize after appending r, to decide whether r
// still fits in the batch.
func (b *Builder) EstimatedSizeWith(r *Record) int {
	base := r.TimestampMs
	if b.count > 0 {
		base = b.baseTs
	}
	return b.EstimatedSize() + recordSize(r, b.count, r.TimestampMs-base)
}

// Build returns the encoded batch in a new buffer owned by the caller, with
// base offset 0. The Builder keeps its records: call Reset to start another
// batch.
func (b *Builder) Build(producerID int64, epoch int16, baseSeq int32) ([]byte, error) {
	if b.count == 0 {
		return nil, fmt.Errorf("%w: no records", ErrInvalid)
	}
	if !b.compression.valid() {
		return nil, fmt.Errorf("%w: unknown compression %d", ErrInvalid, b.compression)
	}
	h := BatchHeader{
		PartitionLeaderEpoch: -1,
		Attributes:           int16(b.compression),
		LastOffsetDelta:      b.count - 1,
		BaseTimestamp:        b.baseTs,
		MaxTimestamp:         b.maxTs,
		ProducerID:           producerID,
		ProducerEpoch:        epoch,
		BaseSequence:         baseSeq,
		RecordCount:          b.count,
	}
	var out []byte
	if b.compression == CompressionNone {
		out = make([]byte, HeaderSize, HeaderSize+len(b.records))
		out = append(out, b.records...)
	} else {
		var err error
		out = make([]byte, HeaderSize, HeaderSize+len(b.records)/2+64)
		if out, err = compress(out, b.compression, b.records); err != nil {
			return nil, err
		}
	}
	finish(out, &h)
	return out, nil
}

// Reset empties the Builder, keeping its buffer.
func (b *Builder) Reset() {
	b.records = b.records[:0]
	b.count = 0
}
