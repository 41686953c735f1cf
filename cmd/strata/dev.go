package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

func newDevCommand(g *globalOptions) *cobra.Command {
	o := devcluster.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a complete local cluster (every role a separate process) until Ctrl-C",
		Long: `Run a complete local cluster: every role as a separate process on fixed
loopback ports, data under --dir (kept across restarts). Prints the addresses,
writes a CLI profile so that strata needs no flags, and stops everything on
Ctrl-C. The state file DIR/cluster.json lists every node (role, id, pid,
addresses, data dir); 'strata dev kill|stop|start NODE' act on one node.

Every broker also serves the Kafka protocol, broker i on --kafka-port + i-1
(kcat -b localhost:9092 -L); with --tls that listener speaks TLS and wants a
client certificate (the profile's admin one) or a SASL user.

The brokers tier sealed ledgers to MinIO, run as one more node (minio, data in
DIR/minio, S3 on --kafka-port + 100 unless --minio-port is given, console on
the next port), when a minio binary is beside the role binaries, on PATH or in
$(go env GOPATH)/bin ('make minio' installs it); otherwise to the local
directory DIR/tier. Every port follows from the port flags, so a second
cluster needs only other ones and another --dir.

Every node dies with this process, even when it is killed with SIGKILL
(Linux). 'strata dev start NODE' has this process start the node, so the node
dies with it too; with no 'strata dev' running for --dir, it starts the node
itself, and the node runs until 'strata dev stop NODE'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.BinDir == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.BinDir = filepath.Dir(exe)
			}
			o.MinIO = devcluster.FindMinIO(o.BinDir, os.Getenv)
			return runDev(cmd, o)
		},
	}
	cmd.PersistentFlags().StringVar(&o.Dir, "dir", o.Dir, "directory for data, logs, the state file and the profile")
	f := cmd.Flags()
	f.StringVar(&o.BinDir, "bin-dir", "", "directory holding the role binaries (default: beside strata)")
	f.IntVar(&o.Metad, "metad", o.Metad, "number of metad members (1, 3 or 5)")
	f.IntVar(&o.MetadPort, "metad-port", o.MetadPort, "first metad client port (raft +100, admin +200)")
	f.IntVar(&o.Bookies, "bookies", o.Bookies, "number of bookies")
	f.IntVar(&o.BookiePort, "bookie-port", o.BookiePort, "first bookie port (admin +100)")
	f.IntVar(&o.Brokers, "brokers", o.Brokers, "number of brokers")
	f.IntVar(&o.BrokerPort, "broker-port", o.BrokerPort, "first broker gRPC port, the CLI's (admin +100)")
	f.IntVar(&o.KafkaPort, "kafka-port", o.KafkaPort, "first broker Kafka protocol port (broker i on +i-1)")
	f.IntVar(&o.MinIOPort, "minio-port", 0, fmt.Sprintf("MinIO's S3 port, when a minio binary is found (console +1; default --kafka-port + %d)",
		devcluster.MinIOPortOffset))
	f.BoolVar(&o.TLS, "tls", false, "mutual TLS on every link: a CA and per-node certificates under DIR/tls, and an admin certificate in the profile")
	cmd.AddCommand(newDevNodeCommand("kill", "Kill a node with a signal (default KILL)", &o.Dir),
		newDevNodeCommand("stop", "Stop a node (SIGTERM, then SIGKILL after 10s)", &o.Dir),
		newDevNodeCommand("start", "Start a stopped or killed node again with its recorded arguments", &o.Dir),
		newDevStatusCommand(g, &o.Dir))
	return cmd
}

func runDev(cmd *cobra.Command, o devcluster.Options) error {
	return devcluster.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

func newDevNodeCommand(action, short string, dir *string) *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:   action + " NODE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := devcluster.LoadState(*dir)
			if err != nil {
				return err
			}
			n, err := st.Node(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch action {
			case "kill":
				return devcluster.KillNode(out, *n, sig)
			case "stop":
				return devcluster.StopNode(out, *n)
			}
			return devcluster.StartNode(cmd.Context(), out, st, n)
		},
	}
	if action == "kill" {
		cmd.Flags().StringVarP(&sig, "signal", "s", "KILL", "signal: KILL, TERM, INT, STOP or CONT")
	}
	return cmd
}

func newDevStatusCommand(g *globalOptions, dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List the dev cluster's nodes: role, pid, running, addresses, data dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := devcluster.LoadState(*dir)
			if err != nil {
				return err
			}
			rows := devcluster.Statuses(st)
			p := g.printer(cmd)
			if p.Format == cli.FormatJSON {
				return p.JSON(rows)
			}
			return devcluster.PrintStatuses(cmd.OutOrStdout(), rows)
		},
	}
}
