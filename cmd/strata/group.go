package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// groupCommitInterval is how often consume -g commits what it printed.
const groupCommitInterval = 5 * time.Second

func newGroupCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "group", Short: "List, describe, reset and delete consumer groups"}
	cmd.AddCommand(newGroupListCommand(g), newGroupDescribeCommand(g), newGroupResetOffsetsCommand(g), newGroupDeleteCommand(g))
	return cmd
}

func newGroupListCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List consumer groups with their state and member count",
		Args:  cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				groups, err := c.ListGroups(ctx)
				if err != nil {
					return err
				}
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					type row struct {
						Group       string `json:"group"`
						State       string `json:"state"`
						Members     int32  `json:"members"`
						Coordinator string `json:"coordinator"`
					}
					rows := []row{}
					for _, gr := range groups {
						rows = append(rows, row{gr.GetGroupId(), gr.GetState(), gr.GetMembers(), gr.GetCoordinatorId()})
					}
					return p.JSON(rows)
				}
				tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
				fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS\tCOORDINATOR")
				for _, gr := range groups {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", gr.GetGroupId(), gr.GetState(), gr.GetMembers(), gr.GetCoordinatorId())
				}
				return tw.Flush()
			})
		}),
	}
}

// groupJSON is `strata group describe` in JSON.
type groupJSON struct {
	Group       string          `json:"group"`
	State       string          `json:"state"`
	Epoch       int32           `json:"epoch"`
	Coordinator string          `json:"coordinator"`
	Members     []memberJSON    `json:"members"`
	Partitions  []groupPartJSON `json:"partitions"`
}

type memberJSON struct {
	ID         string   `json:"id"`
	Client     string   `json:"client"`
	Host       string   `json:"host"`
	Epoch      int32    `json:"epoch"`
	Topics     []string `json:"topics"`
	Assignment []string `json:"assignment"`
	Owned      []string `json:"owned"`
}

// groupPartJSON is one partition's progress. Committed and Lag are -1 when
// nothing is committed; LagMs is how old the first unconsumed record is
// (0 when caught up, -1 when unknown). BelowLogStart: retention deleted
// records the group had not consumed (the committed offset is below the
// log start, LogStart; -1 when unknown); the group resumes at the log
// start (or its reset policy) and those records are lost to it.
type groupPartJSON struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	Committed     int64  `json:"committed"`
	LogStart      int64  `json:"log_start"`
	End           int64  `json:"end"`
	Lag           int64  `json:"lag"`
	LagMs         int64  `json:"lag_ms"`
	BelowLogStart bool   `json:"below_log_start"`
	Owner         string `json:"owner,omitempty"`
}

func newGroupDescribeCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show a group's members and, per partition, committed offset, end and lag",
		Long: `Shows the group's state and members (id, client, host, epoch, assignment),
and for every partition of the subscribed topics (and every partition with a
committed offset): the committed offset, the end offset (high watermark),
the lag in records (end - committed) and the lag in time: how long ago the
first record not yet committed was written (0 when caught up). A committed
offset below the partition's log start is marked with '*': retention deleted
records the group had not read.`,
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				out, err := describeGroup(ctx, c, args[0], time.Now())
				if err != nil {
					return err
				}
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(out)
				}
				return printGroup(p.W, out)
			})
		}),
	}
}

func tpStrings(tps []*brokerpb.TopicPartitions) []string {
	out := []string{}
	for _, t := range tps {
		for _, p := range t.GetPartitions() {
			out = append(out, fmt.Sprintf("%s/%d", t.GetTopic(), p))
		}
	}
	return out
}

