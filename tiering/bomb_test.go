package tiering

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/strata-log/strata/internal/racedetect"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

// A time lookup in a tiered segment of decompression bombs (each a zstd
// batch of a few hundred bytes holding one record of 8 MiB, its header's
// max timestamp past the time asked and its record older, so every batch
// is scanned) streams each one: it allocates the reader's chunks and
// nothing the bombs inflate to.
func TestOffsetForTimeOverBombsIsBounded(t *testing.T) {
	const bombs, ts = 10, int64(1_700_000_000_000)
	var batches [][]byte
	for i := range bombs {
		b := hostilebatch.ZstdBomb(8 << 20)
		binary.BigEndian.PutUint64(b[35:], uint64(ts)) // max timestamp; the record's is 0
		b = hostilebatch.Fix(b)
		recordbatch.SetBaseOffset(b, int64(i))
		batches = append(batches, b)
	}
	st := memstore.New(memstore.Options{})
	s := putSegment(t, st, "t/p0/bombs.seg", 0, false, 1<<20, batches)
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: 8 * testChunk})
	lookup := func() {
		if off, _, found, err := r.OffsetForTime(bg, s.ref, ts, recordbatch.MaxDecompressedBytes); err != nil || found {
			t.Fatalf("OffsetForTime(%d) = %d, %t, %v; want not found: no record is that new", ts, off, found, err)
		}
	}
	lookup() // warm the caches and pools
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	lookup()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a time lookup through %d tiered bombs of 8 MiB allocated %.1f KiB", bombs, float64(allocated)/(1<<10))
	if !racedetect.Enabled && allocated > 2<<20 {
		t.Errorf("the lookup allocated %d bytes", allocated)
	}
}
