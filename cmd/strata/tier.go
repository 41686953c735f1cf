package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/objstore/storeurl"
	"github.com/strata-log/strata/tiering/scrub"
)

func newTierCommand(g *globalOptions) *cobra.Command {
	tier := &cobra.Command{
		Use:   "tier",
		Short: "Tiered storage: what is in the object store and what waits, and a scrub of the objects",
	}
	tier.AddCommand(newTierStatusCommand(g), newTierScrubCommand(g))
	return tier
}

func newTierStatusCommand(g *globalOptions) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "status [TOPIC]",
		Short: "Per partition: what is in the object store, what is still on the bookies, and the upload lag",
		Long: "Shows, per partition (of TOPIC, or of every topic; internal topics only with --all), the log\n" +
			"start, the offset the objects reach (TIERED END), the objects and their bytes in the store,\n" +
			"the bytes and ledgers on the bookies, and the upload lag: the bytes of closed ledgers not yet\n" +
			"in an object, and how old they are (now minus the newest record of the oldest of them).\n" +
			"LAG is \"off\" for topics that are not tiered (remote.storage.enable=false, compacted,\n" +
			"internal). From the topic descriptions only: it does not read the store.",
		Args: cobra.MaximumNArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				descs, err := describeTopics(ctx, c, args, all)
				if err != nil {
					return err
				}
				rows := tierStatusRows(descs, time.Now())
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(map[string][]tierStatusJSON{"partitions": rows})
				}
				return printTierStatus(p.W, rows)
			})
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "include internal topics")
	return cmd
}

// describeTopics describes the topic named in args, or every topic (with
// internal ones when all), a few at a time. Topics deleted meanwhile are
// left out.
func describeTopics(ctx context.Context, c *client.Client, args []string, all bool) ([]*brokerpb.TopicDescription, error) {
	if len(args) == 1 {
		d, err := c.DescribeTopic(ctx, args[0])
		if err != nil {
			return nil, err
		}
		return []*brokerpb.TopicDescription{d}, nil
	}
	topics, err := c.ListTopics(ctx, all)
	if err != nil {
		return nil, err
	}
	descs := make([]*brokerpb.TopicDescription, len(topics))
	errs := make([]error, len(topics))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, t := range topics {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			descs[i], errs[i] = c.DescribeTopic(ctx, t.GetName())
			if status.Code(errs[i]) == codes.NotFound {
				errs[i] = nil
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(descs, func(d *brokerpb.TopicDescription) bool { return d == nil }), nil
}

// tierStatusJSON is one partition's line of `tier status`.
type tierStatusJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Tiering: the topic's configs let it be tiered (the broker still
	// needs a --tier-store).
	Tiering         bool  `json:"tiering"`
	LogStartOffset  int64 `json:"log_start_offset"`  // -1: unknown
	TieredEndOffset int64 `json:"tiered_end_offset"` // 0: nothing tiered
	TieredObjects   int32 `json:"tiered_objects"`
	TieredBytes     int64 `json:"tiered_bytes"`
	BookieBytes     int64 `json:"bookie_bytes"`
	BookieLedgers   int   `json:"bookie_ledgers"`
	// The upload lag: closed ledgers with offsets at or after the tiered
	// end, their bytes, and now minus the newest record of the oldest of
	// them (0 when none waits).
	LagLedgers int   `json:"upload_lag_ledgers"`
	LagBytes   int64 `json:"upload_lag_bytes"`
	LagMs      int64 `json:"upload_lag_ms"`
}

// tierStatusRows computes the status of every partition of descs, sorted
// by topic and partition.
func tierStatusRows(descs []*brokerpb.TopicDescription, now time.Time) []tierStatusJSON {
	rows := []tierStatusJSON{}
	for _, d := range descs {
		tiering := topicTiered(d)
		for _, p := range d.GetPartitions() {
			r := tierStatusJSON{Topic: d.GetName(), Partition: p.GetPartition(), Tiering: tiering,
				LogStartOffset: p.GetLogStartOffset(), TieredEndOffset: p.GetTieredEndOffset(),
				TieredObjects: p.GetTieredSegments(), TieredBytes: p.GetTieredBytes(),
				BookieBytes: p.GetBytes(), BookieLedgers: len(p.GetLedgers())}
			if tiering {
				r.LagLedgers, r.LagBytes, r.LagMs = uploadLag(p, now)
			}
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Topic != rows[j].Topic {
			return rows[i].Topic < rows[j].Topic
		}
		return rows[i].Partition < rows[j].Partition
	})
	return rows
}

// topicTiered reports whether a topic's configs let the broker tier it:
// remote.storage.enable, not internal (as the broker decides).
func topicTiered(d *brokerpb.TopicDescription) bool {
	if d.GetInternal() {
		return false
	}
	for _, c := range d.GetConfigs() {
		if c.GetName() == "remote.storage.enable" {
			return c.GetValue() == "true"
		}
	}
	return true
}

// uploadLag sums the closed, non-empty ledgers that reach past the tiered
// end offset (not yet in an object), and returns how old the oldest of
// them is: now minus its newest record's timestamp (0 if unknown or in the
// future).
func uploadLag(p *brokerpb.PartitionDescription, now time.Time) (ledgers int, bytes, ageMs int64) {
	oldest := int64(-1)
	for _, l := range p.GetLedgers() {
		if !l.GetClosed() || l.GetLastOffset() < l.GetFirstOffset() || l.GetLastOffset() < p.GetTieredEndOffset() {
			continue
		}
		ledgers++
		bytes += l.GetBytes()
		if ts := l.GetMaxTimestampMs(); ts > 0 && (oldest < 0 || ts < oldest) {
			oldest = ts
		}
	}
	if oldest > 0 {
		ageMs = max(0, now.UnixMilli()-oldest)
	}
	return ledgers, bytes, ageMs
}

func printTierStatus(w io.Writer, rows []tierStatusJSON) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tSTART\tTIERED END\tOBJECTS\tSTORE\tBOOKIES\tLEDGERS\tLAG\tLAG AGE")
	for _, r := range rows {
		start, end := "-", "-"
		if r.LogStartOffset >= 0 {
			start = strconv.FormatInt(r.LogStartOffset, 10)
		}
		if r.TieredObjects > 0 {
			end = strconv.FormatInt(r.TieredEndOffset, 10)
		}
		lag, age := "off", "-"
		switch {
		case r.Tiering && r.LagLedgers > 0:
			lag = fmt.Sprintf("%s in %s", cli.Bytes(uint64(max(0, r.LagBytes))), plural(r.LagLedgers, "ledger"))
			age = (time.Duration(r.LagMs) * time.Millisecond).Round(time.Second).String()
		case r.Tiering:
			lag = "0"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", r.Topic, r.Partition, start, end, r.TieredObjects,
			cli.Bytes(uint64(max(0, r.TieredBytes))), cli.Bytes(uint64(max(0, r.BookieBytes))), r.BookieLedgers, lag, age)
	}
	return tw.Flush()
}

