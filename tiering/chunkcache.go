package tiering

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/strata-log/strata/tiering/segfile"
)

// group owns the read path's background goroutines (downloads and
// read-ahead): close cancels the context they run under and waits for
// every one, so a closed Reader leaves nothing running.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
	}
}

func newGroup() *group {
	g := &group{}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// goFn runs fn in a goroutine close waits for. It reports false, and
// does not run fn, once the group is closed: the check and the Add are
// under one lock, so close cannot miss a goroutine.
func (g *group) goFn(fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
	return true
}

func (g *group) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.closed
}

// close stops new goroutines, cancels the running ones and waits for
// them. It may be called more than once.
func (g *group) close() {
	g.mu.Lock()
	g.mu.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}

// flight is one download shared by every caller that wants its result
// (singleflight). It runs in a goroutine of the group under a context of
// its own, not a caller's: one caller giving up must not fail the others.
// The download is cancelled when the last caller that joined gives up
// (nobody wants it any more; a read-ahead nobody joined runs to its end,
// bounded by RequestTimeout), or when the group closes.
type flight[T any] struct {
	done   chan struct{}
	val    T // set before done is closed
	err    error
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		waiters   int
		joined    bool // someone waited on it at some point
		abandoned bool // its waiters all gave up: it is being cancelled
	}
}

// startFlight starts fn in g with waiters callers already joined. settle
// runs in the flight's goroutine with the result, before any waiter sees
// it, so that a cache can publish or drop the result first. It returns
// false when g is closed.
func startFlight[T any](g *group, waiters int, fn func(context.Context) (T, error), settle func(*flight[T])) (*flight[T], bool) {
	ctx, cancel := context.WithCancel(g.ctx)
	f := &flight[T]{done: make(chan struct{}), cancel: cancel}
	f.mu.waiters, f.mu.joined = waiters, waiters > 0
	ok := g.goFn(func() {
		defer cancel()
		f.val, f.err = fn(ctx)
		settle(f)
		close(f.done)
	})
	if !ok {
		cancel()
		return nil, false
	}
	return f, true
}

// join adds a waiter. It returns false when the flight's waiters have
// all given up (it is being cancelled): the caller starts another.
func (f *flight[T]) join() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.abandoned {
		return false
	}
	f.mu.waiters++
	f.mu.joined = true
	return true
}

func (f *flight[T]) wasJoined() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.joined
}

// wait returns the flight's result, or ctx's error when ctx ends first;
// the caller must have joined. A result already there wins over an ended
// ctx.
func (f *flight[T]) wait(ctx context.Context) (T, error) {
	select {
	case <-f.done:
	case <-ctx.Done():
		select {
		case <-f.done:
		default:
			f.leave(true)
			var zero T
			return zero, fmt.Errorf("tiering: gave up waiting for a download: %w", ctx.Err())
		}
	}
	f.leave(false)
	return f.val, f.err
}

// leave removes a waiter; the last one to give up cancels the download.
func (f *flight[T]) leave(gaveUp bool) {
	f.mu.Lock()
	f.mu.waiters--
	cancel := gaveUp && f.mu.waiters == 0
	if cancel {
		f.mu.abandoned = true
	}
	f.mu.Unlock()
	if cancel {
		f.cancel()
	}
}

// chunkKey names a chunk: the ChunkBytes-aligned range number idx of an
// object. Keys are immutable (T2), so a cached chunk never goes stale.
type chunkKey struct {
	key string
	idx int64
}

// chunk is a cache entry: downloading (elem nil, f running) or
// downloaded (elem in the LRU, f.val its bytes).
type chunk struct {
	key       chunkKey
	size      int64
	f         *flight[chunkData]
	readAhead bool          // counted in mu.readAheads until settled
	elem      *list.Element // REQUIRES: chunkCache.mu held
}

// chunkCache holds object chunks in memory, bounded in bytes, evicting
// the least recently used downloaded chunk first. A chunk being
// downloaded is charged from the start, so the bound holds for what is
// allocated, not only for what is done; a reader that finds no room
// waits until a download ends rather than exceed it. Safe for concurrent
// use.
type chunkCache struct {
	chunkBytes   int64
	capBytes     int64
	maxReadAhead int
	fetch        fetchFunc
	g            *group
	m            *Metrics

	mu struct {
		sync.Mutex
		bytes       int64 // charged: downloaded and downloading chunks
		cachedBytes int64 // downloaded chunks (in lru), i.e. evictable
		peak        int64 // the most bytes ever charged (tests check the bound)
		chunks      map[chunkKey]*chunk
		lru         list.List // downloaded chunks, most recently used first
		// space is closed (and replaced) whenever bytes are released or
		// become evictable, to wake the readers waiting for room.
		space      chan struct{}
		readAheads int // read-ahead downloads in flight
	}
}

// fetchFunc downloads consecutive pieces of key from off, of the given
// sizes, in one request where it can, and hands each to deliver (in
// order, exactly its size) as soon as it is complete. It returns the
// error that stopped it; the pieces not delivered by then are not. t,
// when not nil, is the object's tail, with which the bytes are checked
// as they arrive (chunkData.checked).
type fetchFunc func(ctx context.Context, key string, off int64, sizes []int64, t *segfile.Tail, deliver func(i int, c chunkData)) error

