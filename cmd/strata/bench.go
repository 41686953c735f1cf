package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/benchsuite"
	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/internal/rpcerror"
)

// benchFlushTimeout bounds waiting for outstanding acknowledgements (and,
// for e2e, for the consumer to catch up) after --duration.
const benchFlushTimeout = 30 * time.Second

type benchOptions struct {
	topic       string
	recordSize  int
	rate        float64
	duration    time.Duration
	producers   int
	acks        string
	linger      time.Duration
	batchBytes  int
	compression string
	partitions  int32
}

// Latency kinds a benchmark reports.
const (
	latPublishAck     = "publish->ack"
	latAckConsume     = "ack->consume"
	latPublishConsume = "publish->consume"
)

func newBenchCommand(g *globalOptions) *cobra.Command {
	o := &benchOptions{}
	bench := &cobra.Command{
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
	pf := bench.PersistentFlags()
	pf.StringVar(&o.topic, "topic", "bench", "topic (created with --partitions when missing)")
	pf.IntVar(&o.recordSize, "record-size", 1024, "value size in bytes")
	pf.Float64Var(&o.rate, "rate", 0, "records per second across all producers (0: as fast as possible)")
	pf.DurationVar(&o.duration, "duration", 30*time.Second, "how long to produce (consume: the longest to read)")
	pf.IntVar(&o.producers, "producers", 1, "number of producers")
	pf.StringVar(&o.acks, "acks", "quorum", "acknowledgement: none, one, quorum or all")
	pf.DurationVar(&o.linger, "linger", 5*time.Millisecond, "producer linger")
	pf.IntVar(&o.batchBytes, "batch-bytes", 0, "producer batch size in bytes (0: the client's default, 1 MiB)")
	pf.StringVar(&o.compression, "compression", "none", "compression: none, gzip, snappy, lz4 or zstd")
	pf.Int32Var(&o.partitions, "partitions", 16, "partitions of the topic when bench creates it")
	for _, mode := range []struct{ name, short string }{
		{"produce", "Produce records and measure publish->ack latency"},
		{"consume", "Read the topic from the earliest offset as fast as possible"},
		{"e2e", "Produce and consume at once: publish->ack, ack->consume, publish->consume latency"},
	} {
		bench.AddCommand(&cobra.Command{
			Use:   mode.name,
			Short: mode.short,
			Args:  cobra.NoArgs,
			RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
				return runBench(cmd, g, o, mode.name)
			}),
		})
	}
	bench.AddCommand(newBenchSuiteCommand(o))
	return bench
}

func (o *benchOptions) validate(mode string) error {
	var errs []error
	if o.recordSize < 0 || (mode == "e2e" && o.recordSize < 8) {
		errs = append(errs, fmt.Errorf("--record-size %d: want at least 8 for e2e, 0 otherwise", o.recordSize))
	}
	if o.rate < 0 {
		errs = append(errs, fmt.Errorf("--rate %g: want 0 or more", o.rate))
	}
	if o.duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration %s: must be positive", o.duration))
	}
	if o.producers < 1 {
		errs = append(errs, fmt.Errorf("--producers %d: want at least 1", o.producers))
	}
	if o.partitions < 1 {
		errs = append(errs, fmt.Errorf("--partitions %d: want at least 1", o.partitions))
	}
	return errors.Join(errs...)
}

// benchRun holds a benchmark's counters, shared by producers, consumer
// and the progress reporter.
type benchRun struct {
	mode, topic string
	partitions  int32
	start       time.Time

	records, bytes, errs atomic.Int64
	errMu                sync.Mutex
	firstErr             error

	kinds []string // latency kinds reported, in order
	mu    sync.Mutex
	lat   map[string]*cli.Histogram // REQUIRES: mu held
}

// newBenchRunFor is newBenchRun with the latency kinds mode measures.
func newBenchRunFor(mode, topic string, partitions int32) *benchRun {
	switch mode {
	case "produce":
		return newBenchRun(mode, topic, partitions, latPublishAck)
	case "consume":
		return newBenchRun(mode, topic, partitions)
	}
	return newBenchRun(mode, topic, partitions, latPublishAck, latAckConsume, latPublishConsume)
}

func newBenchRun(mode, topic string, partitions int32, kinds ...string) *benchRun {
	r := &benchRun{mode: mode, topic: topic, partitions: partitions, kinds: kinds, lat: map[string]*cli.Histogram{}}
	for _, k := range kinds {
		r.lat[k] = &cli.Histogram{}
	}
	return r
}

func (r *benchRun) fail(err error) {
	r.errs.Add(1)
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
}

func (r *benchRun) observe(kind string, d time.Duration) {
	r.mu.Lock()
	r.lat[kind].RecordDuration(d)
	r.mu.Unlock()
}

