// Package hostilebatch builds malformed and malicious record batches for
// tests of the code that must refuse them: decompression bombs and batches
// whose header lies about their records. Every batch it returns has a valid
// header, size and CRC, so it gets past recordbatch.Verify; what is wrong
// is inside.
package hostilebatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/strata-log/strata/recordbatch"
)

// Byte offsets of the v2 header fields this package rewrites.
const (
	offBatchLength     = 8
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offRecordCount     = 57
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is the header of a valid one-record batch (no producer id).
func header() []byte {
	buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		Records: []recordbatch.Record{{Value: []byte("v")}}})
	if err != nil {
		panic("hostilebatch: " + err.Error()) // a fixed valid batch: cannot fail
	}
	return buf[:recordbatch.HeaderSize:recordbatch.HeaderSize]
}

// WithSection returns a batch with header h's fields (RecordCount 1,
// LastOffsetDelta 0), compression c and section as its records section,
// its length and CRC fixed up.
func WithSection(c recordbatch.Compression, section []byte) []byte {
	b := append(header(), section...)
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(c))
	return Fix(b)
}

// Fix recomputes a batch's length and CRC after its bytes were edited.
func Fix(b []byte) []byte {
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

// Claim returns a valid batch of the given records whose header claims
// recordCount records and lastOffsetDelta, e.g. 2^31-1 of each for a
// 61-byte batch that would move a log's next offset by two billion.
func Claim(records []recordbatch.Record, recordCount, lastOffsetDelta int32) []byte {
	b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: records})
	if err != nil {
		panic("hostilebatch: " + err.Error())
	}
	binary.BigEndian.PutUint32(b[offRecordCount:], uint32(recordCount))
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(lastOffsetDelta))
	return Fix(b)
}

// The bombs below are valid one-record batches whose record's value is
// zeros bytes of zeros: their framing and counts pass every check, so only
// a bound on the decompressed bytes (or on their ratio to the batch's
// size) refuses them. Each is built without holding the zeros in memory
// (at most 16 MiB of them), compressed as tightly as its codec allows.

// recordPrefix and recordSuffix frame a record of valueBytes bytes of
// value: its length, attributes 0, timestamp and offset deltas 0, a null
// key, the value's length; and after the value, no headers.
func recordPrefix(valueBytes int) []byte {
	body := binary.AppendVarint([]byte{0, 0, 0, 1}, int64(valueBytes)) // attributes, deltas, key -1
	bodyLen := len(body) + valueBytes + 1
	return append(binary.AppendVarint(nil, int64(bodyLen)), body...)
}

var recordSuffix = []byte{0} // header count

// GzipBomb returns a one-record batch whose gzip records section inflates
// to a record of zeros bytes of zeros. It is a multi-member gzip stream
// (members of up to 16 MiB of zeros, the middle ones repeated), which
// readers must accept and which costs a sixteenth of compressing the
// whole; the last member's ISIZE claims its own size only.
func GzipBomb(zeros int) []byte {
	const memberZeros = 16 << 20
	member := func(prefix []byte, n int, suffix []byte) []byte {
		var out bytes.Buffer
		w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
		writeAndClose(w, prefix, n, suffix)
		return out.Bytes()
	}
	first := min(zeros, memberZeros)
	section := member(recordPrefix(zeros), first, nil)
	var full []byte
	left := zeros - first
	for ; left > memberZeros; left -= memberZeros {
		if full == nil {
			full = member(nil, memberZeros, nil)
		}
		section = append(section, full...)
	}
	section = append(section, member(nil, left, recordSuffix)...)
	return WithSection(recordbatch.CompressionGzip, section)
}

// ZstdBomb returns a one-record batch whose zstd records section is one
// frame that decompresses to a record of zeros bytes of zeros and declares
// that size (the frame content size) in its header.
func ZstdBomb(zeros int) []byte {
	prefix := recordPrefix(zeros)
	var out bytes.Buffer
	w, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic("hostilebatch: " + err.Error())
	}
	w.ResetContentSize(&out, int64(len(prefix)+zeros+len(recordSuffix)))
	writeAndClose(w, prefix, zeros, recordSuffix)
	return WithSection(recordbatch.CompressionZstd, out.Bytes())
}

