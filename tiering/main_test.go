package tiering

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// TestMain fails the package if a test leaves goroutines behind: every
// download and read-ahead must stop on Reader.Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var bg = context.Background()

// genConfig describes the batches genBatches makes.
type genConfig struct {
	batches    int
	maxRecords int // records per batch: 1..maxRecords
	maxValue   int // value bytes: 0..maxValue
	// bigEvery: every bigEvery-th batch carries one incompressible value
	// of bigValue bytes (batches larger than a chunk); 0: none.
	bigEvery, bigValue int
	codec              recordbatch.Compression
	// holes: gaps of 1..5 offsets before some batches (a compacted
	// segment), the first batch included.
	holes bool
}

// genBatches builds batches from offset base on, stamped as the broker
// stores them. Timestamps wander, so neither batches nor records are in
// time order (the time lookups must cope).
func genBatches(t testing.TB, rng *rand.Rand, base int64, c genConfig) [][]byte {
	t.Helper()
	var out [][]byte
	next, ts := base, int64(1_700_000_000_000)
	for i := range c.batches {
		n := 1 + rng.Intn(max(c.maxRecords, 1))
		recs := make([]recordbatch.Record, n)
		for j := range recs {
			ts += int64(rng.Intn(2000) - 500)
			v := make([]byte, rng.Intn(c.maxValue+1))
			rng.Read(v[:len(v)/2])
			recs[j] = recordbatch.Record{TimestampMs: ts, Key: fmt.Appendf(nil, "k%d", rng.Intn(50)), Value: v}
		}
		if c.bigEvery > 0 && i%c.bigEvery == c.bigEvery-1 {
			big := make([]byte, c.bigValue)
			rng.Read(big)
			recs[0].Value = big
		}
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c.codec, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		if c.holes && rng.Intn(3) == 0 {
			next += int64(1 + rng.Intn(5))
		}
		recordbatch.SetBaseOffset(b, next)
		recordbatch.SetPartitionLeaderEpoch(b, 7)
		h, err := recordbatch.Verify(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		next = h.LastOffset() + 1
	}
	return out
}

// testSeg is a segment object put in a store, with what it was made of.
type testSeg struct {
	ref     SegmentRef
	obj     []byte
	batches [][]byte
}

// tierKey is the tests' cluster tier key: every test reader holds it, as
// brokers do, and authenticated segments are written with it.
var tierKey = func() *segfile.Key {
	k, err := segfile.NewKey(bytes.Repeat([]byte{0x5a}, segfile.KeySize))
	if err != nil {
		panic(err)
	}
	return k
}()

// testBlockBytes is the block size of authenticated test segments: the
// smallest chunk size, so that every chunk is whole blocks.
const testBlockBytes = 4 << 10

// putSegment writes batches as a segment (base offset base, index every
// indexInterval bytes) under key, unauthenticated (format version 1).
func putSegment(t testing.TB, st objstore.Store, key string, base int64, compacted bool, indexInterval int64, batches [][]byte) testSeg {
	t.Helper()
	return putSegmentWith(t, st, key, segfile.Options{BaseOffset: base, Compacted: compacted, IndexIntervalBytes: indexInterval}, batches)
}

// putAuthenticated is putSegment writing an authenticated segment, with
// tierKey in testBlockBytes blocks, as the uploader does.
func putAuthenticated(t testing.TB, st objstore.Store, key string, base int64, compacted bool, indexInterval int64, batches [][]byte) testSeg {
	t.Helper()
	return putSegmentWith(t, st, key, segfile.Options{BaseOffset: base, Compacted: compacted, IndexIntervalBytes: indexInterval,
		Key: tierKey, Name: key, BlockBytes: testBlockBytes}, batches)
}

func putSegmentWith(t testing.TB, st objstore.Store, key string, opts segfile.Options, batches [][]byte) testSeg {
	t.Helper()
	var buf bytes.Buffer
	w, err := segfile.NewWriter(&buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		if err := w.Append(b); err != nil {
			t.Fatalf("append batch %d: %v", i, err)
		}
	}
	sum, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(bg, key, bytes.NewReader(buf.Bytes()), int64(buf.Len()), nil); err != nil {
		t.Fatal(err)
	}
	ref := SegmentRef{Key: key, Size: sum.Size, IndexPos: sum.IndexPos, BaseOffset: sum.BaseOffset, LastOffset: sum.LastOffset,
		Authenticated: sum.Authenticated}
	return testSeg{ref: ref, obj: buf.Bytes(), batches: batches}
}

// newTestReader returns a Reader closed at the end of the test.
func newTestReader(t testing.TB, st objstore.Store, cfg ReaderConfig) (*Reader, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	if cfg.Key == nil {
		cfg.Key = tierKey
	}
	r := NewReader(st, cfg, m)
	t.Cleanup(func() { r.Close() })
	return r, m
}

// bruteFetch is a fetch by brute force: the batches from the one holding
// offset (or the next), within maxBytes but at least one.
func bruteFetch(t testing.TB, batches [][]byte, offset int64, maxBytes int) []byte {
	t.Helper()
	var out []byte
	for _, b := range batches {
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.LastOffset() < offset {
			continue
		}
		if len(out) > 0 && len(out)+len(b) > maxBytes {
			break
		}
		out = append(out, b...)
		if len(out) >= maxBytes {
			break
		}
	}
	return out
}

type timeHit struct {
	offset, ts int64
	found      bool
}

// bruteTime is ListOffsets by brute force: the first record whose
// timestamp is >= ts.
func bruteTime(t testing.TB, batches [][]byte, ts int64) timeHit {
	t.Helper()
	for _, b := range batches {
		_, recs, err := recordbatch.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.TimestampMs >= ts {
				return timeHit{r.Offset, r.TimestampMs, true}
			}
		}
	}
	return timeHit{}
}

// headerOf parses a batch header or fails the test.
func headerOf(t testing.TB, b []byte) recordbatch.BatchHeader {
	t.Helper()
	h, err := recordbatch.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// value reads a counter or gauge.
func value(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("metric %v has no value", c.Desc())
	return 0
}

// getLog records the GETs a memstore serves, by range.
type getLog struct {
	mu struct {
		sync.Mutex
		ranges map[[2]int64]int
		order  [][2]int64
	}
}

func newGetLog() *getLog {
	l := &getLog{}
	l.mu.ranges = map[[2]int64]int{}
	return l
}

func (l *getLog) record(c memstore.Call) {
	if c.Op != objstore.OpGetRange {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := [2]int64{c.Off, c.N}
	l.mu.ranges[r]++
	l.mu.order = append(l.mu.order, r)
}

// hook records every call and lets it run.
func (l *getLog) hook(c memstore.Call) memstore.Fault {
	l.record(c)
	return memstore.Fault{}
}

func (l *getLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.order)
}

func (l *getLog) count(off, n int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.ranges[[2]int64{off, n}]
}

// maxPerRange is the most GETs of any one range.
func (l *getLog) maxPerRange() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := 0
	for _, n := range l.mu.ranges {
		m = max(m, n)
	}
	return m
}

// maxPerByte is the most GETs that downloaded any one byte below end
// (ranges of different GETs may overlap).
func (l *getLog) maxPerByte(end int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	delta := map[int64]int{} // +count where ranges start, -count where they end
	for r, n := range l.mu.ranges {
		if r[0] < end {
			delta[r[0]] += n
			delta[min(r[0]+r[1], end)] -= n
		}
	}
	points := slices.Sorted(maps.Keys(delta))
	m, cur := 0, 0
	for _, p := range points {
		cur += delta[p]
		m = max(m, cur)
	}
	return m
}
