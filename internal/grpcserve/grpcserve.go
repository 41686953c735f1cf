// Package grpcserve builds the gRPC server every Strata node runs: bounded
// message sizes, keepalive, the grpc.health.v1 service and server
// reflection, so grpcurl works against any node. With TLS (Secure), the
// server requires a client certificate and checks every call's role
// (internal/authz) before any other interceptor runs.
//
// Its listener bounds what a client can make it hold (config.Limits):
// connections in total and per source IP (internal/connlimit; refusals
// counted in strata_ROLE_grpc_connections_refused_total), a deadline on
// the TLS handshake and the HTTP/2 preface of a new connection, a bound
// on the calls open on one connection, and an idle timeout. No transport
// buffer is held by a connection that is idle (grpcopts.BufferServerOptions).
package grpcserve

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/connlimit"
	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/wirecodec"
)

// Keepalive: a connection quiet for keepaliveTime is pinged, and closed
// when the ping is not answered within keepaliveTimeout (a peer gone
// without a FIN, or one that does not speak HTTP/2).
const (
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// Config is what New serves.
type Config struct {
	// Addr is the listen address (host:port).
	Addr string
	// Reflection registers gRPC server reflection.
	Reflection bool
	// TLS says that the options passed to New make the server speak TLS
	// (Secure's, or the role's own): its connections then read through
	// crypto/tls's buffer only.
	TLS bool
	// Limits bound the listener's connections and their calls; zero:
	// config.DefaultLimits().
	Limits config.Limits
	// Role names the node's role in the metric names
	// (strata_ROLE_grpc_connections_open, ..._refused_total).
	Role string
	// Registry, when not nil, gets the listener's metrics.
	Registry prometheus.Registerer
	// Logger, when nil, is slog.Default().
	Logger *slog.Logger
}

// Server is a gRPC server with health and reflection registered.
type Server struct {
	*grpc.Server
	Health *health.Server
	ln     *connlimit.Listener
}

// New listens on cfg.Addr and returns a server ready for services to be
// registered; call Serve afterwards. opts come after the base options, so
// they win where both set something.
func New(cfg Config, opts ...grpc.ServerOption) (*Server, error) {
	limits := cfg.Limits
	if limits == (config.Limits{}) {
		limits = config.DefaultLimits()
	}
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("grpcserve: %w", err)
	}
	role := cfg.Role
	if role == "" {
		role = "node"
	}
	ln, err := connlimit.Listen(cfg.Addr, connlimit.Config{
		MaxConnections: limits.GRPCMaxConnections, MaxConnectionsPerIP: limits.GRPCMaxConnectionsPerIP,
		Name: "strata_" + role + "_grpc", Help: "gRPC", Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("grpcserve: listen %s: %w", cfg.Addr, err)
	}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(ln); err != nil {
			ln.Close()
			return nil, fmt.Errorf("grpcserve: register metrics: %w", err)
		}
	}
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(grpcopts.MaxMessageBytes),
		grpc.MaxSendMsgSize(grpcopts.MaxMessageBytes),
		grpc.MaxConcurrentStreams(uint32(limits.GRPCMaxConcurrentStreams)),
		// Large flow-control windows: adds and fetches carry up to MiBs per
		// message, and the 64 KiB default stalls a stream every message.
		grpc.InitialWindowSize(grpcopts.WindowBytes),
		grpc.InitialConnWindowSize(grpcopts.ConnWindowBytes),
		wirecodec.ServerOption(),
		// The TLS handshake, the HTTP/2 preface and the client's first
		// settings frame must arrive within it (gRPC's default: 120s).
		grpc.ConnectionTimeout(limits.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: limits.GRPCIdleTimeout, Time: keepaliveTime, Timeout: keepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	base = append(base, grpcopts.BufferServerOptions(cfg.TLS)...)
	s := &Server{Server: grpc.NewServer(append(base, opts...)...), Health: health.NewServer(), ln: ln}
	healthpb.RegisterHealthServer(s.Server, s.Health)
	if cfg.Reflection {
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

// OpenConnections is the number of connections the listener admitted
// and the server has not closed yet.
func (s *Server) OpenConnections() int { return s.ln.Open() }

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
