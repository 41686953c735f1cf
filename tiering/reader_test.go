package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
)

const testChunk = 4 << 10

// threeSegments puts three consecutive segments in st: plain with some
// batches larger than two chunks, zstd-compressed, and compacted (holes).
// Small index intervals give many index entries per chunk. The first was
// written before authentication (format version 1), the others are
// authenticated.
func threeSegments(t testing.TB, st objstore.Store) []testSeg {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	a := putSegment(t, st, "t/p0/a.seg", 0, false, 2048,
		genBatches(t, rng, 0, genConfig{batches: 120, maxRecords: 8, maxValue: 300, bigEvery: 25, bigValue: 10_000}))
	baseB := a.ref.LastOffset + 1
	b := putAuthenticated(t, st, "t/p0/b.seg", baseB, false, 2048,
		genBatches(t, rng, baseB, genConfig{batches: 80, maxRecords: 20, maxValue: 500, codec: recordbatch.CompressionZstd}))
	baseC := b.ref.LastOffset + 1
	c := putAuthenticated(t, st, "t/p0/c.seg", baseC, true, 1024,
		genBatches(t, rng, baseC+2, genConfig{batches: 80, maxRecords: 6, maxValue: 400, holes: true}))
	return []testSeg{a, b, c}
}

func TestFetchEveryOffset(t *testing.T) {
	st := memstore.New(memstore.Options{})
	segs := threeSegments(t, st)
	// A cache of a dozen chunks: fetches evict and re-download as they go.
	r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: 12 * testChunk})
	for _, s := range segs {
		if s.ref.Size < 8*testChunk {
			t.Fatalf("%s: %d bytes, want several chunks", s.ref.Key, s.ref.Size)
		}
		for _, maxBytes := range []int{0, 1000, 9000, 1 << 20} {
			for off := s.ref.BaseOffset; off <= s.ref.LastOffset+1; off++ {
				got, err := r.Fetch(bg, s.ref, off, maxBytes)
				if err != nil {
					t.Fatalf("%s offset %d max %d: %v", s.ref.Key, off, maxBytes, err)
				}
				want := bruteFetch(t, s.batches, off, maxBytes)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s offset %d max %d: got %d bytes, want %d", s.ref.Key, off, maxBytes, len(got), len(want))
				}
				if off > s.ref.LastOffset {
					if got != nil {
						t.Fatalf("%s: offset %d past the end returned %d bytes", s.ref.Key, off, len(got))
					}
					continue
				}
				// The first batch holds offset, or is the first after it
				// (only in a compacted segment's hole).
				h := headerOf(t, got)
				if h.LastOffset() < off || (h.BaseOffset > off && !strings.HasSuffix(s.ref.Key, "c.seg")) {
					t.Fatalf("%s offset %d: first batch [%d, %d]", s.ref.Key, off, h.BaseOffset, h.LastOffset())
				}
			}
		}
	}
	if errs := value(t, m.ReadErrors); errs != 0 {
		t.Errorf("%v read errors", errs)
	}
	if b, peak, _ := r.chunks.stats(); peak > 12*testChunk || b != int64(value(t, m.ChunkCacheBytes)) {
		t.Errorf("cache: %d bytes (gauge %v), peak %d over the bound %d", b, value(t, m.ChunkCacheBytes), peak, 12*testChunk)
	}
}

func TestOffsetForTime(t *testing.T) {
	st := memstore.New(memstore.Options{})
	segs := threeSegments(t, st)
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: 8 * testChunk})
	for _, s := range segs {
		tss := []int64{0, 1 << 62}
		for _, b := range s.batches {
			_, recs, err := recordbatch.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			for i, rec := range recs {
				if i%3 == 0 {
					tss = append(tss, rec.TimestampMs-1, rec.TimestampMs, rec.TimestampMs+1)
				}
			}
		}
		for _, ts := range tss {
			off, bts, found, err := r.OffsetForTime(bg, s.ref, ts, 0)
			if err != nil {
				t.Fatalf("%s ts %d: %v", s.ref.Key, ts, err)
			}
			if got, want := (timeHit{off, bts, found}), bruteTime(t, s.batches, ts); got != want {
				t.Fatalf("%s ts %d: got %+v, want %+v", s.ref.Key, ts, got, want)
			}
		}
	}
}