// describeGroup collects the group's members and per-partition lag.
func describeGroup(ctx context.Context, c *client.Client, group string, now time.Time) (*groupJSON, error) {
	d, err := c.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	out := &groupJSON{Group: d.GetGroupId(), State: d.GetState(), Epoch: d.GetGroupEpoch(), Coordinator: d.GetCoordinatorId(),
		Members: []memberJSON{}, Partitions: []groupPartJSON{}}
	topics := map[string]bool{}
	owner := map[client.TopicPartition]string{}
	for _, m := range d.GetMembers() {
		out.Members = append(out.Members, memberJSON{ID: m.GetMemberId(), Client: m.GetClientId(), Host: m.GetClientHost(),
			Epoch: m.GetMemberEpoch(), Topics: m.GetSubscribedTopics(), Assignment: tpStrings(m.GetAssignment()), Owned: tpStrings(m.GetOwned())})
		for _, t := range m.GetSubscribedTopics() {
			topics[t] = true
		}
		for _, t := range m.GetAssignment() {
			for _, p := range t.GetPartitions() {
				owner[client.TopicPartition{Topic: t.GetTopic(), Partition: p}] = m.GetMemberId()
			}
		}
	}
	committed := map[client.TopicPartition]int64{}
	for _, o := range d.GetOffsets() {
		committed[client.TopicPartition{Topic: o.GetTopic(), Partition: o.GetPartition()}] = o.GetOffset()
		topics[o.GetTopic()] = true
	}
	var tps []client.TopicPartition
	for _, t := range slices.Sorted(func(yield func(string) bool) {
		for t := range topics {
			if !yield(t) {
				return
			}
		}
	}) {
		n, err := partitionCount(ctx, c, t)
		if err != nil {
			// A deleted topic keeps its commits: show them.
			for tp := range committed {
				if tp.Topic == t {
					tps = append(tps, tp)
				}
			}
			continue
		}
		for p := range n {
			tps = append(tps, client.TopicPartition{Topic: t, Partition: p})
		}
	}
	slices.SortFunc(tps, func(a, b client.TopicPartition) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return int(a.Partition - b.Partition)
	})
	lagging := map[client.TopicPartition]int64{}
	for _, tp := range tps {
		row := groupPartJSON{Topic: tp.Topic, Partition: tp.Partition, Committed: -1, LogStart: -1, End: -1, Lag: -1, LagMs: -1, Owner: owner[tp]}
		if off, ok := committed[tp]; ok {
			row.Committed = off
		}
		if lo, err := c.ListOffsets(ctx, tp, -1); err == nil {
			row.End, row.LogStart = lo.GetOffset(), lo.GetLogStartOffset()
			row.BelowLogStart = row.Committed >= 0 && row.Committed < row.LogStart
			if row.Committed >= 0 {
				row.Lag = max(row.End-row.Committed, 0)
				if row.Lag == 0 {
					row.LagMs = 0
				} else {
					lagging[tp] = row.Committed
				}
			}
		}
		out.Partitions = append(out.Partitions, row)
	}
	if len(lagging) > 0 {
		ts := firstTimestamps(ctx, c, lagging)
		for i := range out.Partitions {
			row := &out.Partitions[i]
			if t, ok := ts[client.TopicPartition{Topic: row.Topic, Partition: row.Partition}]; ok {
				row.LagMs = max(now.Sub(t).Milliseconds(), 0)
			}
		}
	}
	return out, nil
}

// firstTimestamps reads, for each partition, the first record at or after
// the given offset and returns its timestamp (within 3 s; partitions that
// yield nothing are left out).
func firstTimestamps(ctx context.Context, c *client.Client, from map[client.TopicPartition]int64) map[client.TopicPartition]time.Time {
	out := map[client.TopicPartition]time.Time{}
	cons, err := c.NewConsumer(client.ConsumerConfig{MaxWait: 200 * time.Millisecond, PartitionMaxBytes: 64 << 10})
	if err != nil {
		return out
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	assign := map[client.TopicPartition]client.Offset{}
	for tp, off := range from {
		assign[tp] = client.OffsetAt(off)
	}
	if err := cons.Assign(ctx, assign); err != nil {
		return out
	}
	for len(out) < len(from) {
		recs, err := cons.Poll(ctx)
		if err != nil && ctx.Err() != nil {
			return out
		}
		for _, r := range recs {
			tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
			if _, done := out[tp]; !done && r.Offset >= from[tp] {
				out[tp] = r.Timestamp
				cons.Unassign(tp)
			}
		}
	}
	return out
}

func printGroup(w io.Writer, g *groupJSON) error {
	fmt.Fprintf(w, "group %s: state %s, epoch %d, coordinator %s, %d members\n", g.Group, g.State, g.Epoch, g.Coordinator, len(g.Members))
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	if len(g.Members) > 0 {
		fmt.Fprintln(tw, "\nMEMBER\tCLIENT\tHOST\tEPOCH\tASSIGNMENT")
		for _, m := range g.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.ID, m.Client, m.Host, m.Epoch, strings.Join(m.Assignment, ","))
		}
	}
	fmt.Fprintln(tw, "\nTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tLAG-TIME\tOWNER")
	dash := func(n int64) string {
		if n < 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	var below []string
	for _, p := range g.Partitions {
		if p.BelowLogStart {
			below = append(below, fmt.Sprintf("%s/%d: committed %d, log start %d (%d records deleted by retention before the group read them)",
				p.Topic, p.Partition, p.Committed, p.LogStart, p.LogStart-p.Committed))
		}
		lagTime := "-"
		if p.LagMs >= 0 {
			lagTime = (time.Duration(p.LagMs) * time.Millisecond).String()
		}
		owner := p.Owner
		if owner == "" {
			owner = "-"
		}
		committed := dash(p.Committed)
		if p.BelowLogStart {
			committed += "*"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, committed, dash(p.End), dash(p.Lag), lagTime, owner)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(below) > 0 {
		fmt.Fprintf(w, "\n* committed offset below the log start:\n  %s\n", strings.Join(below, "\n  "))
	}
	return nil
}

type resetOptions struct {
	topic      string
	toEarliest bool
	toLatest   bool
	toOffset   int64
	toDatetime string
	byDuration time.Duration
	execute    bool
}

// resetPlanRow is one partition of a reset plan.
type resetPlanRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Current   int64  `json:"current"` // -1: nothing committed
	New       int64  `json:"new"`
}

