package partlog

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/objstore"
)

// Read-side bounds.
const (
	// readAheadBytes: a read from bookies fetches this much beyond what a
	// fetch asked for, kept for the next sequential fetch.
	readAheadBytes = 1 << 20
	// indexCacheSize, readerCacheSize: closed segments' indexes and ledger
	// readers kept per partition.
	indexCacheSize  = 64
	readerCacheSize = 8
)

// FetchResult is what Fetch returns.
type FetchResult struct {
	// Batches: whole stored batches, in offset order (a part read from a
	// segment object may hold several, concatenated); the first may start
	// below the requested offset (the client skips those records). They
	// are not copied out of the tail cache and the ledger reads, so they
	// are shared, and read-only.
	Batches                       [][]byte
	HighWatermark, LogStartOffset int64
}

// Bytes is the size of r's batches.
func (r FetchResult) Bytes() int {
	n := 0
	for _, b := range r.Batches {
		n += len(b)
	}
	return n
}

// Records is r's batches concatenated, in a new slice (nil if none).
func (r FetchResult) Records() []byte {
	if len(r.Batches) == 0 {
		return nil
	}
	return bytes.Join(r.Batches, nil)
}

// segRef is a snapshot of one segment for the read path.
type segRef struct {
	ledgerID    uint64
	first, last int64 // last acknowledged offset
	lastEntry   int64
	maxTs       int64
	open        bool
	entries     []entryInfo // open segment: its acknowledged entries
}

// readState is the read path's caches: closed segments' indexes, ledger
// readers, and the read-ahead buffer.
type readState struct {
	mu      sync.Mutex
	indexes *lru[uint64, *brokerpb.LedgerIndex]
	readers *lru[uint64, *ledger.Reader]
	// ahead: entries first.. of ledger aheadLedger read from bookies
	// beyond what a fetch asked for.
	aheadLedger uint64
	aheadFirst  int64
	ahead       [][]byte
}

func (r *readState) init() {
	r.indexes = newLRU[uint64, *brokerpb.LedgerIndex](indexCacheSize)
	r.readers = newLRU[uint64, *ledger.Reader](readerCacheSize)
}

func (r *readState) putIndex(id uint64, idx *brokerpb.LedgerIndex) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.indexes.put(id, idx)
}

// forget drops what is cached of a deleted ledger.
func (r *readState) forget(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.indexes.remove(id)
	r.readers.remove(id)
	if r.aheadLedger == id {
		r.aheadLedger, r.ahead = 0, nil
	}
}

func (r *readState) readAhead(id uint64, entry int64) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != r.aheadLedger || entry < r.aheadFirst || entry >= r.aheadFirst+int64(len(r.ahead)) {
		return nil, false
	}
	return r.ahead[entry-r.aheadFirst], true
}

