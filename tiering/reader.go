package tiering

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/diskcache"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// SegmentRef is what a reader needs to know of a committed segment object
// (all of it is recorded in metad when the segment is committed).
type SegmentRef struct {
	Key        string // object key
	Size       int64  // object size in bytes
	IndexPos   int64  // segfile trailer's index position (start of the tail)
	BaseOffset int64
	LastOffset int64
	// Authenticated: the object was written with a MAC, so a copy
	// without one is refused (segfile.Auth.Required).
	Authenticated bool
}

// validate catches a ref no committed segment can have: a caller's bug,
// not a property of the object.
func (s SegmentRef) validate() error {
	if err := objstore.ValidateKey(s.Key); err != nil {
		return fmt.Errorf("tiering: invalid segment ref: %w", err)
	}
	switch {
	case s.Size <= 0:
		return fmt.Errorf("tiering: invalid segment ref %s: size %d", s.Key, s.Size)
	case s.BaseOffset < 0 || s.LastOffset < s.BaseOffset:
		return fmt.Errorf("tiering: invalid segment ref %s: offsets [%d, %d]", s.Key, s.BaseOffset, s.LastOffset)
	}
	return nil
}

// Defaults of ReaderConfig.
const (
	// DefaultChunkBytes: MinIO spends about a third less CPU per byte on
	// 8 MiB ranged GETs than on 4 MiB ones, and so does the reader
	// (TestCatchUpThroughput); Redpanda's chunks are 16 MiB.
	DefaultChunkBytes       = 8 << 20
	DefaultCacheBytes       = 256 << 20
	DefaultTailCacheEntries = 1024
	// DefaultReadAhead: runs of 4 chunks, one 32 MiB GET each, cost MinIO
	// about the CPU per byte of whole-object GETs (TestCatchUpThroughput).
	DefaultReadAhead      = 4
	DefaultRequestTimeout = 30 * time.Second
)

const (
	// Chunk size bounds: below 4 KiB a GET costs more in requests than it
	// moves in bytes; above 1 GiB one chunk is one huge allocation.
	minChunkBytes = 4 << 10
	maxChunkBytes = 1 << 30
	// maxReadAheadFlights bounds the chunks read ahead in flight over all
	// segments: a run each for 4 sequential consumers at the default
	// ReadAhead, half the default cache; more would only take bandwidth
	// and room from the reads consumers are waiting for.
	maxReadAheadFlights = 16
	// readStreams is how many sequential readers of one segment the
	// read-ahead detector tells apart (consumer groups reading the same
	// segment at different positions).
	readStreams = 4
)

// ErrClosed is returned by a Reader after Close.
var ErrClosed = errors.New("tiering: reader closed")

// ReaderConfig configures a Reader. Zero fields take the defaults.
type ReaderConfig struct {
	ChunkBytes       int64         // aligned ranged GET size; default 8 MiB (a quarter of a smaller CacheBytes)
	CacheBytes       int64         // bound of the in-memory chunk cache; default 256 MiB
	TailCacheEntries int           // parsed tails kept (LRU); default 1024
	ReadAhead        int           // chunks prefetched after a sequential read, in one GET; default 4, negative: none
	RequestTimeout   time.Duration // each GET; default 30s
	// DiskCache, when not nil, is the level under the in-memory chunk
	// cache: a chunk missing from memory is looked for there before it is
	// downloaded, and every chunk downloaded is written there in the
	// background. The Reader uses it but does not own it (no Close).
	DiskCache *diskcache.Cache
	// Key is the cluster's tier key, with which authenticated objects are
	// read (segfile.Auth). Nil: they cannot be (segfile.ErrNoKey).
	Key *segfile.Key
}

