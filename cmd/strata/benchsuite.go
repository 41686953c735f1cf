package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/benchsuite"
	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/internal/devcluster"
)

// benchSuiteOptions are the flags of `strata bench suite`; the workload
// parameters (--duration, --record-size, --partitions, --acks, --linger,
// --producers, ...) are bench's own flags.
type benchSuiteOptions struct {
	brokers  []int
	quick    bool
	out      string
	tableOut string
	dir      string
	binDir   string
	keepData bool
}

// quickDuration is --quick's workload duration (unless --duration is
// given) and quickProbe its disk probe duration.
const (
	quickDuration = 3 * time.Second
	quickProbe    = 300 * time.Millisecond
)

func newBenchSuiteCommand(o *benchOptions) *cobra.Command {
	s := &benchSuiteOptions{}
	cmd := &cobra.Command{
		Use:   "suite",
		Short: "Start a local cluster, measure the machine's limits, run the standard workloads, write a report",
		Long: `Runs the standard benchmark on a local cluster it starts itself (every role a
separate process, as 'strata dev': 3 metad, 3 bookies, --brokers brokers, data
in a temporary directory under --dir, ports chosen free) and stops it at the
end, on error and on Ctrl-C.

First it measures the machine's limits in the file system of the bookies'
data: fdatasync latency and combined write bandwidth of one and of three
concurrent journal-like files, at group sizes from 4 KiB to 4 MiB (the bookie
journal groups whatever is queued, up to 4 MiB, per fdatasync), and the
loopback TCP round trip. Then, per cluster shape, the workloads:

  produce-max      produce as fast as possible (--record-size, default 1 KiB)
  e2e-5000         open-loop e2e at 5,000 records/s
  e2e-half-max     open-loop e2e at 50% of produce-max's records/s
  catch-up         read produce-max's topic from the earliest offset
  produce-max-64k  produce as fast as possible, 64 KiB records

It records CPU seconds per process (/proc/PID/stat) and the bookies' journal
group sizes (their /metrics) around each workload, writes a JSON report to
--out and a table (each result as a ratio to the limit that binds it, next to
issue 16's targets) to stdout and to --table-out.`,
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			if s.quick && !cmd.Flags().Changed("duration") {
				o.duration = quickDuration
			}
			return runBenchSuite(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, s)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&s.brokers, "brokers", []int{2}, "brokers of the cluster; a list (1,2) runs one cluster per shape")
	f.BoolVar(&s.quick, "quick", false, "smoke run: "+quickDuration.String()+" per workload (unless --duration), short disk probes")
	f.StringVar(&s.out, "out", "bench-report.json", "JSON report file")
	f.StringVar(&s.tableOut, "table-out", "", "table file (default: --out with .txt for .json)")
	f.StringVar(&s.dir, "dir", "", "parent of the temporary cluster directory, on the file system to measure (default $TMPDIR)")
	f.StringVar(&s.binDir, "bin-dir", "", "directory holding the role binaries (default: beside strata)")
	f.BoolVar(&s.keepData, "keep-data", false, "keep the cluster directory (data, logs, cluster.json) after the run")
	return cmd
}

