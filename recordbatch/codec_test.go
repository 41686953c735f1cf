package recordbatch_test

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy/xerial"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/strata-log/strata/recordbatch"
)

// encodeRecordsSection returns the uncompressed records section of recs.
func encodeRecordsSection(t *testing.T, recs []recordbatch.Record) (header, records []byte) {
	t.Helper()
	buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return buf[:recordbatch.HeaderSize], buf[recordbatch.HeaderSize:]
}

// compressedSection encodes recs with c and returns the records section.
func compressedSection(t *testing.T, c recordbatch.Compression, recs []recordbatch.Record) []byte {
	t.Helper()
	buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return buf[recordbatch.HeaderSize:]
}

// batchWith builds a batch from a header and a records section compressed
// by another implementation.
func batchWith(header []byte, c recordbatch.Compression, section []byte) []byte {
	b := append(bytes.Clone(header), section...)
	binary.BigEndian.PutUint16(b[21:], uint16(c))
	return withCRC(b)
}

// Our compressed output must be readable by independent decoders, and
// their output by us: the codecs are the wire format.
func TestCodecInterop(t *testing.T) {
	recs := sampleRecords() // > 32 KiB: several xerial chunks, several lz4 blocks
	header, plain := encodeRecordsSection(t, recs)
	if len(plain) < 3*32<<10 {
		t.Fatalf("records section only %d bytes", len(plain))
	}
	read := func(name string, r io.Reader, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out
	}
	check := func(name string, got []byte) {
		t.Helper()
		if !bytes.Equal(got, plain) {
			t.Errorf("%s: decompressed %d bytes differ from the %d-byte records section", name, len(got), len(plain))
		}
	}

	t.Run("gzip", func(t *testing.T) {
		sec := compressedSection(t, recordbatch.CompressionGzip, recs)
		if !bytes.HasPrefix(sec, []byte{0x1f, 0x8b}) {
			t.Errorf("no gzip magic: % x", sec[:4])
		}
		zr, err := stdgzip.NewReader(bytes.NewReader(sec))
		check("stdlib gzip reading ours", read("gzip", zr, err))
		var w bytes.Buffer
		zw := stdgzip.NewWriter(&w)
		zw.Write(plain)
		zw.Close()
		decodeAndCheck(t, batchWith(header, recordbatch.CompressionGzip, w.Bytes()), recs)
	})
	t.Run("snappy", func(t *testing.T) {
		sec := compressedSection(t, recordbatch.CompressionSnappy, recs)
		wantHeader := []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
		if !bytes.HasPrefix(sec, wantHeader) {
			t.Errorf("no xerial header: % x", sec[:16])
		}
		// Chunks hold at most 32 KiB of input, like SnappyOutputStream's.
		chunks := 0
		for rest := sec[16:]; len(rest) > 0; chunks++ {
			n := binary.BigEndian.Uint32(rest)
			dl, err := s2.DecodedLen(rest[4 : 4+n])
			if err != nil || dl > 32<<10 {
				t.Fatalf("chunk %d: decoded length %d %v", chunks, dl, err)
			}
			rest = rest[4+n:]
		}
		if want := (len(plain) + 32<<10 - 1) / (32 << 10); chunks != want {
			t.Errorf("%d chunks, want %d", chunks, want)
		}
		got, err := xerial.Decode(sec)
		if err != nil {
			t.Fatal(err)
		}
		check("klauspost xerial reading ours", got)
		// Theirs (xerial framing), and a bare snappy block.
		decodeAndCheck(t, batchWith(header, recordbatch.CompressionSnappy, xerial.Encode(nil, plain)), recs)
		decodeAndCheck(t, batchWith(header, recordbatch.CompressionSnappy, s2.EncodeSnappy(nil, plain)), recs)
		// Truncated xerial framing is corrupt, not a panic.
		for _, cut := range []int{1, 4, len(sec) - 17} {
			bad := batchWith(header, recordbatch.CompressionSnappy, sec[:len(sec)-cut])
			if _, _, err := recordbatch.Decode(bad); err == nil {
				t.Errorf("xerial cut by %d: no error", cut)
			}
		}
	})
	t.Run("lz4", func(t *testing.T) {
		sec := compressedSection(t, recordbatch.CompressionLZ4, recs)
		// Frame magic, FLG = version 01 + block independence, BD = 64 KiB.
		if !bytes.HasPrefix(sec, []byte{0x04, 0x22, 0x4d, 0x18, 0x60, 0x40}) {
			t.Errorf("lz4 frame header % x", sec[:7])
		}
		check("pierrec lz4 reading ours", read("lz4", lz4.NewReader(bytes.NewReader(sec)), nil))
		var w bytes.Buffer
		zw := lz4.NewWriter(&w) // default: 4 MiB blocks, content checksum
		zw.Write(plain)
		zw.Close()
		decodeAndCheck(t, batchWith(header, recordbatch.CompressionLZ4, w.Bytes()), recs)
	})
	t.Run("zstd", func(t *testing.T) {
		sec := compressedSection(t, recordbatch.CompressionZstd, recs)
		if !bytes.HasPrefix(sec, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Errorf("no zstd magic: % x", sec[:4])
		}
		zr, err := zstd.NewReader(bytes.NewReader(sec))
		check("zstd stream reading ours", read("zstd", zr, err))
		zr.Close()
		var w bytes.Buffer
		zw, _ := zstd.NewWriter(&w, zstd.WithEncoderLevel(zstd.SpeedFastest))
		zw.Write(plain)
		zw.Close()
		decodeAndCheck(t, batchWith(header, recordbatch.CompressionZstd, w.Bytes()), recs)
	})
}

func decodeAndCheck(t *testing.T, buf []byte, want []recordbatch.Record) {
	t.Helper()
	h, got, err := recordbatch.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, h, want, got)
}

func TestConcurrentEncodeDecode(t *testing.T) {
	done := make(chan error)
	for _, c := range codecs {
		go func() {
			var err error
			defer func() { done <- err }()
			for i := range 20 {
				var buf []byte
				recs := sampleRecords()[:1+i%5]
				if buf, err = recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: c, Records: recs}); err != nil {
					return
				}
				if _, _, err = recordbatch.Decode(buf); err != nil {
					return
				}
			}
		}()
	}
	for range codecs {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestDecompressionLimit(t *testing.T) {
	header, _ := encodeRecordsSection(t, []recordbatch.Record{{Value: []byte("v")}})
	// A snappy block whose length prefix claims more than the limit.
	claim := binary.AppendUvarint(nil, recordbatch.MaxDecompressedBytes+1)
	block := append(claim, 0x00, 'x')
	for name, sec := range map[string][]byte{
		"raw block": block,
		"xerial":    append(append([]byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}, 0, 0, 0, byte(len(block))), block...),
	} {
		_, _, err := recordbatch.Decode(batchWith(header, recordbatch.CompressionSnappy, sec))
		if !errors.Is(err, recordbatch.ErrTooLarge) {
			t.Errorf("%s: %v, want ErrTooLarge", name, err)
		}
		t.Log(err)
	}
}