// Lz4Bomb returns a one-record batch whose lz4 records section (one frame
// of 4 MiB blocks, the largest the format has) decompresses to a record of
// zeros bytes of zeros. LZ4 cannot inflate more than about 255 times.
func Lz4Bomb(zeros int) []byte {
	var out bytes.Buffer
	w := lz4.NewWriter(&out)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block4Mb), lz4.ChecksumOption(false), lz4.ConcurrencyOption(1),
		lz4.CompressionLevelOption(lz4.Level9)); err != nil {
		panic("hostilebatch: " + err.Error())
	}
	writeAndClose(w, recordPrefix(zeros), zeros, recordSuffix)
	return WithSection(recordbatch.CompressionLZ4, out.Bytes())
}

// SnappyBomb returns a one-record batch whose snappy records section (in
// xerial's framing, as Kafka's Java client writes it) an S2 decoder
// (klauspost/compress/s2) decompresses to a record of zeros bytes of
// zeros. Standard snappy cannot inflate more than about 21 times; these
// blocks use S2's repeat codes and inflate thousands of times. Standard
// decoders (Kafka's clients, Strata's) refuse them as corrupt, so a broker
// that stored one would hand every such consumer a batch it cannot read.
// Blocks hold up to 4 MiB of zeros, the middle ones repeated.
func SnappyBomb(zeros int) []byte {
	return snappyZeros(zeros, s2.EncodeBest)
}

// SnappyZeros is SnappyBomb in standard snappy: the largest inflation the
// format allows (about 21 times), valid for every decoder.
func SnappyZeros(zeros int) []byte {
	return snappyZeros(zeros, s2.EncodeSnappy)
}

func snappyZeros(zeros int, encode func(dst, src []byte) []byte) []byte {
	const blockZeros = 4 << 20
	block := func(prefix []byte, n int, suffix []byte) []byte {
		raw := append(append(append([]byte(nil), prefix...), make([]byte, n)...), suffix...)
		enc := encode(nil, raw)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(enc))), enc...)
	}
	section := []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
	first := min(zeros, blockZeros)
	section = append(section, block(recordPrefix(zeros), first, nil)...)
	var full []byte
	left := zeros - first
	for ; left > blockZeros; left -= blockZeros {
		if full == nil {
			full = block(nil, blockZeros, nil)
		}
		section = append(section, full...)
	}
	section = append(section, block(nil, left, recordSuffix)...)
	return WithSection(recordbatch.CompressionSnappy, section)
}

// Bomb is a valid one-record batch of codec c whose record is zeros bytes
// of zeros, inflating as far as the codec allows: GzipBomb, SnappyZeros
// (standard snappy: about 21 times), Lz4Bomb, ZstdBomb.
func Bomb(c recordbatch.Compression, zeros int) []byte {
	switch c {
	case recordbatch.CompressionGzip:
		return GzipBomb(zeros)
	case recordbatch.CompressionSnappy:
		return SnappyZeros(zeros)
	case recordbatch.CompressionLZ4:
		return Lz4Bomb(zeros)
	case recordbatch.CompressionZstd:
		return ZstdBomb(zeros)
	}
	panic(fmt.Sprintf("hostilebatch: no bomb of codec %s", c))
}

// Codecs are the codecs Bomb has a batch of.
var Codecs = []recordbatch.Compression{recordbatch.CompressionGzip, recordbatch.CompressionSnappy,
	recordbatch.CompressionLZ4, recordbatch.CompressionZstd}

// BombCodecs are the codecs whose Bomb inflates thousands of times, past
// any max.compression.ratio a topic should have (standard snappy cannot).
var BombCodecs = []recordbatch.Compression{recordbatch.CompressionGzip, recordbatch.CompressionLZ4,
	recordbatch.CompressionZstd}

// writeAndClose writes prefix, zeros bytes of zeros and suffix to w and
// closes it.
func writeAndClose(w io.WriteCloser, prefix []byte, zeros int, suffix []byte) {
	mustWrite(w, prefix)
	writeZeros(w, zeros)
	mustWrite(w, suffix)
	if err := w.Close(); err != nil {
		panic("hostilebatch: " + err.Error())
	}
}

func mustWrite(w io.Writer, b []byte) {
	if _, err := w.Write(b); err != nil {
		panic("hostilebatch: " + err.Error())
	}
}

func writeZeros(w io.Writer, n int) {
	chunk := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, len(chunk))
		mustWrite(w, chunk[:k])
		n -= k
	}
}