// tierScrubOptions are the flags of `tier scrub`.
type tierScrubOptions struct {
	store    string
	topic    string
	parallel int
	progress bool
}

func newTierScrubCommand(g *globalOptions) *cobra.Command {
	var o tierScrubOptions
	cmd := &cobra.Command{
		Use:   "scrub --store URL",
		Short: "Check every committed segment object: present, of its size, every checksum, as recorded",
		Long: "Reads every partition's list of segment objects from metad and checks each object in the store\n" +
			"--store (the brokers' --tier-store URL; s3 credentials from AWS_ACCESS_KEY_ID and\n" +
			"AWS_SECRET_ACCESS_KEY): that it exists with the recorded size, that every byte passes its\n" +
			"checksum (it reads all of it), and that offsets, records, bytes and index position are what\n" +
			"metad records. Prints each problem (missing, truncated, size-mismatch, corrupt,\n" +
			"metadata-mismatch, unreadable) with topic/partition, offsets and key, progress on stderr when\n" +
			"it is a terminal (or with --progress), and a summary line. It only reads.\n" +
			"Exits 2 if any object is damaged, 1 if some could not be read, 0 otherwise. Without an\n" +
			"explicit --timeout it runs until done or interrupted (--timeout still bounds the metad reads).",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			return g.runTierScrub(cmd, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.store, "store", "", "the object store: s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&insecure=true] or file:///ABS/DIR")
	f.StringVar(&o.topic, "topic", "", "check only this topic's objects")
	f.IntVar(&o.parallel, "parallel", scrub.DefaultParallel, "objects verified at once")
	f.BoolVar(&o.progress, "progress", false, "show progress on stderr even when it is not a terminal")
	return cmd
}

// runTierScrub lists the segments, checks them, and prints the outcome.
func (g *globalOptions) runTierScrub(cmd *cobra.Command, o tierScrubOptions) error {
	switch {
	case o.store == "":
		return cli.Exit(cli.ExitUsage, errors.New("--store is required (the brokers' --tier-store URL)"))
	case o.parallel < 1:
		return cli.Exit(cli.ExitUsage, fmt.Errorf("--parallel %d: want at least 1", o.parallel))
	}
	if _, err := storeurl.Parse(o.store); err != nil {
		return cli.Exit(cli.ExitUsage, fmt.Errorf("--store: %w", err))
	}
	var segs []scrub.Segment
	err := g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) (err error) {
		segs, err = tieredSegments(ctx, c, o.topic)
		return err
	})
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if cmd.Flags().Changed("timeout") {
		var cancel context.CancelFunc
		ctx, cancel = g.commandContext(cmd)
		defer cancel()
	}
	store, err := storeurl.Open(ctx, o.store, storeurl.Options{})
	if err != nil {
		return err
	}
	if c, ok := store.(io.Closer); ok {
		defer c.Close()
	}
	p, stderr := g.printer(cmd), cmd.ErrOrStderr()
	line := cli.NewProgressLine(stderr, o.progress || cli.IsTerminal(stderr))
	cfg := scrub.Config{
		Parallel: o.parallel,
		Progress: func(pr scrub.Progress) { line.Update(scrubProgressText(pr)) },
	}
	if p.Format != cli.FormatJSON {
		cfg.Problem = func(pr scrub.Problem) {
			line.Clear()
			fmt.Fprintln(p.W, pr)
		}
	}
	start := time.Now()
	rep, err := scrub.Run(ctx, store, segs, cfg)
	line.Clear()
	fmt.Fprintln(stderr, scrubSummary(rep, len(segs), time.Since(start)))
	if err != nil {
		return err
	}
	if p.Format == cli.FormatJSON {
		if err := p.JSON(newScrubJSON(rep, len(segs))); err != nil {
			return err
		}
	}
	switch {
	case rep.Damaged() > 0:
		return cli.Exit(cli.ExitUsage, nil)
	case len(rep.Problems) > 0:
		return cli.Exit(cli.ExitRuntime, nil)
	}
	return nil
}

