package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// zstdMaxWindow bounds the window a zstd frame may declare: the stream
// decoder allocates its history ring from it before any output exists, so
// it is the one allocation a frame header controls. 8 MiB is what the
// zstd format recommends decoders support; Kafka's Java producer streams
// with a 2 MiB window whatever the batch size, so the bound cannot be the
// (smaller) output bound.
const zstdMaxWindow = 8 << 20

// minInflating is the least number of decompressions that may run at once.
const minInflating = 4

// inflating bounds the decompressions running at once in the process, to
// max(GOMAXPROCS, minInflating). Each holds a codec's state whose size the
// compressed bytes choose, not their number: a zstd window of up to
// zstdMaxWindow, lz4 blocks of up to 4 MiB, whatever the batch's size. A
// 1 KiB batch could otherwise cost 8 MiB for each goroutine that validates
// one. Decompression is CPU work: more of it at once than there are
// processors would not end sooner. Callers beyond the bound wait for a
// slot, which a decompression holds for a time its output bound limits.
var inflating = sync.OnceValue(func() chan struct{} {
	return make(chan struct{}, max(runtime.GOMAXPROCS(0), minInflating))
})

// inflation is a records section being decompressed: r streams its
// output, sizeHint is what to allocate for it when it is kept whole (the
// exact size for snappy, whose blocks state it; a multiple of the
// compressed size otherwise). close returns the decompressor to its pool
// and the slot to inflating.
type inflation struct {
	r        io.Reader
	sizeHint int
	gzip     *gzipReader
	lz4      *lz4Reader
	zstd     *zstdReader
	snappy   *snappyReader
}

// inflate starts decompressing data, a records section compressed with c.
// Nothing is allocated from a size the section claims beyond limit: a
// snappy section claiming more fails here, a zstd frame declaring more
// (or a larger window than zstdMaxWindow) fails here or on its first read.
// Errors are the codec's, or ErrTooLarge (see codecError).
func inflate(c Compression, data []byte, limit int) (inflation, error) {
	if !c.valid() || c == CompressionNone {
		return inflation{}, fmt.Errorf("unknown compression codec %d", c)
	}
	inflating() <- struct{}{}
	in, err := openInflation(c, data, limit)
	if err != nil {
		in.close()
		return inflation{}, err
	}
	return in, nil
}

func openInflation(c Compression, data []byte, limit int) (in inflation, err error) {
	switch c {
	case CompressionGzip:
		in.gzip = gzipReaders.Get().(*gzipReader)
		in.gzip.br.Reset(data)
		// The trailer's ISIZE is not trusted: it is the attacker's number.
		in.r, in.sizeHint = &in.gzip.r, 4*len(data)
		return in, in.gzip.r.Reset(&in.gzip.br)
	case CompressionLZ4:
		in.lz4 = lz4Readers.Get().(*lz4Reader)
		in.lz4.br.Reset(data)
		in.lz4.r.Reset(&in.lz4.br)
		in.r, in.sizeHint = in.lz4.r, 2*len(data)
		return in, nil
	case CompressionZstd:
		in.zstd = zstdReaders.Get().(*zstdReader)
		in.r, in.sizeHint = in.zstd, 4*len(data)
		return in, in.zstd.reset(data, limit)
	default: // snappy
		in.snappy = snappyReaders.Get().(*snappyReader)
		in.r = in.snappy
		in.sizeHint, err = in.snappy.reset(data, limit)
		return in, err
	}
}

func (in *inflation) close() {
	switch {
	case in.gzip != nil:
		in.gzip.br.Reset(nil)
		gzipReaders.Put(in.gzip)
	case in.lz4 != nil:
		in.lz4.br.Reset(nil)
		lz4Readers.Put(in.lz4)
	case in.zstd != nil:
		in.zstd.release()
		zstdReaders.Put(in.zstd)
	case in.snappy != nil:
		if in.snappy.release() {
			snappyReaders.Put(in.snappy)
		}
	}
	<-inflating()
}

