package compact

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/strata-log/strata/client/recordbatch"
)

// This file re-encodes a batch with chosen offset deltas, base timestamp
// and attributes, which client/recordbatch's Encode and Builder do not
// offer (they number records 0..n-1 and take the first record's
// timestamp as the base). The record and header layouts are those of
// client/recordbatch/doc.go; the codecs are configured as there (Kafka's
// Java client framing), so the output decodes with recordbatch.Decode and
// with Kafka clients.

// Header field offsets (client/recordbatch/doc.go).
const (
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
	batchLengthEnd     = 12
	magicV2            = 2
)

// Attribute bits this package reads or writes.
const (
	attrCompressionMask = 0x07
	attrLogAppendTime   = 0x08
	attrControl         = 0x20
	attrDeleteHorizon   = 0x40 // KIP-534: baseTimestamp holds the delete horizon
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// finishHeader writes h into batch[:HeaderSize], batchLength from
// len(batch), magic 2, and the CRC-32C of batch[21:].
func finishHeader(batch []byte, h *recordbatch.BatchHeader) {
	be := binary.BigEndian
	be.PutUint64(batch[0:], uint64(h.BaseOffset))
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

// appendRecord appends r with the given deltas: length, attributes (0),
// timestampDelta, offsetDelta, key, value, headers.
func appendRecord(dst []byte, r *recordbatch.Record, offsetDelta int32, timestampDelta int64) []byte {
	var body [3 * binary.MaxVarintLen64]byte
	n := 1 // attributes
	n += binary.PutVarint(body[n:], timestampDelta)
	n += binary.PutVarint(body[n:], int64(offsetDelta))
	size := n + bytesSize(r.Key) + bytesSize(r.Value) + varintSize(int64(len(r.Headers)))
	for i := range r.Headers {
		hd := &r.Headers[i]
		size += varintSize(int64(len(hd.Key))) + len(hd.Key) + bytesSize(hd.Value)
	}
	dst = slices.Grow(dst, binary.MaxVarintLen64+size)
	dst = binary.AppendVarint(dst, int64(size))
	dst = append(dst, body[:n]...)
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

func varintSize(v int64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], v)
}

func bytesSize(b []byte) int {
	if b == nil {
		return 1 // varint -1
	}
	return varintSize(int64(len(b))) + len(b)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// appendWriter is an io.Writer appending to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// compress appends src compressed with c to dst.
func compress(dst []byte, c recordbatch.Compression, src []byte) ([]byte, error) {
	switch c {
	case recordbatch.CompressionNone:
		return append(dst, src...), nil
	case recordbatch.CompressionGzip:
		return streamCompress(&gzipWriters, dst, src)
	case recordbatch.CompressionSnappy:
		return xerialCompress(dst, src), nil
	case recordbatch.CompressionLZ4:
		return streamCompress(&lz4Writers, dst, src)
	case recordbatch.CompressionZstd:
		return zstdEncoder().EncodeAll(src, dst), nil
	}
	return dst, fmt.Errorf("%w: unknown compression %d", ErrUnsupported, c)
}

// streamWriter is a pooled compressor writing into aw.
type streamWriter struct {
	aw appendWriter
	w  interface {
		io.WriteCloser
		Reset(io.Writer)
	}
}

var gzipWriters = sync.Pool{New: func() any {
	s := &streamWriter{}
	s.w = gzip.NewWriter(&s.aw)
	return s
}}

var lz4Writers = sync.Pool{New: func() any {
	s := &streamWriter{}
	w := lz4.NewWriter(&s.aw)
	// As Kafka: 64 KiB independent blocks, no checksums. Apply fails only
	// on invalid options, which these are not.
	_ = w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false), lz4.ConcurrencyOption(1))
	s.w = w
	return s
}}

func streamCompress(pool *sync.Pool, dst, src []byte) ([]byte, error) {
	s := pool.Get().(*streamWriter)
	s.aw.b = dst
	s.w.Reset(&s.aw)
	_, err := s.w.Write(src)
	if err == nil {
		err = s.w.Close()
	}
	out := s.aw.b
	s.aw.b = nil
	pool.Put(s)
	if err != nil {
		return dst, fmt.Errorf("compact: compress: %w", err)
	}
	return out, nil
}

// xerialCompress writes snappy in xerial's framing, as Kafka's Java client.
func xerialCompress(dst, src []byte) []byte {
	dst = append(dst, 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1)
	for len(src) > 0 {
		chunk := src[:min(len(src), 32<<10)]
		src = src[len(chunk):]
		need := 4 + s2.MaxEncodedLen(len(chunk))
		at := len(dst)
		dst = slices.Grow(dst, need)[:at+need]
		enc := s2.EncodeSnappy(dst[at+4:], chunk)
		binary.BigEndian.PutUint32(dst[at:], uint32(len(enc)))
		dst = dst[:at+4+len(enc)]
	}
	return dst
}

var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		panic("compact: zstd encoder: " + err.Error()) // static options: cannot fail
	}
	return e
})

// scratch is a pooled buffer for an uncompressed records section.
type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 64<<10)} }}

func getScratch() *scratch { s := scratchPool.Get().(*scratch); s.b = s.b[:0]; return s }

func putScratch(s *scratch) {
	if cap(s.b) > 4<<20 { // do not pin huge buffers
		return
	}
	scratchPool.Put(s)
}
