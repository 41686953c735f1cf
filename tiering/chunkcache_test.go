package tiering

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/tiering/segfile"
)

const unit = 1 << 10 // chunk size of these tests

// fakeObjects is a chunkCache's fetch function over made-up objects: chunk
// i of any key is unit bytes of value i. Downloads of an index in gates
// wait until its channel closes (or their ctx ends).
type fakeObjects struct {
	mu struct {
		sync.Mutex
		calls     map[int64]int
		cancelled int
		gates     map[int64]chan struct{}
		fail      error
		failIdx   map[int64]error // failures of one chunk
	}
}

func newFake() *fakeObjects {
	f := &fakeObjects{}
	f.mu.calls = map[int64]int{}
	f.mu.gates = map[int64]chan struct{}{}
	f.mu.failIdx = map[int64]error{}
	return f
}

// fetch is a fetchFunc: each piece downloaded as one chunk (counted,
// gated and failed one by one).
func (f *fakeObjects) fetch(ctx context.Context, key string, off int64, sizes []int64, _ *segfile.Tail, deliver func(int, chunkData)) error {
	for i, n := range sizes {
		data, err := f.fetchChunk(ctx, off, n)
		if err != nil {
			return err
		}
		deliver(i, chunkData{bytes: data})
		off += n
	}
	return nil
}

func (f *fakeObjects) fetchChunk(ctx context.Context, off, n int64) ([]byte, error) {
	idx := off / unit
	f.mu.Lock()
	f.mu.calls[idx]++
	gate, fail := f.mu.gates[idx], f.mu.fail
	if err := f.mu.failIdx[idx]; err != nil {
		fail = err
	}
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			f.mu.Lock()
			f.mu.cancelled++
			f.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	return bytes.Repeat([]byte{byte(idx)}, int(n)), nil
}

// gate makes downloads of chunk idx wait; the returned func lets them go.
func (f *fakeObjects) gate(idx int64) func() {
	ch := make(chan struct{})
	f.mu.Lock()
	f.mu.gates[idx] = ch
	f.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

func (f *fakeObjects) calls(idx int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.calls[idx]
}

func (f *fakeObjects) cancelled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.cancelled
}

// newTestCache returns a cache of capChunks chunks over f, closed at the
// end of the test.
func newTestCache(t *testing.T, f *fakeObjects, capChunks int64, maxReadAhead int) (*chunkCache, *Metrics) {
	g := newGroup()
	t.Cleanup(g.close)
	m := NewMetrics(nil)
	return newChunkCache(unit, capChunks*unit, maxReadAhead, g, m, f.fetch), m
}

// get acquires and waits for chunk idx of "k".
func get(ctx context.Context, c *chunkCache, idx int64) ([]byte, error) {
	tk, err := c.acquire(ctx, "k", idx, unit, nil)
	if err != nil {
		return nil, err
	}
	data, err := tk.wait(ctx)
	return data.bytes, err
}

func cached(c *chunkCache, idx int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.mu.chunks[chunkKey{"k", idx}]
	return ch != nil && ch.elem != nil
}

func TestChunkCacheSingleflight(t *testing.T) {
	f := newFake()
	c, m := newTestCache(t, f, 4, 2)
	release := f.gate(3)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			b, err := get(bg, c, 3)
			if err == nil && !bytes.Equal(b, bytes.Repeat([]byte{3}, unit)) {
				err = errors.New("wrong bytes")
			}
			errs <- err
		})
	}
	testwait.Until(t, 5*time.Second, "the readers to join", func() bool {
		return value(t, m.ChunkCacheHits)+value(t, m.ChunkCacheMisses) == 20
	})
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.calls(3); n != 1 || value(t, m.ChunkCacheMisses) != 1 {
		t.Errorf("%d downloads, %v misses", n, value(t, m.ChunkCacheMisses))
	}
}

