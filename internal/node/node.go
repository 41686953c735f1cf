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
// once runnable) is how a node's latency shows that it is short of CPU.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
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
	// Exposure: pprof on the admin address, gRPC reflection.
	Exposure config.Exposure
	// Security: with AdminTLS the admin address serves TLS with the
	// node's certificate (TLS's, else loaded from the files; client
	// certificates optional there); AdminTokenFile, when set, holds the
	// bearer token /metrics and /debug/ require (see internal/admin).
	Security config.Security
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
	gs, err := grpcserve.New(s.Listen, s.Exposure.GRPCReflection, append(opts, s.ServerOptions...)...)
	if err != nil {
		return err
	}
	s.Register(gs.Server)
	adminCfg := admin.Config{Addr: s.AdminListen, Registry: s.Registry, Ready: s.Ready,
		Pprof: s.Exposure.EnablePprof, TokenFile: s.Security.AdminTokenFile}
	if s.Security.AdminTLS {
		creds := s.TLS
		if !creds.Enabled() {
			// A role serving its own gRPC TLS (the broker) passes none.
			creds, err = mtls.Load(s.Security.Files())
		}
		if err == nil && !creds.Enabled() {
			err = errors.New("node: --admin-tls needs --tls-cert-file, --tls-key-file and --tls-ca-file")
		}
		if err != nil {
			gs.Stop(time.Second)
			return err
		}
		adminCfg.TLS = creds.Reloader().HTTPSConfig()
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
		"admin_tls", adminCfg.TLS != nil, "admin_token", s.Security.AdminTokenFile != "")
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
	gs.Stop(5 * time.Second)
	return err
}
