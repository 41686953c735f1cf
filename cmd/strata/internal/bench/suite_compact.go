package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
	"github.com/strata-log/strata/internal/admin"
	"github.com/strata-log/strata/internal/ctxtime"
)

// WorkloadCompact's source topics: keyed records written before the load,
// one topic per cycle. The load alternates between windows without
// compaction and cycles: a compacting cycle switches one source to
// cleanup.policy=compact, and the control cycle after it lasts as long
// with nothing switched. Interleaving them, rather than comparing one
// window before a switch with one after it, lets every side see the same
// minutes of this machine, whose speed moves by 2x within a run; the
// control cycles, measured like the compacting ones, show what that
// comparison reads when compaction changes nothing (an A/A test).
const (
	compactPartitions = 2
	compactKeys       = 2000
	// compactCycles sources are compacted, one per cycle (a full run, and
	// --quick).
	compactCycles      = 3
	compactQuickCycles = 2
	// Each source's size and segments: a full run (128 MB per partition,
	// within the brokers' --compaction-buffer-bytes, so a pass reads it
	// once), and --quick.
	compactSourceBytes      = 256e6
	compactSegmentBytes     = 8 << 20
	compactQuickSourceBytes = 8e6
	compactQuickSegment     = 1 << 20
	// compactSettle: after a cycle's passes are swapped in, this long is
	// still counted as compacting (the deletes of the passes' inputs and
	// the bookies' garbage collection they start).
	compactSettle = time.Second
	// compactWarmup: the load's first seconds count on neither side (at
	// most half the first window without compaction): connections,
	// metadata and the first batches of the load's topic.
	compactWarmup = 2 * time.Second
	// compactPoll is how often the brokers' compaction metrics are read
	// while waiting for the passes; compactPassTimeout bounds that wait.
	compactPoll        = 100 * time.Millisecond
	compactPassTimeout = 3 * time.Minute
	// CompactionCheckInterval is the suite brokers'
	// --compaction-check-interval: a pass starts within it of the switch.
	CompactionCheckInterval = 250 * time.Millisecond
)

// compactLoad is how long WorkloadCompact's load runs for --duration d:
// room for its cycles, compacting and control, and the windows between
// them.
func compactLoad(d time.Duration) time.Duration { return d * 4 }

// Latency phases of WorkloadCompact's load (Run.SetPhase): the warm-up
// is phase 0; cycle i (compacting or control) is phase 3i+1 without
// compaction, then 3i+2 from the switch until its passes are swapped in
// (a control cycle: as long as the compacting cycle before it took),
// then 3i+3 for compactSettle; after the last cycle the load runs without
// compaction again (phase 3n+1).
const phaseWarmup = 0

func phaseOff(cycle int) int     { return 3*cycle + 1 }
func phaseDuring(cycle int) int  { return 3*cycle + 2 }
func phaseSettled(cycle int) int { return 3*cycle + 3 }

// warmupFor is the warm-up of a load whose windows without compaction
// last off.
func warmupFor(off time.Duration) time.Duration { return min(compactWarmup, off/2) }

// The brokers' compaction metrics (broker/compactor.go).
const (
	metricCompactRuns     = "strata_broker_compaction_runs_total"
	metricCompactErrors   = "strata_broker_compaction_errors_total"
	metricCompactBytesIn  = "strata_broker_compaction_bytes_in_total"
	metricCompactBytesOut = "strata_broker_compaction_bytes_out_total"
	metricCompactSeconds  = "strata_broker_compaction_duration_seconds_sum"
	// The bookies' journal compaction (ledger/storage): live entries
	// copied out of journal files that deletes left mostly dead.
	metricBookieGCCopied = "strata_bookie_compaction_bytes_total"
)