func newGroupResetOffsetsCommand(g *globalOptions) *cobra.Command {
	cmd, _ := resetOffsetsCommand(g)
	return cmd
}

// resetOffsetsCommand returns the command and the options its flags fill.
func resetOffsetsCommand(g *globalOptions) (*cobra.Command, *resetOptions) {
	o := &resetOptions{toOffset: -1}
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP --topic T (--to-earliest|--to-latest|--to-offset N|--to-datetime T|--by-duration D) [--execute]",
		Short: "Plan (and with --execute apply) new committed offsets for a group without members",
		Long: `Computes new committed offsets of GROUP for every partition of --topic and
prints the plan (partition, current, new). Nothing changes without --execute.
The group must have no members (stop its consumers first).

  --to-earliest       the log start
  --to-latest         the end (skip everything not yet consumed)
  --to-offset N       offset N (clamped to the log start and end)
  --to-datetime T     the first record at or after T (RFC 3339, e.g. 2026-01-02T15:04:05Z)
  --by-duration D     the first record at or after now-D (Go duration, e.g. 1h30m)`,
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			target, err := o.target(cmd, time.Now())
			if err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				return runResetOffsets(ctx, cmd, g, c, args[0], o, target)
			})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.topic, "topic", "", "topic whose partitions to reset (required)")
	f.BoolVar(&o.toEarliest, "to-earliest", false, "reset to the log start")
	f.BoolVar(&o.toLatest, "to-latest", false, "reset to the end")
	f.Int64Var(&o.toOffset, "to-offset", -1, "reset to offset N")
	f.StringVar(&o.toDatetime, "to-datetime", "", "reset to the first record at or after this RFC 3339 time")
	f.DurationVar(&o.byDuration, "by-duration", 0, "reset to the first record at or after now minus this duration")
	f.BoolVar(&o.execute, "execute", false, "apply the plan (default: only print it)")
	return cmd, o
}

// resetTarget resolves a reset for one partition: a ListOffsets timestamp
// (-2, -1 or ms), or an absolute offset when timestamp is unused.
type resetTarget struct {
	timestamp int64
	offset    int64 // >= 0: absolute
}

func (o *resetOptions) target(cmd *cobra.Command, now time.Time) (resetTarget, error) {
	n := 0
	var t resetTarget
	t.offset = -1
	if o.toEarliest {
		n, t.timestamp = n+1, -2
	}
	if o.toLatest {
		n, t.timestamp = n+1, -1
	}
	if cmd.Flags().Changed("to-offset") {
		if o.toOffset < 0 {
			return t, fmt.Errorf("--to-offset %d: want 0 or more", o.toOffset)
		}
		n, t.offset = n+1, o.toOffset
	}
	if o.toDatetime != "" {
		at, err := time.Parse(time.RFC3339, o.toDatetime)
		if err != nil {
			return t, fmt.Errorf("--to-datetime: %w", err)
		}
		n, t.timestamp = n+1, at.UnixMilli()
	}
	if cmd.Flags().Changed("by-duration") {
		if o.byDuration <= 0 {
			return t, fmt.Errorf("--by-duration %s: want a positive duration", o.byDuration)
		}
		n, t.timestamp = n+1, now.Add(-o.byDuration).UnixMilli()
	}
	if n != 1 {
		return t, errors.New("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --by-duration")
	}
	if o.topic == "" {
		return t, errors.New("--topic is required")
	}
	return t, nil
}