// tieredSegments lists the committed segment objects of every partition
// (of topic, when not empty) from the PartitionLogs in metad.
func tieredSegments(ctx context.Context, c *metaclient.Client, topic string) ([]scrub.Segment, error) {
	prefix := partlog.PartitionPrefix
	if topic != "" {
		prefix += topic + "/"
	}
	kvs, _, err := c.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if topic != "" && len(kvs) == 0 {
		return nil, fmt.Errorf("topic %s: no partition in metad", topic)
	}
	var segs []scrub.Segment
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.GetKey(), partlog.PartitionPrefix)
		i := strings.LastIndexByte(rest, '/')
		part, perr := strconv.ParseInt(rest[i+1:], 10, 32)
		if i < 0 || perr != nil {
			return nil, fmt.Errorf("metad key %s: not /strata/partitions/TOPIC/PARTITION", kv.GetKey())
		}
		var pl brokerpb.PartitionLog
		if err := proto.Unmarshal(kv.GetValue(), &pl); err != nil {
			return nil, fmt.Errorf("metad key %s: %w", kv.GetKey(), err)
		}
		for _, t := range pl.GetTiered() {
			segs = append(segs, scrub.Segment{Topic: rest[:i], Partition: int32(part), Tiered: t})
		}
	}
	return segs, nil
}

func scrubProgressText(p scrub.Progress) string {
	pct := 100.0
	if p.TotalBytes > 0 {
		pct = 100 * float64(p.Bytes) / float64(p.TotalBytes)
	}
	return fmt.Sprintf("scrub: %d/%d objects, %s/%s (%.0f%%), %s", p.Objects, p.TotalObjects,
		cli.Bytes(uint64(p.Bytes)), cli.Bytes(uint64(p.TotalBytes)), pct, plural(p.Problems, "problem"))
}

// scrubSummary is the last line of a scrub, on stderr.
func scrubSummary(rep scrub.Report, total int, elapsed time.Duration) string {
	s := fmt.Sprintf("scrub: checked %d of %d objects (%s) in %s: ", rep.Objects, total, cli.Bytes(uint64(rep.Bytes)),
		elapsed.Round(time.Millisecond))
	if len(rep.Problems) == 0 {
		return s + "no problems"
	}
	counts := rep.Counts()
	var kinds []string
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(kinds)
	return s + plural(len(rep.Problems), "problem") + " (" + strings.Join(kinds, ", ") + ")"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// scrubJSON is the JSON form of a scrub's report.
type scrubJSON struct {
	Objects      int                `json:"objects"`
	TotalObjects int                `json:"total_objects"`
	Bytes        int64              `json:"bytes"`
	Damaged      int                `json:"damaged"`
	Problems     []scrubProblemJSON `json:"problems"`
}

type scrubProblemJSON struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	BaseOffset int64  `json:"base_offset"`
	LastOffset int64  `json:"last_offset"`
	Key        string `json:"key"`
	Kind       string `json:"kind"`
	Detail     string `json:"detail"`
}

func newScrubJSON(rep scrub.Report, total int) scrubJSON {
	out := scrubJSON{Objects: rep.Objects, TotalObjects: total, Bytes: rep.Bytes, Damaged: rep.Damaged(),
		Problems: []scrubProblemJSON{}}
	for _, p := range rep.Problems {
		t := p.Segment.Tiered
		out.Problems = append(out.Problems, scrubProblemJSON{Topic: p.Segment.Topic, Partition: p.Segment.Partition,
			BaseOffset: t.GetBaseOffset(), LastOffset: t.GetLastOffset(), Key: t.GetObjectKey(), Kind: string(p.Kind), Detail: p.Detail})
	}
	return out
}