// compaction is WorkloadCompact's side of the load: the keyed source
// topics and the goroutine that switches them to compact, one a cycle,
// and watches the passes.
type compaction struct {
	sr      *suiteRunner
	sources []string
	result  benchsuite.Compaction
	done    chan struct{}
	err     error // set before done closes
	// control[i]: whether cycle i was a control cycle; len(control) is
	// how many cycles ran (set before done closes).
	control []bool
	// bookiesAtSwitch: the bookies' metrics at the first switch (set
	// before done closes; nil if none was made).
	bookiesAtSwitch []benchsuite.Samples
	// The nodes' latency histograms at the last phase change, and their
	// growth over the windows of each side (nodesChanged).
	nodesAt                           []benchsuite.Samples
	nodesOff, nodesWith, nodesControl benchsuite.Samples
	// traces: the flight traces being saved (flightTraces), and those
	// saved (under tracesMu).
	traces     sync.WaitGroup
	tracesMu   sync.Mutex
	traceFiles []string
}

// compactShape returns the number of cycles and each source's bytes and
// segment size.
func compactShape(quick bool) (cycles int, sourceBytes float64, segmentBytes int) {
	if quick {
		return compactQuickCycles, compactQuickSourceBytes, compactQuickSegment
	}
	return compactCycles, compactSourceBytes, compactSegmentBytes
}

// prepareCompaction creates the source topics (cleanup.policy=delete, so
// nothing compacts them yet) and writes their keyed records with base's
// acks, waiting for every acknowledgement.
func (sr *suiteRunner) prepareCompaction(ctx context.Context, quick bool) (*compaction, error) {
	cycles, sourceBytes, segmentBytes := compactShape(quick)
	c := &compaction{sr: sr, done: make(chan struct{}),
		nodesOff: benchsuite.Samples{}, nodesWith: benchsuite.Samples{}, nodesControl: benchsuite.Samples{}}
	c.result = benchsuite.Compaction{SourceBytes: int64(sourceBytes), SourceKeys: compactKeys, SegmentBytes: segmentBytes}
	setupCtx, cancel := context.WithTimeout(ctx, workloadSetupTimeout)
	defer cancel()
	cfg := map[string]string{"cleanup.policy": "delete", "segment.bytes": strconv.Itoa(segmentBytes)}
	for i := range cycles {
		topic := fmt.Sprintf("%s-%s-src%d", sr.prefix, benchsuite.WorkloadCompact, i)
		if _, err := sr.client.CreateTopic(setupCtx, topic, compactPartitions, cfg); err != nil {
			return nil, fmt.Errorf("create %s: %w", topic, err)
		}
		c.sources = append(c.sources, topic)
	}
	for _, topic := range c.sources {
		stream.WaitOwned(setupCtx, sr.client, topic, workloadOwnersWait)
		fmt.Fprintf(sr.progress, "bench suite: %s: writing %.0f MB of %d keys to %s (%d partitions, %d-byte segments)\n",
			benchsuite.WorkloadCompact, sourceBytes/1e6, compactKeys, topic, compactPartitions, segmentBytes)
		if err := sr.writeKeyed(ctx, topic, int64(sourceBytes)); err != nil {
			return nil, fmt.Errorf("write %s: %w", topic, err)
		}
	}
	return c, nil
}

// writeKeyed produces bytes of records of the base record size to topic,
// keys cycling over compactKeys, and waits for every acknowledgement.
func (sr *suiteRunner) writeKeyed(ctx context.Context, topic string, bytes int64) error {
	pcfg, err := sr.base.ProducerConfig()
	if err != nil {
		return err
	}
	p, err := sr.client.NewProducer(pcfg)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var firstErr error
	failed := func(_ *client.Record, err error) {
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	}
	value := randomPayload(sr.base.RecordSize)
	for i, written := 0, int64(0); written < bytes; i++ {
		r := client.NewRecord(topic, fmt.Appendf(nil, "key-%05d", i%compactKeys), value)
		if err := p.Produce(ctx, r, failed); err != nil {
			p.Close(ctx)
			return err
		}
		written += int64(len(value))
	}
	err = p.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(firstErr, err)
}