func runResetOffsets(ctx context.Context, cmd *cobra.Command, g *globalOptions, c *client.Client, group string, o *resetOptions, target resetTarget) error {
	d, err := c.DescribeGroup(ctx, group)
	switch {
	case errors.Is(err, client.ErrUnknownGroup):
	case err != nil:
		return err
	case len(d.GetMembers()) > 0:
		return fmt.Errorf("group %s has %d members (state %s): stop them before resetting offsets", group, len(d.GetMembers()), d.GetState())
	}
	n, err := partitionCount(ctx, c, o.topic)
	if err != nil {
		return err
	}
	var tps []client.TopicPartition
	for p := range n {
		tps = append(tps, client.TopicPartition{Topic: o.topic, Partition: p})
	}
	current, err := c.FetchOffsets(ctx, group, tps...)
	if err != nil {
		return err
	}
	cur := map[client.TopicPartition]int64{}
	for _, co := range current {
		cur[client.TopicPartition{Topic: co.GetTopic(), Partition: co.GetPartition()}] = co.GetOffset()
	}
	var plan []resetPlanRow
	offsets := map[client.TopicPartition]int64{}
	for _, tp := range tps {
		var off int64
		if target.offset >= 0 {
			lo, err := c.ListOffsets(ctx, tp, -2)
			if err != nil {
				return err
			}
			off = min(max(target.offset, lo.GetLogStartOffset()), lo.GetHighWatermark())
		} else {
			lo, err := c.ListOffsets(ctx, tp, target.timestamp)
			if err != nil {
				return err
			}
			off = lo.GetOffset()
		}
		current, ok := cur[tp]
		if !ok {
			current = -1
		}
		plan = append(plan, resetPlanRow{Topic: tp.Topic, Partition: tp.Partition, Current: current, New: off})
		offsets[tp] = off
	}
	if o.execute {
		if err := c.CommitGroupOffsets(ctx, group, offsets); err != nil {
			return err
		}
	}
	p := g.printer(cmd)
	if p.Format == cli.FormatJSON {
		return p.JSON(struct {
			Group    string         `json:"group"`
			Executed bool           `json:"executed"`
			Plan     []resetPlanRow `json:"plan"`
		}{group, o.execute, plan})
	}
	tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW")
	for _, r := range plan {
		curStr := "-"
		if r.Current >= 0 {
			curStr = fmt.Sprint(r.Current)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", r.Topic, r.Partition, curStr, r.New)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.execute {
		_, err = fmt.Fprintf(p.W, "committed new offsets of group %s\n", group)
	} else {
		_, err = fmt.Fprintln(p.W, "plan only: nothing changed (add --execute to apply)")
	}
	return err
}

func newGroupDeleteCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP",
		Short: "Delete a group without members and its committed offsets",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.DeleteGroup(ctx, args[0]); err != nil {
					return err
				}
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(map[string]string{"deleted": args[0]})
				}
				_, err := fmt.Fprintf(p.W, "deleted group %s\n", args[0])
				return err
			})
		}),
	}
}

