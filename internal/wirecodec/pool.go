package wirecodec

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// poolTiers are the pooled capacities: gRPC's default pool's, 256 B,
// 4 KiB (a page), 16 KiB (gRPC's HTTP/2 frames), 32 KiB (its write
// buffer) and 1 MiB, and 2 MiB, for messages that carry a whole ledger
// entry (Pooled): an entry of a full 1 MiB batch is a little over 1 MiB.
// Larger buffers are not pooled.
var poolTiers = [...]int{8, 12, 14, 15, 20, 21}

// dirtyPool is a tiered mem.BufferPool that does not zero what it hands
// out (see the package doc).
type dirtyPool struct {
	pools [len(poolTiers)]sync.Pool // of *[]byte of capacity 1<<poolTiers[i]
}

// BufferPool is the process's one pool; its options put it under every
// server's and client's transport.
var BufferPool mem.BufferPool = &dirtyPool{}

// ServerOption and DialOption make a server's or a client's transport
// use BufferPool.
func ServerOption() grpc.ServerOption { return experimental.BufferPool(BufferPool) }

func DialOption() grpc.DialOption { return experimental.WithBufferPool(BufferPool) }

// tier returns the index of the smallest tier that holds n bytes, or -1.
func tier(n int) int {
	e := bits.Len(uint(max(n, 1) - 1)) // smallest e with 1<<e >= n
	for i, t := range poolTiers {
		if t >= e {
			return i
		}
	}
	return -1
}

func (p *dirtyPool) Get(n int) *[]byte {
	i := tier(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.pools[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<poolTiers[i])
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	i := tier(c)
	if i < 0 || 1<<poolTiers[i] != c {
		return // not one of ours: leave it to the collector
	}
	*b = (*b)[:0]
	p.pools[i].Put(b)
}
