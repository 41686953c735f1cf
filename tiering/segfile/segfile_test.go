package segfile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

// checkSegment checks everything a reader can do on obj against the
// batches it was written from.
func checkSegment(t *testing.T, obj []byte, sum segfile.Summary, batches [][]byte, opts segfile.Options, rng *rand.Rand) {
	t.Helper()
	auth := authOf(opts)
	got, err := segfile.Verify(ctx, segfile.Bytes(obj), int64(len(obj)), auth)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if got != sum {
		t.Fatalf("Verify summary\n got %+v\nwant %+v", got, sum)
	}
	// Both tail paths: with metadata (one read) and without.
	cr := &countingReader{r: segfile.Bytes(obj)}
	tail, err := segfile.ReadTail(ctx, cr, sum.IndexPos, sum.Size, auth)
	if err != nil {
		t.Fatalf("ReadTail: %v", err)
	}
	if cr.reads != 1 {
		t.Fatalf("ReadTail made %d reads, want 1", cr.reads)
	}
	found, err := segfile.FindTail(ctx, segfile.Bytes(obj), sum.Size, auth)
	if err != nil {
		t.Fatalf("FindTail: %v", err)
	}
	if tail.Summary() != sum || found.Summary() != sum {
		t.Fatalf("tail summaries %+v / %+v, want %+v", tail.Summary(), found.Summary(), sum)
	}
	if sum.Authenticated != (opts.Key != nil) || tail.Authenticated() != sum.Authenticated {
		t.Fatalf("authenticated: summary %t, tail %t, written with a key: %t", sum.Authenticated, tail.Authenticated(), opts.Key != nil)
	}
	f := tail.Footer
	if f.GetTopic() != opts.Footer.GetTopic() || f.GetUploadId() != opts.Footer.GetUploadId() ||
		!proto.Equal(f.GetProducers()[0], opts.Footer.GetProducers()[0]) {
		t.Fatalf("footer lost caller fields: %v", f)
	}

	// Every batch, in order, byte for byte.
	it := tail.Batches(obj[segfile.HeaderSize:sum.IndexPos], segfile.HeaderSize)
	i := 0
	for it.Next() {
		if !bytes.Equal(it.Batch().Bytes, batches[i]) {
			t.Fatalf("batch %d differs", i)
		}
		i++
	}
	if it.Err() != nil || !it.Done() || i != len(batches) {
		t.Fatalf("iterated %d of %d batches, done %t, err %v", i, len(batches), it.Done(), it.Err())
	}

	// Fetches at every offset of the range (and around it), one read each.
	first, last := sum.BaseOffset, sum.LastOffset
	for off := first - 1; off <= last+1; off++ {
		maxBytes := int64(rng.Intn(3 * int(sum.DataBytes/int64(len(batches))+1)))
		cr := &countingReader{r: segfile.Bytes(obj)}
		got, err := tail.ReadFetch(ctx, cr, off, maxBytes)
		if err != nil {
			t.Fatalf("ReadFetch(%d, %d): %v", off, maxBytes, err)
		}
		if want := bruteFetch(t, batches, off, maxBytes); !bytes.Equal(got, want) {
			t.Fatalf("ReadFetch(%d, %d): %d bytes, want %d", off, maxBytes, len(got), len(want))
		}
		if off <= last && cr.reads != 1 {
			t.Fatalf("ReadFetch(%d, %d) made %d reads, want 1", off, maxBytes, cr.reads)
		}
	}

	// Time lookups around every batch's timestamps, one read each.
	var stamps []int64
	for _, b := range batches {
		h, _ := recordbatch.ParseHeader(b)
		stamps = append(stamps, h.BaseTimestamp-1, h.BaseTimestamp, h.MaxTimestamp, h.MaxTimestamp+1)
	}
	stamps = append(stamps, -1, 0, sum.MaxTimestampMs+1)
	for _, ts := range stamps {
		minOffset := first
		if rng.Intn(4) == 0 {
			minOffset = first + rng.Int63n(last-first+1)
		}
		cr := &countingReader{r: segfile.Bytes(obj)}
		off, gotTs, ok, err := tail.ReadOffsetForTime(ctx, cr, ts, minOffset, 0)
		if err != nil {
			t.Fatalf("ReadOffsetForTime(%d): %v", ts, err)
		}
		want := bruteTime(t, batches, ts, minOffset)
		if (wantTime{off, gotTs, ok}) != want {
			t.Fatalf("ReadOffsetForTime(%d, min %d) = %d@%d %t, want %+v", ts, minOffset, off, gotTs, ok, want)
		}
		// One read, unless minOffset cuts into the range that the time
		// index points at: then the record may be anywhere after it.
		if ok && minOffset == first && cr.reads != 1 {
			t.Fatalf("ReadOffsetForTime(%d) made %d reads, want 1", ts, cr.reads)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gen      genConfig
		interval int64
	}{
		{"one tiny batch", genConfig{batches: 1, maxRecords: 1, maxValue: 0}, 0},
		{"small batches dense index", genConfig{batches: 200, maxRecords: 5, maxValue: 50}, 256},
		{"index entry per batch", genConfig{batches: 50, maxRecords: 3, maxValue: 20}, 1},
		{"large batches", genConfig{batches: 6, maxRecords: 20, maxValue: 40 << 10}, 64 << 10},
		{"larger than one scan read", genConfig{batches: 12, maxRecords: 4, maxValue: 1 << 20}, 0},
		{"gzip", genConfig{batches: 40, maxRecords: 10, maxValue: 300, codec: recordbatch.CompressionGzip}, 1 << 10},
		{"snappy", genConfig{batches: 40, maxRecords: 10, maxValue: 300, codec: recordbatch.CompressionSnappy}, 1 << 10},
		{"lz4", genConfig{batches: 40, maxRecords: 10, maxValue: 300, codec: recordbatch.CompressionLZ4}, 1 << 10},
		{"zstd", genConfig{batches: 40, maxRecords: 10, maxValue: 300, codec: recordbatch.CompressionZstd}, 1 << 10},
		{"log append time and horizons", genConfig{batches: 40, maxRecords: 4, maxValue: 30, logAppendTime: true, horizon: true}, 512},
		{"compacted with gaps", genConfig{batches: 80, maxRecords: 4, maxValue: 30, compacted: true}, 300},
		{"compacted zstd", genConfig{batches: 30, maxRecords: 6, maxValue: 200, compacted: true, codec: recordbatch.CompressionZstd}, 700},
	} {
		for _, blockBytes := range []int64{0, 512, segfile.DefaultBlockBytes} {
			name := tc.name
			if blockBytes > 0 {
				name = fmt.Sprintf("%s, authenticated in %d-byte blocks", name, blockBytes)
			}
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewSource(1))
				batches := genBatches(t, rng, 1000, tc.gen)
				opts := segfile.Options{BaseOffset: 1000, Compacted: tc.gen.compacted, IndexIntervalBytes: tc.interval, Footer: testFooter()}
				if tc.gen.compacted {
					opts.BaseOffset = 990 // the segment covers a hole before its first batch
				}
				if blockBytes > 0 {
					opts = authenticated(t, opts, "c/t/topic/3/round-trip.seg", blockBytes)
				}
				obj, sum := writeSegment(t, batches, opts)
				checkSegment(t, obj, sum, batches, opts, rng)
			})
		}
	}
}

