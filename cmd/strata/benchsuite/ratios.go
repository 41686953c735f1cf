package benchsuite

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Ratio is one result stated against the limit that binds it, next to
// its target (docs/bench/README.md).
type Ratio struct {
	Workload string  `json:"workload"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	// Bound says which limit of the same run the value is taken against.
	Bound string `json:"bound"`
	// Target: Value must be AtLeast or at most Target.
	Target  float64 `json:"target"`
	AtLeast bool    `json:"at_least"`
	Met     bool    `json:"met"`
}

func ratio(workload, metric, unit, bound string, value, target float64, atLeast bool) Ratio {
	value = finite(value)
	met := value <= target
	if atLeast {
		met = value >= target
	}
	return Ratio{Workload: workload, Metric: metric, Value: value, Unit: unit, Bound: bound, Target: target, AtLeast: atLeast, Met: met}
}

// The targets each result is stated against (docs/bench/README.md).
const (
	TargetThroughputFraction = 0.80 // acknowledged MB/s ÷ (three-journal MB/s ÷ 3)
	TargetCPUPerGB           = 5.0  // core-s/GB, brokers and bookies
	TargetBrokerCPUPerGB     = 1.5  // core-s/GB, brokers
	TargetAckOverFsyncP50Ms  = 1.5  // e2e-5000 publish->ack p50 − fsync p50
	TargetAckP99Ms           = 10.0 // e2e-5000 publish->ack p99 when fsync p99 <= 2 ms
	TargetAckP99FsyncFactor  = 5.0  // … else at most this × fsync p99
	TargetFsyncP99QuietMs    = 2.0
	TargetConsumeP99Ms5k     = 5.0  // e2e-5000 ack->consume p99
	TargetConsumeP99MsHalf   = 10.0 // e2e-half-max ack->consume p99
	TargetAckP99MsHalf       = 25.0 // e2e-half-max publish->ack p99
	TargetAckP99Ms25k        = 15.0 // e2e-25000 publish->ack p99
	TargetAckP99Ms50k        = 25.0 // e2e-50000 publish->ack p99
	TargetConsumeP99MsFixed  = 10.0 // e2e-25000 and e2e-50000 ack->consume p99
	TargetCatchUpOverProduce = 2.0  // catch-up MB/s ÷ produce-max MB/s
	// The client's peak RSS at most this many times its producers'
	// MaxBufferedBytes, measured where they are full (produce-max).
	TargetClientRSSOverBuffers = 1.5
	// A compaction pass's input rate with the broker serving
	// produce at half its maximum, and that produce's p99 at most this
	// many times what it was without compaction.
	TargetCompactMBPerSec  = 50.0
	TargetCompactP99Factor = 1.5
	journalsPerEnsemble    = 3
)

// groupBytes is the mean journal group the bookies reported for w; 0
// when unknown, which picks the smallest probe (Limits.Probe).
func groupBytes(w Workload) float64 {
	if w.Journal == nil {
		return 0
	}
	return w.Journal.BytesPerGroup
}

// Ratios states run's results against limits (B4), then each Kafka
// workload against its gRPC twin (KafkaRatios). A workload that did not
// run contributes nothing.
func Ratios(limits Limits, run Run) []Ratio {
	var out []Ratio
	for _, name := range []string{WorkloadProduce, WorkloadKafkaProduce, WorkloadProduceBig} {
		if w, ok := run.Workload(name); ok {
			out = append(out, produceRatios(limits, w)...)
		}
	}
	for _, name := range []string{WorkloadE2E5k, WorkloadKafkaE2E5k} {
		if w, ok := run.Workload(name); ok {
			out = append(out, e2e5kRatios(limits, w)...)
		}
	}
	for _, f := range fixedLoadTargets {
		if w, ok := run.Workload(f.workload); ok {
			out = append(out, fixedLoadRatios(limits, w, f.ackP99Ms, f.consumeP99Ms)...)
		}
	}
	if w, ok := run.Workload(WorkloadE2EHalf); ok {
		if l, ok := w.LatencyOf(LatencyAckConsume); ok {
			out = append(out, ratio(w.Name, "ack->consume p99", "ms", "loopback only", l.P99, TargetConsumeP99MsHalf, false))
		}
		if l, ok := w.LatencyOf(LatencyPublishAck); ok {
			out = append(out, ratio(w.Name, "pub->ack p99", "ms", "disk at half load", l.P99, TargetAckP99MsHalf, false))
		}
		out = append(out, cpuRatios(w)...)
	}
	for _, name := range []string{WorkloadCatchUp, WorkloadKafkaCatchUp} {
		if w, ok := run.Workload(name); ok {
			out = append(out, catchUpRatios(limits, run, w)...)
		}
	}
	if w, ok := run.Workload(WorkloadCompact); ok && w.Compaction != nil {
		out = append(out, compactRatios(w)...)
	}
	if w, ok := run.Workload(WorkloadGroupRebalance); ok && w.Rebalance != nil {
		out = append(out, rebalanceRatios(w)...)
	}
	return append(out, KafkaRatios(run)...)
}

// produceRatios states a max-rate produce workload against the journals'
// bandwidth, its CPU targets and its client's buffers.
func produceRatios(limits Limits, w Workload) []Ratio {
	var out []Ratio
	if p, ok := limits.Probe(journalsPerEnsemble, groupBytes(w)); ok && p.MBPerSec > 0 {
		perJournal := p.MBPerSec / journalsPerEnsemble
		out = append(out, ratio(w.Name, "ack MB/s ÷ journal MB/s", "x",
			fmt.Sprintf("%.1f MB/s = 3-journal %.1f MB/s ÷ 3 at %d B groups", perJournal, p.MBPerSec, p.GroupBytes),
			w.MBPerSec/perJournal, TargetThroughputFraction, true))
	}
	out = append(out, cpuRatios(w)...)
	if m := w.Memory; m != nil && m.ClientBufferBytes > 0 && m.PeakRSSByRole[RoleClient] > 0 {
		out = append(out, ratio(w.Name, "client peak RSS ÷ buffers", "x",
			fmt.Sprintf("%.0f MB of producer buffers (closed loop: full)", float64(m.ClientBufferBytes)/1e6),
			float64(m.PeakRSSByRole[RoleClient])/float64(m.ClientBufferBytes), TargetClientRSSOverBuffers, false))
	}
	return out
}

// e2e5kRatios states an e2e workload at 5,000 records/s against the
// three-journal fsync latency at its group size.
func e2e5kRatios(limits Limits, w Workload) []Ratio {
	var out []Ratio
	p, _ := limits.Probe(journalsPerEnsemble, groupBytes(w))
	if l, ok := w.LatencyOf(LatencyPublishAck); ok {
		out = append(out, ratio(w.Name, "pub->ack p50 − fsync p50", "ms",
			fmt.Sprintf("fsync p50 %.2f ms (3 journals, %d B groups)", p.SyncP50Ms, p.GroupBytes),
			l.P50-p.SyncP50Ms, TargetAckOverFsyncP50Ms, false))
		target, bound := TargetAckP99Ms, fmt.Sprintf("fsync p99 %.2f ms ≤ %.0f ms", p.SyncP99Ms, TargetFsyncP99QuietMs)
		if p.SyncP99Ms > TargetFsyncP99QuietMs {
			target, bound = TargetAckP99FsyncFactor*p.SyncP99Ms, fmt.Sprintf("%.0f × fsync p99 %.2f ms", TargetAckP99FsyncFactor, p.SyncP99Ms)
		}
		out = append(out, ratio(w.Name, "pub->ack p99", "ms", bound, l.P99, target, false))
	}
	if l, ok := w.LatencyOf(LatencyAckConsume); ok {
		out = append(out, ratio(w.Name, "ack->consume p99", "ms", "loopback only", l.P99, TargetConsumeP99Ms5k, false))
	}
	return append(out, cpuRatios(w)...)
}

// fixedLoadTargets are the p99 targets of the e2e workloads at fixed
// loads above e2e-5000's.
var fixedLoadTargets = []struct {
	workload               string
	ackP99Ms, consumeP99Ms float64
}{
	{WorkloadE2E25k, TargetAckP99Ms25k, TargetConsumeP99MsFixed},
	{WorkloadE2E50k, TargetAckP99Ms50k, TargetConsumeP99MsFixed},
}

// fixedLoadRatios states an e2e workload at a fixed load against its p99
// targets. At a fixed rate the nodes' work per entry decides how busy the
// machine is, and so how long a request waits for a core: the bounds name
// the fsync p99 at the group size in use and the machine's busy share.
func fixedLoadRatios(limits Limits, w Workload, ackP99Ms, consumeP99Ms float64) []Ratio {
	var out []Ratio
	busy := fmt.Sprintf("machine CPU %.0f%% busy", 100*w.CPU.HostBusy)
	if l, ok := w.LatencyOf(LatencyPublishAck); ok {
		p, _ := limits.Probe(journalsPerEnsemble, groupBytes(w))
		out = append(out, ratio(w.Name, "pub->ack p99", "ms",
			fmt.Sprintf("fsync p99 %.2f ms (3 journals, %d B groups); %s", p.SyncP99Ms, p.GroupBytes, busy), l.P99, ackP99Ms, false))
	}
	if l, ok := w.LatencyOf(LatencyAckConsume); ok {
		out = append(out, ratio(w.Name, "ack->consume p99", "ms", "loopback only; "+busy, l.P99, consumeP99Ms, false))
	}
	return append(out, cpuRatios(w)...)
}

// catchUpRatios states a catch-up read against produce-max's rate.
func catchUpRatios(limits Limits, run Run, w Workload) []Ratio {
	p, ok := run.Workload(WorkloadProduce)
	if !ok || p.MBPerSec <= 0 {
		return nil
	}
	bound := fmt.Sprintf("produce-max %.1f MB/s", p.MBPerSec)
	if w.Reads != nil {
		bound += fmt.Sprintf("; %.0f%% of fetched bytes from bookies", 100*w.Reads.FromBookies)
	}
	if rp := limits.DiskRead; rp.MBPerSec > 0 {
		bound += fmt.Sprintf("; disk reads %.0f MB/s (%d files)", rp.MBPerSec, rp.Files)
	}
	return []Ratio{ratio(w.Name, "catch-up MB/s ÷ produce MB/s", "x", bound, w.MBPerSec/p.MBPerSec, TargetCatchUpOverProduce, true)}
}

// compactRatios states WorkloadCompact against its targets.
func compactRatios(w Workload) []Ratio {
	c := w.Compaction
	bound := fmt.Sprintf("machine CPU %.0f%% busy", 100*w.CPU.HostBusy)
	out := []Ratio{ratio(w.Name, "compaction MB/s per pass", "MB/s", bound, c.MBPerSecPerPass, TargetCompactMBPerSec, true)}
	with, ok := w.LatencyOf(LatencyPublishAck)
	without, okB := Workload{Latency: c.Before}.LatencyOf(LatencyPublishAck)
	if !ok || !okB || without.P99 <= 0 {
		return out
	}
	// All the windows with compaction merged against all those without:
	// interleaved, both sides see the same minutes of the machine, and
	// merged, a p99 is not set by the few stalls of one window of
	// seconds (the cycles' own ratios, listed, scatter by 2x and more).
	out = append(out, ratio(w.Name, "pub->ack p99 compacting ÷ not", "x",
		fmt.Sprintf("%d cycles merged: without %.2f ms, compacting %.2f ms; per cycle against the window before it %s%s",
			c.Cycles, without.P99, with.P99, FormatRatios(c.CycleP99Ratios), stallCounts(c.StallsBefore, c.StallsCompacting)),
		with.P99/without.P99, TargetCompactP99Factor, false))
	// The control cycles, measured as the compacting ones with nothing
	// compacted: above the target, this run's machine stalled by itself
	// more than compaction is allowed to, and its ratio above says little.
	// The windows without compaction follow the cycles and carry their
	// after-effects (the bookies' journal GC after the passes' deletes),
	// so the control cycles are the cleaner baseline: compacting ÷ control
	// is the stricter reading of the target.
	control, ok := (Workload{Latency: c.Control}).LatencyOf(LatencyPublishAck)
	if !ok || control.P99 <= 0 {
		return out
	}
	return append(out,
		ratio(w.Name, "pub->ack p99 control ÷ not", "x",
			fmt.Sprintf("%d control cycles, nothing compacted (the machine's own noise): %.2f ms%s", c.ControlCycles, control.P99,
				stallCounts(c.StallsControl, c.StallsBefore)),
			control.P99/without.P99, TargetCompactP99Factor, false),
		ratio(w.Name, "pub->ack p99 compacting ÷ control", "x",
			fmt.Sprintf("compacting %.2f ms, control cycles %.2f ms%s", with.P99, control.P99, stallCounts(c.StallsCompacting, c.StallsControl)),
			with.P99/control.P99, TargetCompactP99Factor, false))
}

// stallCounts says how many device stalls each side of a ratio, a ÷ b,
// had ("" when the device was not watched): a side with more has its p99
// set by the device rather than by the nodes.
func stallCounts(a, b *DiskStalls) string {
	if a == nil || b == nil {
		return ""
	}
	return fmt.Sprintf("; device stalls %d ÷ %d", a.Count, b.Count)
}

// FormatRatios writes rs as "1.10x 0.92x ...".
func FormatRatios(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.2fx", r)
	}
	return strings.Join(parts, " ")
}

func cpuRatios(w Workload) []Ratio {
	if w.Bytes <= 0 {
		return nil
	}
	gb := fmt.Sprintf("%.3f GB acknowledged", float64(w.Bytes)/1e9)
	return []Ratio{
		ratio(w.Name, "CPU brokers+bookies", "core-s/GB", gb, w.CPU.PerGBBrokersBookies, TargetCPUPerGB, false),
		ratio(w.Name, "CPU brokers", "core-s/GB", gb, w.CPU.PerGBBrokers, TargetBrokerCPUPerGB, false),
	}
}

// WriteRatios prints ratios as a table.
func WriteRatios(w io.Writer, ratios []Ratio) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "  WORKLOAD\tMETRIC\tVALUE\tTARGET\tMET\tBOUND BY")
	for _, r := range ratios {
		cmp := "≤"
		if r.AtLeast {
			cmp = "≥"
		}
		met := "no"
		if r.Met {
			met = "yes"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%.2f %s\t%s %.2f\t%s\t%s\n", r.Workload, r.Metric, r.Value, r.Unit, cmp, r.Target, met, r.Bound)
	}
	return tw.Flush()
}
