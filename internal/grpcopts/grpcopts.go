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

// DialOptions are the client-side counterparts for connections that move
// data: message size limit, flow-control windows and the transport's
// buffer pool (internal/wirecodec).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithInitialWindowSize(WindowBytes),
		grpc.WithInitialConnWindowSize(ConnWindowBytes),
		wirecodec.DialOption(),
	}
}