// start watches run's load in the background, which lasts d: it
// alternates windows without compaction, of d/(4n+2) for n sources, with
// cycles: one that switches a source to compact and waits for its passes
// (one per partition), then a control cycle as long, polling the brokers'
// metrics as the first did, as long as a cycle and the window after it
// still fit.
func (c *compaction) start(ctx context.Context, run *Run, d time.Duration) {
	run.SetPhase(phaseWarmup)
	if c.sr.profileDir != "" {
		// For flightTraces: this process's recorder, and when each
		// acknowledgement came.
		if err := admin.StartFlight(); err != nil {
			fmt.Fprintf(c.sr.progress, "bench suite: warning: client flight recorder: %v\n", err)
		}
		run.EnableTimeline()
	}
	go func() {
		defer close(c.done)
		c.err = c.watch(ctx, run, d)
	}()
}

func (c *compaction) watch(ctx context.Context, run *Run, d time.Duration) error {
	start := time.Now()
	off := d / time.Duration(4*len(c.sources)+2)
	warmup := warmupFor(off)
	c.result.WarmupSeconds = warmup.Seconds()
	var cycle time.Duration      // the longest cycle so far, off window included
	var compacting time.Duration // the last compacting cycle's switch to its passes' swap
	for i := 0; i < 2*len(c.sources); i++ {
		if i > 0 && time.Since(start)+cycle+off > d {
			break
		}
		began := time.Now()
		wait := off
		if i == 0 {
			if err := ctxtime.Sleep(ctx, warmup); err != nil {
				return err
			}
			run.SetPhase(phaseOff(0))
			c.nodesChanged(ctx, nil)
			wait -= warmup
		}
		if err := ctxtime.Sleep(ctx, wait); err != nil {
			return err
		}
		if i == 0 {
			c.bookiesAtSwitch = c.sr.scrape(ctx, devcluster.RoleBookie)
		}
		control := i%2 == 1
		run.SetPhase(phaseDuring(i))
		c.nodesChanged(ctx, c.nodesOff)
		c.control = append(c.control, control)
		switched := time.Now()
		var err error
		if control {
			err = c.pollFor(ctx, compacting)
		} else {
			err = c.compactSource(ctx, c.sources[i/2])
			compacting = time.Since(switched)
		}
		run.SetPhase(phaseSettled(i))
		c.flightTraces(ctx, i, control)
		if err != nil {
			run.SetPhase(phaseOff(i + 1))
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(compactSettle):
		}
		run.SetPhase(phaseOff(i + 1))
		c.nodesChanged(ctx, c.side(control))
		cycle = max(cycle, time.Since(began))
	}
	return nil
}

// side is where the nodes' latencies of a cycle's windows add up.
func (c *compaction) side(control bool) benchsuite.Samples {
	if control {
		return c.nodesControl
	}
	return c.nodesWith
}

// nodesChanged scrapes the brokers' and bookies' latency histograms at a
// phase change and adds their growth since the last change to ended, the
// side of the window that just ended (nil: the warm-up, counted nowhere).
func (c *compaction) nodesChanged(ctx context.Context, ended benchsuite.Samples) {
	now := append(c.sr.scrape(ctx, devcluster.RoleBroker), c.sr.scrape(ctx, devcluster.RoleBookie)...)
	if ended != nil && c.nodesAt != nil {
		benchsuite.AddNodeDeltas(ended, c.nodesAt, now)
	}
	c.nodesAt = now
}

