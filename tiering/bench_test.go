package tiering

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// benchFetchBytes is a consumer's fetch size (max.partition.fetch.bytes).
const benchFetchBytes = 1 << 20

// benchSegment puts a 32 MiB segment of 16 KiB uncompressed batches (100
// records of ~150 bytes, dense offsets) in a new memstore, authenticated
// (1 MiB blocks) or not, and returns the offsets a consumer reading it
// whole fetches from, benchFetchBytes at a time.
func benchSegment(b *testing.B, authenticated bool) (*memstore.Store, testSeg, []int64) {
	b.Helper()
	recs := make([]recordbatch.Record, 100)
	for i := range recs {
		recs[i] = recordbatch.Record{TimestampMs: int64(1_700_000_000_000 + i), Key: []byte("key"), Value: bytes.Repeat([]byte{byte(i)}, 150)}
	}
	tmpl, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
	if err != nil {
		b.Fatal(err)
	}
	batches := make([][]byte, (32<<20)/len(tmpl))
	for i := range batches {
		batches[i] = bytes.Clone(tmpl)
		recordbatch.SetBaseOffset(batches[i], int64(i*len(recs)))
	}
	st := memstore.New(memstore.Options{})
	opts := segfile.Options{}
	if authenticated {
		opts.Key, opts.Name = tierKey, "t/bench/0.seg"
	}
	s := putSegmentWith(b, st, "t/bench/0.seg", opts, batches)
	perFetch := int64(benchFetchBytes/len(tmpl)) * int64(len(recs))
	var plan []int64
	for off := int64(0); off <= s.ref.LastOffset; off += perFetch {
		plan = append(plan, off)
	}
	return st, s, plan
}

// readPass fetches the whole segment as planned.
func readPass(b *testing.B, r *Reader, s testSeg, plan []int64) {
	for _, off := range plan {
		got, err := r.Fetch(bg, s.ref, off, benchFetchBytes)
		if err != nil || len(got) == 0 {
			b.Fatalf("offset %d: %d bytes, %v", off, len(got), err)
		}
	}
}

// benchAuth names the two kinds of segment the benchmarks read.
var benchAuth = []struct {
	name          string
	authenticated bool
}{{"unauthenticated", false}, {"authenticated", true}}

// BenchmarkFetchWarm: a consumer reading a segment whose chunks are all
// cached: the cost of the caches, the copies and the batch checks (an
// authenticated segment's blocks were checked when the chunks arrived).
func BenchmarkFetchWarm(b *testing.B) {
	for _, a := range benchAuth {
		b.Run(a.name, func(b *testing.B) {
			st, s, plan := benchSegment(b, a.authenticated)
			r := NewReader(st, ReaderConfig{CacheBytes: 64 << 20, Key: tierKey}, nil)
			defer r.Close()
			readPass(b, r, s, plan)
			b.SetBytes(s.ref.IndexPos)
			b.ResetTimer()
			for range b.N {
				readPass(b, r, s, plan)
			}
		})
	}
}

// BenchmarkFetchCold: a consumer reading a segment no chunk of which is
// cached, through a new Reader per pass; with the store answering at
// memory speed, and with each GET taking 5 ms, as an object store's
// first byte does, with and without read-ahead; unauthenticated, and
// authenticated (each chunk's blocks hashed as it arrives).
func BenchmarkFetchCold(b *testing.B) {
	for _, c := range []struct {
		latency       time.Duration
		readAhead     int
		authenticated bool
	}{{0, 0, false}, {0, 0, true}, {5 * time.Millisecond, 0, false}, {5 * time.Millisecond, 0, true}, {5 * time.Millisecond, -1, false}} {
		ra := "off"
		if c.readAhead >= 0 {
			ra = fmt.Sprint(ReaderConfig{ReadAhead: c.readAhead}.withDefaults().ReadAhead)
		}
		name := fmt.Sprintf("latency=%v/readahead=%s/authenticated=%t", c.latency, ra, c.authenticated)
		b.Run(name, func(b *testing.B) {
			st, s, plan := benchSegment(b, c.authenticated)
			if c.latency > 0 {
				st.SetHook(func(memstore.Call) memstore.Fault { return memstore.Fault{Delay: c.latency} })
			}
			b.SetBytes(s.ref.IndexPos)
			b.ResetTimer()
			for range b.N {
				r := NewReader(st, ReaderConfig{ReadAhead: c.readAhead, Key: tierKey}, nil)
				readPass(b, r, s, plan)
				b.StopTimer()
				r.Close()
				b.StartTimer()
			}
		})
	}
}
