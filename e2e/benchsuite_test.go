package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/devcluster"
)

// TestBenchSuiteQuick runs `strata bench suite --quick` as `make
// bench-cluster` does, with short workloads: the report has the machine's
// limits and every workload with sane numbers, the Kafka ones (through
// the brokers' Kafka listeners) stated against their gRPC twins, the
// group workloads with their members' reads and every rebalance scenario
// timed, the table is printed, and no process of the cluster it started
// is left running, nor its data.
func TestBenchSuiteQuick(t *testing.T) {
	skipShort(t)
	work := t.TempDir()
	out := filepath.Join(work, "report.json")
	binDir := filepath.Dir(bins["metad"])
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	profiles := filepath.Join(work, "profiles")
	cmd := exec.CommandContext(ctx, bins["strata"], "bench", "suite", "--quick", "--duration", "2s",
		"--bin-dir", binDir, "--dir", work, "--out", out, "--profile", profiles)
	output, err := cmd.CombinedOutput()
	t.Logf("bench suite took %s", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("bench suite: %v\n%s", err, output)
	}
	for _, want := range []string{"WORKLOAD", "catch-up MB/s ÷ produce MB/s", "MB/s Kafka ÷ gRPC", "kip-848 kill → consuming, max", "report: " + out} {
		if !strings.Contains(string(output), want) {
			t.Errorf("output lacks %q:\n%s", want, output)
		}
	}
	rep, err := benchsuite.ReadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(strings.TrimSuffix(out, ".json") + ".txt"); err != nil {
		t.Errorf("no table file: %v", err)
	}

	if len(rep.Limits.Disk) != 2*len(benchsuite.DefaultGroupBytes) || rep.Limits.Loopback.P50Us <= 0 {
		t.Errorf("limits: %+v", rep.Limits)
	}
	for _, p := range rep.Limits.Disk {
		if p.Syncs == 0 || p.SyncP50Ms <= 0 || p.MBPerSec <= 0 {
			t.Errorf("disk probe: %+v", p)
		}
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Brokers != 2 || rep.Runs[0].Error != "" {
		t.Fatalf("runs: %+v", rep.Runs)
	}
	run := rep.Runs[0]
	// The device under --dir is watched for stalls where /proc/diskstats
	// lists it (not, say, on an overlay file system).
	watched := false
	if major, minor, err := benchsuite.DiskDevice(work); err == nil {
		_, _, err = benchsuite.ReadDiskCounters(major, minor)
		watched = err == nil
	}
	for _, name := range benchsuite.Workloads {
		w, ok := run.Workload(name)
		if !ok {
			t.Errorf("no workload %s", name)
			continue
		}
		if d := w.Disk; watched && (d == nil || d.Device == "" || d.Samples < int(w.Seconds*1000/d.SampleMs/4)) {
			t.Errorf("%s: device %+v over %.1f s", name, d, w.Seconds)
		}
		if w.Records <= 0 || w.Bytes <= 0 || w.MBPerSec <= 0 || w.Seconds <= 0 || w.Errors != 0 {
			t.Errorf("%s: %+v", name, w)
		}
		if w.CPU.PerRole[devcluster.RoleBroker] <= 0 {
			t.Errorf("%s: CPU %+v", name, w.CPU)
		}
		if benchsuite.IsCatchUp(name) {
			// A quick run's topic fits the brokers' tail caches: the
			// bookies may not be read at all.
			if w.Reads == nil || w.Reads.FetchedBytes <= 0 {
				t.Errorf("%s: reads %+v", name, w.Reads)
			}
		} else {
			if w.CPU.PerRole[devcluster.RoleBookie] <= 0 {
				t.Errorf("%s: CPU %+v", name, w.CPU)
			}
			if l, ok := w.LatencyOf(benchsuite.LatencyPublishAck); !ok || l.Count == 0 || l.P50 <= 0 {
				t.Errorf("%s: publish->ack %+v", name, l)
			}
			if w.Journal == nil || w.Journal.Groups <= 0 || w.Journal.BytesPerGroup <= 0 {
				t.Errorf("%s: journal %+v", name, w.Journal)
			}
		}
	}
	// The compaction workload saw its passes (one per partition of each
	// source it compacted, in at least one cycle) through the brokers'
	// metrics, and compared each cycle with the window before it.
	if w, ok := run.Workload(benchsuite.WorkloadCompact); ok {
		if c := w.Compaction; c == nil || c.Cycles < 1 || c.Passes < 2*c.Cycles || len(c.CycleP99Ratios) != c.Cycles ||
			c.BytesIn <= 0 || c.BytesOut <= 0 || c.MBPerSecPerPass <= 0 || len(c.Before) == 0 {
			t.Errorf("%s: compaction %+v", w.Name, c)
		}
		// The nodes' latencies were read at every phase change; a control
		// cycle (when one fitted) was measured like a compacting one.
		if c := w.Compaction; c != nil {
			if c.NodesBefore == nil || c.NodesBefore.Appends <= 0 || c.NodesCompacting == nil || c.NodesCompacting.Reads <= 0 {
				t.Errorf("%s: node latencies without compaction %+v, compacting %+v", w.Name, c.NodesBefore, c.NodesCompacting)
			}
			if (c.ControlCycles > 0) != (len(c.Control) > 0 && c.NodesControl != nil) {
				t.Errorf("%s: %d control cycles, latency %+v, nodes %+v", w.Name, c.ControlCycles, c.Control, c.NodesControl)
			}
			if _, _, ok := c.ExtraCPU(); (c.ControlCycles > 0) != ok || (ok && c.CPUPerRoleControl[devcluster.RoleBroker] <= 0) {
				t.Errorf("%s: %d control cycles over %.2f s, CPU %+v", w.Name, c.ControlCycles, c.ControlSeconds, c.CPUPerRoleControl)
			}
			// Each side's stalls add up to no more than the load's.
			if watched {
				if c.StallsBefore == nil || c.StallsCompacting == nil || c.StallsControl == nil ||
					c.StallsBefore.Count+c.StallsCompacting.Count+c.StallsControl.Count > w.Disk.Stalls.Count {
					t.Errorf("%s: device stalls %+v, without compaction %+v, compacting %+v, control %+v",
						w.Name, w.Disk, c.StallsBefore, c.StallsCompacting, c.StallsControl)
				}
			}
		}
	}
	// --profile: a CPU profile per node and workload, and for the
	// compaction workload the flight traces of every broker, bookie and
	// the client at the end of its first cycle, with the timeline of the
	// acknowledgements.
	if w, ok := run.Workload(benchsuite.WorkloadCompact); ok {
		var traces, timelines int
		for _, f := range w.Profiles {
			switch {
			case strings.Contains(f, "-cycle1-compacting-") && strings.HasSuffix(f, ".trace"):
				b, err := os.ReadFile(f)
				if err != nil || !strings.HasPrefix(string(b), "go 1.") {
					t.Errorf("%s: not an execution trace (%v)", f, err)
				}
				traces++
			case strings.HasSuffix(f, "-acks.tsv"):
				if b, err := os.ReadFile(f); err != nil || strings.Count(string(b), "\n") < 100 {
					t.Errorf("%s: %d bytes (%v), want a line per 10 ms", f, len(b), err)
				}
				timelines++
			}
		}
		if traces != 2+3+1 || timelines != 1 {
			t.Errorf("%s: %d flight traces of the first cycle, %d timelines in %v; want 6 and 1", w.Name, traces, timelines, w.Profiles)
		}
	}
	checkGroupWorkloads(t, run)
	if len(benchsuite.Ratios(rep.Limits, run)) == 0 {
		t.Error("no ratios")
	}
	// Every Kafka workload is stated against its gRPC twin: throughput
	// and CPU of produce-max, p99 at 5,000 records/s, catch-up's rate.
	kafka := map[string]bool{}
	for _, x := range benchsuite.KafkaRatios(run) {
		kafka[x.Workload+"/"+x.Metric] = x.Value > 0
	}
	for _, want := range []string{benchsuite.WorkloadKafkaProduce + "/MB/s Kafka ÷ gRPC", benchsuite.WorkloadKafkaProduce + "/CPU brokers+bookies Kafka ÷ gRPC",
		benchsuite.WorkloadKafkaE2E5k + "/pub->ack p99 Kafka ÷ gRPC", benchsuite.WorkloadKafkaCatchUp + "/MB/s Kafka ÷ gRPC",
		benchsuite.WorkloadKafkaGroupCatchUp + "/MB/s Kafka ÷ gRPC"} {
		if !kafka[want] {
			t.Errorf("no Kafka ratio %s (have %v)", want, kafka)
		}
	}

	// Every node it started has stopped; its cluster directory is gone.
	if len(run.Nodes) != 8 {
		t.Errorf("nodes: %+v", run.Nodes)
	}
	for _, n := range run.Nodes {
		node := devcluster.Node{Name: n.Name, PID: n.PID, Bin: filepath.Join(binDir, n.Role)}
		if err := devcluster.Check(node); err == nil {
			t.Errorf("%s (pid %d) still runs", n.Name, n.PID)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(work, "strata-bench-*")); len(left) != 0 {
		t.Errorf("cluster directory left: %v", left)
	}
}

// checkGroupWorkloads: each group catch-up read with its members (CPU
// per GB stated per process), and group-rebalance timed every scenario
// once per group, within its wait, a clean leave within the session, a
// member cut off no sooner than its session allows.
func checkGroupWorkloads(t *testing.T, run benchsuite.Run) {
	t.Helper()
	for _, name := range []string{benchsuite.WorkloadGroupCatchUp, benchsuite.WorkloadKafkaGroupCatchUp} {
		w, ok := run.Workload(name)
		if !ok {
			continue // reported above
		}
		if g := w.Group; g == nil || g.Members != benchsuite.GroupMembers || g.JoinSeconds <= 0 || g.Assignments < 1 {
			t.Errorf("%s: group %+v", name, g)
		}
		if w.CPU.PerGBByProcess[benchsuite.RoleClient] <= 0 || len(w.CPU.PerGBByProcess) != len(run.Nodes)+1 {
			t.Errorf("%s: CPU per GB per process %v", name, w.CPU.PerGBByProcess)
		}
	}
	w, ok := run.Workload(benchsuite.WorkloadGroupRebalance)
	if !ok {
		return
	}
	r := w.Rebalance
	if r == nil || len(r.Scenarios) != 4 || r.Repeats < 1 {
		t.Fatalf("%s: %+v", w.Name, r)
	}
	for _, s := range r.Scenarios {
		if len(s.SamplesMs) != r.Repeats || s.TimedOut != 0 || s.MedianMs <= 0 || s.MaxMs < s.MedianMs {
			t.Errorf("%s %s: %+v", s.Protocol, s.Event, s)
			continue
		}
		for _, ms := range s.SamplesMs {
			if s.Event == benchsuite.EventLeave && ms >= s.SessionTimeoutMs ||
				s.Event == benchsuite.EventKill && ms < s.SessionTimeoutMs-2*s.HeartbeatIntervalMs {
				t.Errorf("%s %s: %.0f ms with a %.0f ms session", s.Protocol, s.Event, ms, s.SessionTimeoutMs)
			}
		}
	}
}

// TestBenchSuiteInterrupt: Ctrl-C in the middle of a workload stops every
// process of the cluster the suite started, and the report says why it is
// short.
func TestBenchSuiteInterrupt(t *testing.T) {
	skipShort(t)
	work := t.TempDir()
	out := filepath.Join(work, "report.json")
	cmd := exec.Command(bins["strata"], "bench", "suite", "--quick", "--duration", "30s", "--keep-data",
		"--bin-dir", filepath.Dir(bins["metad"]), "--dir", work, "--out", out)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var seen []string
	deadline := time.After(90 * time.Second)
	for started := false; !started; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("bench suite exited before its first workload:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			// A progress line of produce-max: the cluster is up and loaded.
			started = strings.Contains(l, "records/s") && strings.Contains(strings.Join(seen, "\n"), "bench suite: produce-max")
		case <-deadline:
			t.Fatalf("no workload within 90s:\n%s", strings.Join(seen, "\n"))
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	select {
	case err := <-exited:
		if err == nil {
			t.Error("an interrupted suite exited 0")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("bench suite still runs 60s after SIGINT")
	}
	dirs, _ := filepath.Glob(filepath.Join(work, "strata-bench-*", "cluster-*"))
	if len(dirs) != 1 {
		t.Fatalf("cluster directories: %v", dirs)
	}
	st, err := devcluster.LoadState(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if devcluster.Check(n) == nil {
			t.Errorf("%s (pid %d) still runs after Ctrl-C", n.Name, n.PID)
		}
	}
	rep, err := benchsuite.ReadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 1 || !strings.Contains(rep.Runs[0].Error, "canceled") {
		t.Errorf("report runs: %+v", rep.Runs)
	}
}
