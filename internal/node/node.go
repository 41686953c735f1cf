// Package node is what every Strata server program does around its own
// logic, once cmd/internal/nodeconfig has filled the role's config: set up
// logging and a metrics registry, serve gRPC (with health and reflection)
// and the admin HTTP endpoints, and stop cleanly on SIGINT or SIGTERM.
package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/strata-log/strata/internal/admin"
	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/grpcserve"
	"github.com/strata-log/strata/internal/logging"
	"github.com/strata-log/strata/internal/mtls"
)

// Logger builds the process's logger on stderr.
func Logger(format, level string) (*slog.Logger, error) {
	return logging.New(os.Stderr, format, level)
}

// NewRegistry returns a metrics registry with Go runtime and process
// collectors. The Go collector adds the scheduler's metrics to its
// defaults: go_sched_latencies_seconds (how long goroutines waited to run
// once runnable) is how a node's latency shows that it is short of CPU;
// and the collector's settings and goals: go_gc_gomemlimit_bytes is the
// soft limit SetMemoryLimit set.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler, collectors.MetricsGC)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Serving describes what a node serves.
type Serving struct {
	// Role names the node's role (metad, bookie, broker) in metric names.
	Role string
	// TLS, when not nil, serves gRPC over mutual TLS and checks every
	// call's role with authz.DefaultPolicy.
	TLS *mtls.Credentials

	Listen, AdminListen string
	Registry            *prometheus.Registry
	Ready               admin.ReadyFunc
	ServerOptions       []grpc.ServerOption
	// Register registers the role's gRPC services.
	Register func(*grpc.Server)
	// Drain, when set, runs after SIGINT/SIGTERM while the gRPC server still
	// serves (a broker hands its partitions over), bounded by DrainTimeout.
	Drain        func(ctx context.Context)
	DrainTimeout time.Duration
	// StopTimeout bounds the gRPC server's graceful stop, after Drain:
	// calls still running then are cut (0: DefaultStopTimeout). A role
	// whose clients hold streams that never end on their own (a bookie's
	// add streams) sets it short.
	StopTimeout time.Duration
	// Exposure: pprof on the admin address, gRPC reflection.
	Exposure config.Exposure
	// Security: with certificate files the admin address serves TLS with
	// the node's certificate (TLS's, else loaded from the files; client
	// certificates optional there), beside plain HTTP unless AdminTLS, and
	// /metrics and /debug/ need an admin client certificate or the bearer
	// token of AdminTokenFile (see internal/admin), as they do on a
	// plaintext node with AdminTokenFile.
	Security config.Security
	// Limits bound the gRPC and admin listeners' connections.
	Limits config.Limits
}

// Serve runs the gRPC and admin servers until ctx ends or SIGINT/SIGTERM
// arrives, then stops them gracefully.
func Serve(ctx context.Context, log *slog.Logger, s Serving) error {
	var opts []grpc.ServerOption
	if s.TLS.Enabled() {
		a, err := authz.New(authz.DefaultPolicy(), s.Role, log, s.Registry)
		if err != nil {
			return err
		}
		opts = grpcserve.Secure(s.TLS, a)
	}
	gs, err := grpcserve.New(grpcserve.Config{
		Addr: s.Listen, Reflection: s.Exposure.GRPCReflection, TLS: s.Security.TLS(), Limits: s.Limits,
		Role: s.Role, Registry: s.Registry, Logger: log,
	}, append(opts, s.ServerOptions...)...)
	if err != nil {
		return err
	}
	s.Register(gs.Server)
	adminCfg, err := adminConfig(s)
	if err != nil {
		gs.Stop(time.Second)
		return err
	}
	adm, err := admin.Start(adminCfg, log)
	if err != nil {
		gs.Stop(time.Second)
		return err
	}
	defer adm.Close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve() }()
	log.Info("serving", "listen", gs.Addr(), "admin", adm.Addr(), "tls", s.TLS.Enabled(),
		"admin_tls", adminCfg.TLS != nil, "admin_tls_only", adminCfg.TLSOnly, "admin_token", s.Security.AdminTokenFile != "")
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		if s.Drain != nil {
			dctx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout)
			s.Drain(dctx)
			cancel()
		}
	case err = <-serveErr:
		if err == nil {
			err = errors.New("grpc server stopped")
		}
	}
	stopTimeout := s.StopTimeout
	if stopTimeout <= 0 {
		stopTimeout = DefaultStopTimeout
	}
	gs.Stop(stopTimeout)
	return err
}

// DefaultStopTimeout is Serving.StopTimeout's default.
const DefaultStopTimeout = 5 * time.Second

// adminConfig is the admin server's: on a node with TLS, its certificate
// (TLS's, else loaded from the files) and authentication required.
func adminConfig(s Serving) (admin.Config, error) {
	limits := s.Limits
	if limits == (config.Limits{}) {
		limits = config.DefaultLimits()
	}
	cfg := admin.Config{Addr: s.AdminListen, Registry: s.Registry, Ready: s.Ready,
		Pprof: s.Exposure.EnablePprof, TokenFile: s.Security.AdminTokenFile, Role: s.Role,
		MaxConnections: limits.AdminMaxConnections, MaxConnectionsPerIP: limits.AdminMaxConnectionsPerIP,
		HandshakeTimeout: limits.HandshakeTimeout}
	if !s.Security.TLS() {
		if s.Security.AdminTLS {
			return cfg, errors.New("node: --admin-tls needs --tls-cert-file, --tls-key-file and --tls-ca-file")
		}
		return cfg, nil
	}
	creds := s.TLS
	if !creds.Enabled() {
		// A role serving its own gRPC TLS (the broker) passes none.
		var err error
		if creds, err = mtls.Load(s.Security.Files()); err != nil {
			return cfg, err
		}
	}
	cfg.TLS, cfg.TLSOnly, cfg.RequireAuth = creds.Reloader().HTTPSConfig(), s.Security.AdminTLS, true
	return cfg, nil
}
