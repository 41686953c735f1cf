package grpcserve

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
)

// echoDesc is a one-method service taking bytes and answering empty: what
// a produce or an add looks like to the server's read path.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "strata.bench.Sink",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Put", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := &wrapperspb.BytesValue{}
		if err := dec(in); err != nil {
			return nil, err
		}
		return &wrapperspb.BytesValue{}, nil
	}}},
}

// BenchmarkTLSRead sends 1 MiB requests over mutual TLS to a server
// whose connections read through crypto/tls only (what New does for a
// TLS server) and, for comparison, through a BufferBytes bufio.Reader of
// their own as well (what every TLS connection held before).
func BenchmarkTLSRead(b *testing.B) {
	ca := mtlstest.NewCA(b)
	server, client := ca.Credentials(b, pki.RoleBookie, "b1"), ca.Credentials(b, pki.RoleBroker, "k1")
	payload := &wrapperspb.BytesValue{Value: make([]byte, 1<<20)}
	for _, bc := range []struct {
		name  string
		extra []grpc.ServerOption
	}{
		{"crypto-tls-buffer-only", nil},
		{"own-256KiB-bufio", []grpc.ServerOption{grpc.ReadBufferSize(grpcopts.BufferBytes)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(Config{Addr: proctest.FreeAddr(b), TLS: true}, append([]grpc.ServerOption{server.ServerOption()}, bc.extra...)...)
			if err != nil {
				b.Fatal(err)
			}
			s.RegisterService(&echoDesc, struct{}{})
			go func() { _ = s.Serve() }()
			defer s.Stop(time.Second)
			cc, err := grpc.NewClient(s.Addr(), append(grpcopts.DialOptions(), client.DialOption())...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			ctx := context.Background()
			out := &wrapperspb.BytesValue{}
			b.SetBytes(int64(len(payload.Value)))
			b.ResetTimer()
			for range b.N {
				if err := cc.Invoke(ctx, "/strata.bench.Sink/Put", payload, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