func TestConcurrentReadersShareDownloads(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	log := newGetLog()
	// Slow GETs, so the readers overlap for sure.
	st.SetHook(func(c memstore.Call) memstore.Fault {
		log.record(c)
		return memstore.Fault{Delay: 30 * time.Millisecond}
	})
	r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: 64 * testChunk, ReadAhead: -1})
	const readers, maxBytes = 20, 3 * testChunk
	fetchTogether(t, r, s, 40, maxBytes, readers)
	if n := log.count(s.ref.IndexPos, s.ref.Size-s.ref.IndexPos); n != 1 {
		t.Errorf("tail read %d times", n)
	}
	if n := log.maxPerRange(); n != 1 {
		t.Errorf("a range was read %d times", n)
	}
	chunks := log.total() - 1
	if chunks < 3 || float64(chunks) != value(t, m.ChunkCacheMisses) || value(t, m.ChunkCacheHits) != float64((readers-1)*chunks) {
		t.Errorf("%d chunk GETs, %v misses, %v hits", chunks, value(t, m.ChunkCacheMisses), value(t, m.ChunkCacheHits))
	}
	if got := value(t, m.RemoteReads); got != float64(log.total()) {
		t.Errorf("remote reads metric %v, store saw %d", got, log.total())
	}
}

func TestCacheNeverExceedsBound(t *testing.T) {
	st := memstore.New(memstore.Options{})
	segs := threeSegments(t, st)
	const bound = 5 * testChunk
	r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: bound})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(int64(w)))
			for range 60 {
				s := segs[rng.Intn(len(segs))]
				off := s.ref.BaseOffset + rng.Int63n(s.ref.LastOffset-s.ref.BaseOffset+1)
				// Up to eight chunks: more than the cache holds.
				maxBytes := rng.Intn(8 * testChunk)
				got, err := r.Fetch(bg, s.ref, off, maxBytes)
				if err == nil && !bytes.Equal(got, bruteFetch(t, s.batches, off, maxBytes)) {
					err = fmt.Errorf("%s offset %d: wrong bytes", s.ref.Key, off)
				}
				if err != nil {
					errs <- err
					return
				}
				if b, _, _ := r.chunks.stats(); b > bound {
					errs <- fmt.Errorf("cache holds %d bytes", b)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Read-ahead downloads the fetches started may still be running; they
	// are charged but not cached until they end.
	testwait.Until(t, 10*time.Second, "no download in flight", func() bool {
		r.chunks.mu.Lock()
		defer r.chunks.mu.Unlock()
		return r.chunks.mu.bytes == r.chunks.mu.cachedBytes
	})
	b, peak, cached := r.chunks.stats()
	if peak > bound || b > bound || peak < bound-testChunk {
		t.Errorf("cache bytes %d, peak %d, bound %d", b, peak, bound)
	}
	if g := value(t, m.ChunkCacheBytes); g != float64(b) || cached == 0 {
		t.Errorf("gauge %v, cache %d bytes in %d chunks", g, b, cached)
	}
}

// sequentialRead consumes s from its base as a consumer does, maxBytes
// per fetch, and checks every fetch.
func sequentialRead(t *testing.T, r *Reader, s testSeg, maxBytes int, each func()) (fetches int) {
	t.Helper()
	for off := s.ref.BaseOffset; off <= s.ref.LastOffset; fetches++ {
		got, err := r.Fetch(bg, s.ref, off, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bruteFetch(t, s.batches, off, maxBytes)) {
			t.Fatalf("offset %d: wrong bytes", off)
		}
		batches, err := recordbatch.Split(got)
		if err != nil {
			t.Fatal(err)
		}
		off = headerOf(t, batches[len(batches)-1]).LastOffset() + 1
		if each != nil {
			each()
		}
	}
	return fetches
}

func TestReadAheadForSequentialReads(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	log := newGetLog()
	st.SetHook(log.hook)
	r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: 64 * testChunk, ReadAhead: 2})
	readAheadsSettled := func() bool {
		r.chunks.mu.Lock()
		defer r.chunks.mu.Unlock()
		return r.chunks.mu.readAheads == 0
	}
	fetches := sequentialRead(t, r, s, 1500, func() {
		// Let read-ahead land, as a consumer's processing does; waiting
		// for it rather than sleeping a millisecond keeps a loaded machine
		// from turning later chunks into misses (read-ahead downloads in
		// flight are bounded, so a slow one holds the next back).
		testwait.Until(t, 5*time.Second, "read-ahead to land", readAheadsSettled)
	})
	dataChunks := (s.ref.IndexPos-1)/testChunk + 1
	// Chunk 0 (and 1 when the first fetch reaches it) is read before the
	// pattern shows; the rest came from read-ahead.
	if misses := value(t, m.ChunkCacheMisses); misses > 2 {
		t.Errorf("%v misses over %d chunks and %d fetches", misses, dataChunks, fetches)
	}
	testwait.Until(t, 5*time.Second, "read-ahead to settle", readAheadsSettled)
	if n := log.maxPerByte(s.ref.IndexPos); n != 1 {
		t.Errorf("a byte of data was downloaded %d times", n)
	}
	// Read-ahead stops at the end of the data (no chunk past it, the
	// tail's own GET aside), and downloads runs of chunks, not one chunk
	// per GET.
	if got := int64(log.total()); got > dataChunks/2+3 {
		t.Errorf("%d GETs for %d data chunks and the tail", got, dataChunks)
	}

}

