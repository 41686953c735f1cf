package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/devcluster"
)

// The warm-up before a shape's first workload.
const (
	// warmUpFill: the share of its tail cache every broker must hold.
	warmUpFill = 0.9
	// warmUpPoll: how often the brokers' metrics are read.
	warmUpPoll = time.Second
	// warmUpSteady: the polls over which no broker's resident memory
	// may have grown by more than warmUpGrowth.
	warmUpSteady = 3
	warmUpGrowth = 0.01
	// warmUpQuick bounds the warm-up of a --quick run.
	warmUpQuick = 3 * time.Second
)

// warmUp writes to a topic of its own as fast as the cluster takes it
// until every broker's tail cache holds warmUpFill of its size and no
// broker's resident memory has grown by more than warmUpGrowth over the
// last warmUpSteady polls, for at most twice the workloads' duration
// (then it says so and goes on). A broker that has just started grows
// its heap to its working size (the tail cache, and as much again before
// the collector runs) while it serves its first gigabyte: some 200,000
// first-touch page faults, over a core-second of kernel time, that would
// be charged to the first workload's CPU per GB. The warm-up's figures
// are not reported.
func (sr *suiteRunner) warmUp(ctx context.Context) error {
	o := sr.base
	o.Rate, o.Topic = 0, sr.prefix+"-warm-up"
	o.Duration = 2 * sr.base.Duration
	if sr.quick {
		o.Duration = warmUpQuick
	}
	pcfg, err := o.ProducerConfig()
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, workloadSetupTimeout)
	partitions, err := Partitions(setupCtx, sr.client, &o, ModeProduce, workloadOwnersWait)
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(sr.progress, "\nbench suite: warm-up: writing %s (%d partitions) until every broker's tail cache is %.0f%% full and its memory steady, at most %s\n",
		o.Topic, partitions, 100*warmUpFill, o.Duration)
	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	full := make(chan struct{})
	var steady warmUpState
	go func() {
		defer close(full)
		for loadCtx.Err() == nil {
			if steady.observe(sr.brokerSamples(loadCtx)) {
				stop()
				return
			}
			select {
			case <-loadCtx.Done():
			case <-time.After(warmUpPoll):
			}
		}
	}()
	start := time.Now()
	err = Execute(loadCtx, io.Discard, sr.client, &o, pcfg, NewRun(ModeProduce, o.Topic, partitions))
	stop()
	<-full
	filled := steady.done
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && !filled {
		return fmt.Errorf("warm-up: %w", err)
	}
	if !filled {
		fmt.Fprintf(sr.progress, "bench suite: warning: warm-up: the brokers' tail caches were not %.0f%% full or their memory not steady after %s; the first workload's CPU includes the brokers' heap growth\n",
			100*warmUpFill, o.Duration.Round(time.Second))
		return nil
	}
	fmt.Fprintf(sr.progress, "bench suite: warm-up: done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// brokerSamples scrapes every broker's metrics; nil when one does not
// answer.
func (sr *suiteRunner) brokerSamples(ctx context.Context) []benchsuite.Samples {
	var out []benchsuite.Samples
	for _, n := range sr.nodes {
		if n.Role != devcluster.RoleBroker {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		s, err := benchsuite.Scrape(sctx, n.Admin)
		cancel()
		if err != nil {
			return nil
		}
		out = append(out, s)
	}
	return out
}

// warmUpState follows the brokers' tail caches and resident memory over
// the warm-up's polls.
type warmUpState struct {
	rss  [][]float64 // per poll, per broker
	done bool
}

// observe adds one poll's scrapes (nil: a broker did not answer, which
// starts the count again) and reports whether the brokers are warm:
// every tail cache warmUpFill full, and no resident memory grown by more
// than warmUpGrowth since warmUpSteady polls ago.
func (w *warmUpState) observe(brokers []benchsuite.Samples) bool {
	if brokers == nil {
		w.rss = nil
		return false
	}
	var rss []float64
	full := true
	for _, s := range brokers {
		full = full && s[benchsuite.MetricTailCacheBytes] >= warmUpFill*brokerTailCacheBytes
		rss = append(rss, s[benchsuite.MetricResidentBytes])
	}
	if !full {
		w.rss = nil
		return false
	}
	w.rss = append(w.rss, rss)
	if len(w.rss) <= warmUpSteady {
		return false
	}
	w.rss = w.rss[len(w.rss)-warmUpSteady-1:]
	for i, now := range w.rss[warmUpSteady] {
		if then := w.rss[0][i]; then <= 0 || now > (1+warmUpGrowth)*then {
			return false
		}
	}
	w.done = true
	return true
}
