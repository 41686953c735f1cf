package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/bench"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

func newBenchCommand(g *globalOptions) *cobra.Command {
	o := &bench.Options{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure produce and consume throughput and latency",
		Long: `Benchmarks against a running cluster. With --rate the load is open-loop:
records are scheduled at fixed send times and latency is measured from the
SCHEDULED time, so a stalled producer cannot hide latency (no coordinated
omission). --rate 0 sends as fast as the producers accept records.

  produce  publish->ack latency, records/s and MB/s
  consume  reads the topic from the earliest offset as fast as possible
  e2e      produce at --rate; a consumer tailing every partition measures
           ack->consume and publish->consume latency (each value carries
           its scheduled send time in its first 8 bytes)

A progress line goes to stderr every second; the summary to stdout
(--output json for a JSON object).`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.Topic, "topic", "bench", "topic (created with --partitions when missing)")
	pf.IntVar(&o.RecordSize, "record-size", 1024, "value size in bytes")
	pf.Float64Var(&o.Rate, "rate", 0, "records per second across all producers (0: as fast as possible)")
	pf.DurationVar(&o.Duration, "duration", 30*time.Second, "how long to produce (consume: the longest to read)")
	pf.IntVar(&o.Producers, "producers", 1, "number of producers")
	pf.StringVar(&o.Acks, "acks", "quorum", "acknowledgement: none, one, quorum or all")
	pf.DurationVar(&o.Linger, "linger", 5*time.Millisecond, "producer linger")
	pf.IntVar(&o.BatchBytes, "batch-bytes", 0, "producer batch size in bytes (0: the client's default, 1 MiB)")
	pf.StringVar(&o.Compression, "compression", "none", "compression: none, gzip, snappy, lz4 or zstd")
	pf.Int32Var(&o.Partitions, "partitions", 16, "partitions of the topic when bench creates it")
	for _, mode := range []struct{ name, short string }{
		{bench.ModeProduce, "Produce records and measure publish->ack latency"},
		{bench.ModeConsume, "Read the topic from the earliest offset as fast as possible"},
		{bench.ModeE2E, "Produce and consume at once: publish->ack, ack->consume, publish->consume latency"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   mode.name,
			Short: mode.short,
			Args:  cobra.NoArgs,
			RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
				return runBench(cmd, g, o, mode.name)
			}),
		})
	}
	cmd.AddCommand(newBenchSuiteCommand(o))
	return cmd
}

// benchOwnersWait bounds waiting for the partitions of a topic bench
// created to have owners.
const benchOwnersWait = 10 * time.Second

func runBench(cmd *cobra.Command, g *globalOptions, o *bench.Options, mode string) error {
	if err := o.Validate(mode); err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	pcfg, err := o.ProducerConfig()
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	setupCtx, cancel := g.commandContext(cmd)
	defer cancel()
	c, err := g.brokerClient(setupCtx)
	if err != nil {
		return err
	}
	defer c.Close()
	partitions, err := bench.Partitions(setupCtx, c, o, mode, min(g.timeout, benchOwnersWait))
	if err != nil {
		return err
	}
	cancel()

	run := bench.NewRun(mode, o.Topic, partitions)
	fmt.Fprintf(cmd.ErrOrStderr(), "bench %s: topic %s (%d partitions), %s\n", mode, o.Topic, partitions, o.Describe(mode, pcfg))
	if err := bench.Execute(cmd.Context(), cmd.ErrOrStderr(), c, o, pcfg, run); err != nil {
		return err
	}
	if err := bench.PrintSummary(g.printer(cmd), run, time.Since(run.Start)); err != nil {
		return err
	}
	return run.Err()
}