// runGroupConsume is `strata consume TOPIC -g GROUP`: it joins GROUP and
// prints the records of the partitions the coordinator assigns, resuming
// from the group's committed offsets (-o applies only to partitions with
// nothing committed). It commits exactly what it printed: every 5 s, when
// a partition is revoked, and on exit (-n reached, -e, Ctrl-C). -p is not
// allowed with -g; -e exits once every partition this member owns is at
// its end. Assignment changes are reported on stderr.
func runGroupConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic string) error {
	usage := func(err error) error { return cli.Exit(cli.ExitUsage, err) }
	spec, err := cli.ParseOffset(o.offset, time.Now())
	if err != nil {
		return usage(fmt.Errorf("-o: %w", err))
	}
	format, err := cli.ParseRecordFormat(o.format)
	if err != nil {
		return usage(fmt.Errorf("-f: %w", err))
	}
	if o.count < 0 {
		return usage(fmt.Errorf("-n %d: want 0 or more", o.count))
	}
	if o.partition >= 0 {
		return usage(errors.New("-p cannot be used with -g: the group assigns partitions"))
	}

	ctx := cmd.Context()
	setupCtx, cancel := g.commandContext(cmd)
	c, err := g.brokerClient(setupCtx)
	if err != nil {
		cancel()
		return err
	}
	defer c.Close()
	if _, err := partitionCount(setupCtx, c, topic); err != nil {
		cancel()
		return err
	}
	cancel()

	stderr := cmd.ErrOrStderr()
	gp := &printedPositions{pos: map[client.TopicPartition]int64{}}
	// The callbacks may run before NewGroupConsumer returns.
	var member atomic.Pointer[client.GroupConsumer]
	report := func(what string, tps []client.TopicPartition) {
		var s []string
		for _, tp := range tps {
			s = append(s, tp.String())
		}
		fmt.Fprintf(stderr, "strata: group %s: %s %s\n", o.group, what, strings.Join(s, ","))
	}
	gc, err := c.NewGroupConsumer(client.GroupConfig{
		Group:             o.group,
		Topics:            []string{topic},
		DisableAutoCommit: true, // commit what was printed, not what was polled
		ResetOffset:       clientOffset(spec),
		OnAssigned:        func(_ context.Context, tps []client.TopicPartition) { report("assigned", tps) },
		OnRevoked: func(ctx context.Context, tps []client.TopicPartition) {
			offsets := gp.take(tps)
			if gc := member.Load(); gc == nil {
				fmt.Fprintf(stderr, "strata: group %s: revoked before start: not committed\n", o.group)
			} else if err := gc.CommitOffsets(ctx, offsets); err != nil {
				fmt.Fprintf(stderr, "strata: group %s: commit on revoke: %v\n", o.group, err)
			}
			report("revoked", tps)
		},
		OnLost: func(_ context.Context, tps []client.TopicPartition) {
			gp.take(tps)
			report("lost", tps)
		},
	})
	if err != nil {
		return err
	}
	member.Store(gc)
	commit := func(ctx context.Context) {
		if err := gc.CommitOffsets(ctx, gp.snapshot(gc.Assignment())); err != nil {
			fmt.Fprintf(stderr, "strata: group %s: commit: %v\n", o.group, err)
		}
	}
	defer func() {
		// Close runs OnRevoked for what the member owns: that commits
		// what was printed.
		cctx, cancel := context.WithTimeout(context.Background(), g.timeout)
		defer cancel()
		if err := gc.Close(cctx); err != nil {
			fmt.Fprintf(stderr, "strata: group %s: leave: %v\n", o.group, err)
		}
	}()

	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	defer out.Flush()
	asJSON := g.format == cli.FormatJSON
	var (
		printed    int64
		buf        []byte
		cr         cli.ConsumedRecord
		lastCommit = time.Now()
	)
	for {
		if time.Since(lastCommit) >= groupCommitInterval {
			commit(ctx)
			lastCommit = time.Now()
		}
		if o.exitAtEnd && groupAtEnd(gc) {
			return nil
		}
		pollCtx, cancelPoll := context.WithTimeout(ctx, consumeEndCheck)
		recs, err := gc.Poll(pollCtx)
		cancelPoll()
		if ctx.Err() != nil {
			return nil // Ctrl-C: a clean stop (the deferred commit runs)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		for _, r := range recs {
			cr = cli.ConsumedRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				TimestampMs: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value, Headers: cr.Headers[:0]}
			for _, h := range r.Headers {
				cr.Headers = append(cr.Headers, cli.RecordHeader{Key: h.Key, Value: h.Value})
			}
			if asJSON {
				b, err := json.Marshal(cli.NewJSONRecord(&cr))
				if err != nil {
					return err
				}
				buf = append(append(buf[:0], b...), '\n')
			} else {
				buf = format.Append(buf[:0], &cr)
			}
			if _, err := out.Write(buf); err != nil {
				return err
			}
			gp.printed(r)
			printed++
			if o.count > 0 && printed >= o.count {
				return out.Flush()
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

// printedPositions is, per partition, the offset after the last record
// consume -g printed: what it commits.
type printedPositions struct {
	mu  sync.Mutex
	pos map[client.TopicPartition]int64
}

func (p *printedPositions) printed(r *client.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pos[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
}

// snapshot returns the positions of the owned partitions.
func (p *printedPositions) snapshot(owned []client.TopicPartition) map[client.TopicPartition]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[client.TopicPartition]int64, len(owned))
	for _, tp := range owned {
		if off, ok := p.pos[tp]; ok {
			out[tp] = off
		}
	}
	return out
}

// take returns the positions of tps and forgets them.
func (p *printedPositions) take(tps []client.TopicPartition) map[client.TopicPartition]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[client.TopicPartition]int64{}
	for _, tp := range tps {
		if off, ok := p.pos[tp]; ok {
			out[tp] = off
			delete(p.pos, tp)
		}
	}
	return out
}

// groupAtEnd: the member owns partitions and each is at its high watermark.
func groupAtEnd(gc *client.GroupConsumer) bool {
	owned := gc.Assignment()
	if len(owned) == 0 {
		return false
	}
	for _, tp := range owned {
		pos, ok := gc.Position(tp)
		hw, known := gc.HighWatermark(tp)
		if !ok || !known || pos < hw {
			return false
		}
	}
	return true
}