// chunkData is a downloaded chunk: its bytes (shared: never modified),
// the range of them, in object positions, that is whole batches already
// checked by segfile.CheckBatches, and the range that is whole blocks
// already authenticated by a segfile.BlockChecker (empty: none).
type chunkData struct {
	bytes         []byte
	checked       span
	authenticated span
}

// span is the object positions [from, to).
type span struct{ from, to int64 }

// holds reports whether [pos, pos+size) lies in s.
func (s span) holds(pos, size int64) bool { return pos >= s.from && pos+size <= s.to }

// fetchOne downloads one piece with fetch.
func fetchOne(ctx context.Context, fetch fetchFunc, key string, off, n int64, t *segfile.Tail) (chunkData, error) {
	var data chunkData
	err := fetch(ctx, key, off, []int64{n}, t, func(_ int, d chunkData) { data = d })
	if err != nil {
		return chunkData{}, err
	}
	return data, nil
}

func newChunkCache(chunkBytes, capBytes int64, maxReadAhead int, g *group, m *Metrics, fetch fetchFunc) *chunkCache {
	c := &chunkCache{chunkBytes: chunkBytes, capBytes: capBytes, maxReadAhead: maxReadAhead, fetch: fetch, g: g, m: m}
	c.mu.chunks = make(map[chunkKey]*chunk)
	c.mu.space = make(chan struct{})
	return c
}

// ticket is a chunk a reader acquired: its bytes when it was cached, or a
// download the reader joined and must wait for or drop.
type ticket struct {
	key  chunkKey
	data chunkData
	f    *flight[chunkData]
}

// wait returns the chunk (its bytes are shared: do not modify).
func (t ticket) wait(ctx context.Context) (chunkData, error) {
	if t.f == nil {
		return t.data, nil
	}
	data, err := t.f.wait(ctx)
	if err != nil {
		return chunkData{}, fmt.Errorf("chunk %d: %w", t.key.idx, err)
	}
	return data, nil
}

// drop leaves a joined download without waiting for it.
func (t ticket) drop() {
	if t.f != nil {
		t.f.leave(true)
	}
}

// acquire returns chunk idx (size bytes) of key: cached, being downloaded
// (joined), or newly started (checked as it arrives with t, when not
// nil). With no room for it, it waits for a download to end, until ctx
// ends.
func (c *chunkCache) acquire(ctx context.Context, key string, idx, size int64, t *segfile.Tail) (ticket, error) {
	k := chunkKey{key, idx}
	for {
		c.mu.Lock()
		ch := c.mu.chunks[k]
		switch {
		case ch != nil && ch.elem != nil:
			c.mu.lru.MoveToFront(ch.elem)
			c.mu.Unlock()
			c.m.ChunkCacheHits.Inc()
			return ticket{key: k, data: ch.f.val}, nil
		case ch != nil && ch.f.join():
			c.mu.Unlock()
			c.m.ChunkCacheHits.Inc()
			return ticket{key: k, f: ch.f}, nil
		}
		// Not there, or abandoned by its waiters (being cancelled): start
		// a download that replaces it.
		ch, space, err := c.startLocked(k, size, false, func(ctx context.Context) (chunkData, error) {
			return fetchOne(ctx, c.fetch, k.key, k.idx*c.chunkBytes, size, t)
		})
		c.mu.Unlock()
		switch {
		case err != nil:
			return ticket{}, err
		case ch != nil:
			c.m.ChunkCacheMisses.Inc()
			return ticket{key: k, f: ch.f}, nil
		}
		select {
		case <-space:
		case <-ctx.Done():
			return ticket{}, fmt.Errorf("tiering: waiting for room in the chunk cache: %w", ctx.Err())
		case <-c.g.ctx.Done():
			return ticket{}, ErrClosed
		}
	}
}