// Fetch returns whole batches from offset on, up to maxBytes (at least
// one batch however large), never at or beyond the high watermark,
// continuing across segments. At offset == HW it waits up to maxWait for
// an append, then returns nothing. Outside [log start, HW]:
// *OutOfRangeError.
func (l *Log) Fetch(ctx context.Context, offset int64, maxBytes int, maxWait time.Duration) (FetchResult, error) {
	var timeout <-chan time.Time
	retries := 0
	for {
		l.mu.Lock()
		if err := l.readErrLocked(); err != nil {
			l.mu.Unlock()
			return FetchResult{}, err
		}
		start, hw := l.mu.pl.GetLogStartOffset(), l.mu.hw
		if offset < start || offset > hw {
			l.mu.Unlock()
			return FetchResult{}, &OutOfRangeError{Offset: offset, Start: start, End: hw}
		}
		if offset < hw {
			if pl, version := l.mu.pl, l.mu.version; offset < localStart(pl, hw) {
				l.mu.Unlock()
				records, err := l.readTiered(ctx, pl, offset, maxBytes)
				if err != nil {
					// The object may have been unlinked (retention, a
					// compaction swap) and deleted after its grace:
					// read again from the new list.
					if t := tieredFor(pl.GetTiered(), offset); t != nil && retries < 3 &&
						l.replacedSince(ctx, version, nil, []*brokerpb.TieredSegment{t}) {
						retries++
						continue
					}
					return FetchResult{}, err
				}
				return FetchResult{Batches: [][]byte{records}, HighWatermark: hw, LogStartOffset: start}, nil
			}
			segs, version := l.segmentsLocked(), l.mu.version
			l.mu.Unlock()
			batches, n, err := l.read(ctx, segs, offset, hw, maxBytes)
			if err != nil {
				// A compaction or retention CAS may have replaced (and
				// deleted) a ledger this read had listed: read again from
				// the new list.
				if retries < 3 && l.replacedSince(ctx, version, segs, nil) {
					retries++
					continue
				}
				return FetchResult{}, err
			}
			l.metrics.FetchedBytes.Add(float64(n))
			return FetchResult{Batches: batches, HighWatermark: hw, LogStartOffset: start}, nil
		}
		changed := l.mu.hwChanged
		l.mu.Unlock()
		if maxWait <= 0 {
			return FetchResult{HighWatermark: hw, LogStartOffset: start}, nil
		}
		if timeout == nil {
			t := time.NewTimer(maxWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return FetchResult{HighWatermark: l.HighWatermark(), LogStartOffset: start}, nil
		case <-ctx.Done():
			return FetchResult{}, ctx.Err()
		}
	}
}

// replacedSince reports whether a read over segs and objects, a snapshot
// of the list taken at version, may have failed because a CAS since (a
// compaction swap, retention, tiering's removal of local copies) replaced
// a ledger or object of the snapshot and deleted it: the list changed and
// no longer names one of them. The read is then worth doing again from
// the new list; a failure on pieces all still listed is not (false also
// once ctx is done).
func (l *Log) replacedSince(ctx context.Context, version int64, segs []segRef, objects []*brokerpb.TieredSegment) bool {
	if ctx.Err() != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.version == version {
		return false
	}
	listed := make(map[uint64]bool, len(l.mu.pl.GetSegments()))
	for _, s := range l.mu.pl.GetSegments() {
		listed[s.GetLedgerId()] = true
	}
	for _, s := range segs {
		if !listed[s.ledgerID] {
			return true
		}
	}
	if len(objects) == 0 {
		return false
	}
	keys := make(map[string]bool, len(l.mu.pl.GetTiered()))
	for _, t := range l.mu.pl.GetTiered() {
		keys[t.ObjectKey] = true
	}
	for _, o := range objects {
		if !keys[o.ObjectKey] {
			return true
		}
	}
	return false
}

// readErrLocked is why reads must be refused, or nil.
// REQUIRES: l.mu held.
func (l *Log) readErrLocked() error {
	if l.mu.err != nil {
		// A failed log serves no more reads, and its broker drops it:
		// the reader is told, as for a closed one, to ask where the
		// partition lives now. The cause stays in the message only: an
		// append's unknown outcome is no read's, and answered as such
		// it made consumers give up instead of retrying elsewhere.
		return fmt.Errorf("%w: the log failed: %v", ErrClosed, l.mu.err)
	}
	select {
	case <-l.mu.closed:
		return ErrClosed
	default:
	}
	return nil
}

// segmentsLocked snapshots the segments for reading.
// REQUIRES: l.mu held.
func (l *Log) segmentsLocked() []segRef {
	segs := make([]segRef, 0, len(l.mu.pl.GetSegments()))
	for _, s := range l.mu.pl.GetSegments() {
		if !s.GetClosed() && s.GetLedgerId() == l.mu.seg.ledgerID {
			o := &l.mu.seg
			entries := o.entries[:o.acked]
			ref := segRef{ledgerID: o.ledgerID, first: o.first, last: o.first - 1, lastEntry: int64(len(entries)) - 1,
				maxTs: -1, open: true, entries: entries}
			if n := len(entries); n > 0 {
				ref.last, ref.maxTs = entries[n-1].last, entries[n-1].runMaxTs
			}
			segs = append(segs, ref)
			continue
		}
		segs = append(segs, segRef{ledgerID: s.GetLedgerId(), first: s.GetFirstOffset(), last: s.GetLastOffset(),
			lastEntry: s.GetLastEntryId(), maxTs: s.GetMaxTimestampMs()})
	}
	return segs
}

// read collects the batches of offset.. below hw, up to maxBytes, and
// their size. Entries are immutable, so it gathers references: the
// fetch response refers to them too (brokerpb's copy-free encoding), and
// no byte of a fetch is copied on the broker until gRPC frames it.
func (l *Log) read(ctx context.Context, segs []segRef, offset, hw int64, maxBytes int) ([][]byte, int, error) {
	var parts [][]byte
	n := 0
	full := false
	i := max(segmentFor(segs, offset), 0)
	for ; i < len(segs) && !full; i++ {
		s := segs[i]
		if s.last < offset {
			continue
		}
		from, err := l.entryFor(ctx, s, offset)
		if err != nil {
			return nil, 0, err
		}
		budget := func() int { return max(maxBytes-n, 0) + readAheadBytes }
		err = l.scan(ctx, s, from, budget, func(id int64, payload []byte) (bool, error) {
			h, err := recordbatch.ParseHeader(payload)
			if err != nil {
				return false, fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorruptBatch, s.ledgerID, id, err)
			}
			switch {
			case h.LastOffset() < offset:
				return true, nil
			case h.BaseOffset >= hw:
				full = true
				return false, nil
			case n > 0 && n+len(payload) > maxBytes:
				full = true
				return false, nil
			}
			parts, n = append(parts, payload), n+len(payload)
			if n >= maxBytes {
				full = true
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return parts, n, nil
}

// entryFor is the entry of s to start reading at for offset.
func (l *Log) entryFor(ctx context.Context, s segRef, offset int64) (int64, error) {
	if s.open {
		return int64(entryForOffset(s.entries, offset)), nil
	}
	idx, err := l.index(ctx, s.ledgerID)
	if err != nil {
		return 0, err
	}
	return indexStartForOffset(idx, offset), nil
}

// index returns a closed segment's index, from the cache or metad.
func (l *Log) index(ctx context.Context, id uint64) (*brokerpb.LedgerIndex, error) {
	l.reads.mu.Lock()
	idx, ok := l.reads.indexes.get(id)
	l.reads.mu.Unlock()
	if ok {
		return idx, nil
	}
	idx, err := readIndex(ctx, l.cfg.Store, id)
	if err != nil {
		return nil, fmt.Errorf("partlog: index of ledger %d: %w", id, err)
	}
	l.reads.putIndex(id, idx)
	return idx, nil
}

// scan calls fn with the entries of s from entry from on, in order, until
// fn says stop or the segment ends. Entries come from the tail cache, the
// shared read-ahead buffer, or the bookies (budget() bytes at a time).
// What it read from the bookies it uses itself before it looks elsewhere
// again: another scan may replace the shared buffer at once, and reading
// the same entries again would let concurrent readers at different
// offsets starve each other (review finding M5).
func (l *Log) scan(ctx context.Context, s segRef, from int64, budget func() int, fn func(id int64, payload []byte) (bool, error)) error {
	var (
		own      [][]byte // entries ownFirst.. read by this scan
		ownFirst int64
	)
	for e := from; e <= s.lastEntry; {
		var payload []byte
		ok := false
		if i := e - ownFirst; i >= 0 && i < int64(len(own)) {
			payload, ok = own[i], true
		}
		if !ok {
			payload, ok = l.cfg.Cache.Get(s.ledgerID, e)
		}
		if !ok {
			payload, ok = l.reads.readAhead(s.ledgerID, e)
		}
		if !ok {
			var err error
			if own, err = l.readFromBookies(ctx, s, e, budget()); err != nil {
				return err
			}
			ownFirst = e
			continue
		}
		more, err := fn(e, payload)
		if err != nil || !more {
			return err
		}
		e++
	}
	return nil
}

var errEnough = errors.New("partlog: read budget reached")

// readFromBookies reads entries first.. of s (at least one, up to budget
// bytes), returns them and offers them to other readers in the read-ahead
// buffer.
func (l *Log) readFromBookies(ctx context.Context, s segRef, first int64, budget int) ([][]byte, error) {
	r, err := l.reader(ctx, s.ledgerID)
	if err != nil {
		return nil, err
	}
	// The segment's entries up to lastEntry are acknowledged (closed, or
	// acknowledged to this owner): no need to ask the bookies.
	r.AdvanceLAC(s.lastEntry)
	var (
		payloads [][]byte
		size     int
	)
	err = r.ReadRange(ctx, first, s.lastEntry, func(e ledger.Entry) error {
		payloads = append(payloads, e.Payload)
		size += len(e.Payload)
		if size >= budget {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("partlog: reading ledger %d from entry %d: %w", s.ledgerID, first, err)
	}
	if len(payloads) == 0 {
		return nil, fmt.Errorf("partlog: reading ledger %d: no entry %d", s.ledgerID, first)
	}
	l.metrics.BookieReadBytes.Add(float64(size))
	l.reads.mu.Lock()
	l.reads.aheadLedger, l.reads.aheadFirst, l.reads.ahead = s.ledgerID, first, payloads
	l.reads.mu.Unlock()
	return payloads, nil
}

// reader returns a (cached) reader of a ledger.
func (l *Log) reader(ctx context.Context, id uint64) (*ledger.Reader, error) {
	l.reads.mu.Lock()
	r, ok := l.reads.readers.get(id)
	l.reads.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err := ledger.OpenReader(ctx, l.cfg.Env, id)
	if err != nil {
		return nil, fmt.Errorf("partlog: opening ledger %d: %w", id, err)
	}
	l.reads.mu.Lock()
	l.reads.readers.put(id, r)
	l.reads.mu.Unlock()
	return r, nil
}

// ListOffset resolves a timestamp to an offset: -2 the log start, -1 the
// high watermark (ts -1 for both); otherwise the first record with a
// timestamp >= timestampMs and its timestamp, or (HW, -1) when none.
// A lookup that fails on a ledger a CAS replaced meanwhile (a compaction
// swap deletes its inputs) looks up once more in the new list, as Fetch
// reads again.
func (l *Log) ListOffset(ctx context.Context, timestampMs int64) (offset, ts int64, err error) {
	for retried := false; ; retried = true {
		l.mu.Lock()
		if err := l.readErrLocked(); err != nil {
			l.mu.Unlock()
			return 0, 0, err
		}
		start, hw, pl, version := l.mu.pl.GetLogStartOffset(), l.mu.hw, l.mu.pl, l.mu.version
		segs := l.segmentsLocked()
		l.mu.Unlock()
		switch {
		case timestampMs == -2:
			return start, -1, nil
		case timestampMs == -1:
			return hw, -1, nil
		case timestampMs < 0:
			return 0, 0, fmt.Errorf("partlog: invalid timestamp %d", timestampMs)
		}
		offset, ts, err = l.offsetForTime(ctx, pl, segs, start, hw, timestampMs)
		if err != nil && !retried && l.replacedSince(ctx, version, segs, pl.GetTiered()) {
			continue
		}
		return offset, ts, err
	}
}

// offsetForTime is ListOffset's lookup of timestampMs >= 0 over one
// snapshot of the list: pl's segment objects, then segs.
func (l *Log) offsetForTime(ctx context.Context, pl *brokerpb.PartitionLog, segs []segRef, start, hw, timestampMs int64) (offset, ts int64, err error) {
	// A stored batch is decoded within the bound a produced one passed
	// (H3: batches stored before that bound existed may be bombs).
	maxDecompressed := DecompressedBound(l.Limits().MaxBatchBytes)
	for _, t := range pl.GetTiered() {
		if t.MaxTimestampMs < timestampMs || t.LastOffset < start {
			continue
		}
		if l.cfg.Tier == nil {
			return 0, 0, errNoTier(t)
		}
		off, ts, found, err := l.cfg.Tier.Reader.OffsetForTime(ctx, t, timestampMs, maxDecompressed)
		if err != nil {
			return 0, 0, tierReadError(ctx, fmt.Errorf("partlog: time lookup in %s: %w", t.ObjectKey, err))
		}
		if found && off >= start {
			return off, ts, nil
		}
	}
	for _, s := range segs {
		if s.last < s.first || s.maxTs < timestampMs {
			continue
		}
		var from int64
		if s.open {
			from = int64(sort.Search(len(s.entries), func(i int) bool { return s.entries[i].runMaxTs >= timestampMs }))
		} else {
			idx, err := l.index(ctx, s.ledgerID)
			if err != nil {
				return 0, 0, err
			}
			from = indexStartForTime(idx, timestampMs)
		}
		found := false
		budget := func() int { return readAheadBytes }
		err := l.scan(ctx, s, from, budget, func(id int64, payload []byte) (bool, error) {
			h, err := recordbatch.ParseHeader(payload)
			if err != nil {
				return false, fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorruptBatch, s.ledgerID, id, err)
			}
			if h.BaseOffset >= hw {
				return false, nil
			}
			if h.MaxTimestamp < timestampMs {
				return true, nil
			}
			offset, ts, found, err = recordbatch.OffsetForTime(payload, h, timestampMs, start, maxDecompressed)
			if err != nil {
				return false, fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorruptBatch, s.ledgerID, id, err)
			}
			return !found, nil
		})
		if err != nil {
			return 0, 0, err
		}
		if found {
			return offset, ts, nil
		}
	}
	return hw, -1, nil
}

// lru is a small least-recently-used map. Not safe for concurrent use.
type lru[K comparable, V any] struct {
	max int
	ll  *list.List
	m   map[K]*list.Element
}

type lruItem[K comparable, V any] struct {
	k K
	v V
}

func newLRU[K comparable, V any](n int) *lru[K, V] {
	return &lru[K, V]{max: n, ll: list.New(), m: make(map[K]*list.Element)}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	if e, ok := c.m[k]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*lruItem[K, V]).v, true
	}
	var zero V
	return zero, false
}

func (c *lru[K, V]) put(k K, v V) {
	if e, ok := c.m[k]; ok {
		e.Value.(*lruItem[K, V]).v = v
		c.ll.MoveToFront(e)
		return
	}
	c.m[k] = c.ll.PushFront(&lruItem[K, V]{k, v})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(*lruItem[K, V]).k)
	}
}