func TestNoReadAheadForRandomReads(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	log := newGetLog()
	st.SetHook(log.hook)
	r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: 64 * testChunk, ReadAhead: 2})
	// Offsets whose batches lie chunks apart and in no order.
	var offs []int64
	for _, i := range []int{100, 10, 60, 30, 90} {
		offs = append(offs, headerOf(t, s.batches[i]).BaseOffset)
	}
	for _, off := range offs {
		if _, err := r.Fetch(bg, s.ref, off, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Fetch decides on read-ahead before it returns (noteRead registers the
	// chunks it will download in the cache), so what the cache holds now
	// is final: no chunk registered as read-ahead, and every GET one that a
	// miss waited for, plus the tail's.
	if n := readAheadChunks(r); n != 0 {
		t.Errorf("%d chunks read ahead for random reads", n)
	}
	if got, misses := log.total(), value(t, m.ChunkCacheMisses); float64(got) != misses+1 {
		t.Errorf("%d GETs for %v chunk misses and the tail: read-ahead ran for random reads", got, misses)
	}
	// The same probe sees read-ahead when there is some: a fetch that
	// continues the last one reads ahead.
	next := headerOf(t, s.batches[91]).BaseOffset
	if _, err := r.Fetch(bg, s.ref, next, 0); err != nil {
		t.Fatal(err)
	}
	if readAheadChunks(r) == 0 {
		t.Error("a sequential fetch after the random ones read nothing ahead")
	}
}

// readAheadChunks counts the chunks r's cache holds or is downloading
// because read-ahead asked for them.
func readAheadChunks(r *Reader) int {
	r.chunks.mu.Lock()
	defer r.chunks.mu.Unlock()
	n := 0
	for _, ch := range r.chunks.mu.chunks {
		if ch.readAhead {
			n++
		}
	}
	return n
}

// blockedStore is a memstore whose GetRange calls it can hold, and which
// counts the calls that returned.
type blockedStore struct {
	*memstore.Store
	ended atomic.Int64
}

func (b *blockedStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	defer b.ended.Add(1)
	return b.Store.GetRange(ctx, key, off, n)
}

func TestReadAheadStopsOnClose(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	release := make(chan struct{})
	defer close(release)
	var blocked atomic.Int64
	// Chunks from 3 on hang until their ctx ends.
	st.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpGetRange && c.Off >= 3*testChunk && c.Off < s.ref.IndexPos {
			blocked.Add(1)
			return memstore.Fault{Block: release}
		}
		return memstore.Fault{}
	})
	m := NewMetrics(nil)
	r := NewReader(st, ReaderConfig{ChunkBytes: testChunk, CacheBytes: 64 * testChunk, ReadAhead: 2, Key: tierKey}, m)
	// Two fetches in chunks 0 and 1: the second is sequential and reads
	// ahead chunks 2 and 3; chunk 3 hangs.
	for _, off := range []int64{0, headerOf(t, s.batches[10]).BaseOffset} {
		if _, err := r.Fetch(bg, s.ref, off, 0); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 5*time.Second, "a read-ahead GET", func() bool { return blocked.Load() > 0 })
	done := make(chan struct{})
	go func() {
		r.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop a hanging read-ahead")
	}
	if _, err := r.Fetch(bg, s.ref, 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("fetch after Close: %v", err)
	}
	if errs := value(t, m.ReadErrors); errs != 1 {
		t.Errorf("%v read errors, want the one fetch after Close (a read-ahead Close cancels is none)", errs)
	}
	goleak.VerifyNone(t)
}

