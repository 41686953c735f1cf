// Package grpcopts holds the gRPC settings both ends of every Strata
// connection agree on: the largest message and the flow-control windows,
// and the dial options built from them. Servers (internal/grpcserve) and
// clients (the public client, metaclient, the ledger client) import it, so
// a client need not link any server code.
package grpcopts

import (
	"google.golang.org/grpc"

	"github.com/strata-log/strata/internal/wirecodec"
)

// MaxMessageBytes bounds every request and response a node accepts, so a
// hostile length prefix cannot make it allocate without limit.
const MaxMessageBytes = 16 << 20

// Flow-control windows for servers and for clients that move data
// (DialOptions).
const (
	WindowBytes     = 4 << 20
	ConnWindowBytes = 16 << 20
)

// BufferBytes is the transport's read size and write buffer on
// connections that move data (produce, fetch, adds, reads), servers' and
// clients' alike. gRPC's 32 KiB default cost a read(2) and a write(2) per
// 32 KiB of records at every hop.
const BufferBytes = 256 << 10

// BufferDialOptions size a client connection's transport buffers
// (BufferBytes).
func BufferDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithReadBufferSize(BufferBytes),
		grpc.WithWriteBufferSize(BufferBytes),
	}
}

// BufferServerOptions are BufferDialOptions' server side, such that an
// idle connection holds no buffer: writes take one from a pool shared by
// every connection for the time of a flush (gRPC's default), and
// plaintext reads take one from a pool when the socket is readable (gRPC
// does so only for a *net.TCPConn). A TLS connection's reads (tlsServer)
// get no buffer of their own: crypto/tls already reads whole records into
// its own, and a bufio.Reader per connection would cost each BufferBytes
// from its handshake on, before any call is authenticated.
func BufferServerOptions(tlsServer bool) []grpc.ServerOption {
	read := BufferBytes
	if tlsServer {
		read = 0
	}
	return []grpc.ServerOption{
		grpc.ReadBufferSize(read),
		grpc.WriteBufferSize(BufferBytes),
	}
}

// DialOptions are the client-side counterparts for connections that move
// data: message size limit, flow-control windows, transport buffers and
// the transport's buffer pool (internal/wirecodec).
func DialOptions() []grpc.DialOption {
	return append([]grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithInitialWindowSize(WindowBytes),
		grpc.WithInitialConnWindowSize(ConnWindowBytes),
		wirecodec.DialOption(),
	}, BufferDialOptions()...)
}