// A footer larger than TailProbeBytes: FindTail needs a second read.
func TestFindTailLargeFooter(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	batches := genBatches(t, rng, 0, genConfig{batches: 3, maxRecords: 2, maxValue: 10})
	f := testFooter()
	for i := range 20000 {
		f.SourceObjects = append(f.SourceObjects, "t/x/3/"+string(rune('a'+i%26)))
	}
	obj, sum := writeSegment(t, batches, segfile.Options{Footer: f})
	if sum.Size-sum.IndexPos <= segfile.TailProbeBytes {
		t.Fatalf("tail is %d bytes, want more than %d", sum.Size-sum.IndexPos, segfile.TailProbeBytes)
	}
	cr := &countingReader{r: segfile.Bytes(obj)}
	tail, err := segfile.FindTail(ctx, cr, sum.Size, segfile.Auth{})
	if err != nil || cr.reads != 2 || len(tail.Footer.GetSourceObjects()) != 20000 {
		t.Fatalf("FindTail: %v after %d reads", err, cr.reads)
	}
	if _, err := segfile.Verify(ctx, segfile.Bytes(obj), sum.Size, segfile.Auth{}); err != nil {
		t.Fatal(err)
	}
}

// T8: the writer refuses a batch it cannot verify or whose offsets do not
// follow, and stays failed, so such an upload is never completed.
func TestWriterRejects(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	good := genBatches(t, rng, 100, genConfig{batches: 3, maxRecords: 3, maxValue: 10})
	corrupt := bytes.Clone(good[1])
	corrupt[len(corrupt)-1] ^= 1
	badMagic := bytes.Clone(good[1])
	badMagic[16] = 1
	gap := bytes.Clone(good[1])
	recordbatch.SetBaseOffset(gap, baseOf(t, good[1])+1)
	overlap := bytes.Clone(good[1])
	recordbatch.SetBaseOffset(overlap, baseOf(t, good[0]))
	empty := bytes.Clone(good[1])
	copy(empty[57:61], []byte{0, 0, 0, 0}) // record count 0
	reCRC(empty)

	for _, tc := range []struct {
		name      string
		compacted bool
		base      int64
		batches   [][]byte
		want      error
	}{
		{"bad crc", false, 100, [][]byte{good[0], corrupt}, recordbatch.ErrCorrupt},
		{"bad crc is an invalid batch", false, 100, [][]byte{good[0], corrupt}, segfile.ErrInvalidBatch},
		{"bad magic", false, 100, [][]byte{good[0], badMagic}, recordbatch.ErrMagic},
		{"truncated batch", false, 100, [][]byte{good[0][:len(good[0])-1]}, recordbatch.ErrShort},
		{"two batches in one", false, 100, [][]byte{append(bytes.Clone(good[0]), good[1]...)}, segfile.ErrInvalidBatch},
		{"gap in a plain segment", false, 100, [][]byte{good[0], gap}, segfile.ErrOffsetOrder},
		{"first batch after base", false, 99, good, segfile.ErrOffsetOrder},
		{"first batch before base", true, 101, good, segfile.ErrOffsetOrder},
		{"overlap in a compacted segment", true, 100, [][]byte{good[0], overlap}, segfile.ErrOffsetOrder},
		{"empty batch in a plain segment", false, 100, [][]byte{good[0], empty}, segfile.ErrInvalidBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := segfile.NewWriter(io.Discard, segfile.Options{BaseOffset: tc.base, Compacted: tc.compacted})
			if err != nil {
				t.Fatal(err)
			}
			var appendErr error
			for _, b := range tc.batches {
				if appendErr = w.Append(b); appendErr != nil {
					break
				}
			}
			if !errors.Is(appendErr, tc.want) {
				t.Fatalf("Append: %v, want %v", appendErr, tc.want)
			}
			// Sticky: the writer stays failed.
			if err := w.Append(good[0]); !errors.Is(err, tc.want) {
				t.Fatalf("Append after failure: %v", err)
			}
			if _, err := w.Finish(); !errors.Is(err, tc.want) {
				t.Fatalf("Finish after failure: %v", err)
			}
		})
	}

	// Compacted input accepts what plain input refuses: a hole before the
	// first batch, holes between batches, empty batches.
	emptyLater := bytes.Clone(empty)
	recordbatch.SetBaseOffset(emptyLater, 1000)
	obj, sum := writeSegment(t, [][]byte{good[0], gap, emptyLater}, segfile.Options{BaseOffset: 90, Compacted: true})
	if got, err := segfile.Verify(ctx, segfile.Bytes(obj), sum.Size, segfile.Auth{}); err != nil || got != sum {
		t.Fatalf("Verify: %v", err)
	}
}

