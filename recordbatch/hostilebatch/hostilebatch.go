// Package hostilebatch builds malformed and malicious record batches for
// tests of the code that must refuse them: decompression bombs and batches
// whose header lies about their records. Every batch it returns has a valid
// header, size and CRC, so it gets past recordbatch.Verify; what is wrong
// is inside.
package hostilebatch

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

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

// GzipBomb returns a one-record batch whose gzip records section inflates
// to zeros bytes of zeros (rounded up to MiB). It is a multi-member gzip
// stream (members of up to 16 MiB, repeated), which readers must accept
// and which costs a sixteenth of compressing the whole; the last member's
// ISIZE claims its 16 MiB.
func GzipBomb(zeros int) []byte {
	const memberZeros = 16 << 20
	member := func(n int) []byte {
		var out bytes.Buffer
		w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
		writeZeros(w, n)
		if err := w.Close(); err != nil {
			panic("hostilebatch: " + err.Error())
		}
		return out.Bytes()
	}
	full := member(min(zeros, memberZeros))
	var section []byte
	for ; zeros >= memberZeros; zeros -= memberZeros {
		section = append(section, full...)
	}
	if zeros > 0 {
		section = append(section, member(zeros)...)
	}
	return WithSection(recordbatch.CompressionGzip, section)
}

// ZstdBomb returns a one-record batch whose zstd records section is one
// frame that decompresses to zeros bytes of zeros and declares that size
// (the frame content size) in its header.
func ZstdBomb(zeros int) []byte {
	var out bytes.Buffer
	w, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic("hostilebatch: " + err.Error())
	}
	w.ResetContentSize(&out, int64(zeros))
	writeZeros(w, zeros)
	if err := w.Close(); err != nil {
		panic("hostilebatch: " + err.Error())
	}
	return WithSection(recordbatch.CompressionZstd, out.Bytes())
}

func writeZeros(w interface{ Write([]byte) (int, error) }, n int) {
	chunk := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := w.Write(chunk[:k]); err != nil {
			panic("hostilebatch: " + err.Error())
		}
		n -= k
	}
}
