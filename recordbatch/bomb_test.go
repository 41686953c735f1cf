package recordbatch_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/alloctest"
	"github.com/strata-log/strata/internal/racedetect"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
)

// bombZeros is how much a test bomb inflates to: far beyond any bound, and
// large enough that allocating it would show in the memory numbers.
const bombZeros = 256 << 20

// Unbounded, a 300 KiB gzip batch (300 MiB of zeros) and a 22 KiB zstd
// batch (200 MiB) made the decoder allocate the whole output (from the
// gzip ISIZE and the zstd frame content size) before failing. The bombs
// are valid one-record batches, so nothing but the bound refuses them.
// With a bound, Decode fails once the output passes it, having allocated
// about twice the bound; a scan (validation, a time lookup) streams and
// allocates about nothing but its codec's state, and never the bomb.
func TestDecompressionBombsRefusedWithinBound(t *testing.T) {
	const limit = 1 << 20
	for _, c := range hostilebatch.Codecs {
		t.Run(c.String(), func(t *testing.T) {
			start := time.Now()
			batch := hostilebatch.Bomb(c, bombZeros)
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
			for _, f := range []struct {
				what  string
				call  func() error
				bound uint64
			}{
				// 2× the bound for the output, zstd's 8 MiB window ring,
				// codec state; the bomb is 256 MiB.
				{"DecodeLimit", decode, 16 << 20},
				// The window, and the codec's state: both pooled, but a
				// collection may empty the pools.
				{"ScanRecords", scan, codecState(c)},
				{"OffsetForTime", lookup, codecState(c)},
			} {
				if err := f.call(); !errors.Is(err, recordbatch.ErrTooLarge) {
					t.Fatalf("%s: %v, want ErrTooLarge", f.what, err)
				}
				// Warm the pools, then measure one more call.
				allocated := alloctest.Bytes(func() { _ = f.call() })
				t.Logf("%s: refused after allocating %.1f KiB", f.what, float64(allocated)/(1<<10))
				if !racedetect.Enabled && allocated > f.bound {
					t.Errorf("%s allocated %d bytes, want at most %d", f.what, allocated, f.bound)
				}
			}
			t.Log(decode())
		})
	}
}

// codecState bounds what a scan of c allocates: its window and the codec's
// state, at most a zstd window (8 MiB), an lz4 block or a snappy block (4
// MiB, the blocks the bombs use), and a gzip window.
func codecState(c recordbatch.Compression) uint64 {
	const window = 256 << 10
	switch c {
	case recordbatch.CompressionZstd:
		return 8<<20 + window
	case recordbatch.CompressionLZ4, recordbatch.CompressionSnappy:
		return 4<<20 + window
	}
	return window
}

