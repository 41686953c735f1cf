package segfile_test

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

// Random segments (seeded, so failures reproduce: the seed is in the
// subtest name): whatever the batches, codecs, gaps and index spacing,
// Verify agrees with Finish, every batch comes back byte for byte, and
// fetch and time lookups agree with brute force (checkSegment).
func TestPropertyRandomSegments(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 15
	}
	for seed := range int64(n) {
		rng := rand.New(rand.NewSource(seed))
		gen := genConfig{
			batches:       1 + rng.Intn(40),
			maxRecords:    1 + rng.Intn(8),
			maxValue:      rng.Intn(2000),
			codec:         codecs[rng.Intn(len(codecs))],
			compacted:     rng.Intn(2) == 0,
			logAppendTime: rng.Intn(3) == 0,
			horizon:       rng.Intn(3) == 0,
		}
		base := rng.Int63n(1 << 40)
		opts := segfile.Options{BaseOffset: base, Compacted: gen.compacted, IndexIntervalBytes: int64(1 + rng.Intn(8000)), Footer: testFooter()}
		if gen.compacted {
			opts.BaseOffset -= rng.Int63n(10)
		}
		if rng.Intn(2) == 0 {
			opts = authenticated(t, opts, "c/t/topic/3/property.seg", segfile.MinBlockBytes<<rng.Intn(10))
		}
		batches := genBatches(t, rng, base, gen)
		obj, sum := writeSegment(t, batches, opts)
		t.Run("", func(t *testing.T) {
			t.Logf("seed %d: %+v interval %d blocks %d authenticated %t", seed, gen, opts.IndexIntervalBytes, opts.BlockBytes, opts.Key != nil)
			checkSegment(t, obj, sum, batches, opts, rng)
			checkIndexSpacing(t, obj, sum, opts)
			checkRandomDamage(t, obj, authOf(opts), rng)
		})
	}
}

// checkIndexSpacing: an entry for the first batch, and consecutive
// entries less than the interval plus one batch apart.
func checkIndexSpacing(t *testing.T, obj []byte, sum segfile.Summary, opts segfile.Options) {
	interval := opts.IndexIntervalBytes
	tail, err := segfile.ReadTail(ctx, segfile.Bytes(obj), sum.IndexPos, sum.Size, authOf(opts))
	if err != nil {
		t.Fatal(err)
	}
	entries := tail.Index
	if entries[0].Position != segfile.HeaderSize {
		t.Fatalf("first entry at %d", entries[0].Position)
	}
	for i := 1; i <= len(entries); i++ {
		end := sum.IndexPos
		if i < len(entries) {
			end = entries[i].Position
		}
		// The last batch before end is at most one batch: find its size.
		var lastSize int64
		it := tail.Batches(obj[entries[i-1].Position:end], entries[i-1].Position)
		for it.Next() {
			lastSize = int64(len(it.Batch().Bytes))
		}
		if gap := end - entries[i-1].Position; i < len(entries) && gap >= interval+lastSize {
			t.Fatalf("entries %d and %d are %d bytes apart, interval %d, last batch %d", i-1, i, gap, interval, lastSize)
		}
	}
}

// checkRandomDamage overwrites a random run of bytes with different
// values: Verify must say ErrCorrupt.
func checkRandomDamage(t *testing.T, obj []byte, auth segfile.Auth, rng *rand.Rand) {
	for range 20 {
		bad := bytes.Clone(obj)
		at := rng.Intn(len(bad))
		n := 1 + rng.Intn(min(16, len(bad)-at))
		for i := at; i < at+n; i++ {
			bad[i] ^= byte(1 + rng.Intn(255))
		}
		if _, err := segfile.Verify(ctx, segfile.Bytes(bad), int64(len(bad)), auth); !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("%d bytes damaged at %d: Verify returned %v", n, at, err)
		}
	}
}

// Cutting a segment's data range at every byte and feeding it piece by
// piece through Continue yields the same batches as reading it whole: the
// chunked read path (aligned ranged reads) does not depend on where the
// chunks end.
func TestIteratorContinue(t *testing.T) {
	rng := rand.New(rand.NewSource(20))
	batches := genBatches(t, rng, 0, genConfig{batches: 8, maxRecords: 3, maxValue: 40, codec: recordbatch.CompressionLZ4})
	obj, sum := writeSegment(t, batches, segfile.Options{IndexIntervalBytes: 150})
	tail, err := segfile.ReadTail(ctx, segfile.Bytes(obj), sum.IndexPos, sum.Size, segfile.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	data := obj[:sum.IndexPos]
	for chunk := 1; chunk <= 300; chunk += 7 {
		var got [][]byte
		readEnd := int64(segfile.HeaderSize)
		it := tail.Batches(nil, segfile.HeaderSize)
		for !it.Done() {
			if it.Err() != nil {
				t.Fatalf("chunk %d: %v", chunk, it.Err())
			}
			// Next read: the carried-over partial batch plus one chunk.
			readEnd = min(readEnd+int64(chunk), sum.IndexPos)
			it.Continue(data[it.Pos():readEnd])
			for it.Next() {
				got = append(got, it.Batch().Bytes)
			}
		}
		if len(got) != len(batches) {
			t.Fatalf("chunk %d: %d batches, want %d", chunk, len(got), len(batches))
		}
		for i := range got {
			if !bytes.Equal(got[i], batches[i]) {
				t.Fatalf("chunk %d: batch %d differs", chunk, i)
			}
		}
	}
}