func (c ReaderConfig) withDefaults() ReaderConfig {
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.ChunkBytes == 0 {
		// A small cache still holds a few chunks (at least the minimum).
		c.ChunkBytes = max(min(DefaultChunkBytes, c.CacheBytes/4), minChunkBytes)
	}
	if c.TailCacheEntries == 0 {
		c.TailCacheEntries = DefaultTailCacheEntries
	}
	if c.ReadAhead == 0 {
		c.ReadAhead = DefaultReadAhead
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return c
}

// Validate reports the problems with c (after defaults).
func (c ReaderConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.ChunkBytes < minChunkBytes || c.ChunkBytes > maxChunkBytes {
		errs = append(errs, fmt.Errorf("chunk size %d outside [%d, %d]", c.ChunkBytes, minChunkBytes, maxChunkBytes))
	}
	// A chunk that cannot fit would wait for room forever.
	if c.CacheBytes < c.ChunkBytes {
		errs = append(errs, fmt.Errorf("a cache of %d bytes cannot hold one %d-byte chunk", c.CacheBytes, c.ChunkBytes))
	}
	if c.TailCacheEntries < 0 {
		errs = append(errs, fmt.Errorf("tail cache entries %d", c.TailCacheEntries))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("request timeout %v", c.RequestTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tiering: invalid reader config: %w", err)
	}
	return nil
}

func (c ReaderConfig) String() string {
	c = c.withDefaults()
	s := fmt.Sprintf("chunk=%dB cache=%dB tails=%d readahead=%d timeout=%v",
		c.ChunkBytes, c.CacheBytes, c.TailCacheEntries, max(c.ReadAhead, 0), c.RequestTimeout)
	if c.Key != nil {
		s += " key=" + c.Key.String()
	}
	if c.DiskCache != nil {
		s += " disk=" + c.DiskCache.String()
	}
	return s
}

// Reader reads committed segment objects: fetches by offset and lookups
// by time, through a cache of parsed tails and a cache of aligned object
// chunks (see "Read path" in the package documentation). Every error is
// an error (T10): a missing object wraps objstore.ErrNotFound, a
// truncated or corrupt one matches segfile.ErrCorrupt, a call whose ctx
// ended matches ctx.Err(). Safe for concurrent use. Close stops the
// read-ahead and the downloads in flight and waits for them.
type Reader struct {
	store  objstore.Store
	cfg    ReaderConfig
	m      *Metrics
	g      *group
	chunks *chunkCache
	// spills queues downloaded chunks for the disk cache writer (nil
	// without a disk cache); full, a chunk is not written.
	spills chan spill
	// invalidations counts reads that proved corrupt: a chunk queued for
	// the disk before one is not written (it may be the damaged one), and
	// one being written meanwhile is removed again.
	invalidations atomic.Int64
	// pendingSpills counts chunks queued or being written (tests wait
	// for it to reach 0).
	pendingSpills atomic.Int64

	mu struct {
		sync.Mutex
		tails map[tailKey]*segEntry
		lru   list.List // entries whose tail is loaded, most recently used first
	}
}

// tailKey names a tail by the whole ref it was checked against, so a ref
// that disagrees with a cached one is checked afresh.
type tailKey SegmentRef

// segEntry is a tail cache entry: loading (elem nil, f running) or
// loaded (elem in the LRU, f.val the tail), with the segment's read-ahead
// state.
type segEntry struct {
	k tailKey
	f *flight[*segfile.Tail]

	// REQUIRES: Reader.mu held, for all below.
	elem *list.Element
	// streams holds the last chunk of recent reads (-1: none); next is
	// the one a new stream replaces.
	streams [readStreams]int64
	next    int
}

// NewReader returns a Reader of store's segment objects; cfg gets its
// defaults. It panics when cfg.Validate fails: configurations are
// validated where they are loaded. m may be nil.
func NewReader(store objstore.Store, cfg ReaderConfig, m *Metrics) *Reader {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	r := &Reader{store: store, cfg: cfg.withDefaults(), m: m, g: newGroup()}
	r.chunks = newChunkCache(r.cfg.ChunkBytes, r.cfg.CacheBytes, maxReadAheadFlights, r.g, m, r.fetchChunks)
	r.mu.tails = make(map[tailKey]*segEntry)
	if r.cfg.DiskCache != nil {
		r.spills = make(chan spill, spillQueue)
		r.g.goFn(r.writeSpills)
	}
	return r
}

// Close stops read-ahead, cancels the downloads in flight and waits for
// their goroutines. Calls after Close fail with ErrClosed. Idempotent.
func (r *Reader) Close() error {
	r.g.close()
	return nil
}

// Fetch returns whole batches of seg, concatenated as stored: the batch
// holding offset (or the first one after it, in a compacted segment's
// hole) and those after it while the total stays within maxBytes, but at
// least that first batch however large, as a Kafka fetch does; never
// past the segment's data. It returns nil when offset is beyond
// seg.LastOffset. Every batch returned passed its CRC-32C and offset
// checks. The slice may share memory with the chunk cache (a fetch
// within one chunk is not copied): the caller must not modify it.
func (r *Reader) Fetch(ctx context.Context, seg SegmentRef, offset int64, maxBytes int) ([]byte, error) {
	var out []byte
	err := r.read(ctx, seg, true, func(t *segfile.Tail, rr segfile.RangeReader) (err error) {
		out, err = t.ReadFetch(ctx, rr, offset, int64(max(maxBytes, 0)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tiering: fetch from %s at offset %d: %w", seg.Key, offset, err)
	}
	return out, nil
}

// OffsetForTime is Kafka ListOffsets by timestamp within seg: the first
// record (by offset) whose timestamp is >= ts, and its timestamp; found
// is false when the segment has none. The special timestamps of
// ListOffsets (latest, earliest) are the caller's to resolve. A batch may
// decompress to at most maxDecompressed bytes (0: recordbatch's default).
func (r *Reader) OffsetForTime(ctx context.Context, seg SegmentRef, ts int64, maxDecompressed int) (offset, timestampMs int64, found bool, err error) {
	err = r.read(ctx, seg, false, func(t *segfile.Tail, rr segfile.RangeReader) (err error) {
		offset, timestampMs, found, err = t.ReadOffsetForTime(ctx, rr, ts, seg.BaseOffset, maxDecompressed)
		return err
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("tiering: time lookup in %s at %d: %w", seg.Key, ts, err)
	}
	return offset, timestampMs, found, nil
}

// read runs fn over seg's tail and a chunked reader of its object, and
// counts a failure. Only fetches drive read-ahead: time lookups are
// probes, not a consumer's sequence.
func (r *Reader) read(ctx context.Context, seg SegmentRef, readAhead bool, fn func(*segfile.Tail, segfile.RangeReader) error) error {
	err := r.doRead(ctx, seg, readAhead, fn)
	if err != nil {
		r.m.ReadErrors.Inc()
	}
	return err
}

func (r *Reader) doRead(ctx context.Context, seg SegmentRef, readAhead bool, fn func(*segfile.Tail, segfile.RangeReader) error) error {
	if r.g.isClosed() {
		return ErrClosed
	}
	if err := seg.validate(); err != nil {
		return err
	}
	t, e, err := r.tail(ctx, seg)
	if err != nil {
		return err
	}
	sr := &segReader{r: r, seg: seg, e: e, t: t, lastDataChunk: (t.DataEnd() - 1) / r.cfg.ChunkBytes, readAhead: readAhead}
	err = fn(t, sr)
	if corruption.Is(err) {
		r.chunks.invalidate(seg.Key, sr.touched)
		if d := r.cfg.DiskCache; d != nil {
			r.invalidations.Add(1)
			for _, idx := range sr.touched {
				d.Remove(seg.Key, idx)
			}
		}
	}
	return err
}

// tail returns seg's parsed tail, from the cache or by loading it (one
// load per object however many readers want it at once).
func (r *Reader) tail(ctx context.Context, seg SegmentRef) (*segfile.Tail, *segEntry, error) {
	k := tailKey(seg)
	r.mu.Lock()
	e := r.mu.tails[k]
	switch {
	case e != nil && e.elem != nil:
		r.mu.lru.MoveToFront(e.elem)
		r.mu.Unlock()
		return e.f.val, e, nil
	case e == nil || !e.f.join():
		e = &segEntry{k: k}
		for i := range e.streams {
			e.streams[i] = -1
		}
		load := func(ctx context.Context) (*segfile.Tail, error) { return r.loadTail(ctx, seg) }
		f, ok := startFlight(r.g, 1, load, func(f *flight[*segfile.Tail]) { r.settleTail(e, f) })
		if !ok {
			r.mu.Unlock()
			return nil, nil, ErrClosed
		}
		e.f = f
		r.mu.tails[k] = e
	}
	r.mu.Unlock()
	t, err := e.f.wait(ctx)
	if err != nil {
		return nil, nil, err
	}
	return t, e, nil
}

// loadTail reads seg's tail with one GET of [IndexPos, Size) (not through
// the chunk cache: a tail is parsed once and cached parsed, while the
// chunk holding it would cost a whole chunk's download) and checks it
// against what metad recorded.
func (r *Reader) loadTail(ctx context.Context, seg SegmentRef) (*segfile.Tail, error) {
	auth := segfile.Auth{Key: r.cfg.Key, Name: seg.Key, Required: seg.Authenticated}
	t, err := segfile.ReadTail(ctx, objectReader{r, seg.Key}, seg.IndexPos, seg.Size, auth)
	if err != nil {
		return nil, err
	}
	if f := t.Footer; f.GetBaseOffset() != seg.BaseOffset || f.GetLastOffset() != seg.LastOffset {
		return nil, &segfile.CorruptError{Pos: t.Trailer.FooterPos, Section: "footer", Detail: fmt.Sprintf(
			"offsets [%d, %d], metad records [%d, %d]", f.GetBaseOffset(), f.GetLastOffset(), seg.BaseOffset, seg.LastOffset)}
	}
	return t, nil
}

// settleTail caches a loaded tail, evicting the least recently used ones
// beyond TailCacheEntries, or forgets a failed load so the next reader
// tries again.
func (r *Reader) settleTail(e *segEntry, f *flight[*segfile.Tail]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	current := r.mu.tails[e.k] == e
	if f.err == nil && current {
		e.elem = r.mu.lru.PushFront(e)
		for r.mu.lru.Len() > r.cfg.TailCacheEntries {
			old := r.mu.lru.Remove(r.mu.lru.Back()).(*segEntry)
			old.elem = nil
			delete(r.mu.tails, old.k)
		}
		return
	}
	if current {
		delete(r.mu.tails, e.k)
	}
}

// noteRead records a fetch that read chunks [first, last] of e's segment
// and, when it continues a previous read (starts in or just after the
// chunk where one ended) or starts at the first chunk, reads ahead: a run
// of ReadAhead chunks once one of the ReadAhead after it is missing, up
// to the end of the data (chunkCache.readAhead).
func (r *Reader) noteRead(e *segEntry, seg SegmentRef, t *segfile.Tail, first, last, lastDataChunk int64) {
	if r.cfg.ReadAhead < 0 {
		return
	}
	r.mu.Lock()
	slot, sequential := e.next, false
	for i, s := range e.streams {
		if s >= 0 && s >= first-1 && s <= last {
			slot, sequential = i, true
			break
		}
	}
	if !sequential {
		e.next = (e.next + 1) % readStreams
	}
	e.streams[slot] = last
	r.mu.Unlock()
	// A read from the object's first chunk is a consumer entering the
	// segment (catching up goes from one segment's start to the next's):
	// read ahead at once rather than one round trip later.
	sequential = sequential || first == 0
	if !sequential {
		return
	}
	r.chunks.readAhead(seg.Key, last+1, min(last+int64(r.cfg.ReadAhead), lastDataChunk), lastDataChunk,
		func(idx int64) int64 { return r.chunkLen(seg, idx) }, t)
}

// chunkLen is the size of chunk idx of seg's object: ChunkBytes, but the
// last chunk is shorter.
func (r *Reader) chunkLen(seg SegmentRef, idx int64) int64 {
	return min(r.cfg.ChunkBytes, seg.Size-idx*r.cfg.ChunkBytes)
}

// segReader is a segfile.CheckedReader and segfile.AuthenticatedReader
// over a segment's object through the chunk cache. One serves one call
// (it records the chunks it read).
type segReader struct {
	r             *Reader
	seg           SegmentRef
	e             *segEntry
	t             *segfile.Tail
	lastDataChunk int64
	readAhead     bool
	touched       []int64 // chunks read, dropped from the cache if the read proves corrupt
	checked       []span  // the checked ranges of the chunks read
	authenticated []span  // the authenticated ranges of the chunks the last ReadAt returned
}

// Checked reports whether [pos, pos+size) lies in the checked range of
// one of the chunks read: the download checked those batches while they
// were in the CPU's caches (readRange).
func (s *segReader) Checked(pos, size int64) bool {
	for _, c := range s.checked {
		if c.holds(pos, size) {
			return true
		}
	}
	return false
}

// Authenticated reports whether [pos, pos+size) lies in the authenticated
// range of one of the chunks the last ReadAt returned: the download
// checked those blocks against their tags, on these very bytes
// (readRange).
func (s *segReader) Authenticated(pos, size int64) bool {
	for _, a := range s.authenticated {
		if a.holds(pos, size) {
			return true
		}
	}
	return false
}

// ReadAt returns exactly [off, off+n) of the object, assembled from the
// chunks that hold it; their downloads run in parallel. A range within
// one chunk is returned in place, not copied: a slice of the cached chunk,
// capacity-limited so that an append cannot write into it. The bytes are
// shared and must not be modified (segfile never does).
func (s *segReader) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > s.seg.Size {
		return nil, &segfile.CorruptError{Pos: off, Section: "object", Detail: fmt.Sprintf(
			"read of [%d, %d) outside the %d bytes metad records", off, off+n, s.seg.Size)}
	}
	if n == 0 {
		return []byte{}, nil
	}
	s.authenticated = s.authenticated[:0]
	cb := s.r.cfg.ChunkBytes
	first, last := off/cb, (off+n-1)/cb
	tickets := make([]ticket, 0, last-first+1)
	defer func() {
		for _, t := range tickets {
			t.drop()
		}
	}()
	for i := first; i <= last; i++ {
		t, err := s.r.chunks.acquire(ctx, s.seg.Key, i, s.r.chunkLen(s.seg, i), s.t)
		if err != nil {
			return nil, err
		}
		tickets = append(tickets, t)
	}
	var out []byte
	if first != last {
		out = make([]byte, n)
	}
	for len(tickets) > 0 {
		t := tickets[0]
		tickets = tickets[1:] // waited for: not dropped
		c, err := t.wait(ctx)
		if err != nil {
			return nil, err
		}
		data := c.bytes
		start := t.key.idx * cb
		if int64(len(data)) != s.r.chunkLen(s.seg, t.key.idx) {
			return nil, fmt.Errorf("tiering: chunk %d of %s holds %d bytes", t.key.idx, s.seg.Key, len(data))
		}
		lo, hi := max(off, start), min(off+n, start+int64(len(data)))
		if first == last {
			out = data[lo-start : hi-start : hi-start]
		} else {
			copy(out[lo-off:hi-off], data[lo-start:hi-start])
		}
		s.touched = append(s.touched, t.key.idx)
		if c.checked.to > c.checked.from {
			s.checked = append(s.checked, c.checked)
		}
		if c.authenticated.to > c.authenticated.from {
			s.authenticated = append(s.authenticated, c.authenticated)
		}
	}
	if s.readAhead {
		s.r.noteRead(s.e, s.seg, s.t, first, last, s.lastDataChunk)
	}
	return out, nil
}

// spillQueue bounds the downloaded chunks waiting to be written to the
// disk cache: the memory they hold beyond the in-memory cache's bound
// (they may have left it meanwhile) is at most spillQueue chunks.
const spillQueue = 4

// spill is a downloaded chunk to write to the disk cache.
type spill struct {
	key   string
	idx   int64
	data  []byte // shared with the chunk cache: read only
	epoch int64  // invalidations when it was downloaded
}

// fetchChunks is the chunk cache's download (a fetchFunc): consecutive
// chunks of key from off. Without a disk cache they come from one ranged
// GET. With one, each chunk it holds (checked there) is read from it, the
// others by one GET per run of consecutive missing chunks, and their
// bytes then go to the disk cache in the background.
func (r *Reader) fetchChunks(ctx context.Context, key string, off int64, sizes []int64, t *segfile.Tail, deliver func(i int, c chunkData)) error {
	d := r.cfg.DiskCache
	if d == nil {
		return r.readRange(ctx, key, off, sizes, t, deliver)
	}
	pos := make([]int64, len(sizes)) // object position of each chunk
	var missing []int
	for i, n := range sizes {
		pos[i] = off
		off += n
		if data, ok := d.Get(key, pos[i]/r.cfg.ChunkBytes, n); ok {
			deliver(i, chunkData{bytes: data, authenticated: authenticate(t, pos[i], data)})
		} else {
			missing = append(missing, i)
		}
	}
	for len(missing) > 0 {
		run := 1
		for run < len(missing) && missing[run] == missing[0]+run {
			run++
		}
		first := missing[0]
		err := r.readRange(ctx, key, pos[first], sizes[first:first+run], t, func(i int, c chunkData) {
			r.spill(key, pos[first+i]/r.cfg.ChunkBytes, c.bytes)
			deliver(first+i, c)
		})
		if err != nil {
			return err
		}
		missing = missing[run:]
	}
	return nil
}

// spill queues a downloaded chunk for the disk cache writer.
func (r *Reader) spill(key string, idx int64, data []byte) {
	r.pendingSpills.Add(1)
	select {
	case r.spills <- spill{key, idx, data, r.invalidations.Load()}:
	default:
		// The disk is behind: a cache may skip a chunk, while a download
		// waiting for the disk would hold up every reader of it.
		r.pendingSpills.Add(-1)
		r.m.DiskCacheSkipped.Inc()
	}
}

// writeSpills writes queued chunks to the disk cache until the Reader
// closes (what is still queued then is dropped).
func (r *Reader) writeSpills() {
	for {
		select {
		case <-r.g.ctx.Done():
			return
		case s := <-r.spills:
			r.writeSpill(s)
			r.pendingSpills.Add(-1)
		}
	}
}

// writeSpill writes s unless a read proved corrupt since s was
// downloaded (s may hold the damaged bytes), and removes it again if one
// did while it was being written.
func (r *Reader) writeSpill(s spill) {
	if s.epoch != r.invalidations.Load() {
		return
	}
	// Failures are counted by the disk cache; the chunk is simply not
	// cached.
	_ = r.cfg.DiskCache.Put(s.key, s.idx, s.data)
	if s.epoch != r.invalidations.Load() {
		r.cfg.DiskCache.Remove(s.key, s.idx)
	}
}

// objectReader is a segfile.RangeReader doing one GET per read, for
// tails.
type objectReader struct {
	r   *Reader
	key string
}

func (o objectReader) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	c, err := fetchOne(ctx, o.r.readRange, o.key, off, n, nil)
	return c.bytes, err
}

// checkStep is how many bytes readRange reads before it checks the
// batches they complete: few enough that they are still in the CPU's
// caches. Checked later, from memory, the CRCs of a catch-up read cost
// about a quarter of its CPU (TestCatchUpThroughput).
const checkStep = 256 << 10

// readRange is one ranged GET of key from off, as many bytes as sizes
// add up to, bounded by RequestTimeout, handing deliver each piece as
// soon as it is read. With t, the object's tail, it checks the batches
// as their bytes arrive (segfile.CheckBatches), from the first batch
// start it knows in each piece (where the index, or the batch before,
// says one starts), and hands each piece with the range it checked. An
// object shorter than metad records answers a range past its end with
// ErrInvalidRange, or a body that ends cleanly but short: both are a
// truncated object, so they become corruption (T10), never a short read.
// A body the store reports cut short is a network failure and stays
// transient.
func (r *Reader) readRange(ctx context.Context, key string, off int64, sizes []int64, t *segfile.Tail, deliver func(i int, c chunkData)) error {
	var total int64
	for _, n := range sizes {
		total += n
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	r.m.RemoteReads.Inc()
	defer func() { r.m.RemoteReadDuration.Observe(time.Since(start).Seconds()) }()
	body, err := r.store.GetRange(ctx, key, off, total)
	if errors.Is(err, objstore.ErrInvalidRange) {
		return truncated(key, off, total, 0, err)
	}
	if err != nil {
		return err
	}
	defer body.Close()
	var prev []byte   // the piece before, for a batch that straddles
	next := int64(-1) // the next batch start to check from (-1: none known)
	for i, n := range sizes {
		buf := make([]byte, n)
		var blocks *segfile.BlockChecker
		fed := off // the bytes given to blocks end here
		if t != nil {
			next = batchStartIn(t, off, prev, next)
			if t.Authenticated() {
				blocks = t.NewBlockChecker(off)
			}
		}
		checked := span{next, next}
		for filled := int64(0); filled < n; {
			step := min(checkStep, n-filled)
			got, err := io.ReadFull(body, buf[filled:filled+step])
			r.m.RemoteReadBytes.Add(float64(got))
			if err != nil {
				return readErr(key, off, n, filled+int64(got), err)
			}
			filled += step
			if blocks != nil {
				// Whole blocks, checked in place. A mismatch ends the
				// authenticated range; the fetch checks that block
				// again and reports it.
				to := max(t.BlockFloor(off+filled), fed)
				_ = blocks.Write(buf[fed-off : to-off])
				fed = to
			}
			if next >= off && next < off+filled {
				end, ok := segfile.CheckBatches(buf[next-off:filled], next, t.DataEnd())
				checked.to, next = end, end
				if !ok {
					next = -1 // the fetch's own checks report it
				}
			}
		}
		deliver(i, chunkData{bytes: buf, checked: checked, authenticated: verified(blocks)})
		prev = buf
		off += n
	}
	return nil
}

// authenticate checks data, the bytes at off of t's object, against its
// block tags and returns the range of whole blocks that matched (empty
// when t is not authenticated or nil).
func authenticate(t *segfile.Tail, off int64, data []byte) span {
	if t == nil || !t.Authenticated() {
		return span{}
	}
	blocks := t.NewBlockChecker(off)
	_ = blocks.Write(data) // a mismatch ends the range, as in readRange
	return verified(blocks)
}

// verified is the range a BlockChecker verified (empty for nil).
func verified(blocks *segfile.BlockChecker) span {
	if blocks == nil {
		return span{}
	}
	from, to := blocks.Verified()
	return span{from, to}
}

// readErr is the error for a body that failed after got of the n bytes
// from off (see readRange).
func readErr(key string, off, n, got int64, err error) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) && objstore.Classified(err):
		return &cutError{err}
	case objstore.Classified(err):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return truncated(key, off, n, got, nil)
	}
	return fmt.Errorf("tiering: reading %s [%d, %d): %w", key, off, off+n, err)
}

// batchStartIn is where to start checking the piece of t's object at
// off: next, the batch start that checking the piece before (prev) got
// to, when it lies in this piece; past a batch that straddles the two
// pieces, when prev holds its header; else the first index entry at or
// after off (the data's first batch for the first piece). -1: none.
func batchStartIn(t *segfile.Tail, off int64, prev []byte, next int64) int64 {
	if next >= off {
		return next
	}
	if prevOff := off - int64(len(prev)); next >= prevOff && next+recordbatch.HeaderSize <= off {
		if h, err := recordbatch.ParseHeader(prev[next-prevOff:]); err == nil {
			return next + int64(h.Size())
		}
	}
	if off <= segfile.HeaderSize {
		return segfile.HeaderSize
	}
	i := sort.Search(len(t.Index), func(i int) bool { return t.Index[i].Position >= off })
	if i == len(t.Index) {
		return -1
	}
	return t.Index[i].Position
}

// truncated is the error for an object that ended before the range
// [off, off+n) did, after got bytes.
func truncated(key string, off, n, got int64, cause error) error {
	detail := fmt.Sprintf("%s is shorter than metad records: [%d, %d) ended after %d bytes", key, off, off+n, got)
	if cause != nil {
		detail += " (" + cause.Error() + ")"
	}
	return &segfile.CorruptError{Pos: off + got, Section: "object", Detail: detail, Err: io.ErrUnexpectedEOF}
}

// cutError is a body the store reported cut short (ErrTransient wrapping
// io.ErrUnexpectedEOF): a dropped connection, worth a retry. segfile
// takes io.ErrUnexpectedEOF for a truncated object, so the cause is kept
// in the message but hidden from errors.Is behind the class: a flaky
// network must not read as a corrupt segment.
type cutError struct{ err error }

func (e *cutError) Error() string { return e.err.Error() }
func (e *cutError) Unwrap() error { return objstore.ErrTransient }
