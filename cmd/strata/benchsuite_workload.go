package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/benchsuite"
	"github.com/strata-log/strata/internal/devcluster"
)

// suiteRunner runs the suite's workloads on one cluster.
type suiteRunner struct {
	progress io.Writer
	base     benchOptions // bench's flags
	client   *client.Client
	nodes    []devcluster.Node
	prefix   string // topic prefix
}

// workload runs the named workload (done is what ran before on this
// cluster: e2e-half-max takes its rate from produce-max).
func (sr *suiteRunner) workload(ctx context.Context, name string, done benchsuite.Run) (benchsuite.Workload, error) {
	o := sr.base
	o.rate = 0
	mode := "produce"
	o.topic = sr.prefix + "-" + name
	switch name {
	case benchsuite.WorkloadE2E5k:
		mode, o.rate = "e2e", 5000
	case benchsuite.WorkloadE2EHalf:
		mode = "e2e"
		p, ok := done.Workload(benchsuite.WorkloadProduce)
		if !ok || p.RecordsPerSec <= 0 {
			return benchsuite.Workload{}, fmt.Errorf("no %s rate to take half of", benchsuite.WorkloadProduce)
		}
		o.rate = max(1, math.Round(benchsuite.HalfMaxRateFraction*p.RecordsPerSec))
	case benchsuite.WorkloadCatchUp:
		mode = "consume"
		o.topic = sr.prefix + "-" + benchsuite.WorkloadProduce
		// The longest to read: reading must not take longer than the
		// writing did, by far.
		o.duration = 2*sr.base.duration + 10*time.Second
	case benchsuite.WorkloadProduceBig:
		o.recordSize = benchsuite.BigRecordBytes
	}
	acks, err := client.ParseAcks(o.acks)
	if err != nil {
		return benchsuite.Workload{}, err
	}
	codec, err := client.ParseCompression(o.compression)
	if err != nil {
		return benchsuite.Workload{}, err
	}
	pcfg := client.ProducerConfig{Acks: acks, Linger: o.linger, BatchBytes: o.batchBytes, Compression: codec}

	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var partitions int32
	if mode == "consume" {
		partitions, err = partitionCount(setupCtx, sr.client, o.topic)
	} else {
		partitions, err = ensureBenchTopic(setupCtx, sr.client, o.topic, o.partitions, 10*time.Second)
	}
	if err != nil {
		return benchsuite.Workload{}, err
	}
	run := newBenchRunFor(mode, o.topic, partitions)
	fmt.Fprintf(sr.progress, "\nbench suite: %s: topic %s (%d partitions), %s\n", name, o.topic, partitions, o.describe(mode, acks, codec))

	cpuBefore := sr.cpu()
	bookiesBefore, brokersBefore := sr.scrape(ctx, devcluster.RoleBookie), sr.scrape(ctx, devcluster.RoleBroker)
	switch mode {
	case "produce":
		err = benchProduce(ctx, sr.progress, sr.client, &o, pcfg, run, nil)
	case "consume":
		err = benchConsume(ctx, sr.progress, sr.client, &o, run)
	default:
		err = benchE2E(ctx, sr.progress, sr.client, &o, pcfg, run)
	}
	if err != nil {
		return benchsuite.Workload{}, err
	}
	elapsed := time.Since(run.start)
	cpuAfter := sr.cpu()
	bookiesAfter, brokersAfter := sr.scrape(ctx, devcluster.RoleBookie), sr.scrape(ctx, devcluster.RoleBroker)

	sum := summarizeBench(run, elapsed)
	w := benchsuite.Workload{Name: name, Topic: o.topic, RecordBytes: o.recordSize, TargetRate: o.rate, Seconds: sum.Seconds,
		Records: sum.Records, Bytes: sum.Bytes, RecordsPerSec: sum.RecordsPerSec, MBPerSec: sum.MBPerSec, Errors: sum.Errors,
		FirstError: sum.FirstError}
	for _, l := range sum.Latency {
		w.Latency = append(w.Latency, benchsuite.Latency(l))
	}
	w.CPU = cpuDelta(cpuBefore, cpuAfter, sr.nodes)
	w.CPU.FillPerGB(w.Bytes)
	w.Journal = benchsuite.JournalDelta(bookiesBefore, bookiesAfter, elapsed.Seconds())
	w.Reads = benchsuite.ReadsDelta(brokersBefore, brokersAfter)
	fmt.Fprintf(sr.progress, "bench suite: %s: %.0f records/s, %.2f MB/s, %d errors; CPU brokers+bookies %.2f core-s/GB\n",
		name, w.RecordsPerSec, w.MBPerSec, w.Errors, w.CPU.PerGBBrokersBookies)
	return w, nil
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

func cpuDelta(before, after map[string]float64, nodes []devcluster.Node) benchsuite.CPU {
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
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := benchsuite.Scrape(sctx, n.Admin)
		cancel()
		if err != nil {
			fmt.Fprintf(sr.progress, "bench suite: warning: %s: %s\n", n.Name, strings.TrimPrefix(err.Error(), "benchsuite: "))
		}
		out = append(out, s)
	}
	return out
}
