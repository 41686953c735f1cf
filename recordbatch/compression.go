package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedBytes bounds the decompressed size of one batch's records
// section for Decode, so that a small malicious batch cannot exhaust
// memory. DecodeLimit and ScanRecords take their own bound (the broker
// passes a bound derived from the topic's max.message.bytes).
const MaxDecompressedBytes = 64 << 20

// zstdMaxWindow bounds the window a zstd frame may declare: the stream
// decoder allocates its history ring from it before any output exists, so
// it is the one allocation a frame header controls. 8 MiB is what the
// zstd format recommends decoders support; Kafka's Java producer streams
// with a 2 MiB window whatever the batch size, so the bound cannot be the
// (smaller) output bound.
const zstdMaxWindow = 8 << 20

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

// decompress appends src decompressed with c to dst, failing with
// ErrTooLarge as soon as the output passes limit bytes. Output buffers
// grow with the bytes actually produced, never from a size the input
// claims (gzip ISIZE, zstd frame content size), so the memory a batch can
// cost is bounded by limit, not by what its header says.
func decompress(dst []byte, c Compression, src []byte, limit int) ([]byte, error) {
	var out []byte
	var err error
	switch c {
	case CompressionGzip:
		out, err = gzipDecompress(dst, src, limit)
	case CompressionSnappy:
		out, err = snappyDecompress(dst, src, limit)
	case CompressionLZ4:
		out, err = lz4Decompress(dst, src, limit)
	case CompressionZstd:
		out, err = zstdDecompress(dst, src, limit)
	default:
		return nil, fmt.Errorf("%w: unknown compression codec %d", ErrCorrupt, c)
	}
	if errors.Is(err, ErrTooLarge) {
		return nil, fmt.Errorf("%s records: %w", c, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s records: %v", ErrCorrupt, c, err)
	}
	return out, nil
}

// tooLarge is the error of output beyond limit.
func tooLarge(limit int) error {
	return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
}

// readLimited appends r's output to dst until EOF, failing with ErrTooLarge
// once more than limit bytes came out. It starts with room for start bytes
// (a multiple of the compressed size, which is real, not claimed) and
// doubles, so a bomb costs at most about twice limit before it is refused.
func readLimited(dst []byte, r io.Reader, start, limit int) ([]byte, error) {
	base := len(dst)
	dst = slices.Grow(dst, min(max(start, 512), limit+1))
	for {
		n := len(dst) - base
		if n > limit {
			return nil, tooLarge(limit)
		}
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, min(max(n, 512), limit+1-n))
		}
		// Never ask for more than one byte past the limit.
		room := min(cap(dst), base+limit+1)
		m, err := r.Read(dst[len(dst):room])
		dst = dst[:len(dst)+m]
		if err == io.EOF {
			if len(dst)-base > limit {
				return nil, tooLarge(limit)
			}
			return dst, nil
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

func gzipDecompress(dst, src []byte, limit int) ([]byte, error) {
	g := gzipReaders.Get().(*gzipReader)
	defer gzipReaders.Put(g)
	g.br.Reset(src)
	defer g.br.Reset(nil)
	if err := g.r.Reset(&g.br); err != nil {
		return nil, err
	}
	// The trailer's ISIZE is not trusted: it is the attacker's number.
	return readLimited(dst, &g.r, 4*len(src), limit)
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

// snappyDecompress trusts the blocks' length prefixes only after checking
// their sum against limit: a snappy block decodes into exactly the length
// it declares, so that sum is the real output size.
func snappyDecompress(dst, src []byte, limit int) ([]byte, error) {
	if len(src) < xerialMagicSize || !bytes.Equal(src[:xerialMagicSize], xerialHeader[:xerialMagicSize]) {
		n, err := s2.DecodedLen(src)
		if err != nil {
			return nil, err
		}
		if n > limit {
			return nil, fmt.Errorf("%w: block of %d bytes exceeds %d", ErrTooLarge, n, limit)
		}
		dst = slices.Grow(dst, n)
		dec, err := s2.Decode(dst[len(dst):len(dst)+n], src)
		if err != nil {
			return nil, err
		}
		return dst[:len(dst)+len(dec)], nil
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
		if total += n; total > limit {
			return nil, tooLarge(limit)
		}
		rest = next
	}
	out := slices.Grow(dst, total)
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

// snappyBlock decodes one raw snappy block into dst's capacity, which
// snappyDecompress sized from the validated block lengths.
func snappyBlock(dst, src []byte) ([]byte, error) {
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

func lz4Decompress(dst, src []byte, limit int) ([]byte, error) {
	l := lz4Readers.Get().(*lz4Reader)
	defer lz4Readers.Put(l)
	l.br.Reset(src)
	defer l.br.Reset(nil)
	l.r.Reset(&l.br)
	return readLimited(dst, l.r, 2*len(src), limit)
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

// zstd decoding streams through pooled single-goroutine decoders rather
// than DecodeAll, which sizes its output from the frame content size the
// frame claims (up to 32768 times the input). A stream decoder allocates
// its window (bounded by zstdMaxWindow and by the frame's declared content
// size, checked against max(limit, zstdMaxWindow) first) and then only what
// it outputs, which readLimited stops at limit.
type zstdReader struct {
	d  *zstd.Decoder
	br bytes.Reader
}

var zstdReaders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(zstdMaxWindow))
	if err != nil {
		panic("recordbatch: zstd decoder: " + err.Error()) // static options: cannot fail
	}
	return &zstdReader{d: d}
}}

func zstdDecompress(dst, src []byte, limit int) ([]byte, error) {
	z := zstdReaders.Get().(*zstdReader)
	defer zstdReaders.Put(z)
	z.br.Reset(src)
	defer func() { z.br.Reset(nil); _ = z.d.Reset(nil) }()
	// A frame whose declared size exceeds the bound fails here, before its
	// window is allocated.
	if err := z.d.ResetWithOptions(onlyReader{&z.br}, zstd.WithDecoderMaxMemory(uint64(max(limit, zstdMaxWindow)))); err != nil {
		return nil, err
	}
	out, err := readLimited(dst, z.d, 4*len(src), limit)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return nil, fmt.Errorf("%w: %v (bound %d bytes)", ErrTooLarge, err, max(limit, zstdMaxWindow))
	}
	return out, err
}

// onlyReader hides everything but Read, so that the zstd decoder streams
// instead of taking its whole-buffer shortcut (which is DecodeAll).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
