package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// Execute runs run's mode: Produce, Consume or E2E.
func Execute(ctx context.Context, progress io.Writer, c *client.Client, o *Options, pcfg client.ProducerConfig, run *Run) error {
	switch run.Mode {
	case ModeProduce:
		return Produce(ctx, progress, c, o, pcfg, run, nil)
	case ModeConsume:
		return Consume(ctx, progress, c, o, run)
	}
	return E2E(ctx, progress, c, o, pcfg, run)
}

// Summary is a run's result: `strata bench --output json`.
type Summary struct {
	Mode          string               `json:"mode"`
	Topic         string               `json:"topic"`
	Partitions    int32                `json:"partitions"`
	Seconds       float64              `json:"seconds"`
	Records       int64                `json:"records"`
	Bytes         int64                `json:"bytes"`
	RecordsPerSec float64              `json:"records_per_sec"`
	MBPerSec      float64              `json:"mb_per_sec"`
	Errors        int64                `json:"errors"`
	FirstError    string               `json:"first_error,omitempty"`
	Latency       []benchsuite.Latency `json:"latency"`
}

// Summarize computes a run's summary (rates over elapsed, latency
// quantiles in milliseconds).
func Summarize(run *Run, elapsed time.Duration) Summary {
	secs := max(elapsed.Seconds(), 1e-9)
	s := Summary{Mode: run.Mode, Topic: run.Topic, Partitions: run.Partitions, Seconds: elapsed.Seconds(),
		Records: run.records.Load(), Bytes: run.bytes.Load(), Errors: run.errs.Load()}
	s.RecordsPerSec, s.MBPerSec = float64(s.Records)/secs, float64(s.Bytes)/secs/1e6
	if err := run.firstError(); err != nil {
		s.FirstError = err.Error()
	}
	run.mu.Lock()
	s.Latency = latencies(run.kinds, run.lat)
	run.mu.Unlock()
	return s
}

// PhaseLatency is the latency quantiles observed during the given
// phases together (Run.SetPhase); phases never set count as empty.
func PhaseLatency(run *Run, phases ...int) []benchsuite.Latency {
	run.mu.Lock()
	defer run.mu.Unlock()
	merged := map[string]*cli.Histogram{}
	for _, k := range run.kinds {
		merged[k] = &cli.Histogram{}
		for _, p := range phases {
			if p >= 0 && p < len(run.phases) {
				merged[k].Merge(run.phases[p][k])
			}
		}
	}
	return latencies(run.kinds, merged)
}

// latencies are the quantiles, in milliseconds, of each kind's histogram.
func latencies(kinds []string, lat map[string]*cli.Histogram) []benchsuite.Latency {
	ms := func(v int64) float64 { return float64(v) / 1e6 }
	out := []benchsuite.Latency{}
	for _, k := range kinds {
		h := lat[k]
		out = append(out, benchsuite.Latency{Kind: strings.ReplaceAll(k, "->", "_to_"), Count: h.Count(), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
			P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: h.Mean() / 1e6})
	}
	return out
}

// PrintSummary prints the run's summary over elapsed: a JSON object, or
// a line and a latency table.
func PrintSummary(p *cli.Printer, run *Run, elapsed time.Duration) error {
	s := Summarize(run, elapsed)
	if p.Format == cli.FormatJSON {
		return p.JSON(s)
	}
	fmt.Fprintf(p.W, "\n%s: %d records in %.1fs: %.0f records/s, %.2f MB/s, %d errors\n",
		s.Mode, s.Records, s.Seconds, s.RecordsPerSec, s.MBPerSec, s.Errors)
	if s.FirstError != "" {
		fmt.Fprintf(p.W, "first error: %s\n", s.FirstError)
	}
	if len(s.Latency) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "LATENCY (ms)\tCOUNT\tP50\tP90\tP99\tP99.9\tMAX\t")
	for i, l := range s.Latency {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", run.kinds[i], l.Count, l.P50, l.P90, l.P99, l.P999, l.Max)
	}
	return tw.Flush()
}
