package raftstore

import (
	"sync"

	"github.com/hashicorp/raft"
)

// LogCache keeps the most recent raft log entries in memory in front of a
// raft.LogStore, like raft.LogCache, but bounded by bytes as well as by
// entries: an entry whose data is larger than maxEntryBytes is not cached
// (it is read back from the store when a follower needs it). With
// raft.LogCache's 1024 slots and 1 MiB values, a burst of large writes
// pinned up to 1 GiB on every member; here the cache
// holds at most slots × maxEntryBytes of data.
type LogCache struct {
	store         raft.LogStore
	maxEntryBytes int

	mu    sync.RWMutex
	slots []*raft.Log // guarded by mu; index % len(slots)
}

var _ raft.LogStore = (*LogCache)(nil)

// NewLogCache returns a cache of slots entries (at least 1) of at most
// maxEntryBytes of data each, in front of store.
func NewLogCache(store raft.LogStore, slots, maxEntryBytes int) *LogCache {
	return &LogCache{store: store, maxEntryBytes: maxEntryBytes, slots: make([]*raft.Log, max(slots, 1))}
}

// GetLog answers from the cache when it holds idx, else from the store.
func (c *LogCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	cached := c.slots[idx%uint64(len(c.slots))]
	c.mu.RUnlock()
	if cached != nil && cached.Index == idx {
		*log = *cached
		return nil
	}
	return c.store.GetLog(idx, log)
}

// StoreLog stores one entry.
func (c *LogCache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

// StoreLogs stores the entries, then caches the small ones. A slot whose
// new entry is too large is cleared, so the cache never answers with an
// older entry of the same slot (GetLog checks the index anyway).
func (c *LogCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		slot := l.Index % uint64(len(c.slots))
		if len(l.Data)+len(l.Extensions) > c.maxEntryBytes {
			c.slots[slot] = nil
			continue
		}
		c.slots[slot] = l
	}
	return nil
}

// FirstIndex is the store's.
func (c *LogCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex is the store's.
func (c *LogCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange empties the cache and deletes from the store.
func (c *LogCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	clear(c.slots)
	c.mu.Unlock()
	return c.store.DeleteRange(lo, hi)
}