// compactSource switches topic to compact and waits until each of its
// partitions had a pass, adding them to c.result.
func (c *compaction) compactSource(ctx context.Context, topic string) error {
	before, cpuBefore := c.samples(ctx), c.sr.cpu()
	start := time.Now()
	fmt.Fprintf(c.sr.progress, "bench suite: %s: cleanup.policy=compact on %s\n", benchsuite.WorkloadCompact, topic)
	if _, err := c.sr.client.AlterTopicConfigs(ctx, topic, map[string]string{"cleanup.policy": "compact"}, nil); err != nil {
		return fmt.Errorf("switch %s to compact: %w", topic, err)
	}
	t := time.NewTicker(compactPoll)
	defer t.Stop()
	deadline := time.After(compactPassTimeout)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("%s: passes not swapped in after %s", topic, compactPassTimeout)
		case <-t.C:
		}
		now := c.samples(ctx)
		delta := func(name string) float64 { return now[name] - before[name] }
		if errs := int(delta(metricCompactErrors)); errs > 0 {
			c.result.Errors += errs
			return fmt.Errorf("%s: %d compaction passes failed (see the brokers' logs)", topic, errs)
		}
		if passes := int(delta(metricCompactRuns)); passes >= compactPartitions {
			r := &c.result
			r.Passes += passes
			r.BytesIn += delta(metricCompactBytesIn)
			r.BytesOut += delta(metricCompactBytesOut)
			r.PassSeconds += delta(metricCompactSeconds)
			r.WindowSeconds += time.Since(start).Seconds()
			if r.PassSeconds > 0 {
				r.MBPerSecPerPass = r.BytesIn / r.PassSeconds / 1e6
			}
			r.CPUPerRole = addCPU(r.CPUPerRole, CPUDelta(cpuBefore, c.sr.cpu(), c.sr.nodes).PerRole)
			return nil
		}
	}
}

// pollFor is a control cycle's wait of d: it reads the brokers'
// compaction metrics every compactPoll, as compactSource does while it
// waits for passes, so that the control cycle carries the same scrapes
// (each costs a broker a few ms of CPU) and differs from a compacting
// cycle only by the compaction.
// Its CPU per role is added to the result's, as compactSource adds a
// compacting cycle's.
func (c *compaction) pollFor(ctx context.Context, d time.Duration) error {
	cpuBefore, start := c.sr.cpu(), time.Now()
	t := time.NewTicker(compactPoll)
	defer t.Stop()
	end := time.After(d)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			r := &c.result
			r.ControlSeconds += time.Since(start).Seconds()
			r.CPUPerRoleControl = addCPU(r.CPUPerRoleControl, CPUDelta(cpuBefore, c.sr.cpu(), c.sr.nodes).PerRole)
			return nil
		case <-t.C:
			c.samples(ctx)
		}
	}
}

// addCPU adds the core-seconds per role of d to sum (made if nil).
func addCPU(sum, d map[string]float64) map[string]float64 {
	if sum == nil {
		sum = map[string]float64{}
	}
	for role, s := range d {
		sum[role] += s
	}
	return sum
}

// samples sums the brokers' compaction metrics.
func (c *compaction) samples(ctx context.Context) benchsuite.Samples {
	sum := benchsuite.Samples{}
	for _, s := range c.sr.scrape(ctx, devcluster.RoleBroker) {
		for _, name := range []string{metricCompactRuns, metricCompactErrors, metricCompactBytesIn, metricCompactBytesOut, metricCompactSeconds} {
			sum[name] += s[name]
		}
	}
	return sum
}

