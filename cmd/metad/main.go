// Command metad runs one member of Strata's metadata service.
//
//	metad --id 1 --data-dir DIR --listen 127.0.0.1:7001 --raft-listen 127.0.0.1:7101 \
//	  --admin-listen 127.0.0.1:7201 --peers 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103
//
// Every flag is also a YAML key in --config and a STRATA_* variable
// (--data-dir: data-dir, STRATA_DATA_DIR). Flags win over the environment,
// which wins over the file.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"github.com/strata-log/strata/internal/admin"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/grpcserve"
	"github.com/strata-log/strata/internal/logging"
	"github.com/strata-log/strata/metad"
	"github.com/strata-log/strata/proto/metadpb"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "metad:", err)
		os.Exit(1)
	}
}

func flags(d metad.Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("metad", pflag.ContinueOnError)
	fs.String(config.FileFlag, "", "YAML config file (keys are the flag names)")
	fs.String("id", d.ID, "member id, as listed in --peers")
	fs.String("data-dir", d.DataDir, "directory for the Raft log, stable store and snapshots")
	fs.String("listen", d.Listen, "client gRPC address")
	fs.String("advertise", d.Advertise, "client address published to others (default: --listen)")
	fs.String("raft-listen", d.RaftListen, "Raft transport address (also advertised to peers)")
	fs.String("admin-listen", d.AdminListen, "HTTP address for /metrics, /livez, /readyz, /debug/pprof/")
	fs.String("peers", d.Peers, "initial voters, id=raftAddress,... (used only to bootstrap an empty member)")
	fs.Bool("join", d.Join, "do not bootstrap; wait to be added with 'strata meta member add'")
	fs.Duration("heartbeat-timeout", d.HeartbeatTimeout, "Raft heartbeat timeout")
	fs.Duration("election-timeout", d.ElectionTimeout, "Raft election timeout")
	fs.Duration("request-timeout", d.RequestTimeout, "deadline for requests that carry none")
	fs.Uint64("snapshot-threshold", d.SnapshotThreshold, "log entries between Raft snapshots")
	fs.Int("history-revisions", d.HistoryRevisions, "revisions of watch history kept for resuming watches")
	fs.Bool("no-sync", d.NoSync, "do not fsync the Raft log (benchmarks only: loses data on a crash)")
	fs.String("log-level", d.LogLevel, "debug, info, warn or error")
	fs.String("log-format", d.LogFormat, "text or json")
	return fs
}

func run(args []string) error {
	cfg := metad.DefaultConfig()
	fs := flags(cfg)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := config.Load(fs, &cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	log.Info("starting metad", "config", cfg.String())

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := metad.Open(cfg, log, reg)
	if err != nil {
		return err
	}
	defer srv.Close()

	gs, err := grpcserve.New(cfg.Listen, srv.ServerOptions()...)
	if err != nil {
		return err
	}
	metadpb.RegisterMetadServer(gs.Server, srv.Service())
	adm, err := admin.Start(cfg.AdminListen, reg, srv.Ready, log)
	if err != nil {
		return err
	}
	defer adm.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve() }()
	log.Info("metad serving", "listen", gs.Addr(), "raft", cfg.RaftListen, "admin", adm.Addr())
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-serveErr:
	}
	gs.Stop(5 * time.Second)
	return err
}
