// Package bufpool pools byte buffers by capacity class, for memory that a
// process fills and drops at a high rate: gRPC's transport buffers and
// received messages (wirecodec), a producer's encoded batches (client).
// Fresh memory for every such byte costs the garbage collector, the
// runtime's scavenger (which returns idle pages to the kernel) and the
// page faults that bring them back, not just the copy.
//
// Buffers are handed out unzeroed: whoever takes one fills it before
// reading it.
package bufpool

import (
	"slices"
	"sync"
)

// Pool is a set of sync.Pools, one per capacity class. Get returns a
// buffer of the smallest class that holds the length asked for; Put keeps
// only buffers whose capacity is exactly a class, so a buffer that is not
// the pool's (or was regrown) is left to the collector. It satisfies
// gRPC's mem.BufferPool. Safe for concurrent use.
type Pool struct {
	classes []int // ascending capacities
	pools   []sync.Pool
	alloc   func(n int) []byte // fresh memory of length and capacity n
}

// New returns a pool of the given capacity classes (ascending).
func New(classes ...int) *Pool { return NewFunc(nil, classes...) }

// NewFunc returns a pool of the given capacity classes (ascending) whose
// fresh buffers come from alloc, which must return n bytes of capacity n
// (for memory with a property that make does not promise, as direct I/O's
// alignment); nil is make.
func NewFunc(alloc func(n int) []byte, classes ...int) *Pool {
	if !slices.IsSorted(classes) {
		panic("bufpool: classes must ascend")
	}
	if alloc == nil {
		alloc = func(n int) []byte { return make([]byte, n) }
	}
	return &Pool{classes: classes, pools: make([]sync.Pool, len(classes)), alloc: alloc}
}

// Steps returns capacity classes from lo to hi (powers of two), with
// perStep classes per doubling, evenly spaced: with 4, a buffer's
// capacity is at most 25% above what was asked for.
func Steps(lo, hi, perStep int) []int {
	var out []int
	for c := lo; c < hi; c *= 2 {
		for i := range perStep {
			out = append(out, c+i*c/perStep)
		}
	}
	return append(out, hi)
}

// class returns the index of the smallest class of at least n, or -1.
func (p *Pool) class(n int) int {
	i, _ := slices.BinarySearch(p.classes, n)
	if i == len(p.classes) {
		return -1
	}
	return i
}

// Get returns a buffer of length n: pooled, with its class's capacity,
// when n fits a class; otherwise fresh, of capacity n.
func (p *Pool) Get(n int) *[]byte {
	i := p.class(n)
	if i < 0 {
		b := p.alloc(n)
		return &b
	}
	if b, ok := p.pools[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := p.alloc(p.classes[i])[:n]
	return &b
}

// Put gives b back for later Gets when its capacity is a class. Nothing
// may use b's memory afterwards.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	i := p.class(c)
	if i < 0 || p.classes[i] != c {
		return // not one of ours: leave it to the collector
	}
	*b = (*b)[:0]
	p.pools[i].Put(b)
}