func TestTruncatedObject(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	cuts := []int64{0, 10, 1000, s.ref.IndexPos - 100, s.ref.IndexPos, s.ref.IndexPos + 10, s.ref.Size - 1}
	for _, cut := range cuts {
		key := fmt.Sprintf("t/cut/%d.seg", cut)
		ref := s.ref
		ref.Key = key
		if _, err := st.Put(bg, key, bytes.NewReader(s.obj[:cut]), cut, nil); err != nil {
			t.Fatal(err)
		}
		r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk})
		if _, err := r.Fetch(bg, ref, 0, 100); !errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("cut at %d: fetch: %v", cut, err)
		}
		if _, _, _, err := r.OffsetForTime(bg, ref, 0, 0); !errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("cut at %d: time lookup: %v", cut, err)
		}
		if errs := value(t, m.ReadErrors); errs != 2 {
			t.Errorf("cut at %d: %v read errors", cut, errs)
		}
	}

	// The tail was read whole, then the data proves short (the object was
	// replaced behind metad's back): chunks past the end (a range the
	// store refuses) and across it (a clean short body).
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})
	if _, err := r.Fetch(bg, s.ref, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(bg, []string{s.ref.Key}); err != nil {
		t.Fatal(err)
	}
	cut := 5*testChunk + 100
	if _, err := st.Put(bg, s.ref.Key, bytes.NewReader(s.obj[:cut]), int64(cut), nil); err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{60, 100} {
		h := headerOf(t, s.batches[b])
		if _, err := r.Fetch(bg, s.ref, h.BaseOffset, 0); !errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("batch %d past the cut: %v", b, err)
		}
	}
	pos := int64(segfile.HeaderSize)
	for _, b := range s.batches {
		if pos+int64(len(b)) > 5*testChunk && pos < int64(cut) {
			if _, err := r.Fetch(bg, s.ref, headerOf(t, b).BaseOffset, 0); !errors.Is(err, segfile.ErrCorrupt) {
				t.Errorf("batch across the cut: %v", err)
			}
			break
		}
		pos += int64(len(b))
	}
}

