package broker

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/strata-log/strata/proto/brokerpb"
)

// A gRPC Fetch response refers to the fetched batches, not to copies
// (internal/wirecodec, W2): its bytes stay in memory until gRPC's
// transport has written them, which may be long after the handler
// returned (flow control: a client that does not read). So its budget is
// released then, not when the handler returns:
//
//   - grpcService.Fetch leaves the release in the call's context
//     (holdUntilSent), where holdFetchResponses, the unary interceptor,
//     picks it up and returns the response as a brokerpb.HeldFetchResponse,
//     whose encoding hands gRPC a last buffer that calls the release when
//     gRPC frees it: after every byte before it was written, or when gRPC
//     drops the message (a stream reset, a failed send);
//   - what gRPC holds when a connection dies it never frees: fetchConns,
//     a stats handler, gives each connection its FetchConn and closes it
//     at the connection's end, which releases what its responses still
//     hold.
//
// Each release runs once, whichever comes first.

// fetchServerOptions are the gRPC server's options for the above.
func (b *Broker) fetchServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StatsHandler(fetchConns{s: b.Service()}), grpc.ChainUnaryInterceptor(holdFetchResponses)}
}

// sendHoldKey is the context key of a gRPC Fetch call's *sendHold.
type sendHoldKey struct{}

// sendHold carries a Fetch's release from the handler to the interceptor.
type sendHold struct{ release func() }

// holdUntilSent hands release to the interceptor, to run once gRPC has
// written the response; without the interceptor (a server built without
// fetchServerOptions) it runs at once.
func holdUntilSent(ctx context.Context, release func()) {
	if h, ok := ctx.Value(sendHoldKey{}).(*sendHold); ok {
		h.release = release
		return
	}
	release()
}

// holdFetchResponses is the unary interceptor that returns a Fetch's
// response as a brokerpb.HeldFetchResponse carrying its release.
func holdFetchResponses(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod != brokerpb.Broker_Fetch_FullMethodName {
		return h(ctx, req)
	}
	held := &sendHold{}
	resp, err := h(context.WithValue(ctx, sendHoldKey{}, held), req)
	if held.release == nil {
		return resp, err
	}
	fr, ok := resp.(*brokerpb.FetchResponse)
	if err != nil || !ok || fr == nil {
		held.release()
		return resp, err
	}
	return brokerpb.HeldFetchResponse{FetchResponse: fr, Release: held.release}, nil
}

// fetchConns is the stats handler that gives every gRPC connection its
// FetchConn, and closes it when the connection ends.
type fetchConns struct{ s *Service }

func (f fetchConns) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return WithFetchConn(ctx, f.s.NewFetchConn())
}

func (fetchConns) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, end := s.(*stats.ConnEnd); end {
		if fc := fetchConnOf(ctx); fc != nil {
			fc.Close()
		}
	}
}

func (fetchConns) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (fetchConns) HandleRPC(context.Context, stats.RPCStats)                       {}