// codecError is the error of a decompression of c: ErrTooLarge as it is,
// anything else the codec says is ErrCorrupt.
func codecError(c Compression, err error) error {
	if errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%s records: %w", c, err)
	}
	return fmt.Errorf("%w: %s records: %v", ErrCorrupt, c, err)
}

// decompress appends src decompressed with c to dst, failing with
// ErrTooLarge as soon as the output passes limit bytes. Output buffers
// grow with the bytes actually produced, never from a size the input
// claims (gzip ISIZE, zstd frame content size), so the memory a batch can
// cost is bounded by limit, not by what its header says.
func decompress(dst []byte, c Compression, src []byte, limit int) ([]byte, error) {
	in, err := inflate(c, src, limit)
	if err != nil {
		return nil, codecError(c, err)
	}
	defer in.close()
	var out []byte
	if in.snappy != nil {
		out, err = in.snappy.appendAll(dst, in.sizeHint)
	} else {
		out, err = readLimited(dst, in.r, in.sizeHint, limit)
	}
	if err != nil {
		return nil, codecError(c, err)
	}
	return out, nil
}

// tooLarge is the error of output beyond limit.
func tooLarge(limit int) error {
	return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
}

// readLimited appends r's output to dst until EOF, failing with ErrTooLarge
// once more than limit bytes came out. It starts with room for start bytes
// (a multiple of the compressed size, which is real, not claimed; or
// snappy's exact size) and doubles, so a bomb costs at most about twice
// limit before it is refused.
func readLimited(dst []byte, r io.Reader, start, limit int) ([]byte, error) {
	base := len(dst)
	// One byte more than start: reading to EOF needs no growth when start
	// was exact.
	dst = slices.Grow(dst, min(max(start+1, 512), limit+1))
	for zero := 0; ; {
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
		switch {
		case err == io.EOF:
			if len(dst)-base > limit {
				return nil, tooLarge(limit)
			}
			return dst, nil
		case err != nil:
			return nil, err
		case m == 0:
			if zero++; zero == maxZeroReads {
				return nil, io.ErrNoProgress
			}
		}
	}
}

// gzip

type gzipReader struct {
	r  gzip.Reader
	br bytes.Reader
}

var gzipReaders = sync.Pool{New: func() any { return &gzipReader{} }}

// lz4 (frame format, as KafkaLZ4BlockOutputStream writes it)

type lz4Reader struct {
	r  *lz4.Reader
	br bytes.Reader
}

var lz4Readers = sync.Pool{New: func() any {
	l := &lz4Reader{}
	l.r = lz4.NewReader(&l.br)
	return l
}}

// zstd decoding streams through pooled single-goroutine decoders rather
// than DecodeAll, which sizes its output from the frame content size the
// frame claims (up to 32768 times the input). A stream decoder allocates
// its window (bounded by zstdMaxWindow and by the frame's declared content
// size, checked against max(limit, zstdMaxWindow) first) and then only what
// it outputs, which its reader stops at limit.
type zstdReader struct {
	d     *zstd.Decoder
	br    bytes.Reader
	bound int
}

var zstdReaders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(zstdMaxWindow))
	if err != nil {
		panic("recordbatch: zstd decoder: " + err.Error()) // static options: cannot fail
	}
	return &zstdReader{d: d}
}}

func (z *zstdReader) reset(src []byte, limit int) error {
	z.br.Reset(src)
	z.bound = max(limit, zstdMaxWindow)
	// A frame whose declared size exceeds the bound fails here, before its
	// window is allocated.
	return z.sizeError(z.d.ResetWithOptions(onlyReader{&z.br}, zstd.WithDecoderMaxMemory(uint64(z.bound))))
}

func (z *zstdReader) Read(p []byte) (int, error) {
	n, err := z.d.Read(p)
	return n, z.sizeError(err)
}

// sizeError makes the decoder's errors about sizes beyond its bound
// ErrTooLarge.
func (z *zstdReader) sizeError(err error) error {
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return fmt.Errorf("%w: %v (bound %d bytes)", ErrTooLarge, err, z.bound)
	}
	return err
}