func (c *lru[K, V]) remove(k K) {
	if e, ok := c.m[k]; ok {
		c.ll.Remove(e)
		delete(c.m, k)
	}
}

// readTiered reads batches from offset on from the segment object that
// holds it (T10: a missing segment or object is an error, never a skip).
func (l *Log) readTiered(ctx context.Context, pl *brokerpb.PartitionLog, offset int64, maxBytes int) ([]byte, error) {
	t := tieredFor(pl.GetTiered(), offset)
	if t == nil {
		return nil, fmt.Errorf("partlog: offset %d is below the first ledger (%d) and no segment object holds it",
			offset, localStart(pl, offset+1))
	}
	if l.cfg.Tier == nil {
		return nil, errNoTier(t)
	}
	records, err := l.cfg.Tier.Reader.Fetch(ctx, t, offset, maxBytes)
	if err != nil {
		return nil, tierReadError(ctx, fmt.Errorf("partlog: reading offset %d from %s: %w", offset, t.ObjectKey, err))
	}
	l.metrics.TierReadBytes.Add(float64(len(records)))
	l.metrics.FetchedBytes.Add(float64(len(records)))
	return records, nil
}

func errNoTier(t *brokerpb.TieredSegment) error {
	return fmt.Errorf("partlog: offsets %d-%d are in the object store (%s) and this broker has no --tier-store",
		t.BaseOffset, t.LastOffset, t.ObjectKey)
}

// tierReadError marks an object-store read failure that may pass (the
// store's transient class, or its own deadline while the caller's ctx is
// still live) with ErrTierUnavailable, so clients retry it.
func tierReadError(ctx context.Context, err error) error {
	if errors.Is(err, objstore.ErrTransient) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
		return fmt.Errorf("%w: %w", ErrTierUnavailable, err)
	}
	return err
}
