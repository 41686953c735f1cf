// Package grpcserve builds the gRPC server every Strata node runs: bounded
// message sizes, keepalive, the grpc.health.v1 service and server
// reflection, so grpcurl works against any node. With TLS (Secure), the
// server requires a client certificate and checks every call's role
// (internal/authz) before any other interceptor runs.
package grpcserve

import (
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/wirecodec"
)

// MaxConcurrentStreams bounds the calls one connection may have open at
// once (gRPC's default is unlimited): a client past it waits for one to
// finish. Every Strata client keeps far fewer (a consumer has one fetch
// per broker, a broker one add stream per bookie and a few watches).
const MaxConcurrentStreams = 1000

// Server is a gRPC server with health and reflection registered.
type Server struct {
	*grpc.Server
	Health *health.Server
	ln     net.Listener
}

// New listens on addr and returns a server ready for services to be
// registered (reflection too, with reflect); call Serve afterwards.
func New(addr string, reflect bool, opts ...grpc.ServerOption) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("grpcserve: listen %s: %w", addr, err)
	}
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(grpcopts.MaxMessageBytes),
		grpc.MaxSendMsgSize(grpcopts.MaxMessageBytes),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		// Large flow-control windows: adds and fetches carry up to MiBs per
		// message, and the 64 KiB default stalls a stream every message.
		grpc.InitialWindowSize(grpcopts.WindowBytes),
		grpc.InitialConnWindowSize(grpcopts.ConnWindowBytes),
		wirecodec.ServerOption(),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	base = append(base, grpcopts.BufferServerOptions()...)
	s := &Server{Server: grpc.NewServer(append(base, opts...)...), Health: health.NewServer(), ln: ln}
	healthpb.RegisterHealthServer(s.Server, s.Health)
	if reflect {
		reflection.Register(s.Server)
	}
	return s, nil
}

// Secure returns the options of a TLS server: creds' mTLS transport and
// a's role checks. Pass them to New before the role's own options, so the
// checks run first. creds nil (plaintext) returns none.
func Secure(creds *mtls.Credentials, a *authz.Authorizer) []grpc.ServerOption {
	if !creds.Enabled() {
		return nil
	}
	return append([]grpc.ServerOption{creds.ServerOption()}, a.ServerOptions()...)
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Stop; it returns nil after a graceful stop.
func (s *Server) Serve() error {
	if err := s.Server.Serve(s.ln); err != nil && err != grpc.ErrServerStopped {
		return err
	}
	return nil
}

// Stop marks every service not serving, then stops gracefully, forcing
// after the timeout.
func (s *Server) Stop(timeout time.Duration) {
	s.Health.Shutdown()
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		s.Server.Stop()
		<-done
	}
}
