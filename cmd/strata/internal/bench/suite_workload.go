package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/internal/ctxtime"
)

// Bounds of a suite workload's steps.
const (
	workloadSetupTimeout = 30 * time.Second
	workloadOwnersWait   = 10 * time.Second
	scrapeTimeout        = 5 * time.Second
	// catchUpSlack: catch-up may read for twice produce-max's duration
	// plus this.
	catchUpSlack = 10 * time.Second
)

// suiteRunner runs the suite's workloads on one cluster.
type suiteRunner struct {
	progress io.Writer
	base     Options // bench's flags
	client   *client.Client
	// kafka: the brokers' Kafka listeners, the Kafka workloads' seeds.
	kafka  []string
	nodes  []devcluster.Node
	prefix string // topic prefix
	dir    string // the cluster's data (spaceFor)
	// profileDir: where CPU profiles of the brokers and bookies go ("":
	// none).
	profileDir string
	quick      bool // --quick: smaller sources
	// only says whether a workload is to run (--workloads).
	only func(name string) bool
	// group: the group workloads' session timeout and heartbeat
	// interval, the brokers' too.
	group GroupSettings
}

// workloads runs every workload of benchsuite.Workloads in order,
// appending each to run.
func (sr *suiteRunner) workloads(ctx context.Context, run *benchsuite.Run) error {
	for _, name := range benchsuite.Workloads {
		if sr.only != nil && !sr.only(name) {
			continue
		}
		if _, o, err := planWorkload(sr.base, sr.prefix, name, *run); err == nil {
			if err := spaceFor(sr.dir, name, o, *run, sr.quick); err != nil {
				return err
			}
		}
		w, err := sr.workload(ctx, name, *run)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		run.Workloads = append(run.Workloads, w)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// planWorkload returns the mode and options of the named workload on
// top of base (done is what ran before on this cluster: e2e-half-max
// takes its rate from produce-max).
func planWorkload(base Options, prefix, name string, done benchsuite.Run) (string, Options, error) {
	o := base
	o.Rate = 0
	mode := ModeProduce
	o.Topic = prefix + "-" + name
	switch name {
	case benchsuite.WorkloadE2E5k, benchsuite.WorkloadKafkaE2E5k, benchsuite.WorkloadE2E25k, benchsuite.WorkloadE2E50k:
		mode = ModeE2E
		o.Rate, _ = benchsuite.FixedRate(name)
	case benchsuite.WorkloadE2EHalf, benchsuite.WorkloadCompact:
		mode = ModeE2E
		if name == benchsuite.WorkloadCompact {
			// The compaction targets' load: the broker serving produce
			// at half its maximum (no consumer tailing it).
			mode = ModeProduce
			o.Duration = compactLoad(base.Duration)
		}
		p, ok := done.Workload(benchsuite.WorkloadProduce)
		if !ok || p.RecordsPerSec <= 0 {
			return "", Options{}, fmt.Errorf("no %s rate to take half of", benchsuite.WorkloadProduce)
		}
		o.Rate = max(1, math.Round(benchsuite.HalfMaxRateFraction*p.RecordsPerSec))
	case benchsuite.WorkloadCatchUp, benchsuite.WorkloadKafkaCatchUp, benchsuite.WorkloadGroupCatchUp, benchsuite.WorkloadKafkaGroupCatchUp:
		mode = ModeConsume
		o.Topic = prefix + "-" + benchsuite.WorkloadProduce
		// The longest to read: reading must not take longer than the
		// writing did, by far.
		o.Duration = 2*base.Duration + catchUpSlack
	case benchsuite.WorkloadProduceBig:
		o.RecordSize = benchsuite.BigRecordBytes
	case benchsuite.WorkloadGroupRebalance:
		o.Rate = RebalanceFeedRate // its feed's
	}
	return mode, o, nil
}

// workload runs the named workload and measures it, with the CPU and
// metrics of the cluster's processes around it.
func (sr *suiteRunner) workload(ctx context.Context, name string, done benchsuite.Run) (benchsuite.Workload, error) {
	mode, o, err := planWorkload(sr.base, sr.prefix, name, done)
	if err != nil {
		return benchsuite.Workload{}, err
	}
	pcfg, err := o.ProducerConfig()
	if err != nil {
		return benchsuite.Workload{}, err
	}
	setupCtx, cancel := context.WithTimeout(ctx, workloadSetupTimeout)
	defer cancel()
	partitions, err := Partitions(setupCtx, sr.client, &o, mode, workloadOwnersWait)
	if err != nil {
		return benchsuite.Workload{}, err
	}
	run := NewRun(mode, o.Topic, partitions)
	fmt.Fprintf(sr.progress, "\nbench suite: %s: topic %s (%d partitions), %s\n", name, o.Topic, partitions, sr.describe(name, mode, o, pcfg))
	var compact *compaction
	if name == benchsuite.WorkloadCompact {
		if compact, err = sr.prepareCompaction(ctx, sr.quick); err != nil {
			return benchsuite.Workload{}, err
		}
	}

	sr.resetPeaks()
	before := sr.sampleCosts(ctx)
	profiles := sr.profile(ctx, name, sr.base.Duration)
	disk := sr.watchDisk(ctx, run)
	if compact != nil {
		compact.start(ctx, run, o.Duration)
	}
	fill, err := sr.execute(ctx, name, &o, pcfg, run)
	if err != nil {
		disk()
		profiles()
		return benchsuite.Workload{}, err
	}
	elapsed := run.Elapsed()
	device, stalls := disk()
	buffers := pcfg.MaxBufferedBytes
	if buffers <= 0 {
		buffers = client.DefaultMaxBufferedBytes
	}
	memory := sr.peaks(int64(o.Producers) * buffers)
	after := sr.sampleCosts(ctx)
	files := profiles()

	w := workloadResult(name, &o, Summarize(run, elapsed))
	sr.fillCosts(&w, before, after, elapsed)
	w.Profiles = files
	w.Memory = memory
	w.Disk = device
	fill(&w)
	if compact != nil {
		if err := compact.finish(ctx, run, &w, stalls); err != nil {
			return w, fmt.Errorf("compaction: %w", err)
		}
	}
	fmt.Fprintf(sr.progress, "bench suite: %s: %.0f records/s, %.2f MB/s, %d errors; CPU brokers+bookies %.2f core-s/GB; machine CPU %.0f%% busy\n",
		name, w.RecordsPerSec, w.MBPerSec, w.Errors, w.CPU.PerGBBrokersBookies, 100*w.CPU.HostBusy)
	return w, nil
}

// costSample is what a workload's costs are measured from, taken before
// and after it: the nodes' CPU, the machine's, the nodes' metrics and the
// load generator's heap objects.
type costSample struct {
	cpu              map[string]float64
	host             benchsuite.HostTimes
	hostErr          error
	bookies, brokers []benchsuite.Samples
	objects          float64
}

func (sr *suiteRunner) sampleCosts(ctx context.Context) costSample {
	s := costSample{cpu: sr.cpu()}
	s.host, s.hostErr = benchsuite.ReadHostTimes()
	s.bookies, s.brokers = sr.scrape(ctx, devcluster.RoleBookie), sr.scrape(ctx, devcluster.RoleBroker)
	s.objects = benchsuite.HeapObjects()
	return s
}

// fillCosts sets w's CPU (per process, per GB, per entry, the machine's
// busy share), journal, reads and allocations from the samples around it.
func (sr *suiteRunner) fillCosts(w *benchsuite.Workload, before, after costSample, elapsed time.Duration) {
	w.CPU = CPUDelta(before.cpu, after.cpu, sr.nodes)
	w.CPU.FillPerGB(w.Bytes)
	if before.hostErr == nil && after.hostErr == nil {
		w.CPU.HostBusy = benchsuite.BusyFraction(before.host, after.host)
	}
	w.Journal = benchsuite.JournalDelta(before.bookies, after.bookies, elapsed.Seconds())
	w.Reads = benchsuite.ReadsDelta(before.brokers, after.brokers)
	scrapes := append(nodeScrapes(sr.nodes, devcluster.RoleBroker, before.brokers, after.brokers),
		nodeScrapes(sr.nodes, devcluster.RoleBookie, before.bookies, after.bookies)...)
	entries := benchsuite.EntriesDelta(scrapes)
	w.CPU.Entries = entries
	if !benchsuite.WritesEntries(w.Name) {
		entries = nil // a read's costs are not stated per entry written
	}
	w.CPU.FillPerEntry(entries, scrapes)
	w.Allocs = benchsuite.AllocsDelta(scrapes, entries, after.objects-before.objects, w.Records)
}

// describe is the named workload's parameters in a line: o's, and for a
// Kafka workload the client and the linger it runs with.
func (sr *suiteRunner) describe(name, mode string, o Options, pcfg client.ProducerConfig) string {
	groups := fmt.Sprintf("session %s, heartbeat %s", sr.group.SessionTimeout, sr.group.HeartbeatInterval)
	switch name {
	case benchsuite.WorkloadGroupCatchUp:
		return fmt.Sprintf("%d Strata group consumers (KIP-848, %s), %s", benchsuite.GroupMembers, groups, o.Describe(mode, pcfg))
	case benchsuite.WorkloadKafkaGroupCatchUp:
		return fmt.Sprintf("%d franz-go members (classic cooperative-sticky, %s), %s", benchsuite.GroupMembers, groups, o.Describe(mode, pcfg))
	case benchsuite.WorkloadGroupRebalance:
		return fmt.Sprintf("%d groups per scenario of %d franz-go members, %s; fed %.0f records/s", sr.rebalanceRepeats(),
			benchsuite.GroupMembers, groups, RebalanceFeedRate)
	}
	if _, kafka := benchsuite.KafkaTwin(name); kafka {
		o.Linger = 0 // kafkaProducerOpts
		return "over Kafka with franz-go, " + o.Describe(mode, pcfg)
	}
	return o.Describe(mode, pcfg)
}

// execute runs the named workload's load: a group workload's, over
// Kafka for a Kafka workload, else with the Strata client. fill adds
// what the load measured besides its Summary to the workload's result.
func (sr *suiteRunner) execute(ctx context.Context, name string, o *Options, pcfg client.ProducerConfig, run *Run) (fill func(*benchsuite.Workload), err error) {
	fill = func(*benchsuite.Workload) {}
	group := sr.prefix + "-" + name
	switch name {
	case benchsuite.WorkloadGroupCatchUp:
		g, err := GroupConsume(ctx, sr.progress, sr.client, devcluster.Endpoints(sr.nodes, devcluster.RoleBroker), group, sr.group, o, run)
		return func(w *benchsuite.Workload) { w.Group = g }, err
	case benchsuite.WorkloadKafkaGroupCatchUp:
		g, err := KafkaGroupConsume(ctx, sr.progress, sr.kafka, group, sr.group, o, run)
		return func(w *benchsuite.Workload) { w.Group = g }, err
	case benchsuite.WorkloadGroupRebalance:
		r, err := GroupRebalance(ctx, sr.progress, sr.client, sr.kafka, sr.group, sr.rebalanceRepeats(), o, run)
		return func(w *benchsuite.Workload) { w.Rebalance = r }, err
	}
	if _, kafka := benchsuite.KafkaTwin(name); kafka {
		return fill, ExecuteKafka(ctx, sr.progress, sr.kafka, o, run)
	}
	return fill, Execute(ctx, sr.progress, sr.client, o, pcfg, run)
}

// rebalanceRepeats is how often group-rebalance measures each scenario.
func (sr *suiteRunner) rebalanceRepeats() int {
	if sr.quick {
		return rebalanceQuickRepeats
	}
	return rebalanceRepeats
}

// workloadResult is the report's entry for a run's summary.
func workloadResult(name string, o *Options, sum Summary) benchsuite.Workload {
	w := benchsuite.Workload{Name: name, Topic: o.Topic, RecordBytes: o.RecordSize, TargetRate: o.Rate, Seconds: sum.Seconds,
		Records: sum.Records, Bytes: sum.Bytes, RecordsPerSec: sum.RecordsPerSec, MBPerSec: sum.MBPerSec, Errors: sum.Errors,
		FirstError: sum.FirstError}
	w.Latency = append(w.Latency, sum.Latency...)
	return w
}

// profile starts taking a CPU profile of d of every broker and bookie
// into sr.profileDir, named <prefix>-<workload>-<node>.pprof, and returns
// the function that waits for them and lists the files written (none
// without a profile directory). A profile that fails is a warning: the
// workload's figures do not depend on it.
func (sr *suiteRunner) profile(ctx context.Context, workload string, d time.Duration) (wait func() []string) {
	if sr.profileDir == "" {
		return func() []string { return nil }
	}
	var mu sync.Mutex
	var files []string
	var wg sync.WaitGroup
	for _, n := range sr.nodes {
		if n.Role != devcluster.RoleBroker && n.Role != devcluster.RoleBookie {
			continue
		}
		path := filepath.Join(sr.profileDir, fmt.Sprintf("%s-%s-%s.pprof", sr.prefix, workload, n.Name))
		wg.Go(func() {
			if err := benchsuite.CPUProfile(ctx, n.Admin, d, path); err != nil {
				fmt.Fprintf(sr.progress, "bench suite: warning: %s: %s\n", n.Name, strings.TrimPrefix(err.Error(), "benchsuite: "))
				return
			}
			mu.Lock()
			files = append(files, path)
			mu.Unlock()
		})
	}
	// This process's CPU over d (the producers and consumers: the
	// consuming client of catch-up spends about what the broker does).
	self := filepath.Join(sr.profileDir, fmt.Sprintf("%s-%s-client.pprof", sr.prefix, workload))
	wg.Go(func() {
		if err := cpuProfileSelf(ctx, d, self); err != nil {
			fmt.Fprintf(sr.progress, "bench suite: warning: client CPU profile: %v\n", err)
			return
		}
		mu.Lock()
		files = append(files, self)
		mu.Unlock()
	})
	// And this process's heap (the producers and consumers) at the end of
	// d: what the client's peak RSS is made of.
	heap := filepath.Join(sr.profileDir, fmt.Sprintf("%s-%s-client.heap.pprof", sr.prefix, workload))
	wg.Go(func() {
		if ctxtime.Sleep(ctx, d) != nil {
			return
		}
		if err := writeHeapProfile(heap); err != nil {
			fmt.Fprintf(sr.progress, "bench suite: warning: client heap profile: %v\n", err)
			return
		}
		mu.Lock()
		files = append(files, heap)
		mu.Unlock()
	})
	return func() []string {
		wg.Wait()
		slices.Sort(files)
		return files
	}
}

// cpu samples every node's CPU seconds and this process's (key "").
// A node that cannot be read (exited) is left out.
func (sr *suiteRunner) cpu() map[string]float64 {
	out := map[string]float64{}
	for _, n := range sr.nodes {
		if s, err := benchsuite.CPUSeconds(n.PID); err == nil {
			out[n.Name] = s
		}
	}
	if s, err := benchsuite.CPUSeconds(os.Getpid()); err == nil {
		out[""] = s
	}
	return out
}

// The memory budgets the suite's nodes run with: the brokers'
// --tail-cache-bytes default and the bookies' Pebble block cache (a test
// holds them to broker.DefaultConfig and index.DefaultCacheBytes, which
// the strata binary must not link: it carries no storage engine).
const (
	brokerTailCacheBytes   = 256 << 20
	bookiePebbleCacheBytes = 64 << 20
)

// resetPeaks starts a new peak RSS for every node and this process; a
// process whose peak cannot be reset is measured from its start.
func (sr *suiteRunner) resetPeaks() {
	for _, pid := range sr.pids() {
		_ = benchsuite.ResetPeakRSS(pid)
	}
}

// peaks reads every node's and this process's peak RSS since resetPeaks;
// clientBuffers is what the workload's producers may buffer.
func (sr *suiteRunner) peaks(clientBuffers int64) *benchsuite.Memory {
	m := &benchsuite.Memory{PeakRSS: map[string]int64{}, PeakRSSByRole: map[string]int64{},
		BrokerTailCacheBytes: brokerTailCacheBytes, BookiePebbleCacheBytes: bookiePebbleCacheBytes, ClientBufferBytes: clientBuffers}
	add := func(name, role string, pid int) {
		if b, err := benchsuite.PeakRSS(pid); err == nil {
			m.PeakRSS[name] = b
			m.PeakRSSByRole[role] = max(m.PeakRSSByRole[role], b)
		}
	}
	for _, n := range sr.nodes {
		add(n.Name, n.Role, n.PID)
	}
	add(benchsuite.RoleClient, benchsuite.RoleClient, os.Getpid())
	return m
}

// pids are the nodes' processes and this one.
func (sr *suiteRunner) pids() []int {
	out := []int{os.Getpid()}
	for _, n := range sr.nodes {
		out = append(out, n.PID)
	}
	return out
}

// CPUDelta is the CPU seconds each node, each role and this process
// (role client) used between two samples of suiteRunner.cpu; a node
// missing from either is left out.
func CPUDelta(before, after map[string]float64, nodes []devcluster.Node) benchsuite.CPU {
	c := benchsuite.CPU{PerProcess: map[string]float64{}, PerRole: map[string]float64{}}
	for _, n := range nodes {
		b, okB := before[n.Name]
		a, okA := after[n.Name]
		if !okA || !okB {
			continue
		}
		c.PerProcess[n.Name] = centis(a - b)
		c.PerRole[n.Role] = centis(c.PerRole[n.Role] + a - b)
	}
	if a, ok := after[""]; ok {
		c.PerRole[benchsuite.RoleClient] = centis(a - before[""])
	}
	return c
}

// centis rounds CPU seconds to the clock tick (1/100 s), dropping the
// float noise of subtracting tick counts.
func centis(s float64) float64 {
	return math.Round(s*benchsuite.ClockTicks) / benchsuite.ClockTicks
}

// scrape reads the /metrics of every node of role (nil entries for those
// that do not answer).
func (sr *suiteRunner) scrape(ctx context.Context, role string) []benchsuite.Samples {
	var out []benchsuite.Samples
	for _, n := range sr.nodes {
		if n.Role != role {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		s, err := benchsuite.Scrape(sctx, n.Admin)
		cancel()
		if err != nil {
			fmt.Fprintf(sr.progress, "bench suite: warning: %s: %s\n", n.Name, strings.TrimPrefix(err.Error(), "benchsuite: "))
		}
		out = append(out, s)
	}
	return out
}

// nodeScrapes pairs the scrapes of the nodes of role, before and after a
// workload (sr.scrape's, in the nodes' order), with their nodes.
func nodeScrapes(nodes []devcluster.Node, role string, before, after []benchsuite.Samples) []benchsuite.NodeScrape {
	var out []benchsuite.NodeScrape
	i := 0
	for _, n := range nodes {
		if n.Role != role {
			continue
		}
		if i < len(before) && i < len(after) {
			out = append(out, benchsuite.NodeScrape{Name: n.Name, Role: n.Role, Before: before[i], After: after[i]})
		}
		i++
	}
	return out
}

// cpuProfileSelf writes a CPU profile of this process over d to path
// (an error if another one is being taken, or ctx ends first).
func cpuProfileSelf(ctx context.Context, d time.Duration, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	slept := ctxtime.Sleep(ctx, d)
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		return err
	}
	return slept
}

// writeHeapProfile writes this process's heap profile to path.
func writeHeapProfile(path string) error {
	return writeFile(path, func(w io.Writer) error { return pprof.Lookup("heap").WriteTo(w, 0) })
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Close())
}
