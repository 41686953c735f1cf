package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/bench"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// benchSuiteLong is `strata bench suite --help`'s text.
const benchSuiteLong = `Runs the standard benchmark on a local cluster it starts itself (every role a
separate process, as 'strata dev': 3 metad, --bookies bookies, --brokers brokers
each also serving the Kafka protocol, data in a temporary directory under
--dir, ports chosen free) and stops it at the end, on error and on Ctrl-C.

First it measures the machine's limits in the file system of the bookies'
data: fdatasync latency and combined write bandwidth of one and of three
concurrent journal-like files, at group sizes from 4 KiB to 4 MiB (the bookie
journal groups whatever is queued, up to 4 MiB, per fdatasync), and the
loopback TCP round trip. Then, per cluster shape, a warm-up (writing to a
topic of its own until every broker's tail cache is full and its memory
steady: a new broker's heap growth is not charged to the first workload) and
the workloads:

  produce-max      produce as fast as possible (--record-size, default 1 KiB)
  kafka-produce-max  the same over Kafka, franz-go producing (acks=all)
  e2e-5000         open-loop e2e at 5,000 records/s
  kafka-e2e-5000   the same over Kafka, franz-go producing and consuming
  e2e-25000        open-loop e2e at 25,000 records/s
  e2e-50000        open-loop e2e at 50,000 records/s
  e2e-half-max     open-loop e2e at 50% of produce-max's records/s
  catch-up         read produce-max's topic from the earliest offset
  kafka-catch-up   the same over Kafka, a franz-go consumer
  group-catch-up   the same with 4 members of a Strata group consumer
  kafka-group-catch-up  the same with 4 franz-go members of a classic
                   cooperative-sticky group
  group-rebalance  franz-go groups of 4 (cooperative-sticky, and KIP-848):
                   how long the partitions of a member that leaves, or is
                   cut off, go unconsumed (--group-session-timeout,
                   --group-heartbeat-interval)
  produce-max-64k  produce as fast as possible, 64 KiB records
  compact-half-max open-loop produce (no consumer) at 50% of produce-max for
                   4 x --duration, alternating
                   windows without compaction with cycles that switch one of
                   three 256 MB keyed topics (2,000 keys, 8 MiB segments)
                   written before it to cleanup.policy=compact, each followed
                   by a control cycle as long that switches nothing: the
                   passes' input MB/s and the load's latency while
                   compacting, and in the control cycles, against the
                   windows without

It records CPU seconds per process (/proc/PID/stat) and the bookies' journal
group sizes (their /metrics) around each workload, writes a JSON report to
--out and a table (each result as a ratio to the limit that binds it, next to
its target, and each Kafka workload against its gRPC twin;
docs/bench/README.md) to stdout and to --table-out.`

// newBenchSuiteCommand is `strata bench suite`; the workload parameters
// (--duration, --record-size, --partitions, --acks, --linger,
// --producers, ...) are bench's own flags, in o.
func newBenchSuiteCommand(o *bench.Options) *cobra.Command {
	s := &bench.SuiteOptions{}
	cmd := &cobra.Command{
		Use:   "suite",
		Short: "Start a local cluster, measure the machine's limits, run the standard workloads, write a report",
		Long:  benchSuiteLong,
		Args:  cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			if s.Quick && !cmd.Flags().Changed("duration") {
				o.Duration = bench.QuickDuration
			}
			if err := s.Validate(o); err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			if err := s.CheckStreams(os.Stdout, os.Stderr); err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			return bench.RunSuite(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, s)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&s.Brokers, "brokers", []int{2}, "brokers of the cluster; a list (1,2) runs one cluster per shape")
	f.IntVar(&s.Bookies, "bookies", 3, "bookies of the cluster (3 to 5; every shape)")
	f.BoolVar(&s.Quick, "quick", false, "smoke run: "+bench.QuickDuration.String()+" per workload (unless --duration), short disk probes")
	f.StringVar(&s.Out, "out", "bench-report.json", "JSON report file")
	f.StringVar(&s.TableOut, "table-out", "", "table file (default: --out with .txt for .json)")
	f.StringVar(&s.Dir, "dir", "", "parent of the temporary cluster directory, on the file system to measure (default $TMPDIR)")
	f.StringVar(&s.BinDir, "bin-dir", "", "directory holding the role binaries (default: beside strata)")
	f.StringVar(&s.ProfileDir, "profile", "", "directory for a CPU profile of every broker and bookie per workload (runs the nodes with --enable-pprof) and a CPU and a heap profile of this process")
	f.StringSliceVar(&s.Workloads, "workloads", nil, "run only these workloads (default: all; e2e-half-max, the catch-ups and compact-half-max need produce-max)")
	f.DurationVar(&s.Group.SessionTimeout, "group-session-timeout", bench.DefaultGroupSessionTimeout,
		"the brokers' --group-session-timeout, and the session the classic group members ask for")
	f.DurationVar(&s.Group.HeartbeatInterval, "group-heartbeat-interval", bench.DefaultGroupHeartbeatInterval,
		"the brokers' --group-heartbeat-interval, and the heartbeat of the classic group members")
	f.BoolVar(&s.KeepData, "keep-data", false, "keep the cluster directory (data, logs, cluster.json) after the run")
	return cmd
}
