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

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/strata-log/strata/cmd/internal/nodeconfig"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/node"
	"github.com/strata-log/strata/metad"
	"github.com/strata-log/strata/proto/metadpb"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, nodeconfig.ErrHelp) {
		fmt.Fprintln(os.Stderr, "metad:", err)
		os.Exit(1)
	}
}

func flags(d metad.Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("metad", pflag.ContinueOnError)
	fs.String("id", d.ID, "member id, as listed in --peers")
	fs.String("data-dir", d.DataDir, "directory for the Raft log, stable store and snapshots")
	config.EndpointsFlags(fs, d.Endpoints, config.EndpointsHelp{
		Listen:    "client gRPC address",
		Advertise: "client address published to others (default: --listen)",
	})
	fs.String("raft-listen", d.RaftListen, "Raft transport address (also advertised to peers)")
	fs.Int("raft-max-connections", d.RaftMaxConnections, "connections the Raft address holds open at once; more are closed at accept (counted)")
	fs.Int("raft-max-connections-per-ip", d.RaftMaxConnectionsPerIP, "Raft connections one IP may hold open (members on one host share theirs)")
	config.ExposureFlags(fs, d.Exposure)
	config.SecurityFlags(fs, d.Security)
	config.LimitsFlags(fs, d.Limits)
	fs.String("peers", d.Peers, "initial voters, id=raftAddress,... (used only to bootstrap an empty member)")
	fs.Bool("join", d.Join, "do not bootstrap; wait to be added with 'strata meta member add'")
	fs.Duration("heartbeat-timeout", d.HeartbeatTimeout, "Raft heartbeat timeout")
	fs.Duration("election-timeout", d.ElectionTimeout, "Raft election timeout")
	fs.Duration("request-timeout", d.RequestTimeout, "deadline for requests that carry none")
	fs.Uint64("snapshot-threshold", d.SnapshotThreshold, "log entries between Raft snapshots")
	fs.Int("history-revisions", d.HistoryRevisions, "revisions of watch history kept for resuming watches")
	fs.Int64("history-bytes", d.HistoryBytes, "bytes of keys and values the watch history keeps, at most")
	fs.Int("max-txn-ops", d.MaxTxnOps, "most compares, and most ops, in one transaction")
	fs.Int64("quota-keys", d.QuotaKeys, "most live keys; writes adding keys past it are refused")
	fs.Int64("quota-bytes", d.QuotaBytes, "most bytes of live keys and values; writes adding bytes past it are refused")
	fs.Int64("quota-leases", d.QuotaLeases, "most granted leases; grants past it are refused")
	fs.Bool("no-sync", d.NoSync, "do not fsync the Raft log (benchmarks only: loses data on a crash)")
	config.LoggingFlags(fs, d.Logging)
	return fs
}

func run(args []string) error {
	cfg := metad.DefaultConfig()
	if err := nodeconfig.Parse(flags(cfg), args, &cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := node.Logger(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	log.Info("starting metad", "config", cfg.String())
	node.SetMemoryLimit(log)
	reg := node.NewRegistry()
	srv, err := metad.Open(cfg, log, reg)
	if err != nil {
		return err
	}
	defer srv.Close()
	return node.Serve(context.Background(), log, node.Serving{
		Role: "metad", TLS: srv.Credentials(),
		Exposure: cfg.Exposure, Security: cfg.Security, Limits: cfg.Limits,
		Listen: cfg.Listen, AdminListen: cfg.AdminListen, Registry: reg, Ready: srv.Ready,
		ServerOptions: srv.ServerOptions(),
		Register:      func(s *grpc.Server) { metadpb.RegisterMetadServer(s, srv.Service()) },
	})
}
