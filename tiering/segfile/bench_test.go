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

// benchVersions are the two formats: unauthenticated (version 1) and
// authenticated with the default 1 MiB blocks (version 2).
var benchVersions = []struct {
	name string
	opts func(testing.TB, segfile.Options) segfile.Options
}{
	{"unauthenticated", func(_ testing.TB, o segfile.Options) segfile.Options { return o }},
	{"authenticated", func(b testing.TB, o segfile.Options) segfile.Options {
		return authenticated(b, o, "c/t/topic/3/bench.seg", segfile.DefaultBlockBytes)
	}},
}

func BenchmarkWrite(b *testing.B) {
	for _, v := range benchVersions {
		b.Run(v.name, func(b *testing.B) { benchmarkWrite(b, v.opts(b, segfile.Options{})) })
	}
}

func benchmarkWrite(b *testing.B, opts segfile.Options) {
	batches := benchBatches(b)
	b.SetBytes(dataBytes(batches))
	b.ResetTimer()
	for range b.N {
		w, err := segfile.NewWriter(io.Discard, opts)
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
	for _, v := range benchVersions {
		b.Run(v.name, func(b *testing.B) {
			opts := v.opts(b, segfile.Options{})
			obj, sum := writeSegment(b, benchBatches(b), opts)
			// Reads straight from memory (no copy), to measure Verify itself.
			r := segfile.FromReaderAt(bytes.NewReader(obj))
			b.SetBytes(sum.Size)
			b.ResetTimer()
			for range b.N {
				if _, err := segfile.Verify(ctx, r, sum.Size, authOf(opts)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCatchUpRead: a consumer catching up reads a whole 32 MiB
// segment in 1 MiB fetches (ReadFetch, each through a reader that copies
// its range, as a ranged GET's body does), unauthenticated and
// authenticated. Every fetch of the authenticated object hashes the
// blocks it reads (a fetch starts at an index entry, so consecutive
// fetches share a block): the cost when nothing authenticated the bytes
// before, as in compaction's and scrub's reads; the tier reader hashes
// each chunk once as it downloads (tiering's BenchmarkFetch*).
func BenchmarkCatchUpRead(b *testing.B) {
	for _, v := range benchVersions {
		b.Run(v.name, func(b *testing.B) {
			opts := v.opts(b, segfile.Options{})
			batches := benchBatches(b)
			obj, sum := writeSegment(b, batches, opts)
			tail, err := segfile.ReadTail(ctx, segfile.Bytes(obj), sum.IndexPos, sum.Size, authOf(opts))
			if err != nil {
				b.Fatal(err)
			}
			r := segfile.FromReaderAt(bytes.NewReader(obj))
			b.SetBytes(sum.DataBytes)
			b.ResetTimer()
			for range b.N {
				var read int64
				for off := sum.BaseOffset; off <= sum.LastOffset; {
					got, err := tail.ReadFetch(ctx, r, off, 1<<20)
					if err != nil || len(got) == 0 {
						b.Fatalf("offset %d: %d bytes, %v", off, len(got), err)
					}
					read += int64(len(got))
					last := got[len(got)-len(batches[0]):]
					off = baseOf(b, last) + 100
				}
				if read != sum.DataBytes {
					b.Fatalf("read %d of %d bytes", read, sum.DataBytes)
				}
			}
		})
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
	for _, v := range benchVersions {
		b.Run(v.name, func(b *testing.B) {
			opts := v.opts(b, segfile.Options{IndexIntervalBytes: 128 << 10, Footer: testFooter()})
			obj, sum := writeSegment(b, benchBatches(b), opts)
			tailBytes := obj[sum.IndexPos:]
			b.SetBytes(int64(len(tailBytes)))
			b.ResetTimer()
			for range b.N {
				if _, err := segfile.ParseTail(tailBytes, sum.Size, authOf(opts)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
