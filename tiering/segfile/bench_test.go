package segfile_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

// benchBatches: 32 MiB of 16 KiB uncompressed batches (100 records of
// ~150 bytes), stamped with dense offsets, as an uploader streams them.
func benchBatches(b *testing.B) [][]byte {
	recs := make([]recordbatch.Record, 100)
	for i := range recs {
		recs[i] = recordbatch.Record{TimestampMs: int64(1_700_000_000_000 + i), Key: []byte("key"), Value: bytes.Repeat([]byte{byte(i)}, 150)}
	}
	tmpl, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
	if err != nil {
		b.Fatal(err)
	}
	n := (32 << 20) / len(tmpl)
	out := make([][]byte, n)
	for i := range out {
		out[i] = bytes.Clone(tmpl)
		recordbatch.SetBaseOffset(out[i], int64(i*len(recs)))
	}
	return out
}

func dataBytes(batches [][]byte) int64 {
	var n int64
	for _, b := range batches {
		n += int64(len(b))
	}
	return n
}

func BenchmarkWrite(b *testing.B) {
	batches := benchBatches(b)
	b.SetBytes(dataBytes(batches))
	b.ResetTimer()
	for range b.N {
		w, err := segfile.NewWriter(io.Discard, segfile.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for _, batch := range batches {
			if err := w.Append(batch); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.Finish(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	obj, sum := writeSegment(b, benchBatches(b), segfile.Options{})
	// Reads straight from memory (no copy), to measure Verify itself.
	r := segfile.FromReaderAt(bytes.NewReader(obj))
	b.SetBytes(sum.Size)
	b.ResetTimer()
	for range b.N {
		if _, err := segfile.Verify(ctx, r, sum.Size, segfile.Auth{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIterate is the read path's per-batch check over a data range.
func BenchmarkIterate(b *testing.B) {
	obj, sum := writeSegment(b, benchBatches(b), segfile.Options{})
	tail, err := segfile.ReadTail(ctx, segfile.Bytes(obj), sum.IndexPos, sum.Size, segfile.Auth{})
	if err != nil {
		b.Fatal(err)
	}
	data := obj[segfile.HeaderSize:sum.IndexPos]
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		it := tail.Batches(data, segfile.HeaderSize)
		for it.Next() {
		}
		if !it.Done() {
			b.Fatal(it.Err())
		}
	}
}

// BenchmarkReadTail: parsing the tail of a 256 MiB segment's size
// (256 index entries) with a typical footer.
func BenchmarkReadTail(b *testing.B) {
	obj, sum := writeSegment(b, benchBatches(b), segfile.Options{IndexIntervalBytes: 128 << 10, Footer: testFooter()})
	tailBytes := obj[sum.IndexPos:]
	b.SetBytes(int64(len(tailBytes)))
	b.ResetTimer()
	for range b.N {
		if _, err := segfile.ParseTail(tailBytes, sum.Size, segfile.Auth{}); err != nil {
			b.Fatal(err)
		}
	}
}
