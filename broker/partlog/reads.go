package partlog

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/objstore"
)

// readState is the read path's caches: closed segments' indexes and
// ledger readers; entries read ahead are in the broker's ReadAhead.
type readState struct {
	// What reads go to: fixed at Open.
	env     ledger.Env
	store   Store
	cache   *TailCache
	ahead   *ReadAhead
	tier    *Tier
	metrics *Metrics

	mu      sync.Mutex
	indexes *lru[uint64, *brokerpb.LedgerIndex]
	readers *lru[uint64, *ledger.Reader]
}

func (rs *readState) init(cfg Config) {
	rs.env, rs.store, rs.cache, rs.ahead, rs.tier, rs.metrics = cfg.Env, cfg.Store, cfg.Cache, cfg.ReadAhead, cfg.Tier, cfg.Metrics
	rs.indexes = newLRU[uint64, *brokerpb.LedgerIndex](indexCacheSize)
	rs.readers = newLRU[uint64, *ledger.Reader](readerCacheSize)
}

func (rs *readState) putIndex(id uint64, idx *brokerpb.LedgerIndex) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.indexes.put(id, idx)
}

// forget drops what is cached of a deleted ledger.
func (rs *readState) forget(id uint64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.indexes.remove(id)
	rs.readers.remove(id)
}

// read collects the batches of offset.. below hw, up to maxBytes, and
// their size. Entries are immutable, so it gathers references: the
// fetch response refers to them too (brokerpb's copy-free encoding), and
// no byte of a fetch is copied on the broker until gRPC frames it.
func (rs *readState) read(ctx context.Context, segs []segRef, offset, hw int64, maxBytes int) ([][]byte, int, error) {
	var parts [][]byte
	n := 0
	full := false
	i := max(segmentFor(segs, offset), 0)
	for ; i < len(segs) && !full; i++ {
		s := segs[i]
		if s.last < offset {
			continue
		}
		from, err := rs.entryFor(ctx, s, offset)
		if err != nil {
			return nil, 0, err
		}
		want := func() int { return max(maxBytes-n, 0) }
		err = rs.scan(ctx, s, from, want, func(id int64, payload []byte) (bool, error) {
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
func (rs *readState) entryFor(ctx context.Context, s segRef, offset int64) (int64, error) {
	if s.open {
		return int64(entryForOffset(s.entries, offset)), nil
	}
	idx, err := rs.index(ctx, s.ledgerID)
	if err != nil {
		return 0, err
	}
	return indexStartForOffset(idx, offset), nil
}

// index returns a closed segment's index, from the cache or metad.
func (rs *readState) index(ctx context.Context, id uint64) (*brokerpb.LedgerIndex, error) {
	rs.mu.Lock()
	idx, ok := rs.indexes.get(id)
	rs.mu.Unlock()
	if ok {
		return idx, nil
	}
	idx, err := readIndex(ctx, rs.store, id)
	if err != nil {
		return nil, fmt.Errorf("partlog: index of ledger %d: %w", id, err)
	}
	rs.putIndex(id, idx)
	return idx, nil
}

// scan calls fn with the entries of s from entry from on, in order, until
// fn says stop or the segment ends. Entries come from the tail cache, the
// read-ahead, or the bookies (want() bytes at a time, plus read-ahead).
// What it read from the bookies it uses itself before it looks elsewhere
// again: other reads may push those entries out of the read-ahead at
// once, and reading the same entries again would let concurrent readers
// at different offsets starve each other.
func (rs *readState) scan(ctx context.Context, s segRef, from int64, want func() int, fn func(id int64, payload []byte) (bool, error)) error {
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
			payload, ok = rs.cache.Get(s.ledgerID, e)
		}
		if !ok {
			payload, ok = rs.ahead.get(s.ledgerID, e)
		}
		if !ok {
			var err error
			if own, err = rs.readFromBookies(ctx, s, e, want()); err != nil {
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

// readFromBookies reads entries first.. of s (at least one, want bytes
// and, when the read-ahead's budget has room, readAheadBytes more) and
// returns them; those beyond want go to the read-ahead for the next
// fetches.
func (rs *readState) readFromBookies(ctx context.Context, s segRef, first int64, want int) ([][]byte, error) {
	r, err := rs.reader(ctx, s.ledgerID)
	if err != nil {
		return nil, err
	}
	budget := want
	done, ahead := rs.ahead.reserve()
	if ahead {
		defer done()
		budget += readAheadBytes
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
	rs.metrics.BookieReadBytes.Add(float64(size))
	if ahead {
		rs.ahead.keep(s.ledgerID, first, payloads, want)
	}
	return payloads, nil
}

// reader returns a (cached) reader of a ledger.
func (rs *readState) reader(ctx context.Context, id uint64) (*ledger.Reader, error) {
	rs.mu.Lock()
	r, ok := rs.readers.get(id)
	rs.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err := ledger.OpenReader(ctx, rs.env, id)
	if err != nil {
		return nil, fmt.Errorf("partlog: opening ledger %d: %w", id, err)
	}
	rs.mu.Lock()
	rs.readers.put(id, r)
	rs.mu.Unlock()
	return r, nil
}

// offsetForTime is ListOffset's lookup of timestampMs >= 0 over one
// snapshot of the list: pl's segment objects, then segs. A stored batch
// is decoded within maxDecompressed, the bound a produced one passed (H3:
// batches stored before that bound existed may be bombs).
func (rs *readState) offsetForTime(ctx context.Context, pl *brokerpb.PartitionLog, segs []segRef, start, hw, timestampMs int64,
	maxDecompressed int) (offset, ts int64, err error) {
	for _, t := range pl.GetTiered() {
		if t.MaxTimestampMs < timestampMs || t.LastOffset < start {
			continue
		}
		if rs.tier == nil {
			return 0, 0, errNoTier(t)
		}
		off, ts, found, err := rs.tier.Reader.OffsetForTime(ctx, t, timestampMs, maxDecompressed)
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
			idx, err := rs.index(ctx, s.ledgerID)
			if err != nil {
				return 0, 0, err
			}
			from = indexStartForTime(idx, timestampMs)
		}
		found := false
		chunk := func() int { return readAheadBytes }
		err := rs.scan(ctx, s, from, chunk, func(id int64, payload []byte) (bool, error) {
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
func (rs *readState) readTiered(ctx context.Context, pl *brokerpb.PartitionLog, offset int64, maxBytes int) ([]byte, error) {
	t := tieredFor(pl.GetTiered(), offset)
	if t == nil {
		return nil, fmt.Errorf("partlog: offset %d is below the first ledger (%d) and no segment object holds it",
			offset, localStart(pl, offset+1))
	}
	if rs.tier == nil {
		return nil, errNoTier(t)
	}
	records, err := rs.tier.Reader.Fetch(ctx, t, offset, maxBytes)
	if err != nil {
		return nil, tierReadError(ctx, fmt.Errorf("partlog: reading offset %d from %s: %w", offset, t.ObjectKey, err))
	}
	rs.metrics.TierReadBytes.Add(float64(len(records)))
	rs.metrics.FetchedBytes.Add(float64(len(records)))
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
