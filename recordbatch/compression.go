package recordbatch

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedBytes bounds the decompressed size of one batch's records
// section for Decode, so that a small malicious batch cannot exhaust
// memory. DecodeLimit and ScanRecords take their own bound (the broker
// passes one derived from the batch's size and its topic's
// max.compression.ratio, at most this).
const MaxDecompressedBytes = 64 << 20

// scratch is a pooled buffer: the uncompressed records section an encoder
// builds, or the window a section streams through.
type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 64<<10)} }}

func getScratch() *scratch { s := scratchPool.Get().(*scratch); s.b = s.b[:0]; return s }

func putScratch(s *scratch) {
	if cap(s.b) > 4<<20 { // do not pin huge buffers
		return
	}
	scratchPool.Put(s)
}

// appendWriter is an io.Writer appending to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// compress appends src compressed with c to dst.
func compress(dst []byte, c Compression, src []byte) ([]byte, error) {
	switch c {
	case CompressionGzip:
		return gzipCompress(dst, src)
	case CompressionSnappy:
		return xerialCompress(dst, src), nil
	case CompressionLZ4:
		return lz4Compress(dst, src)
	case CompressionZstd:
		return zstdEncoder().EncodeAll(src, dst), nil
	}
	return dst, fmt.Errorf("%w: unknown compression %d", ErrInvalid, c)
}

// gzip

type gzipWriter struct {
	w  *gzip.Writer
	aw appendWriter
}

var gzipWriters = sync.Pool{New: func() any {
	g := &gzipWriter{}
	g.w = gzip.NewWriter(&g.aw)
	return g
}}

func gzipCompress(dst, src []byte) ([]byte, error) {
	g := gzipWriters.Get().(*gzipWriter)
	g.aw.b = dst
	g.w.Reset(&g.aw)
	_, err := g.w.Write(src)
	if err == nil {
		err = g.w.Close()
	}
	out := g.aw.b
	g.aw.b = nil
	gzipWriters.Put(g)
	if err != nil {
		return dst, fmt.Errorf("recordbatch: gzip: %w", err)
	}
	return out, nil
}

// snappy (xerial framing, as Kafka's Java client writes it)

func xerialCompress(dst, src []byte) []byte {
	dst = append(dst, xerialHeader...)
	for len(src) > 0 {
		chunk := src[:min(len(src), xerialBlockSize)]
		src = src[len(chunk):]
		need := 4 + s2.MaxEncodedLen(len(chunk))
		at := len(dst)
		dst = append(dst, make([]byte, need)...)[:at]
		enc := s2.EncodeSnappy(dst[at+4:at+need], chunk)
		binary.BigEndian.PutUint32(dst[at:at+4], uint32(len(enc)))
		dst = dst[:at+4+len(enc)]
	}
	return dst
}

// lz4 (frame format, as KafkaLZ4BlockOutputStream writes it)

type lz4Writer struct {
	w  *lz4.Writer
	aw appendWriter
}

var lz4Writers = sync.Pool{New: func() any {
	l := &lz4Writer{}
	l.w = lz4.NewWriter(&l.aw)
	// Kafka: 64 KiB independent blocks, no block or content checksum.
	// Apply fails only on invalid options, which these are not.
	_ = l.w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false), lz4.ConcurrencyOption(1))
	return l
}}

func lz4Compress(dst, src []byte) ([]byte, error) {
	l := lz4Writers.Get().(*lz4Writer)
	l.aw.b = dst
	l.w.Reset(&l.aw)
	_, err := l.w.Write(src)
	if err == nil {
		err = l.w.Close()
	}
	out := l.aw.b
	l.aw.b = nil
	lz4Writers.Put(l)
	if err != nil {
		return dst, fmt.Errorf("recordbatch: lz4: %w", err)
	}
	return out, nil
}

// zstd: encoders are expensive to create; one, made on first use, serves
// every goroutine (EncodeAll is safe for concurrent use).

var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		panic("recordbatch: zstd encoder: " + err.Error()) // static options: cannot fail
	}
	return e
})