func (r *benchRun) quantile(kind string, q float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.lat[kind].Quantile(q))
}

// progress prints a line to w every second until ctx ends.
// startProgress prints progress lines to w until the returned stop is
// called; stop waits for the last line.
func (r *benchRun) startProgress(ctx context.Context, w io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.progress(ctx, w)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (r *benchRun) progress(ctx context.Context, w io.Writer) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastRecords, lastBytes int64
	last := r.start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rec, b := r.records.Load(), r.bytes.Load()
			secs := now.Sub(last).Seconds()
			line := fmt.Sprintf("%6s  %9.0f records/s  %8.2f MB/s", now.Sub(r.start).Round(time.Second),
				float64(rec-lastRecords)/secs, float64(b-lastBytes)/secs/1e6)
			if len(r.kinds) > 0 {
				k := r.kinds[len(r.kinds)-1]
				line += fmt.Sprintf("  p99 %s %s", k, fmtLatency(r.quantile(k, 0.99)))
			}
			if e := r.errs.Load(); e > 0 {
				line += fmt.Sprintf("  errors %d", e)
			}
			fmt.Fprintln(w, line)
			lastRecords, lastBytes, last = rec, b, now
		}
	}
}

func fmtLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

func runBench(cmd *cobra.Command, g *globalOptions, o *benchOptions, mode string) error {
	if err := o.validate(mode); err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	acks, err := client.ParseAcks(o.acks)
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	codec, err := client.ParseCompression(o.compression)
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}
	pcfg := client.ProducerConfig{Acks: acks, Linger: o.linger, BatchBytes: o.batchBytes, Compression: codec}

	ctx := cmd.Context()
	setupCtx, cancel := g.commandContext(cmd)
	defer cancel()
	c, err := g.brokerClient(setupCtx)
	if err != nil {
		return err
	}
	defer c.Close()
	var partitions int32
	if mode == "consume" {
		partitions, err = partitionCount(setupCtx, c, o.topic)
	} else {
		partitions, err = ensureBenchTopic(setupCtx, c, o.topic, o.partitions, min(g.timeout, 10*time.Second))
	}
	if err != nil {
		return err
	}
	cancel()

	run := newBenchRunFor(mode, o.topic, partitions)
	fmt.Fprintf(cmd.ErrOrStderr(), "bench %s: topic %s (%d partitions), %s\n", mode, o.topic, partitions, o.describe(mode, acks, codec))
	switch mode {
	case "produce":
		err = benchProduce(ctx, cmd.ErrOrStderr(), c, o, pcfg, run, nil)
	case "consume":
		err = benchConsume(ctx, cmd.ErrOrStderr(), c, o, run)
	default:
		err = benchE2E(ctx, cmd.ErrOrStderr(), c, o, pcfg, run)
	}
	if err != nil {
		return err
	}
	if err := printBenchSummary(g.printer(cmd), run, time.Since(run.start)); err != nil {
		return err
	}
	if run.errs.Load() > 0 {
		return fmt.Errorf("%d errors; first: %w", run.errs.Load(), run.firstErr)
	}
	return nil
}

func (o *benchOptions) describe(mode string, acks client.Acks, codec client.Compression) string {
	rate := "max rate"
	if o.rate > 0 {
		rate = fmt.Sprintf("%g records/s", o.rate)
	}
	if mode == "consume" {
		return fmt.Sprintf("at most %s", o.duration)
	}
	producers := "1 producer"
	if o.producers != 1 {
		producers = fmt.Sprintf("%d producers", o.producers)
	}
	return fmt.Sprintf("%s, %s, %d-byte records, acks=%s, compression=%s, linger %s, for %s",
		producers, rate, o.recordSize, acks, codec, o.linger, o.duration)
}

// ensureBenchTopic returns the topic's partition count, creating it with
// partitions when it does not exist and waiting for owners.
func ensureBenchTopic(ctx context.Context, c *client.Client, topic string, partitions int32, wait time.Duration) (int32, error) {
	n, err := partitionCount(ctx, c, topic)
	if err == nil {
		return n, nil
	}
	desc, cerr := c.CreateTopic(ctx, topic, partitions, nil)
	if cerr != nil && rpcerror.Reason(cerr) != rpcerror.ReasonTopicExists {
		return 0, fmt.Errorf("create topic %s: %w (looking it up: %v)", topic, cerr, err)
	}
	waitOwned(ctx, c, topic, wait)
	if cerr == nil {
		return desc.GetPartitionCount(), nil
	}
	return partitionCount(ctx, c, topic)
}