func TestCorruptObject(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	// Positions covered by a check a partial read makes: batch bytes from
	// 21 on (the CRC-32C) and every byte of the tail.
	var flips []int64
	pos := int64(segfile.HeaderSize)
	for i, b := range s.batches {
		if i%17 == 0 {
			flips = append(flips, pos+21+int64(i)%int64(len(b)-21))
		}
		pos += int64(len(b))
	}
	flips = append(flips, s.ref.IndexPos, s.ref.IndexPos+30, s.ref.Size-40, s.ref.Size-1)
	for _, p := range flips {
		key := fmt.Sprintf("t/flip/%d.seg", p)
		obj := bytes.Clone(s.obj)
		obj[p] ^= 0x10
		if _, err := st.Put(bg, key, bytes.NewReader(obj), int64(len(obj)), nil); err != nil {
			t.Fatal(err)
		}
		ref := s.ref
		ref.Key = key
		// Fetch the batch holding the flipped byte.
		off, at := s.ref.BaseOffset, int64(segfile.HeaderSize)
		for _, b := range s.batches {
			if at+int64(len(b)) > p {
				off = headerOf(t, b).BaseOffset
				break
			}
			at += int64(len(b))
		}
		r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk})
		if _, err := r.Fetch(bg, ref, off, 0); !errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("bit flipped at %d: %v", p, err)
		}
	}

	// Damage in transit (a GET's bytes changed, same length) fails the
	// fetch, and the damaged chunk is not kept: the retry is served right.
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})
	if _, err := r.Fetch(bg, s.ref, 0, 0); err != nil {
		t.Fatal(err)
	}
	// Batch 35, and the chunk holding its middle.
	off, at := headerOf(t, s.batches[35]).BaseOffset, int64(segfile.HeaderSize)
	for _, b := range s.batches[:35] {
		at += int64(len(b))
	}
	damaged := (at + int64(len(s.batches[35]))/2) / testChunk * testChunk
	var once atomic.Bool
	st.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpGetRange && c.Off == damaged && once.CompareAndSwap(false, true) {
			return memstore.Fault{Body: func(b []byte) []byte { b[at+int64(len(s.batches[35]))/2-damaged] ^= 1; return b }}
		}
		return memstore.Fault{}
	})
	want := bruteFetch(t, s.batches, off, 3*testChunk)
	if _, err := r.Fetch(bg, s.ref, off, 3*testChunk); !errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("damaged in transit: %v", err)
	}
	if got, err := r.Fetch(bg, s.ref, off, 3*testChunk); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("retry: %d bytes, %v", len(got), err)
	}

	// metad and the object disagree on the offsets.
	ref := s.ref
	ref.LastOffset--
	if _, err := r.Fetch(bg, ref, 0, 0); !errors.Is(err, segfile.ErrCorrupt) {
		t.Errorf("offsets disagree: %v", err)
	}
}

func TestDeletedObject(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	// One reader has the tail cached and chunk 0, the other nothing.
	warm, wm := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})
	if _, err := warm.Fetch(bg, s.ref, 0, 0); err != nil {
		t.Fatal(err)
	}
	cold, cm := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk})
	if _, err := st.Delete(bg, []string{s.ref.Key}); err != nil {
		t.Fatal(err)
	}
	last := headerOf(t, s.batches[len(s.batches)-1]).BaseOffset
	for name, call := range map[string]func() error{
		"cold fetch": func() error { _, err := cold.Fetch(bg, s.ref, 0, 0); return err },
		"cold time":  func() error { _, _, _, err := cold.OffsetForTime(bg, s.ref, 0, 0); return err },
		"warm fetch": func() error { _, err := warm.Fetch(bg, s.ref, last, 0); return err },
	} {
		err := call()
		if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), s.ref.Key) || errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if value(t, wm.ReadErrors) != 1 || value(t, cm.ReadErrors) != 2 {
		t.Errorf("read errors: %v and %v", value(t, wm.ReadErrors), value(t, cm.ReadErrors))
	}
	// Chunk 0 is still cached: the object's absence shows only on what
	// must be read (T1: metad, not the bucket, decides what is LIVE).
	if _, err := warm.Fetch(bg, s.ref, 0, 0); err != nil {
		t.Errorf("cached chunk: %v", err)
	}
}

