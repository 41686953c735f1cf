package partlog

import "sync"

// TailCache holds recently acknowledged entries of every partition a
// broker owns, so tailing consumers read from memory. It is bounded in
// bytes and evicts the oldest entry first (FIFO across partitions): a
// tail cache serves the newest data, and FIFO costs O(1) per entry.
// Entries are immutable; Get returns the cached slice (do not modify).
// Safe for concurrent use; a nil *TailCache caches nothing.
type TailCache struct {
	maxBytes int64
	metrics  *Metrics

	mu struct {
		sync.Mutex
		bytes   int64
		entries map[cacheKey][]byte
		// queue holds keys in insertion order from head on.
		queue []cacheKey
		head  int
	}
}

type cacheKey struct {
	ledgerID uint64
	entryID  int64
}

// NewTailCache returns a cache of at most maxBytes payload bytes.
// metrics may be nil.
func NewTailCache(maxBytes int64, metrics *Metrics) *TailCache {
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	c := &TailCache{maxBytes: maxBytes, metrics: metrics}
	c.mu.entries = make(map[cacheKey][]byte)
	return c
}

// Add caches an acknowledged entry. An entry larger than the whole cache
// is not cached.
func (c *TailCache) Add(ledgerID uint64, entryID int64, payload []byte) {
	if c == nil || int64(len(payload)) > c.maxBytes {
		return
	}
	k := cacheKey{ledgerID, entryID}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.entries[k]; ok {
		return
	}
	for c.mu.bytes+int64(len(payload)) > c.maxBytes && c.mu.head < len(c.mu.queue) {
		old := c.mu.queue[c.mu.head]
		c.mu.queue[c.mu.head] = cacheKey{}
		c.mu.head++
		c.mu.bytes -= int64(len(c.mu.entries[old]))
		delete(c.mu.entries, old)
	}
	if c.mu.head > 1024 && c.mu.head > len(c.mu.queue)/2 {
		c.mu.queue = append(c.mu.queue[:0], c.mu.queue[c.mu.head:]...)
		c.mu.head = 0
	}
	c.mu.entries[k] = payload
	c.mu.queue = append(c.mu.queue, k)
	c.mu.bytes += int64(len(payload))
	c.metrics.CacheBytes.Set(float64(c.mu.bytes))
}

// Get returns a cached entry and counts a hit or a miss.
func (c *TailCache) Get(ledgerID uint64, entryID int64) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	p, ok := c.mu.entries[cacheKey{ledgerID, entryID}]
	c.mu.Unlock()
	if ok {
		c.metrics.CacheHits.Inc()
	} else {
		c.metrics.CacheMisses.Inc()
	}
	return p, ok
}

// Bytes is the payload bytes held.
func (c *TailCache) Bytes() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.bytes
}