func TestChunkCacheEvictsLeastRecentlyUsed(t *testing.T) {
	f := newFake()
	c, m := newTestCache(t, f, 3, 2)
	for _, idx := range []int64{0, 1, 2, 0, 3} { // 0 touched again: 1 is the oldest
		if _, err := get(bg, c, idx); err != nil {
			t.Fatal(err)
		}
	}
	if !cached(c, 0) || cached(c, 1) || !cached(c, 2) || !cached(c, 3) {
		t.Error("chunk 1, the least recently used, should be the one evicted")
	}
	if b, peak, n := c.stats(); b != 3*unit || peak != 3*unit || n != 3 || value(t, m.ChunkCacheBytes) != 3*unit {
		t.Errorf("%d bytes (peak %d) in %d chunks", b, peak, n)
	}
}

func TestChunkCacheWaitsForRoom(t *testing.T) {
	f := newFake()
	c, _ := newTestCache(t, f, 2, 2)
	release0, release1 := f.gate(0), f.gate(1)
	defer release1()
	// Two downloads in flight fill the cache: they are charged.
	t0, err := c.acquire(bg, "k", 0, unit, nil)
	if err != nil {
		t.Fatal(err)
	}
	t1, err := c.acquire(bg, "k", 1, unit, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.drop()
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if _, err := c.acquire(ctx, "k", 2, unit, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no room: %v", err)
	}
	// Once chunk 0 is downloaded it can be evicted for chunk 2.
	got := make(chan error, 1)
	go func() {
		_, err := get(bg, c, 2)
		got <- err
	}()
	release0()
	if _, err := t0.wait(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, peak, _ := c.stats(); peak > 2*unit || cached(c, 0) || !cached(c, 2) {
		t.Errorf("peak %d, chunk 0 cached %t, chunk 2 cached %t", peak, cached(c, 0), cached(c, 2))
	}
}

func TestChunkCacheCancelsAbandonedDownload(t *testing.T) {
	f := newFake()
	c, _ := newTestCache(t, f, 4, 2)
	release := f.gate(1)
	defer release()
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	if _, err := get(ctx, c, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hanging download: %v", err)
	}
	// Its only reader left: the download is cancelled, its bytes freed.
	testwait.Until(t, 5*time.Second, "the download to be cancelled", func() bool {
		b, _, _ := c.stats()
		return f.cancelled() == 1 && b == 0
	})
	release()
	if _, err := get(bg, c, 1); err != nil || f.calls(1) != 2 {
		t.Fatalf("retry: %v after %d downloads", err, f.calls(1))
	}
}

func TestChunkCacheDoesNotCacheFailures(t *testing.T) {
	f := newFake()
	c, _ := newTestCache(t, f, 4, 2)
	boom := errors.New("boom")
	f.mu.Lock()
	f.mu.fail = boom
	f.mu.Unlock()
	if _, err := get(bg, c, 0); !errors.Is(err, boom) {
		t.Fatalf("failed download: %v", err)
	}
	if b, _, n := c.stats(); b != 0 || n != 0 {
		t.Errorf("after a failure: %d bytes in %d chunks", b, n)
	}
	f.mu.Lock()
	f.mu.fail = nil
	f.mu.Unlock()
	if _, err := get(bg, c, 0); err != nil || f.calls(0) != 2 || !cached(c, 0) {
		t.Errorf("retry: %v after %d downloads", err, f.calls(0))
	}
	c.invalidate("k", []int64{0, 7})
	if cached(c, 0) {
		t.Error("invalidated chunk still cached")
	}
}

// A read-ahead run is one download of consecutive chunks: the chunks
// before a failure are cached, those from it on are not, nobody waiting
// sees a wrong chunk, and the next read of a failed chunk downloads it
// again.
func TestChunkCacheReadAheadRun(t *testing.T) {
	f := newFake()
	c, m := newTestCache(t, f, 8, 8)
	size := func(int64) int64 { return unit }
	f.mu.Lock()
	f.mu.failIdx[3] = errors.New("boom")
	f.mu.Unlock()
	release := f.gate(1)
	c.readAhead("k", 1, 4, 100, size, nil)      // chunks 1 to 4, one download
	tk, err := c.acquire(bg, "k", 4, unit, nil) // joins the run's chunk 4
	if err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := tk.wait(bg); err == nil {
		t.Error("chunk 4, after the run failed at chunk 3: no error")
	}
	testwait.Until(t, 5*time.Second, "the run to settle", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.mu.readAheads == 0
	})
	for idx, want := range map[int64]bool{1: true, 2: true, 3: false, 4: false} {
		if cached(c, idx) != want {
			t.Errorf("chunk %d cached: %v, want %v", idx, !want, want)
		}
	}
	f.mu.Lock()
	delete(f.mu.failIdx, 3)
	f.mu.Unlock()
	for idx := int64(1); idx <= 4; idx++ {
		data, err := get(bg, c, idx)
		if err != nil || !bytes.Equal(data, bytes.Repeat([]byte{byte(idx)}, unit)) {
			t.Errorf("chunk %d: %d bytes, %v", idx, len(data), err)
		}
	}
	if f.calls(3) != 2 || f.calls(4) != 1 || f.calls(1) != 1 {
		t.Errorf("downloads: chunk 1 %d, chunk 3 %d, chunk 4 %d; want 1, 2, 1", f.calls(1), f.calls(3), f.calls(4))
	}
	// The failure no reader waited for (chunk 3) is counted; chunk 4's
	// was seen by its reader.
	if n := value(t, m.ReadErrors); n != 1 {
		t.Errorf("%v read errors, want 1", n)
	}
	// A window whose chunks are all there starts nothing.
	c.readAhead("k", 1, 4, 100, size, nil)
	if f.calls(2) != 1 {
		t.Error("read-ahead downloaded a cached chunk again")
	}
}

func TestChunkCacheReadAheadIsBounded(t *testing.T) {
	f := newFake()
	c, m := newTestCache(t, f, 3, 2)
	var releases []func()
	for i := range int64(6) {
		releases = append(releases, f.gate(i))
	}
	size := func(int64) int64 { return unit }
	for i := range int64(6) {
		c.readAhead("k", i, i, i, size, nil)
	}
	c.mu.Lock()
	inFlight, n := c.mu.readAheads, len(c.mu.chunks)
	c.mu.Unlock()
	if inFlight != 2 || n != 2 {
		t.Errorf("%d read-aheads in flight, %d chunks: want the bound, 2", inFlight, n)
	}
	// One foreground download fills the cache; read-ahead never waits
	// for room, nor evicts in-flight downloads.
	tk, err := c.acquire(bg, "k", 5, unit, nil)
	if err != nil {
		t.Fatal(err)
	}
	releases[0]()
	testwait.Until(t, 5*time.Second, "a read-ahead to finish", func() bool { return cached(c, 0) })
	c.readAhead("k", 4, 4, 4, size, nil) // fits by evicting chunk 0
	c.mu.Lock()
	ok := c.mu.chunks[chunkKey{"k", 4}] != nil
	c.mu.Unlock()
	if !ok || cached(c, 0) {
		t.Error("read-ahead should evict a downloaded chunk for room")
	}
	c.readAhead("k", 3, 3, 3, size, nil) // two read-aheads in flight, and no room
	if f.calls(3) != 0 {
		t.Error("read-ahead started with no room")
	}
	// Close cancels read-ahead downloads, and those count as no error.
	c.g.close()
	tk.drop()
	if _, err := c.acquire(bg, "k", 9, unit, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("acquire after close: %v", err)
	}
	if value(t, m.ReadErrors) != 0 {
		t.Errorf("%v read errors", value(t, m.ReadErrors))
	}
	for _, r := range releases {
		r()
	}
}