// finish, called once the load ended, reads the bookies' journal
// compaction since the first switch, waits for the watch and fills w: the
// passes, the load's latency while compacting (w.Latency: the cycles'
// passes and settle windows) and without (c.Before), each cycle's p99
// against the window before it, and the device's stalls on each side
// (none when w.Disk is nil: the device was not watched).
func (c *compaction) finish(ctx context.Context, run *Run, w *benchsuite.Workload, stalls []benchsuite.DiskStall) error {
	bookies := c.sr.scrape(ctx, devcluster.RoleBookie)
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.nodesChanged(ctx, c.nodesOff) // the window after the last cycle
	w.Profiles = append(w.Profiles, c.savedTraces(run)...)
	res := c.result
	res.Sources = len(c.sources)
	for i, s := range bookies {
		if i < len(c.bookiesAtSwitch) {
			res.BookieGCCopiedBytes += s[metricBookieGCCopied] - c.bookiesAtSwitch[i][metricBookieGCCopied]
		}
	}
	var off, during, settled, control []int
	for i, isControl := range c.control {
		off = append(off, phaseOff(i))
		if isControl {
			res.ControlCycles++
			control = append(control, phaseDuring(i), phaseSettled(i))
			continue
		}
		res.Cycles++
		during, settled = append(during, phaseDuring(i)), append(settled, phaseSettled(i))
		without := PhaseLatency(run, phaseOff(i))
		with := PhaseLatency(run, phaseDuring(i), phaseSettled(i))
		res.CycleP99Ratios = append(res.CycleP99Ratios, benchsuite.P99Ratio(with, without, benchsuite.LatencyPublishAck))
	}
	off = append(off, phaseOff(len(c.control)))
	res.Before = PhaseLatency(run, off...)
	res.During, res.After = PhaseLatency(run, during...), PhaseLatency(run, settled...)
	if len(control) > 0 {
		res.Control = PhaseLatency(run, control...)
	}
	res.NodesBefore = benchsuite.NodeLatencyOf(c.nodesOff)
	res.NodesCompacting = benchsuite.NodeLatencyOf(c.nodesWith)
	res.NodesControl = benchsuite.NodeLatencyOf(c.nodesControl)
	if w.Disk != nil {
		side := func(phases []int) *benchsuite.DiskStalls {
			s := benchsuite.SumDiskStalls(stalls, func(p int) bool { return slices.Contains(phases, p) })
			return &s
		}
		res.StallsBefore, res.StallsCompacting = side(off), side(append(slices.Clone(during), settled...))
		res.StallsControl = side(control)
	}
	w.Latency = PhaseLatency(run, append(during, settled...)...)
	w.Compaction = &res
	return c.err
}

// flightTraces, with a profile directory, saves the last seconds of
// execution trace (about admin.FlightWindow: the flight recorders of
// every broker and bookie, run with --enable-pprof, and this process's)
// at the end of cycle's window, in the background, as
// <prefix>-compact-half-max-cycle<N>-<compacting|control>-<node>.trace
// (this process: "client"). With the acknowledgements' timeline
// (savedTraces) they show what each process did in a window's slow
// moments (`go tool trace`). Fetching them costs the machine CPU in the
// settling second after the window, which counts as compacting.
func (c *compaction) flightTraces(ctx context.Context, cycle int, control bool) {
	if c.sr.profileDir == "" {
		return
	}
	kind := "compacting"
	if control {
		kind = "control"
	}
	path := func(node string) string {
		return filepath.Join(c.sr.profileDir, fmt.Sprintf("%s-%s-cycle%d-%s-%s.trace", c.sr.prefix, benchsuite.WorkloadCompact, cycle+1, kind, node))
	}
	saved := func(node, path string, err error) {
		if err != nil {
			fmt.Fprintf(c.sr.progress, "bench suite: warning: %s: %s\n", node, strings.TrimPrefix(err.Error(), "benchsuite: "))
			return
		}
		c.tracesMu.Lock()
		c.traceFiles = append(c.traceFiles, path)
		c.tracesMu.Unlock()
	}
	for _, n := range c.sr.nodes {
		if n.Role != devcluster.RoleBroker && n.Role != devcluster.RoleBookie {
			continue
		}
		c.traces.Go(func() { saved(n.Name, path(n.Name), benchsuite.FlightTrace(ctx, n.Admin, path(n.Name))) })
	}
	c.traces.Go(func() { saved("client", path("client"), writeFile(path("client"), admin.WriteFlight)) })
}

// savedTraces waits for the flight traces and, when there are any, writes
// run's timeline next to them; it returns the files written.
func (c *compaction) savedTraces(run *Run) []string {
	c.traces.Wait()
	if len(c.traceFiles) == 0 {
		return nil
	}
	files := c.traceFiles
	timeline := filepath.Join(c.sr.profileDir, fmt.Sprintf("%s-%s-acks.tsv", c.sr.prefix, benchsuite.WorkloadCompact))
	if err := writeFile(timeline, run.WriteTimeline); err != nil {
		fmt.Fprintf(c.sr.progress, "bench suite: warning: acknowledgement timeline: %v\n", err)
	} else {
		files = append(files, timeline)
	}
	slices.Sort(files)
	return files
}