func (z *zstdReader) release() {
	z.br.Reset(nil)
	_ = z.d.Reset(nil)
}

// onlyReader hides everything but Read, so that the zstd decoder streams
// instead of taking its whole-buffer shortcut (which is DecodeAll).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// snappy: xerial's framing (chunks of a length and a raw block, as Kafka's
// Java client writes them) or one bare block (as librdkafka writes it). A
// snappy block decodes to exactly the length its preamble states, so the
// sum of those lengths is the section's real size: reset checks it against
// the limit before anything is decoded, and the reader decodes one block
// at a time.
type snappyReader struct {
	chunks []byte // xerial chunks not decoded yet
	block  []byte // a bare block not decoded yet
	buf    []byte // the block decoded last; buf[at:] is unread
	at     int
}

// maxPooledSnappyBlock: a reader whose buffer grew past this (a bare block
// of that size) is not pooled, so that one large batch does not pin its
// size for good.
const maxPooledSnappyBlock = 1 << 20

var snappyReaders = sync.Pool{New: func() any { return &snappyReader{} }}

var xerialHeader = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}

const (
	xerialMagicSize = 8 // the part of the header that identifies the framing
	xerialBlockSize = 32 << 10
)

// reset starts reading src and returns its decompressed size.
func (s *snappyReader) reset(src []byte, limit int) (int, error) {
	s.buf, s.at = s.buf[:0], 0
	if len(src) < xerialMagicSize || !bytes.Equal(src[:xerialMagicSize], xerialHeader[:xerialMagicSize]) {
		n, err := s2.DecodedLen(src)
		if err != nil {
			return 0, err
		}
		if n > limit {
			return 0, fmt.Errorf("%w: block of %d bytes exceeds %d", ErrTooLarge, n, limit)
		}
		s.block = src
		return n, nil
	}
	if len(src) < len(xerialHeader) {
		return 0, fmt.Errorf("xerial header truncated at %d bytes", len(src))
	}
	total := 0
	for rest := src[len(xerialHeader):]; len(rest) > 0; {
		chunk, next, err := xerialChunk(rest)
		if err != nil {
			return 0, err
		}
		n, err := s2.DecodedLen(chunk)
		if err != nil {
			return 0, err
		}
		if total += n; total > limit {
			return 0, tooLarge(limit)
		}
		rest = next
	}
	s.chunks = src[len(xerialHeader):]
	return total, nil
}

// next returns the next block to decode, and false after the last.
func (s *snappyReader) next() ([]byte, bool) {
	switch {
	case s.block != nil:
		b := s.block
		s.block = nil
		return b, true
	case len(s.chunks) > 0:
		b, rest, _ := xerialChunk(s.chunks) // checked by reset
		s.chunks = rest
		return b, true
	}
	return nil, false
}

func (s *snappyReader) Read(p []byte) (int, error) {
	for s.at == len(s.buf) {
		block, ok := s.next()
		if !ok {
			return 0, io.EOF
		}
		n, _ := s2.DecodedLen(block) // checked by reset
		dec, err := snappy.DecodeStrict(slices.Grow(s.buf[:0], n)[:n], block)
		if err != nil {
			return 0, err
		}
		s.buf, s.at = dec, 0
	}
	n := copy(p, s.buf[s.at:])
	s.at += n
	return n, nil
}

// appendAll appends everything to dst, total bytes (reset's answer),
// decoding each block in place.
func (s *snappyReader) appendAll(dst []byte, total int) ([]byte, error) {
	out := slices.Grow(dst, total)
	for {
		block, ok := s.next()
		if !ok {
			return out, nil
		}
		// reset checked that every block fits in total.
		dec, err := snappy.DecodeStrict(out[len(out):cap(out)], block)
		if err != nil {
			return nil, err
		}
		out = out[:len(out)+len(dec)]
	}
}

// release forgets the input and reports whether s may be pooled.
func (s *snappyReader) release() bool {
	s.chunks, s.block, s.buf, s.at = nil, nil, s.buf[:0], 0
	return cap(s.buf) <= maxPooledSnappyBlock
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
