package rpctest

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/stats"
)

// Received counts the request messages a gRPC server received (see the
// package doc). Install it with grpc.StatsHandler.
type Received struct{ n atomic.Int64 }

// Count is the number of request messages received so far.
func (r *Received) Count() int64 { return r.n.Load() }

// TagRPC implements stats.Handler.
func (r *Received) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC implements stats.Handler: it counts InPayload events.
func (r *Received) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InPayload); ok {
		r.n.Add(1)
	}
}

// TagConn implements stats.Handler.
func (r *Received) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (r *Received) HandleConn(context.Context, stats.ConnStats) {}
