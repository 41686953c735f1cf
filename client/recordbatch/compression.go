package recordbatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedBytes bounds the decompressed size of one batch's records
// section, so that a small malicious batch cannot exhaust memory.
const MaxDecompressedBytes = 256 << 20

// scratch is a pooled buffer for the uncompressed records section.
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

// decompress returns src decompressed with c in a new buffer.
func decompress(c Compression, src []byte) ([]byte, error) {
	var out []byte
	var err error
	switch c {
	case CompressionGzip:
		out, err = gzipDecompress(src)
	case CompressionSnappy:
		out, err = snappyDecompress(src)
	case CompressionLZ4:
		out, err = lz4Decompress(src)
	case CompressionZstd:
		out, err = zstdDecompress(src)
	default:
		return nil, fmt.Errorf("%w: unknown compression codec %d", ErrCorrupt, c)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s records: %v", ErrCorrupt, c, err)
	}
	return out, nil
}

// readAllLimited reads r to EOF into a buffer starting at capacity hint,
// failing beyond MaxDecompressedBytes.
func readAllLimited(r io.Reader, hint int) ([]byte, error) {
	b := make([]byte, 0, min(max(hint, 512), MaxDecompressedBytes))
	for {
		if len(b) == cap(b) {
			if len(b) >= MaxDecompressedBytes {
				return nil, fmt.Errorf("decompressed size exceeds %d bytes", MaxDecompressedBytes)
			}
			b = append(b, 0)[:len(b)]
			b = b[:len(b):min(cap(b), MaxDecompressedBytes)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
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

type gzipReader struct {
	r  gzip.Reader
	br bytes.Reader
}

var gzipReaders = sync.Pool{New: func() any { return &gzipReader{} }}

func gzipDecompress(src []byte) ([]byte, error) {
	g := gzipReaders.Get().(*gzipReader)
	defer gzipReaders.Put(g)
	g.br.Reset(src)
	if err := g.r.Reset(&g.br); err != nil {
		return nil, err
	}
	out, err := readAllLimited(&g.r, gzipSizeHint(src))
	g.br.Reset(nil)
	return out, err
}

// gzipSizeHint reads the uncompressed size (mod 2^32) from the gzip
// trailer, trusting it no further than deflate's maximum ratio (1032:1)
// allows: the +1 lets the final read see EOF without growing the buffer.
func gzipSizeHint(src []byte) int {
	if len(src) < 18 { // header 10 + trailer 8
		return 4 * len(src)
	}
	isize := int(binary.LittleEndian.Uint32(src[len(src)-4:]))
	return min(isize, 1032*len(src)) + 1
}

// snappy (xerial framing, as Kafka's Java client writes it)

var xerialHeader = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}

const (
	xerialMagicSize = 8 // the part of the header that identifies the framing
	xerialBlockSize = 32 << 10
)

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

func snappyDecompress(src []byte) ([]byte, error) {
	if len(src) < xerialMagicSize || !bytes.Equal(src[:xerialMagicSize], xerialHeader[:xerialMagicSize]) {
		return snappyBlock(nil, src)
	}
	if len(src) < len(xerialHeader) {
		return nil, fmt.Errorf("xerial header truncated at %d bytes", len(src))
	}
	// First pass: validate the chunk lengths and size the output.
	total := 0
	for rest := src[len(xerialHeader):]; len(rest) > 0; {
		chunk, next, err := xerialChunk(rest)
		if err != nil {
			return nil, err
		}
		n, err := s2.DecodedLen(chunk)
		if err != nil {
			return nil, err
		}
		if total += n; total > MaxDecompressedBytes {
			return nil, fmt.Errorf("decompressed size exceeds %d bytes", MaxDecompressedBytes)
		}
		rest = next
	}
	out := make([]byte, 0, total)
	for rest := src[len(xerialHeader):]; len(rest) > 0; {
		chunk, next, _ := xerialChunk(rest)
		dec, err := snappyBlock(out[len(out):cap(out)], chunk)
		if err != nil {
			return nil, err
		}
		out = out[:len(out)+len(dec)]
		rest = next
	}
	return out, nil
}

func xerialChunk(b []byte) (chunk, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("xerial chunk length truncated")
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, fmt.Errorf("xerial chunk of %d bytes, %d left", n, len(b)-4)
	}
	return b[4 : 4+n], b[4+n:], nil
}

// snappyBlock decodes one raw snappy block into dst's capacity when it fits.
func snappyBlock(dst, src []byte) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n > MaxDecompressedBytes {
		return nil, fmt.Errorf("decompressed size %d exceeds %d bytes", n, MaxDecompressedBytes)
	}
	return s2.Decode(dst, src)
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

type lz4Reader struct {
	r  *lz4.Reader
	br bytes.Reader
}

var lz4Readers = sync.Pool{New: func() any {
	l := &lz4Reader{}
	l.r = lz4.NewReader(&l.br)
	return l
}}

func lz4Decompress(src []byte) ([]byte, error) {
	l := lz4Readers.Get().(*lz4Reader)
	defer lz4Readers.Put(l)
	l.br.Reset(src)
	l.r.Reset(&l.br)
	out, err := readAllLimited(l.r, 2*len(src))
	l.br.Reset(nil)
	return out, err
}

// zstd: encoders and decoders are expensive to create; one of each, made on
// first use, serves every goroutine (EncodeAll and DecodeAll are safe for
// concurrent use).

var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		panic("recordbatch: zstd encoder: " + err.Error()) // static options: cannot fail
	}
	return e
})

var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(MaxDecompressedBytes), zstd.WithDecoderConcurrency(0))
	if err != nil {
		panic("recordbatch: zstd decoder: " + err.Error()) // static options: cannot fail
	}
	return d
})

func zstdDecompress(src []byte) ([]byte, error) {
	return zstdDecoder().DecodeAll(src, nil)
}