// benchValue returns a value for one record: size bytes from payload,
// with the scheduled send time in the first 8 bytes when stamp.
func benchValue(payload []byte, sched time.Time, stamp bool) []byte {
	v := make([]byte, len(payload))
	copy(v, payload)
	if stamp {
		binary.BigEndian.PutUint64(v, uint64(sched.UnixNano()))
	}
	return v
}

// benchProduce runs --producers producers for --duration. With --rate each
// producer sends at fixed scheduled times (open loop); latency counts from
// the scheduled time. onAck, when set, sees each acknowledged record.
func benchProduce(ctx context.Context, progress io.Writer, c *client.Client, o *benchOptions, pcfg client.ProducerConfig,
	run *benchRun, onAck func(r *client.Record, at time.Time)) error {
	payload := make([]byte, o.recordSize)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for i := range payload {
		payload[i] = byte(rng.Uint32()) // incompressible, like most real payloads once encoded
	}
	prods := make([]*client.Producer, o.producers)
	for i := range prods {
		p, err := c.NewProducer(pcfg)
		if err != nil {
			for _, q := range prods[:i] {
				_ = q.Close(context.Background())
			}
			return err
		}
		prods[i] = p
	}
	stamp := onAck != nil
	if run.start.IsZero() { // e2e starts the clock (and its progress) itself
		run.start = time.Now()
	}
	end := run.start.Add(o.duration)
	if onAck == nil { // e2e reports progress from its consumer side
		defer run.startProgress(ctx, progress)()
	}
	var wg sync.WaitGroup
	for i, prod := range prods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var interval time.Duration
			next := run.start
			if o.rate > 0 {
				interval = time.Duration(float64(o.producers) / o.rate * float64(time.Second))
				next = run.start.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))
			}
			for ctx.Err() == nil {
				sched := time.Now()
				if o.rate > 0 {
					if !next.Before(end) {
						break
					}
					if wait := time.Until(next); wait > 50*time.Microsecond {
						select {
						case <-ctx.Done():
							return
						case <-time.After(wait):
						}
					}
					sched, next = next, next.Add(interval)
				} else if !sched.Before(end) {
					break
				}
				rec := &client.Record{Topic: o.topic, Partition: -1, Value: benchValue(payload, sched, stamp), Offset: -1}
				err := prod.Produce(ctx, rec, func(r *client.Record, err error) {
					now := time.Now()
					if err != nil {
						run.fail(err)
						return
					}
					run.records.Add(1)
					run.bytes.Add(int64(len(r.Value)))
					run.observe(latPublishAck, now.Sub(sched))
					if onAck != nil {
						onAck(r, now)
					}
				})
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					run.fail(err)
				}
			}
		}()
	}
	wg.Wait()
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchFlushTimeout)
	defer cancel()
	if ctx.Err() != nil { // Ctrl-C: do not wait long
		var c2 context.CancelFunc
		flushCtx, c2 = context.WithTimeout(flushCtx, 3*time.Second)
		defer c2()
	}
	var closeErrs []error
	for _, p := range prods {
		if err := p.Close(flushCtx); err != nil {
			closeErrs = append(closeErrs, err)
		}
	}
	if len(closeErrs) > 0 && run.errs.Load() == 0 {
		run.fail(fmt.Errorf("flush: %w", errors.Join(closeErrs...)))
	}
	return nil
}

// benchConsume reads the topic from the earliest offset until every
// partition reached the end it had when the benchmark started, or
// --duration passed.
func benchConsume(ctx context.Context, progress io.Writer, c *client.Client, o *benchOptions, run *benchRun) error {
	ends, err := partitionEnds(ctx, c, o.topic, run.partitions)
	if err != nil {
		return err
	}
	cons, err := c.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		return err
	}
	defer cons.Close()
	assign := map[client.TopicPartition]client.Offset{}
	for tp := range ends {
		assign[tp] = client.OffsetEarliest()
	}
	if err := cons.Assign(ctx, assign); err != nil {
		return err
	}
	run.start = time.Now()
	runCtx, cancel := context.WithDeadline(ctx, run.start.Add(o.duration))
	defer cancel()
	defer run.startProgress(runCtx, progress)()
	done := func() bool {
		for tp, end := range ends {
			if pos, ok := cons.Position(tp); !ok || pos < end {
				if !ok && end == 0 {
					continue
				}
				return false
			}
		}
		return true
	}
	for !done() {
		pollCtx, cancelPoll := context.WithTimeout(runCtx, time.Second)
		recs, err := cons.Poll(pollCtx)
		cancelPoll()
		if runCtx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			run.fail(err)
			return nil
		}
		var b int64
		for _, r := range recs {
			b += int64(len(r.Key) + len(r.Value))
		}
		run.records.Add(int64(len(recs)))
		run.bytes.Add(b)
	}
	return nil
}

