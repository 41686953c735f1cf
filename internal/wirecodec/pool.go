package wirecodec

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"

	"github.com/strata-log/strata/internal/bufpool"
)

// BufferPool is the process's one pool of transport buffers; its options
// put it under every server's and client's transport. Its classes are
// gRPC's default pool's, 256 B, 4 KiB (a page), 16 KiB (gRPC's HTTP/2
// frames), 32 KiB (its write buffer) and 1 MiB, and 2 MiB, for messages
// that carry a whole ledger entry (Pooled): an entry of a full 1 MiB batch
// is a little over 1 MiB. Larger buffers are not pooled. It does not zero
// what it hands out (see the package doc).
var BufferPool mem.BufferPool = bufpool.New(1<<8, 1<<12, 1<<14, 1<<15, 1<<20, 1<<21)

// ServerOption and DialOption make a server's or a client's transport
// use BufferPool.
func ServerOption() grpc.ServerOption { return experimental.BufferPool(BufferPool) }

func DialOption() grpc.DialOption { return experimental.WithBufferPool(BufferPool) }
