package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/chaos"
)

// errChaosFound makes the command exit non-zero when the checker found
// records lost, duplicated or reordered (the report says which).
var errChaosFound = errors.New("chaos: the history check failed (see the table)")

func newChaosCommand() *cobra.Command {
	o := chaos.Options{}
	var kinds, binDir string
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run a cluster under randomized faults and check every record (root only)",
		Long: `Run a complete cluster (3 metad, 4 bookies, 3 brokers, MinIO), every node in
a network namespace of its own and every bookie on a file system of its own,
under a workload of idempotent writers (gRPC and Kafka protocol), tail
readers and a consumer group, while a seeded nemesis injects overlapping
faults: kill -9 and restart, pauses shorter and longer than a lease, clock
jumps, network partitions of every shape, packet loss, full disks, fsync
stalls, I/O errors and an unavailable object store. Then it heals everything, reads every
partition back and checks the history: every acknowledged record read back
once at its offset in per-key order, nothing a writer was told failed,
no partition delivered to two members of one generation, no commit moving
back, the latest value of each key of the compacted topic kept.

Prints each fault as it starts and ends, then a table (faults by kind,
records acknowledged, lost, duplicated, reordered, the longest time a
partition could not be written) and, after a failure, the line that replays
the same schedule. Exits non-zero when anything was lost, duplicated or
reordered. Fault kinds: ` + strings.Join(chaos.Kinds(), ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if binDir == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				binDir = filepath.Dir(exe)
			}
			o.BinDir, o.MinIO, o.Out = binDir, devcluster.FindMinIO(binDir, os.Getenv), cmd.OutOrStdout()
			if kinds != "" {
				o.Kinds = strings.Split(kinds, ",")
			}
			if o.Dir == "" {
				dir, err := os.MkdirTemp("", "strata-chaos")
				if err != nil {
					return err
				}
				o.Dir = dir
			}
			report, err := chaos.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if !report.OK() {
				return errChaosFound
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&o.Seed, "seed", 1, "seed of the fault schedule (kinds, targets, durations)")
	f.DurationVar(&o.Duration, "duration", 0, "how long to inject faults (at least 10s)")
	f.StringVar(&kinds, "faults", "", "comma-separated fault kinds (default: all)")
	f.StringVar(&o.Report, "report", "", "write the report as JSON to this file")
	f.StringVar(&o.Dir, "dir", "", "directory for the nodes' data and logs (default: a new temporary one, removed after a clean run)")
	f.BoolVar(&o.Keep, "keep", false, "keep --dir after a clean run")
	f.StringVar(&o.Name, "name", "sc", "prefix of the network namespaces and links the run creates")
	f.StringVar(&binDir, "bin-dir", "", "directory holding the role binaries (default: beside strata)")
	_ = cmd.MarkFlagRequired("duration")
	return cmd
}
