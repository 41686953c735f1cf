package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/internal/config"
)

// SuiteOptions are `strata bench suite`'s own flags; the workloads take
// their parameters from Options.
type SuiteOptions struct {
	Brokers  []int // one cluster per shape
	Bookies  int   // bookies of every shape's cluster
	Quick    bool
	Out      string // JSON report file
	TableOut string // table file; "" is Out with .txt for .json
	Dir      string // parent of the temporary cluster directory
	BinDir   string // the role binaries; "" is beside this executable
	KeepData bool
	// Workloads, when set, runs only these (in the suite's order).
	Workloads []string
	// ProfileDir, when set, runs the nodes with pprof on and keeps a CPU
	// profile of every broker and bookie per workload there.
	ProfileDir string
	// Group: the brokers' group session timeout and heartbeat interval,
	// which the group workloads' classic members ask for too.
	Group GroupSettings
}

// The suite's group settings by default: what a user who wants fast
// rebalances would choose. 6 s is the shortest session the brokers (and
// Kafka's) accept by default; members heartbeat every 0.5 s, so a leave
// or a removed member is seen within 0.5 s. The brokers' own defaults
// (and franz-go's) are 45 s and 3 s.
const (
	DefaultGroupSessionTimeout    = 6 * time.Second
	DefaultGroupHeartbeatInterval = 500 * time.Millisecond
	// brokerMinSessionTimeout is the brokers' --group-min-session-timeout
	// default: the suite lowers it only for a shorter session.
	brokerMinSessionTimeout = 6 * time.Second
)

// QuickDuration is --quick's workload duration (unless --duration is
// given) and QuickProbe its disk probe duration.
const (
	QuickDuration = 3 * time.Second
	QuickProbe    = 300 * time.Millisecond
)

// Disk and loopback probes of a full run, and the loopback round trips
// of a quick one.
const (
	fullProbe       = 2 * time.Second
	fullRoundTrips  = 5000
	quickRoundTrips = 500
	// stopTimeout bounds stopping a suite's cluster.
	stopTimeout = 10 * time.Second
)

