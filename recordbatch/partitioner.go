package recordbatch

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
)

// Murmur2 is Kafka's murmur2 hash (Utils.murmur2), byte for byte: seed
// 0x9747b28c, little-endian 4-byte blocks.
func Murmur2(b []byte) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	n := len(b)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := binary.LittleEndian.Uint32(b[i:])
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch t := b[n&^3:]; len(t) {
	case 3:
		h ^= uint32(t[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(t[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(t[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// PartitionForKey is Kafka's keyed partitioner (BuiltInPartitioner.
// partitionForKey): toPositive(murmur2(key)) % n, where toPositive(x) is
// x & 0x7fffffff (not abs). It panics if n <= 0.
func PartitionForKey(key []byte, n int32) int32 {
	if n <= 0 {
		panic("recordbatch: PartitionForKey with no partitions")
	}
	return int32(uint32(Murmur2(key))&0x7fffffff) % n
}

// Sticky is the sticky partitioner for keyless records (KIP-480): every
// keyless record of a topic goes to the same partition until the producer
// completes a batch for it and calls Next, which moves to another partition
// chosen at random. Batches fill faster than with round-robin, so fewer and
// larger requests go out. Use one Sticky per topic. Safe for concurrent
// use.
type Sticky struct {
	mu struct {
		sync.Mutex
		current int32 // -1 before the first choice
	}
}

// NewSticky returns a Sticky with no partition chosen yet.
func NewSticky() *Sticky {
	s := &Sticky{}
	s.mu.current = -1
	return s
}

// Partition returns the sticky partition among n, choosing one at random
// on first use or when the partition count shrank below it. It panics if
// n <= 0.
func (s *Sticky) Partition(n int32) int32 {
	if n <= 0 {
		panic("recordbatch: Sticky.Partition with no partitions")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.current < 0 || s.mu.current >= n {
		s.mu.current = rand.Int32N(n)
	}
	return s.mu.current
}

// Next moves to another partition among n, chosen at random and different
// from the current one when n > 1. The producer calls it when the batch
// for the sticky partition is complete (sent or full). It panics if n <= 0.
func (s *Sticky) Next(n int32) {
	if n <= 0 {
		panic("recordbatch: Sticky.Next with no partitions")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.mu.current
	if n == 1 || cur < 0 || cur >= n {
		s.mu.current = rand.Int32N(n)
		return
	}
	p := rand.Int32N(n - 1) // skip cur: uniform over the n-1 others
	if p >= cur {
		p++
	}
	s.mu.current = p
}