// partitionEnds returns each partition's current high watermark.
func partitionEnds(ctx context.Context, c *client.Client, topic string, n int32) (map[client.TopicPartition]int64, error) {
	ends := map[client.TopicPartition]int64{}
	for p := range n {
		tp := client.TopicPartition{Topic: topic, Partition: p}
		resp, err := c.ListOffsets(ctx, tp, -1)
		if err != nil {
			return nil, fmt.Errorf("end of %s: %w", tp, err)
		}
		ends[tp] = resp.GetOffset()
	}
	return ends, nil
}

// benchE2E produces at --rate while a consumer tails every partition from
// its current end.
func benchE2E(ctx context.Context, progress io.Writer, c *client.Client, o *benchOptions, pcfg client.ProducerConfig, run *benchRun) error {
	ends, err := partitionEnds(ctx, c, o.topic, run.partitions)
	if err != nil {
		return err
	}
	cons, err := c.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		return err
	}
	defer cons.Close()
	assign := map[client.TopicPartition]client.Offset{}
	for tp, end := range ends {
		assign[tp] = client.OffsetAt(end)
	}
	if err := cons.Assign(ctx, assign); err != nil {
		return err
	}

	// A record's ack and its consumption race: whichever comes second
	// computes ack->consume.
	type key struct {
		p int32
		o int64
	}
	var (
		mu       sync.Mutex
		acked    = map[key]time.Time{}
		consumed = map[key]time.Time{}
		ackCount atomic.Int64
		seen     atomic.Int64
	)
	onAck := func(r *client.Record, at time.Time) {
		ackCount.Add(1)
		k := key{r.Partition, r.Offset}
		mu.Lock()
		defer mu.Unlock()
		if ct, ok := consumed[k]; ok {
			delete(consumed, k)
			run.observe(latAckConsume, max(0, ct.Sub(at)))
			return
		}
		acked[k] = at
	}
	consCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	var consumeErr error
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		for consCtx.Err() == nil {
			recs, err := cons.Poll(consCtx)
			if err != nil {
				if consCtx.Err() == nil {
					consumeErr = err
				}
				return
			}
			now := time.Now()
			for _, r := range recs {
				if len(r.Value) >= 8 {
					sched := time.Unix(0, int64(binary.BigEndian.Uint64(r.Value)))
					run.observe(latPublishConsume, now.Sub(sched))
				}
				k := key{r.Partition, r.Offset}
				mu.Lock()
				if at, ok := acked[k]; ok {
					delete(acked, k)
					run.observe(latAckConsume, now.Sub(at))
				} else {
					consumed[k] = now
				}
				mu.Unlock()
			}
			seen.Add(int64(len(recs)))
		}
	}()
	run.start = time.Now()
	defer run.startProgress(consCtx, progress)()
	if err := benchProduce(ctx, io.Discard, c, o, pcfg, run, onAck); err != nil {
		return err
	}
	// Let the consumer catch up with every acknowledged record.
	deadline := time.Now().Add(benchFlushTimeout)
	for seen.Load() < ackCount.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-consumerDone:
			deadline = time.Now()
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopConsumer()
	<-consumerDone
	if consumeErr != nil {
		run.fail(fmt.Errorf("consume: %w", consumeErr))
	}
	if missing := ackCount.Load() - seen.Load(); missing > 0 {
		run.fail(fmt.Errorf("consumer saw %d of %d acknowledged records", seen.Load(), ackCount.Load()))
	}
	return nil
}

type benchSummary struct {
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

func printBenchSummary(p *cli.Printer, run *benchRun, elapsed time.Duration) error {
	s := summarizeBench(run, elapsed)
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

// summarizeBench computes a run's summary (rates over elapsed, latency
// quantiles in milliseconds).
func summarizeBench(run *benchRun, elapsed time.Duration) benchSummary {
	secs := max(elapsed.Seconds(), 1e-9)
	s := benchSummary{Mode: run.mode, Topic: run.topic, Partitions: run.partitions, Seconds: elapsed.Seconds(),
		Records: run.records.Load(), Bytes: run.bytes.Load(), Errors: run.errs.Load(), Latency: []benchsuite.Latency{}}
	s.RecordsPerSec, s.MBPerSec = float64(s.Records)/secs, float64(s.Bytes)/secs/1e6
	if run.firstErr != nil {
		s.FirstError = run.firstErr.Error()
	}
	ms := func(v int64) float64 { return float64(v) / 1e6 }
	run.mu.Lock()
	for _, k := range run.kinds {
		h := run.lat[k]
		s.Latency = append(s.Latency, benchsuite.Latency{Kind: strings.ReplaceAll(k, "->", "_to_"), Count: h.Count(), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
			P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: h.Mean() / 1e6})
	}
	run.mu.Unlock()
	return s
}