// A scan streams: checking a valid batch whose one record is 32 MiB costs
// a window and the codec's state, not 32 MiB.
func TestScanRecordsAllocatesAWindow(t *testing.T) {
	const zeros = 32 << 20
	for _, c := range hostilebatch.Codecs {
		t.Run(c.String(), func(t *testing.T) {
			batch := hostilebatch.Bomb(c, zeros)
			h, err := recordbatch.Verify(batch)
			if err != nil {
				t.Fatal(err)
			}
			var got []recordbatch.RecordInfo
			scan := func() error {
				got = got[:0]
				_, err := recordbatch.ScanRecords(batch, h, zeros+64, func(_ int, r recordbatch.RecordInfo) error {
					got = append(got, r)
					return nil
				})
				return err
			}
			if err := scan(); err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Size < zeros {
				t.Fatalf("scanned %+v, want one record of more than %d bytes", got, zeros)
			}
			allocated := alloctest.Bytes(func() { _ = scan() })
			t.Logf("%d-byte batch, one %d MiB record: scanned allocating %.1f KiB", len(batch), zeros>>20, float64(allocated)/(1<<10))
			if bound := codecState(c); !racedetect.Enabled && allocated > bound {
				t.Errorf("allocated %d bytes, want at most %d", allocated, bound)
			}
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

// Decompressions run at most InflatingSlots at once in a process: each
// holds a codec state the compressed bytes size (a zstd window of 8 MiB
// for a 1 KiB batch), so goroutines validating batches in parallel could
// otherwise hold that many windows. A scan beyond the bound waits until
// one ends.
func TestDecompressionsAtOnceAreBounded(t *testing.T) {
	batch := hostilebatch.ZstdBomb(1 << 10)
	h, err := recordbatch.Verify(batch)
	if err != nil {
		t.Fatal(err)
	}
	slots := recordbatch.InflatingSlots()
	release := make(chan struct{})
	started := make(chan int, slots+1)
	var wg sync.WaitGroup
	scan := func(i int) {
		defer wg.Done()
		_, err := recordbatch.ScanRecords(batch, h, 1<<20, func(int, recordbatch.RecordInfo) error {
			started <- i
			<-release // the scan holds its decompressor while fn runs
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	wg.Add(slots + 1)
	for i := range slots {
		go scan(i)
	}
	for range slots {
		<-started
	}
	go scan(slots)
	select {
	case i := <-started:
		t.Fatalf("scan %d decompressed while %d others held every slot", i, slots)
	case <-time.After(100 * time.Millisecond): // it must still be waiting
	}
	release <- struct{}{} // one of the first ends: the last one starts
	if i := <-started; i != slots {
		t.Fatalf("scan %d started, want the waiting one (%d)", i, slots)
	}
	close(release)
	wg.Wait()
}

// DecodeWithin counts what decoding holds, not only the decompressed
// bytes: 400,000 empty headers are 800 KB encoded and 16 MB as Headers,
// and 100,000 empty records 700 KB and 9.6 MB as Records. Within 4 MiB
// both are refused before those are allocated; a batch of real records
// decodes and counts its section, records and headers.
func TestDecodeWithinAllocationCountsDecodedStructures(t *testing.T) {
	headers := make([]recordbatch.Header, 400_000) // empty keys, empty values
	manyHeaders, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: []recordbatch.Record{{Headers: headers}}})
	if err != nil {
		t.Fatal(err)
	}
	manyRecords, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: recordbatch.CompressionZstd,
		Records: make([]recordbatch.Record, 100_000)})
	if err != nil {
		t.Fatal(err)
	}
	for name, batch := range map[string][]byte{"400,000 headers": manyHeaders, "100,000 zstd records": manyRecords} {
		decode := func() error { _, _, _, err := recordbatch.DecodeWithin(batch, 4<<20); return err }
		if err := decode(); !errors.Is(err, recordbatch.ErrTooLarge) {
			t.Fatalf("%s (%d bytes): %v, want ErrTooLarge", name, len(batch), err)
		}
		allocated := alloctest.Bytes(func() { _ = decode() })
		t.Logf("%s (%d bytes): refused after allocating %.1f KiB", name, len(batch), float64(allocated)/(1<<10))
		if !racedetect.Enabled && allocated > 5<<20 {
			t.Errorf("%s: allocated %d bytes, want at most the 4 MiB bound and change", name, allocated)
		}
	}
	recs := []recordbatch.Record{{Key: []byte("k"), Value: []byte("value"), Headers: []recordbatch.Header{{Key: "a"}, {Key: "b", Value: []byte("c")}}}, {Value: []byte("v2")}}
	for _, c := range codecs {
		buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Compression: c, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		_, section := encodeRecordsSection(t, recs)
		want := len(section) + 2*recordbatch.RecordBytes + 2*recordbatch.HeaderBytes
		_, got, decoded, err := recordbatch.DecodeWithin(buf, want)
		// A decompression buffer's capacity counts: at least 512 bytes, rounded up.
		if err != nil || len(got) != 2 || decoded < want || decoded > want+512 {
			t.Fatalf("%s: %d records, %d bytes counted, %v; want 2 records, %d bytes", c, len(got), decoded, err, want)
		}
		if _, _, _, err := recordbatch.DecodeWithin(buf, want-1); !errors.Is(err, recordbatch.ErrTooLarge) {
			t.Fatalf("%s within one byte less than its records: %v, want ErrTooLarge", c, err)
		}
	}
}

// Snappy is decoded as the standard format, as Kafka's clients and the
// reference decoder do: S2's extensions (its repeat codes, which make
// snappy bombs possible) are corrupt input, so no batch Strata accepts is
// one another consumer cannot read. Standard snappy inflates at most about
// 21 times.
func TestSnappyS2CodesRefused(t *testing.T) {
	const zeros = 8 << 20
	bomb := hostilebatch.SnappyBomb(zeros)
	h, err := recordbatch.Verify(bomb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recordbatch.ScanRecords(bomb, h, 64<<20, func(int, recordbatch.RecordInfo) error { return nil }); !errors.Is(err, recordbatch.ErrCorrupt) {
		t.Fatalf("scan of a %d-byte batch with S2's codes: %v, want ErrCorrupt", len(bomb), err)
	}
	if _, _, err := recordbatch.Decode(bomb); !errors.Is(err, recordbatch.ErrCorrupt) {
		t.Fatalf("decode of a batch with S2's codes: %v, want ErrCorrupt", err)
	}
	plain := hostilebatch.SnappyZeros(zeros)
	_, recs, err := recordbatch.Decode(plain)
	if err != nil || len(recs) != 1 || len(recs[0].Value) != zeros {
		t.Fatalf("standard snappy: %d records, %v", len(recs), err)
	}
	if ratio := zeros / len(plain); ratio < 15 || ratio > 25 {
		t.Errorf("standard snappy inflated %d times, want about 21", ratio)
	}
	t.Logf("%d MiB of zeros: %d bytes with S2's codes, %d in standard snappy", zeros>>20, len(bomb), len(plain))
}
