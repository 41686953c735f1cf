package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/benchsuite"
	"github.com/strata-log/strata/internal/cli/stream"
	"github.com/strata-log/strata/internal/devcluster"
)

// WorkloadCompact's source topic: keyed records written before the load,
// switched to cleanup.policy=compact a third into it.
const (
	compactPartitions = 2
	compactKeys       = 2000
	// The source's size and segments: a full run, and --quick.
	compactSourceBytes      = 256e6
	compactSegmentBytes     = 8 << 20
	compactQuickSourceBytes = 16e6
	compactQuickSegment     = 1 << 20
	// compactPoll is how often the brokers' compaction metrics are read
	// while waiting for the passes; compactPassTimeout bounds that wait.
	compactPoll        = 100 * time.Millisecond
	compactPassTimeout = 3 * time.Minute
	// CompactionCheckInterval is the suite brokers'
	// --compaction-check-interval: a pass starts within it of the switch.
	CompactionCheckInterval = time.Second
)

// Latency phases of WorkloadCompact's load (Run.SetPhase): before the
// switch to compact, from it until every pass is swapped in, and from
// then to the load's end (the deletes of the passes' inputs and the
// bookies' garbage collection that follows).
const (
	phaseBefore = iota
	phaseDuring
	phaseAfter
)

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
// topic and the goroutine that switches it to compact and watches the
// passes.
type compaction struct {
	sr     *suiteRunner
	topic  string
	result benchsuite.Compaction
	done   chan struct{}
	err    error // set before done closes
	// bookiesAtSwitch: the bookies' metrics when the switch was made
	// (set before done closes; nil if it was not).
	bookiesAtSwitch []benchsuite.Samples
}

// prepareCompaction creates the source topic (cleanup.policy=delete, so
// nothing compacts it yet) and writes its keyed records with base's
// acks, waiting for every acknowledgement.
func (sr *suiteRunner) prepareCompaction(ctx context.Context, quick bool) (*compaction, error) {
	c := &compaction{sr: sr, topic: sr.prefix + "-" + benchsuite.WorkloadCompact + "-src", done: make(chan struct{})}
	c.result = benchsuite.Compaction{SourceBytes: compactSourceBytes, SourceKeys: compactKeys, SegmentBytes: compactSegmentBytes}
	if quick {
		c.result.SourceBytes, c.result.SegmentBytes = compactQuickSourceBytes, compactQuickSegment
	}
	setupCtx, cancel := context.WithTimeout(ctx, workloadSetupTimeout)
	defer cancel()
	cfg := map[string]string{"cleanup.policy": "delete", "segment.bytes": strconv.Itoa(c.result.SegmentBytes)}
	if _, err := sr.client.CreateTopic(setupCtx, c.topic, compactPartitions, cfg); err != nil {
		return nil, fmt.Errorf("create %s: %w", c.topic, err)
	}
	stream.WaitOwned(setupCtx, sr.client, c.topic, workloadOwnersWait)
	fmt.Fprintf(sr.progress, "bench suite: %s: writing %.0f MB of %d keys to %s (%d partitions, %d-byte segments)\n",
		benchsuite.WorkloadCompact, float64(c.result.SourceBytes)/1e6, compactKeys, c.topic, compactPartitions, c.result.SegmentBytes)
	if err := sr.writeKeyed(ctx, c.topic, c.result.SourceBytes); err != nil {
		return nil, fmt.Errorf("write %s: %w", c.topic, err)
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

// start watches run's load in the background: after after, it switches
// the source topic to compact (phaseDuring) and waits for one pass per
// partition (then phaseAfter).
func (c *compaction) start(ctx context.Context, run *Run, after time.Duration) {
	run.SetPhase(phaseBefore)
	go func() {
		defer close(c.done)
		c.err = c.watch(ctx, run, after)
	}()
}

func (c *compaction) watch(ctx context.Context, run *Run, after time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(after):
	}
	before, cpuBefore := c.samples(ctx), c.sr.cpu()
	c.bookiesAtSwitch = c.sr.scrape(ctx, devcluster.RoleBookie)
	start := time.Now()
	run.SetPhase(phaseDuring)
	defer run.SetPhase(phaseAfter)
	fmt.Fprintf(c.sr.progress, "bench suite: %s: cleanup.policy=compact on %s\n", benchsuite.WorkloadCompact, c.topic)
	if _, err := c.sr.client.AlterTopicConfigs(ctx, c.topic, map[string]string{"cleanup.policy": "compact"}, nil); err != nil {
		return fmt.Errorf("switch %s to compact: %w", c.topic, err)
	}
	t := time.NewTicker(compactPoll)
	defer t.Stop()
	deadline := time.After(compactPassTimeout)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("%d of %d passes swapped in after %s", c.result.Passes, compactPartitions, compactPassTimeout)
		case <-t.C:
		}
		now := c.samples(ctx)
		delta := func(name string) float64 { return now[name] - before[name] }
		r := &c.result
		r.Passes, r.Errors = int(delta(metricCompactRuns)), int(delta(metricCompactErrors))
		r.BytesIn, r.BytesOut, r.PassSeconds = delta(metricCompactBytesIn), delta(metricCompactBytesOut), delta(metricCompactSeconds)
		r.WindowSeconds = time.Since(start).Seconds()
		if r.PassSeconds > 0 {
			r.MBPerSecPerPass = r.BytesIn / r.PassSeconds / 1e6
		}
		if r.Errors > 0 {
			return fmt.Errorf("%d compaction passes failed (see the brokers' logs)", r.Errors)
		}
		if r.Passes >= compactPartitions {
			r.CPUPerRole = CPUDelta(cpuBefore, c.sr.cpu(), c.sr.nodes).PerRole
			return nil
		}
	}
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
// compaction since the switch, waits for the watch and fills w: the
// passes, and the load's latency since the switch (w.Latency) and before.
func (c *compaction) finish(ctx context.Context, run *Run, w *benchsuite.Workload) error {
	bookies := c.sr.scrape(ctx, devcluster.RoleBookie)
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	res := c.result
	for i, s := range bookies {
		if i < len(c.bookiesAtSwitch) {
			res.BookieGCCopiedBytes += s[metricBookieGCCopied] - c.bookiesAtSwitch[i][metricBookieGCCopied]
		}
	}
	res.Before = PhaseLatency(run, phaseBefore)
	res.During, res.After = PhaseLatency(run, phaseDuring), PhaseLatency(run, phaseAfter)
	w.Latency = PhaseLatency(run, phaseDuring, phaseAfter)
	w.Compaction = &res
	return c.err
}