// readAhead starts downloading, in the background and with one request,
// a run of chunks of key as long as the window [from, to], from the first
// chunk in the window neither cached nor downloading (none: nothing to
// do), but not past limit. A reader moving one chunk on thus finds its
// window full again for a while, instead of adding one chunk to it: a
// store spends less per byte on fewer, larger requests. size gives each
// chunk's length. The run ends early at a chunk already there, where
// read-ahead downloads reach their bound, or where the cache has no room
// without waiting: read-ahead is a bet and must never hold up or crowd
// out the reads that are asked for.
func (c *chunkCache) readAhead(key string, from, to, limit int64, size func(idx int64) int64, t *segfile.Tail) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := from
	for first <= to && c.mu.chunks[chunkKey{key, first}] != nil {
		first++
	}
	if first > to {
		return
	}
	end := min(first+to-from, limit)
	var sizes []int64
	var results []chan pieceResult
	for idx := first; idx <= end && c.mu.readAheads < c.maxReadAhead; idx++ {
		k := chunkKey{key, idx}
		if c.mu.chunks[k] != nil {
			break
		}
		res := make(chan pieceResult, 1) // the downloader never waits on a reader
		ch, _, err := c.startLocked(k, size(idx), true, func(ctx context.Context) (chunkData, error) {
			select {
			case r := <-res:
				return r.data, r.err
			case <-ctx.Done():
				return chunkData{}, ctx.Err()
			}
		})
		if err != nil || ch == nil {
			break // closed, or no room
		}
		sizes = append(sizes, size(idx))
		results = append(results, res)
	}
	if len(sizes) == 0 {
		return
	}
	// The chunks' flights wait for their pieces; a closed group cancels
	// them, so a downloader that does not start leaves none waiting.
	c.g.goFn(func() {
		delivered := 0
		err := c.fetch(c.g.ctx, key, first*c.chunkBytes, sizes, t, func(i int, data chunkData) {
			results[i] <- pieceResult{data: data}
			delivered = i + 1
		})
		if err == nil && delivered < len(sizes) {
			err = fmt.Errorf("tiering: read-ahead of %s delivered %d of %d chunks", key, delivered, len(sizes))
		}
		for _, res := range results[delivered:] {
			res <- pieceResult{err: err}
		}
	})
}

// pieceResult is one chunk of a read-ahead run, handed from the run's
// downloader to the chunk's flight.
type pieceResult struct {
	data chunkData
	err  error
}

// startLocked starts downloading k and charges its size, evicting
// downloaded chunks as needed. A read-ahead download has no waiter; any
// other has the caller as its first. With no room even after evicting
// every downloaded chunk, it returns the channel that signals released
// bytes instead.
//
// REQUIRES: c.mu held.
func (c *chunkCache) startLocked(k chunkKey, size int64, readAhead bool, fetch func(context.Context) (chunkData, error)) (*chunk, <-chan struct{}, error) {
	if c.mu.bytes-c.mu.cachedBytes+size > c.capBytes {
		return nil, c.mu.space, nil
	}
	for c.mu.bytes+size > c.capBytes {
		c.evictLocked(c.mu.lru.Back().Value.(*chunk))
	}
	ch := &chunk{key: k, size: size, readAhead: readAhead}
	waiters := 1
	if readAhead {
		waiters = 0
	}
	f, ok := startFlight(c.g, waiters, fetch, func(f *flight[chunkData]) { c.settle(ch, f) })
	if !ok {
		return nil, nil, ErrClosed
	}
	// settle needs c.mu, which is held until ch is complete.
	ch.f = f
	c.mu.chunks[k] = ch
	c.mu.bytes += size
	c.mu.peak = max(c.mu.peak, c.mu.bytes)
	c.m.ChunkCacheBytes.Add(float64(size))
	if readAhead {
		c.mu.readAheads++
	}
	return ch, nil, nil
}

// settle publishes a finished download, or drops it: a failed download is
// not cached (the next reader retries it), and neither is one that was
// abandoned and replaced meanwhile.
func (c *chunkCache) settle(ch *chunk, f *flight[chunkData]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.readAhead {
		c.mu.readAheads--
		// Nobody else sees a failed read-ahead, but a missing or broken
		// object must show (T10). Close cancelling it is no failure.
		if f.err != nil && !f.wasJoined() && c.g.ctx.Err() == nil {
			c.m.ReadErrors.Inc()
		}
	}
	current := c.mu.chunks[ch.key] == ch
	if f.err == nil && current {
		ch.elem = c.mu.lru.PushFront(ch)
		c.mu.cachedBytes += ch.size
		// Evictable now: room for a reader waiting.
		c.wakeLocked()
		return
	}
	if current {
		delete(c.mu.chunks, ch.key)
	}
	c.releaseLocked(ch.size)
}

// invalidate drops the downloaded chunks idxs of key: bytes that failed a
// check may have been damaged in transit, and a retry must download them
// again rather than fail on the cached copy forever.
func (c *chunkCache) invalidate(key string, idxs []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, idx := range idxs {
		if ch := c.mu.chunks[chunkKey{key, idx}]; ch != nil && ch.elem != nil {
			c.evictLocked(ch)
		}
	}
}

// REQUIRES: c.mu held; ch downloaded (in the LRU).
func (c *chunkCache) evictLocked(ch *chunk) {
	c.mu.lru.Remove(ch.elem)
	ch.elem = nil
	delete(c.mu.chunks, ch.key)
	c.mu.cachedBytes -= ch.size
	c.releaseLocked(ch.size)
}

// REQUIRES: c.mu held.
func (c *chunkCache) releaseLocked(size int64) {
	c.mu.bytes -= size
	c.m.ChunkCacheBytes.Add(-float64(size))
	c.wakeLocked()
}

// wakeLocked wakes the readers waiting for room.
//
// REQUIRES: c.mu held.
func (c *chunkCache) wakeLocked() {
	close(c.mu.space)
	c.mu.space = make(chan struct{})
}

// stats returns the bytes charged, the most ever charged and the number of
// downloaded chunks (for tests and String-like reports).
func (c *chunkCache) stats() (bytes, peak int64, cached int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.bytes, c.mu.peak, c.mu.lru.Len()
}