func TestFailedDownloadIsNotCached(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	log := newGetLog()
	var fault atomic.Int32 // 1: fail the next chunk GET, 2: cut its body
	var hit atomic.Int64   // the chunk the last fault hit
	st.SetHook(func(c memstore.Call) memstore.Fault {
		log.record(c)
		if c.Op != objstore.OpGetRange || c.Off == s.ref.IndexPos {
			return memstore.Fault{}
		}
		f := fault.Swap(0)
		if f != 0 {
			hit.Store(c.Off)
		}
		switch f {
		case 1:
			return memstore.Fault{Err: errors.New("503 slow down")}
		case 2:
			return memstore.Fault{Body: func(b []byte) []byte { return b[:len(b)/2] }}
		}
		return memstore.Fault{}
	})
	r, m := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})
	// Each fault at a chunk not cached yet: chunk 0, then one of batch
	// 60's.
	for _, f := range []struct {
		fault int32
		off   int64
	}{{1, 0}, {2, headerOf(t, s.batches[60]).BaseOffset}} {
		want := bruteFetch(t, s.batches, f.off, 0)
		fault.Store(f.fault)
		_, err := r.Fetch(bg, s.ref, f.off, 0)
		// A cut connection is no corrupt object: it is retried.
		if !errors.Is(err, objstore.ErrTransient) || errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("fault %d: %v", f.fault, err)
		}
		if got, err := r.Fetch(bg, s.ref, f.off, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("fault %d, retry: %d bytes, %v", f.fault, len(got), err)
		}
		if n := log.count(hit.Load(), testChunk); n != 2 {
			t.Errorf("fault %d: chunk at %d read %d times, want 2 (a failure, a success)", f.fault, hit.Load(), n)
		}
	}
	if value(t, m.ReadErrors) != 2 {
		t.Errorf("%v read errors", value(t, m.ReadErrors))
	}
	// A download its waiters abandoned (the other chunk of a failed read)
	// stays charged until its goroutine ends: wait for that, not longer.
	testwait.Until(t, 10*time.Second, "only cached chunks charged", func() bool {
		b, _, cached := r.chunks.stats()
		return b == int64(cached)*testChunk && cached >= 2
	})
}

func TestHangingGetEndsAtDeadline(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	bs := &blockedStore{Store: st}
	release := make(chan struct{})
	defer close(release)
	var hang atomic.Bool
	var started atomic.Int64
	st.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpGetRange && hang.Load() {
			started.Add(1)
			return memstore.Fault{Block: release}
		}
		return memstore.Fault{}
	})
	r, m := newTestReader(t, bs, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})
	check := func(what string, call func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancel()
		before, begun := bs.ended.Load(), time.Now()
		err := call(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v", what, err)
		}
		if d := time.Since(begun); d > 2*time.Second {
			t.Errorf("%s: returned after %v", what, d)
		}
		// The GET nobody waits for any more is cancelled, not left to
		// RequestTimeout.
		testwait.Until(t, 2*time.Second, what+": the abandoned GET to end", func() bool { return bs.ended.Load() > before })
	}
	hang.Store(true)
	check("tail", func(ctx context.Context) error { _, err := r.Fetch(ctx, s.ref, 0, 0); return err })
	hang.Store(false)
	if _, err := r.Fetch(bg, s.ref, 0, 0); err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	check("chunk", func(ctx context.Context) error { _, err := r.Fetch(ctx, s.ref, s.ref.LastOffset, 0); return err })
	if value(t, m.ReadErrors) != 2 {
		t.Errorf("%v read errors", value(t, m.ReadErrors))
	}

	// With no deadline of the caller's, RequestTimeout ends the GET.
	r2, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, RequestTimeout: 100 * time.Millisecond})
	err := func() error { _, err := r2.Fetch(bg, s.ref, 0, 0); return err }()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, objstore.ErrTransient) {
		t.Errorf("request timeout: %v", err)
	}
}

func TestSegmentRefAndConfig(t *testing.T) {
	st := memstore.New(memstore.Options{})
	r, _ := newTestReader(t, st, ReaderConfig{})
	for _, ref := range []SegmentRef{
		{Key: "", Size: 100, IndexPos: 40},
		{Key: "a/b.seg", Size: 0},
		{Key: "a/b.seg", Size: 100, BaseOffset: 5, LastOffset: 4},
	} {
		if _, err := r.Fetch(bg, ref, 0, 0); err == nil || errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("%+v: %v", ref, err)
		}
	}
	if got := (ReaderConfig{}).String(); got != "chunk=8388608B cache=268435456B tails=1024 readahead=4 timeout=30s" {
		t.Errorf("defaults: %s", got)
	}
	// A small cache gets smaller chunks rather than being refused.
	if c := (ReaderConfig{CacheBytes: 1 << 20}); c.Validate() != nil || c.withDefaults().ChunkBytes != 256<<10 {
		t.Errorf("1 MiB cache: %v, chunk %d", c.Validate(), c.withDefaults().ChunkBytes)
	}
	for _, bad := range []ReaderConfig{
		{ChunkBytes: 100}, {ChunkBytes: 2 << 30, CacheBytes: 4 << 30}, {ChunkBytes: 1 << 20, CacheBytes: 1 << 19},
		{TailCacheEntries: -1}, {RequestTimeout: -time.Second}, {CacheBytes: -1},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v: valid", bad)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("NewReader took an invalid config")
			}
		}()
		NewReader(st, ReaderConfig{ChunkBytes: 1}, nil)
	}()
}