type errReader struct{ err error }

func (e errReader) ReadAt(context.Context, int64, int64) ([]byte, error) { return nil, e.err }

func TestWriterLifecycle(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	batches := genBatches(t, rng, 0, genConfig{batches: 2, maxRecords: 2, maxValue: 5})

	var buf bytes.Buffer
	w, _ := segfile.NewWriter(&buf, segfile.Options{})
	if _, err := w.Finish(); !errors.Is(err, segfile.ErrEmpty) || buf.Len() != 0 {
		t.Fatalf("Finish of nothing: %v, %d bytes written", err, buf.Len())
	}
	if err := w.Append(batches[0]); !errors.Is(err, segfile.ErrFinished) {
		t.Fatalf("Append after Finish: %v", err)
	}

	w, _ = segfile.NewWriter(&buf, segfile.Options{})
	if err := w.Append(batches[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); !errors.Is(err, segfile.ErrFinished) {
		t.Fatalf("second Finish: %v", err)
	}

	// The io.Writer's error is returned and sticky.
	boom := errors.New("upload failed")
	w, _ = segfile.NewWriter(failingWriter{boom}, segfile.Options{})
	if err := w.Append(batches[0]); !errors.Is(err, boom) {
		t.Fatalf("Append: %v", err)
	}
	if _, err := w.Finish(); !errors.Is(err, boom) {
		t.Fatalf("Finish: %v", err)
	}

	key := testKey(t, 1)
	for _, o := range []segfile.Options{{BaseOffset: -1}, {IndexIntervalBytes: -1}, {Key: key}, {Key: key, Name: strings.Repeat("k", 1025)},
		{BlockBytes: 32}, {BlockBytes: 1000}, {BlockBytes: 128 << 20}} {
		if _, err := segfile.NewWriter(io.Discard, o); !errors.Is(err, segfile.ErrInvalidOptions) {
			t.Fatalf("NewWriter(%v): %v", o, err)
		}
	}
	if s := (segfile.Options{BaseOffset: 5, Footer: testFooter()}).String(); s == "" {
		t.Fatal("empty String")
	}
	if s := (segfile.Options{Key: key, Name: "x"}).String(); !strings.Contains(s, key.String()) || strings.Contains(s, "\x01") {
		t.Fatalf("String of an authenticated writer's options: %q", s)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

// T10: a reader whose metadata disagrees with the object fails closed.
func TestReadTailMismatch(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	batches := genBatches(t, rng, 0, genConfig{batches: 20, maxRecords: 2, maxValue: 50})
	obj, sum := writeSegment(t, batches, segfile.Options{IndexIntervalBytes: 200})
	for _, c := range []struct{ indexPos, size int64 }{
		{sum.IndexPos - 1, sum.Size}, {sum.IndexPos + 1, sum.Size}, {sum.IndexPos + segfile.IndexEntrySize, sum.Size},
		{sum.IndexPos, sum.Size + 1}, {sum.IndexPos, sum.Size - 1}, {0, sum.Size}, {sum.IndexPos, 0},
	} {
		if _, err := segfile.ReadTail(ctx, segfile.Bytes(obj), c.indexPos, c.size, segfile.Auth{}); !errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("ReadTail(%d, %d): %v, want ErrCorrupt", c.indexPos, c.size, err)
		}
	}
	// A RangeReader's own error is passed through, not called corruption.
	boom := errors.New("connection reset")
	if _, err := segfile.ReadTail(ctx, errReader{boom}, sum.IndexPos, sum.Size, segfile.Auth{}); !errors.Is(err, boom) || errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("ReadTail over a failing reader: %v", err)
	}
	// ParseTail given too little says so.
	if _, err := segfile.ParseTail(obj[sum.IndexPos+1:], sum.Size, segfile.Auth{}); !errors.Is(err, segfile.ErrIncompleteTail) {
		t.Fatalf("ParseTail of a partial tail: %v", err)
	}
}

// CheckBatches checks whole batches from a batch start and stops, without
// passing them, at a partial batch (more bytes may come) and at a damaged
// one.
func TestCheckBatches(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	batches := genBatches(t, rng, 0, genConfig{batches: 10, maxRecords: 5, maxValue: 200})
	obj, sum := writeSegment(t, batches, segfile.Options{})
	dataEnd := sum.IndexPos
	starts := []int64{segfile.HeaderSize}
	for _, b := range batches {
		starts = append(starts, starts[len(starts)-1]+int64(len(b)))
	}
	if end, ok := segfile.CheckBatches(obj[segfile.HeaderSize:], segfile.HeaderSize, dataEnd); end != dataEnd || !ok {
		t.Errorf("whole data: end %d ok %v, want %d true", end, ok, dataEnd)
	}
	// From the fourth batch, cut in the middle of the seventh.
	cut := (starts[6] + starts[7]) / 2
	if end, ok := segfile.CheckBatches(obj[starts[3]:cut], starts[3], dataEnd); end != starts[6] || !ok {
		t.Errorf("partial: end %d ok %v, want %d true", end, ok, starts[6])
	}
	// A flipped bit in the sixth batch's records stops the check before it.
	bad := bytes.Clone(obj)
	bad[starts[5]+recordbatch.HeaderSize+3] ^= 4
	if end, ok := segfile.CheckBatches(bad[segfile.HeaderSize:], segfile.HeaderSize, dataEnd); end != starts[5] || ok {
		t.Errorf("damaged: end %d ok %v, want %d false", end, ok, starts[5])
	}
	// Bytes past the data (the index) are never taken for batches.
	if end, _ := segfile.CheckBatches(obj[starts[9]:], starts[9], dataEnd); end != dataEnd {
		t.Errorf("to the end: end %d, want %d", end, dataEnd)
	}
}
