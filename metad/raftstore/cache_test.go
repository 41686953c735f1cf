package raftstore

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach the store behind the cache.
type countingStore struct {
	*raft.InmemStore
	reads int
}

func (s *countingStore) GetLog(idx uint64, log *raft.Log) error {
	s.reads++
	return s.InmemStore.GetLog(idx, log)
}

// TestLogCacheBoundsEntryBytes: small entries are served from memory,
// entries over the byte bound always from the store (so the cache holds at
// most slots × maxEntryBytes), a large entry evicts the small one in its
// slot, and DeleteRange empties the cache.
func TestLogCacheBoundsEntryBytes(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := NewLogCache(store, 4, 100)
	small := func(i uint64) *raft.Log { return &raft.Log{Index: i, Data: bytes.Repeat([]byte{byte(i)}, 10)} }
	large := func(i uint64) *raft.Log { return &raft.Log{Index: i, Data: bytes.Repeat([]byte{byte(i)}, 101)} }
	if err := c.StoreLogs([]*raft.Log{small(1), large(2), small(3)}); err != nil {
		t.Fatal(err)
	}
	get := func(idx uint64, wantLen, wantReads int) {
		t.Helper()
		var l raft.Log
		if err := c.GetLog(idx, &l); err != nil || l.Index != idx || len(l.Data) != wantLen {
			t.Fatalf("GetLog(%d) = %d %d bytes, %v", idx, l.Index, len(l.Data), err)
		}
		if store.reads != wantReads {
			t.Fatalf("after GetLog(%d): %d store reads, want %d", idx, store.reads, wantReads)
		}
	}
	get(1, 10, 0)
	get(3, 10, 0)
	get(2, 101, 1) // too large to cache
	// Index 5 shares entry 1's slot: a large entry clears it.
	if err := c.StoreLog(large(5)); err != nil {
		t.Fatal(err)
	}
	get(5, 101, 2)
	get(1, 10, 3)
	if err := c.StoreLog(small(7)); err != nil {
		t.Fatal(err)
	}
	get(7, 10, 3)
	if err := c.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	get(7, 10, 4) // the cache was emptied
	var l raft.Log
	if err := c.GetLog(3, &l); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog of a deleted entry: %v", err)
	}
}