func (s *benchSuiteOptions) validate(o *benchOptions) error {
	var errs []error
	if len(s.brokers) == 0 {
		errs = append(errs, errors.New("--brokers: give at least one shape"))
	}
	for _, n := range s.brokers {
		if n < 1 || n > 20 {
			errs = append(errs, fmt.Errorf("--brokers %d: want 1 to 20", n))
		}
	}
	if s.out == "" {
		errs = append(errs, errors.New("--out is required"))
	}
	if err := o.validate("e2e"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func runBenchSuite(ctx context.Context, stdout, progress io.Writer, o *benchOptions, s *benchSuiteOptions) error {
	if err := s.validate(o); err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	if s.binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		s.binDir = filepath.Dir(exe)
	}
	dir, err := os.MkdirTemp(s.dir, "strata-bench-")
	if err != nil {
		return err
	}
	if s.keepData {
		fmt.Fprintf(progress, "bench suite: cluster data in %s (kept)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	rep := &benchsuite.Report{Version: benchsuite.ReportVersion, StartedAt: time.Now().UTC(), Host: hostInfo(),
		Settings: benchsuite.Settings{DurationSeconds: o.duration.Seconds(), RecordBytes: o.recordSize, Partitions: o.partitions,
			Acks: o.acks, LingerMs: float64(o.linger) / 1e6, Producers: o.producers, Quick: s.quick}}
	if rep.Host.LoadAverage != "" {
		rep.Note = "load average at start " + rep.Host.LoadAverage + " on " + fmt.Sprint(rep.Host.CPUs) + " CPUs"
	}
	start := time.Now()

	probe := 2 * time.Second
	trips := 5000
	if s.quick {
		probe, trips = quickProbe, 500
	}
	fmt.Fprintf(progress, "bench suite: measuring the disk in %s (%s per probe) and loopback\n", dir, probe)
	rep.Limits.Dir = dir
	if rep.Limits.Disk, err = benchsuite.MeasureDisk(ctx, benchsuite.DiskConfig{Dir: dir, Duration: probe}); err != nil {
		return err
	}
	if rep.Limits.Loopback, err = benchsuite.MeasureLoopback(ctx, trips); err != nil {
		return err
	}

	var runErrs []error
	for _, brokers := range s.brokers {
		run, err := runSuiteShape(ctx, progress, o, s, filepath.Join(dir, fmt.Sprintf("cluster-%dbrokers", brokers)), brokers)
		if err != nil {
			run.Error = err.Error()
			runErrs = append(runErrs, fmt.Errorf("%d broker(s): %w", brokers, err))
		}
		rep.Runs = append(rep.Runs, run)
		if ctx.Err() != nil {
			break
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	if err := writeSuiteReport(stdout, rep, s); err != nil {
		runErrs = append(runErrs, err)
	}
	return errors.Join(runErrs...)
}

func writeSuiteReport(stdout io.Writer, rep *benchsuite.Report, s *benchSuiteOptions) error {
	if err := rep.WriteFile(s.out); err != nil {
		return err
	}
	var table strings.Builder
	if err := rep.Fprint(&table); err != nil {
		return err
	}
	tableOut := s.tableOut
	if tableOut == "" {
		tableOut = strings.TrimSuffix(s.out, ".json") + ".txt"
	}
	if tableOut != s.out {
		if err := os.WriteFile(tableOut, []byte(table.String()), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprint(stdout, table.String())
	fmt.Fprintf(stdout, "\nreport: %s, table: %s\n", s.out, tableOut)
	return nil
}

func hostInfo() benchsuite.Host {
	h := benchsuite.Host{CPUs: runtime.NumCPU()}
	h.Hostname, _ = os.Hostname()
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			h.LoadAverage = strings.Join(f[:3], " ")
		}
	}
	return h
}

// runSuiteShape starts a cluster with the given brokers in dir, runs
// every workload on it and stops it (also on error and when ctx ends).
func runSuiteShape(ctx context.Context, progress io.Writer, o *benchOptions, s *benchSuiteOptions, dir string, brokers int) (benchsuite.Run, error) {
	co := devcluster.DefaultOptions()
	co.Dir, co.BinDir, co.Brokers = dir, s.binDir, brokers
	run := benchsuite.Run{Metad: co.Metad, Bookies: co.Bookies, Brokers: brokers}
	ports, err := benchsuite.FreePorts(co.Host)
	if err != nil {
		return run, err
	}
	co.MetadPort, co.BookiePort, co.BrokerPort = ports.Metad, ports.Bookie, ports.Broker
	// No tiering (and so no MinIO): uploads would add their CPU to the
	// produce path's, and would move produce-max's ledgers to the object
	// store before catch-up reads them from the bookies.
	co.BrokerArgs = []string{"--tier-store="}
	fmt.Fprintf(progress, "bench suite: starting %d metad, %d bookies, %d broker(s) in %s\n", co.Metad, co.Bookies, brokers, dir)
	st, err := devcluster.Up(ctx, co, progress)
	if err != nil {
		return run, err
	}
	defer func() {
		fmt.Fprintf(progress, "bench suite: stopping the cluster\n")
		devcluster.Down(st, 10*time.Second)
	}()
	for _, n := range st.Nodes {
		run.Nodes = append(run.Nodes, benchsuite.Process{Name: n.Name, Role: n.Role, PID: n.PID})
	}
	c, err := client.New(ctx, client.Config{Brokers: devcluster.Endpoints(st.Nodes, devcluster.RoleBroker), ClientID: "strata-bench-suite"})
	if err != nil {
		return run, err
	}
	defer c.Close()
	sr := &suiteRunner{progress: progress, base: *o, client: c, nodes: st.Nodes, prefix: fmt.Sprintf("%s-%db", o.topic, brokers)}
	for _, name := range benchsuite.Workloads {
		w, err := sr.workload(ctx, name, run)
		if err != nil {
			return run, fmt.Errorf("%s: %w", name, err)
		}
		run.Workloads = append(run.Workloads, w)
		if ctx.Err() != nil {
			return run, ctx.Err()
		}
	}
	for _, n := range st.Nodes {
		if err := devcluster.Check(n); err != nil {
			return run, fmt.Errorf("after the workloads: %w", err)
		}
	}
	return run, nil
}
