package bufpool

import (
	"slices"
	"testing"
)

// TestPool: buffers of every size come back with the length asked for,
// pooled ones with their class's capacity, and buffers of other
// capacities are not pooled.
func TestPool(t *testing.T) {
	p := New(256, 4096, 1<<20)
	for _, c := range []struct{ n, capacity int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 4096}, {4096, 4096}, {4097, 1 << 20},
		{1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1},
	} {
		for range 3 {
			b := p.Get(c.n)
			if len(*b) != c.n || cap(*b) != c.capacity {
				t.Fatalf("Get(%d): len %d cap %d, want cap %d", c.n, len(*b), cap(*b), c.capacity)
			}
			p.Put(b)
		}
	}
	odd := make([]byte, 100, 300)
	p.Put(&odd) // not a class's capacity: dropped, never handed out
	for range 10 {
		if b := p.Get(100); cap(*b) == 300 {
			t.Fatal("a foreign buffer was pooled")
		}
	}
}

func TestSteps(t *testing.T) {
	got := Steps(4096, 32768, 4)
	want := []int{4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768}
	if !slices.Equal(got, want) {
		t.Fatalf("Steps = %v, want %v", got, want)
	}
	if got := Steps(256, 256, 4); !slices.Equal(got, []int{256}) {
		t.Fatalf("Steps(256, 256) = %v", got)
	}
}

// TestNewFunc: a pool's fresh buffers, pooled classes and others, come
// from its alloc.
func TestNewFunc(t *testing.T) {
	var allocs []int
	p := NewFunc(func(n int) []byte {
		allocs = append(allocs, n)
		b := make([]byte, n)
		b[0] = 0xa5 // marks the buffer as alloc's
		return b
	}, 4096, 8192)
	for _, n := range []int{100, 5000, 20000} {
		b := p.Get(n)
		if (*b)[:1][0] != 0xa5 {
			t.Fatalf("Get(%d) did not come from alloc", n)
		}
	}
	if want := []int{4096, 8192, 20000}; !slices.Equal(allocs, want) {
		t.Fatalf("alloc called for %v, want %v", allocs, want)
	}
}
