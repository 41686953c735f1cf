package recordbatch_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

// benchRecords: a 16 KiB batch of 1 KiB records, values compressible
// about like JSON logs (random words from a small vocabulary).
func benchRecords() []recordbatch.Record {
	rng := rand.New(rand.NewPCG(7, 7))
	words := []string{"user", "id", "event", "click", "view", "timestamp", "session", "\"", ":", ",", "{", "}", "value", "page", "ok"}
	recs := make([]recordbatch.Record, 16)
	for i := range recs {
		v := make([]byte, 0, 1024)
		for len(v) < 1024 {
			v = append(v, words[rng.IntN(len(words))]...)
			v = fmt.Appendf(v, "%d", rng.IntN(1000))
		}
		recs[i] = recordbatch.Record{
			TimestampMs: 1_700_000_000_000 + int64(i),
			Key:         fmt.Appendf(nil, "key-%08d", rng.IntN(1e8)),
			Value:       v[:1024],
			Headers:     []recordbatch.Header{{Key: "trace", Value: []byte("0123456789abcdef")}},
		}
	}
	return recs
}

const benchBytes = 16 * 1024

func BenchmarkVerify(b *testing.B) {
	buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: 1, Records: benchRecords()})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := recordbatch.Verify(buf); err != nil {
			b.Fatal(err)
		}
		recordbatch.SetBaseOffset(buf, 42)
	}
}

func BenchmarkEncode(b *testing.B) {
	recs := benchRecords()
	for _, c := range codecs {
		b.Run(c.String(), func(b *testing.B) {
			batch := &recordbatch.Batch{ProducerID: 1, Compression: c, Records: recs}
			var dst []byte
			b.SetBytes(benchBytes)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = recordbatch.AppendEncode(dst[:0], batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(dst)), "batch-bytes")
		})
	}
}

func BenchmarkBuilder(b *testing.B) {
	recs := benchRecords()
	for _, c := range codecs {
		b.Run(c.String(), func(b *testing.B) {
			bld := recordbatch.NewBuilder(c)
			b.SetBytes(benchBytes)
			b.ReportAllocs()
			for b.Loop() {
				bld.Reset()
				for _, r := range recs {
					bld.Append(r)
				}
				if _, err := bld.Build(1, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	benchEachCodec(b, func(buf []byte) error {
		_, _, err := recordbatch.Decode(buf)
		return err
	})
}

// benchEachCodec runs op on the benchRecords batch of each codec.
func benchEachCodec(b *testing.B, op func(buf []byte) error) {
	recs := benchRecords()
	for _, c := range codecs {
		b.Run(c.String(), func(b *testing.B) {
			buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: 1, Compression: c, Records: recs})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(benchBytes)
			b.ReportAllocs()
			for b.Loop() {
				if err := op(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPartitionForKey(b *testing.B) {
	key := []byte("user-1234567890")
	for b.Loop() {
		recordbatch.PartitionForKey(key, 64)
	}
}

// BenchmarkScanRecords is a produce's validation of a 16 KiB batch: the
// records section checked (decompressed as a stream) without keeping it.
func BenchmarkScanRecords(b *testing.B) {
	benchEachCodec(b, func(buf []byte) error {
		h, err := recordbatch.ParseHeader(buf)
		if err == nil {
			_, err = recordbatch.ScanRecords(buf, h, 1<<20, func(int, recordbatch.RecordInfo) error { return nil })
		}
		return err
	})
}