// Validate reports every flag that does not fit (the workloads are e2e
// at most, so o must fit e2e).
func (s *SuiteOptions) Validate(o *Options) error {
	var errs []error
	if len(s.Brokers) == 0 {
		errs = append(errs, errors.New("--brokers: give at least one shape"))
	}
	for _, n := range s.Brokers {
		if n < 1 || n > 20 {
			errs = append(errs, fmt.Errorf("--brokers %d: want 1 to 20", n))
		}
	}
	// 3: an ensemble's; 5: the ports benchsuite.FreePorts reserves.
	if s.Bookies < 3 || s.Bookies > 5 {
		errs = append(errs, fmt.Errorf("--bookies %d: want 3 to 5", s.Bookies))
	}
	errs = append(errs, s.validateWorkloads()...)
	if g := s.Group; g.SessionTimeout < time.Second || g.HeartbeatInterval <= 0 || g.HeartbeatInterval >= g.SessionTimeout {
		errs = append(errs, fmt.Errorf("--group-session-timeout %s, --group-heartbeat-interval %s: want a session of 1s or more and a shorter heartbeat",
			g.SessionTimeout, g.HeartbeatInterval))
	}
	if s.runsKafka() {
		if _, err := kafkaProducerOpts(o); err != nil {
			errs = append(errs, fmt.Errorf("the Kafka workloads: %w", err))
		}
	}
	if s.Out == "" {
		errs = append(errs, errors.New("--out is required"))
	}
	// A flag's value that is itself a flag is a flag given without its
	// value: `--profile --keep-data` would profile into ./--keep-data.
	for _, f := range []struct{ flag, v string }{{"--out", s.Out}, {"--table-out", s.TableOut}, {"--profile", s.ProfileDir}, {"--dir", s.Dir}, {"--bin-dir", s.BinDir}} {
		if strings.HasPrefix(f.v, "-") {
			errs = append(errs, fmt.Errorf("%s %q: looks like a flag, not a path (write %s PATH)", f.flag, f.v, f.flag))
		}
	}
	if err := o.Validate(ModeE2E); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckStreams reports stdout or stderr being --out's or --table-out's
// file (`--out x.json > x.txt`): the suite writes that file whole at the
// end, so the stream's own writes (the table, progress) would be mixed
// into it or overwrite it.
func (s *SuiteOptions) CheckStreams(stdout, stderr *os.File) error {
	var errs []error
	for _, path := range []string{s.Out, s.TableFile()} {
		fi, err := os.Stat(path)
		if err != nil {
			continue // not there yet: no stream is it
		}
		for _, st := range []struct {
			name string
			f    *os.File
		}{{"stdout", stdout}, {"stderr", stderr}} {
			if sfi, err := st.f.Stat(); err == nil && os.SameFile(fi, sfi) {
				errs = append(errs, fmt.Errorf("%s is %s, which the suite writes itself: send %s elsewhere", st.name, path, st.name))
			}
		}
	}
	return errors.Join(errs...)
}

// dependsOnProduce are the workloads that take their rate or topic from
// produce-max's.
var dependsOnProduce = []string{benchsuite.WorkloadE2EHalf, benchsuite.WorkloadCatchUp, benchsuite.WorkloadKafkaCatchUp,
	benchsuite.WorkloadGroupCatchUp, benchsuite.WorkloadKafkaGroupCatchUp, benchsuite.WorkloadCompact}

func (s *SuiteOptions) validateWorkloads() []error {
	var errs []error
	for _, name := range s.Workloads {
		if !slices.Contains(benchsuite.Workloads, name) {
			errs = append(errs, fmt.Errorf("--workloads: unknown workload %q (want some of %s)", name, strings.Join(benchsuite.Workloads, ", ")))
		} else if slices.Contains(dependsOnProduce, name) && !s.runs(benchsuite.WorkloadProduce) {
			errs = append(errs, fmt.Errorf("--workloads: %s needs %s", name, benchsuite.WorkloadProduce))
		}
	}
	return errs
}

// runs says whether the named workload is to run.
func (s *SuiteOptions) runs(name string) bool {
	return len(s.Workloads) == 0 || slices.Contains(s.Workloads, name)
}

// runsKafka says whether a Kafka workload is to run.
func (s *SuiteOptions) runsKafka() bool {
	return slices.ContainsFunc(benchsuite.Workloads, func(name string) bool {
		_, kafka := benchsuite.KafkaTwin(name)
		return kafka && s.runs(name)
	})
}

// RunSuite measures the machine's limits in a temporary directory under
// s.Dir, runs every workload on one cluster per shape in s.Brokers, and
// writes the report to s.Out, the table to s.TableOut and stdout.
// Progress goes to progress. s must be valid (Validate).
func RunSuite(ctx context.Context, stdout, progress io.Writer, o *Options, s *SuiteOptions) error {
	if s.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		s.BinDir = filepath.Dir(exe)
	}
	dir, err := os.MkdirTemp(s.Dir, "strata-bench-")
	if err != nil {
		return err
	}
	if s.KeepData {
		fmt.Fprintf(progress, "bench suite: cluster data in %s (kept)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	rep := newReport(o, s)
	start := time.Now()
	if s.ProfileDir != "" {
		if err := os.MkdirAll(s.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	if err := measureLimits(ctx, progress, rep, dir, s.Quick); err != nil {
		return err
	}
	var runErrs []error
	for _, brokers := range s.Brokers {
		run, err := runShape(ctx, progress, o, s, filepath.Join(dir, fmt.Sprintf("cluster-%dbrokers", brokers)), brokers)
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
	if err := writeReport(stdout, rep, s); err != nil {
		runErrs = append(runErrs, err)
	}
	return errors.Join(runErrs...)
}

func newReport(o *Options, s *SuiteOptions) *benchsuite.Report {
	rep := &benchsuite.Report{Version: benchsuite.ReportVersion, StartedAt: time.Now().UTC(), Host: hostInfo(),
		Settings: benchsuite.Settings{DurationSeconds: o.Duration.Seconds(), RecordBytes: o.RecordSize, Partitions: o.Partitions,
			Acks: o.Acks, LingerMs: float64(o.Linger) / 1e6, Producers: o.Producers, Quick: s.Quick}}
	if rep.Host.LoadAverage != "" {
		rep.Note = "load average at start " + rep.Host.LoadAverage + " on " + fmt.Sprint(rep.Host.CPUs) + " CPUs"
	}
	return rep
}

// measureLimits fills rep.Limits: the disk under dir and the loopback.
func measureLimits(ctx context.Context, progress io.Writer, rep *benchsuite.Report, dir string, quick bool) error {
	probe, trips := fullProbe, fullRoundTrips
	if quick {
		probe, trips = QuickProbe, quickRoundTrips
	}
	fmt.Fprintf(progress, "bench suite: measuring the disk in %s (%s per probe) and loopback\n", dir, probe)
	rep.Limits.Dir = dir
	var err error
	if rep.Limits.Disk, err = benchsuite.MeasureDisk(ctx, benchsuite.DiskConfig{Dir: dir, Duration: probe}); err != nil {
		return err
	}
	// One reader per bookie, as catch-up reads the bookies' journals.
	if rep.Limits.DiskRead, err = benchsuite.ProbeDiskRead(ctx, dir, 3, probe); err != nil {
		return err
	}
	rep.Limits.Loopback, err = benchsuite.MeasureLoopback(ctx, trips)
	return err
}

// TableFile is where the table goes: s.TableOut, or s.Out with .txt for
// .json.
func (s *SuiteOptions) TableFile() string {
	if s.TableOut != "" {
		return s.TableOut
	}
	return strings.TrimSuffix(s.Out, ".json") + ".txt"
}

func writeReport(stdout io.Writer, rep *benchsuite.Report, s *SuiteOptions) error {
	if err := rep.WriteFile(s.Out); err != nil {
		return err
	}
	var table strings.Builder
	if err := rep.Fprint(&table); err != nil {
		return err
	}
	tableOut := s.TableFile()
	if tableOut != s.Out {
		if err := os.WriteFile(tableOut, []byte(table.String()), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprint(stdout, table.String())
	fmt.Fprintf(stdout, "\nreport: %s, table: %s\n", s.Out, tableOut)
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

// runShape starts a cluster with the given brokers in dir, runs every
// workload on it and stops it (also on error and when ctx ends: B4).
func runShape(ctx context.Context, progress io.Writer, o *Options, s *SuiteOptions, dir string, brokers int) (benchsuite.Run, error) {
	co := devcluster.DefaultOptions()
	co.Dir, co.BinDir, co.Brokers, co.Bookies = dir, s.BinDir, brokers, s.Bookies
	run := benchsuite.Run{Metad: co.Metad, Bookies: co.Bookies, Brokers: brokers}
	ports, err := benchsuite.FreePorts(co.Host)
	if err != nil {
		return run, err
	}
	co.MetadPort, co.BookiePort, co.BrokerPort, co.KafkaPort = ports.Metad, ports.Bookie, ports.Broker, ports.Kafka
	// No tiering (and so no MinIO): uploads would add their CPU to the
	// produce path's, and would move produce-max's ledgers to the object
	// store before catch-up reads them from the bookies.
	co.BrokerArgs = append([]string{"--tier-store=", "--compaction-check-interval=" + CompactionCheckInterval.String()}, groupArgs(s.Group)...)
	if s.ProfileDir != "" {
		co.Env = []string{config.EnvPrefix + "_ENABLE_PPROF=true"}
	}
	fmt.Fprintf(progress, "bench suite: starting %d metad, %d bookies, %d broker(s) in %s\n", co.Metad, co.Bookies, brokers, dir)
	// Every broker serves Kafka too, broker i on ports.Kafka+i-1, for the
	// Kafka workloads.
	st, err := devcluster.Up(ctx, co, progress)
	if err != nil {
		return run, err
	}
	kafkaSeeds := strings.Split(devcluster.KafkaBootstrap(st.Nodes), ",")
	defer func() {
		fmt.Fprintf(progress, "bench suite: stopping the cluster\n")
		devcluster.Down(st, stopTimeout)
		// The next shape must not find the disk full of this one's data:
		// one shape writes three copies of every workload's bytes (tens of
		// GB at a few hundred MB/s), and bookies turn read-only at 95%.
		if !s.KeepData {
			if err := os.RemoveAll(dir); err != nil {
				fmt.Fprintf(progress, "bench suite: warning: removing %s: %v\n", dir, err)
			}
		}
	}()
	for _, n := range st.Nodes {
		run.Nodes = append(run.Nodes, benchsuite.Process{Name: n.Name, Role: n.Role, PID: n.PID})
	}
	c, err := client.New(ctx, client.Config{Brokers: devcluster.Endpoints(st.Nodes, devcluster.RoleBroker), ClientID: "strata-bench-suite"})
	if err != nil {
		return run, err
	}
	defer c.Close()
	sr := &suiteRunner{progress: progress, base: *o, client: c, kafka: kafkaSeeds, nodes: st.Nodes, prefix: fmt.Sprintf("%s-%db", o.Topic, brokers), dir: dir,
		profileDir: s.ProfileDir, quick: s.Quick, only: s.runs, group: s.Group}
	if err := sr.warmUp(ctx); err != nil {
		return run, err
	}
	if err := sr.workloads(ctx, &run); err != nil {
		return run, err
	}
	for _, n := range st.Nodes {
		if err := devcluster.Check(n); err != nil {
			return run, fmt.Errorf("after the workloads: %w", err)
		}
	}
	return run, nil
}

// groupArgs are the brokers' flags for the group settings g.
func groupArgs(g GroupSettings) []string {
	return []string{"--group-session-timeout=" + g.SessionTimeout.String(), "--group-heartbeat-interval=" + g.HeartbeatInterval.String(),
		"--group-min-session-timeout=" + min(g.SessionTimeout, brokerMinSessionTimeout).String()}
}
