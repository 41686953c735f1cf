package recordbatch_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// bombZeros is how much a test bomb inflates to: far beyond any bound, and
// large enough that allocating it would show in the memory numbers.
const bombZeros = 256 << 20

// Unbounded, a 300 KiB gzip batch (300 MiB of zeros) and a 22 KiB zstd
// batch (200 MiB) made the decoder allocate the whole output (from the
// gzip ISIZE and the zstd frame content size) before failing.
// With a bound, they fail once the output passes it, having allocated about
// twice the bound (plus zstd's window) and never the bomb.
func TestDecompressionBombsRefusedWithinBound(t *testing.T) {
	const limit = 1 << 20
	for name, bomb := range map[string]func(int) []byte{"gzip": hostilebatch.GzipBomb, "zstd": hostilebatch.ZstdBomb} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			batch := bomb(bombZeros)
			t.Logf("%d-byte batch inflating to %d MiB, built in %v", len(batch), bombZeros>>20, time.Since(start).Round(time.Millisecond))
			h, err := recordbatch.Verify(batch)
			if err != nil {
				t.Fatal(err)
			}
			decode := func() error { _, _, err := recordbatch.DecodeLimit(batch, limit); return err }
			// A time lookup (ListOffsets) over a stored bomb.
			lookup := func() error {
				_, _, _, err := recordbatch.OffsetForTime(batch, h, h.MaxTimestamp, 0, limit)
				return err
			}
			scan := func() error {
				_, err := recordbatch.ScanRecords(batch, h, limit, func(int, recordbatch.RecordInfo) error { return nil })
				return err
			}
			for what, f := range map[string]func() error{"DecodeLimit": decode, "ScanRecords": scan, "OffsetForTime": lookup} {
				if err := f(); !errors.Is(err, recordbatch.ErrTooLarge) {
					t.Fatalf("%s: %v, want ErrTooLarge", what, err)
				}
				// Warm the pools, then measure one more call.
				allocated := allocatedBy(func() { _ = f() })
				t.Logf("%s: refused after allocating %.1f MiB", what, float64(allocated)/(1<<20))
				// 2× the bound for the output, zstd's 8 MiB window ring,
				// codec state; the bomb is 256 MiB.
				if bound := uint64(16 << 20); allocated > bound {
					t.Errorf("%s allocated %d bytes, want at most %d", what, allocated, bound)
				}
			}
			err = decode()
			t.Log(err)
		})
	}
}

// The bound is on the output, not a rule of thumb on the ratio: a batch
// that inflates to exactly the bound decodes, one byte more does not.
func TestDecompressionBoundIsExact(t *testing.T) {
	recs := []recordbatch.Record{{Value: make([]byte, 100_000)}}
	for _, c := range []recordbatch.Compression{recordbatch.CompressionGzip, recordbatch.CompressionSnappy, recordbatch.CompressionLZ4, recordbatch.CompressionZstd} {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: c, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		_, plain := encodeRecordsSection(t, recs)
		if _, _, err := recordbatch.DecodeLimit(buf, len(plain)); err != nil {
			t.Errorf("%s at the bound: %v", c, err)
		}
		if _, _, err := recordbatch.DecodeLimit(buf, len(plain)-1); !errors.Is(err, recordbatch.ErrTooLarge) {
			t.Errorf("%s one byte over the bound: %v, want ErrTooLarge", c, err)
		}
	}
}

// allocatedBy is the bytes f allocates (TotalAlloc grows even if the GC
// frees them again).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