// fetchTogether has n readers fetch (offset, maxBytes) of s from r at the
// same moment and fails t unless every one gets what bruteFetch computes.
func fetchTogether(t *testing.T, r *Reader, s testSeg, offset int64, maxBytes, n int) {
	t.Helper()
	want := bruteFetch(t, s.batches, offset, maxBytes)
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			<-start
			got, err := r.Fetch(bg, s.ref, offset, maxBytes)
			if err == nil && !bytes.Equal(got, want) {
				err = fmt.Errorf("got %d bytes, want %d", len(got), len(want))
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Downloads check the batches as their bytes arrive, so that fetches need
// not read them from memory again for their CRCs; a damaged batch is
// never in a checked range, and its fetch still fails.
func TestBatchesCheckedAsTheyArrive(t *testing.T) {
	st := memstore.New(memstore.Options{})
	s := threeSegments(t, st)[0]
	starts := []int64{segfile.HeaderSize}
	for _, b := range s.batches {
		starts = append(starts, starts[len(starts)-1]+int64(len(b)))
	}
	// fetchAll reads every batch of ref through one Reader and reports how
	// many lay in a range the downloads checked.
	fetchAll := func(ref SegmentRef) (checked int, err error) {
		r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})
		for i, b := range s.batches {
			err := r.read(bg, ref, false, func(tail *segfile.Tail, rr segfile.RangeReader) error {
				if _, err := tail.ReadFetch(bg, rr, headerOf(t, b).BaseOffset, 1); err != nil {
					return err
				}
				if rr.(*segReader).Checked(starts[i], int64(len(b))) {
					checked++
				}
				return nil
			})
			if err != nil {
				return checked, err
			}
		}
		return checked, nil
	}
	checked, err := fetchAll(s.ref)
	if err != nil {
		t.Fatal(err)
	}
	// Those straddling two chunks, or before the first batch start a
	// chunk knows, are checked by the fetch instead.
	if checked < len(s.batches)/2 {
		t.Errorf("%d of %d batches checked as they arrived", checked, len(s.batches))
	}

	// Batch 40 damaged at rest: fetches before it are served, its own
	// fails, and it is never taken for checked.
	obj := bytes.Clone(s.obj)
	obj[starts[40]+recordbatch.HeaderSize+5] ^= 8
	ref := s.ref
	ref.Key = "t/flip/checked.seg"
	if _, err := st.Put(bg, ref.Key, bytes.NewReader(obj), int64(len(obj)), nil); err != nil {
		t.Fatal(err)
	}
	r, _ := newTestReader(t, st, ReaderConfig{ChunkBytes: testChunk, ReadAhead: -1})
	err = r.read(bg, ref, false, func(tail *segfile.Tail, rr segfile.RangeReader) error {
		_, err := tail.ReadFetch(bg, rr, headerOf(t, s.batches[40]).BaseOffset, 1)
		if rr.(*segReader).Checked(starts[40], int64(len(s.batches[40]))) {
			t.Error("the damaged batch lies in a checked range")
		}
		return err
	})
	if !errors.Is(err, segfile.ErrCorrupt) {
		t.Errorf("fetch of the damaged batch: %v", err)
	}
	if _, err := fetchAll(ref); !errors.Is(err, segfile.ErrCorrupt) {
		t.Errorf("reading the damaged object through: %v", err)
	}
}
