package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/group"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
)

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
				return group.PrintList(g.printer(cmd), groups)
			})
		}),
	}
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
				out, err := group.Describe(ctx, c, args[0], time.Now())
				if err != nil {
					return err
				}
				return group.Print(g.printer(cmd), out)
			})
		}),
	}
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

func runResetOffsets(ctx context.Context, cmd *cobra.Command, g *globalOptions, c *client.Client, name string, o *resetOptions, target resetTarget) error {
	plan, err := group.PlanReset(ctx, c, name, o.topic, group.ResetTarget{Timestamp: target.timestamp, Offset: target.offset})
	if err != nil {
		return err
	}
	if o.execute {
		if err := plan.Execute(ctx, c); err != nil {
			return err
		}
	}
	return group.PrintPlan(g.printer(cmd), plan)
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
func runGroupConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, f consumeFlags, topic string) error {
	if o.partition >= 0 {
		return cli.Exit(cli.ExitUsage, errors.New("-p cannot be used with -g: the group assigns partitions"))
	}
	setupCtx, cancel := g.commandContext(cmd)
	c, err := g.brokerClient(setupCtx)
	if err != nil {
		cancel()
		return err
	}
	defer c.Close()
	if _, err := stream.PartitionCount(setupCtx, c, topic); err != nil {
		cancel()
		return err
	}
	cancel()
	member, err := stream.JoinGroup(c, o.group, topic, stream.ClientOffset(f.spec), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer member.Leave(g.timeout)
	loop := stream.Loop{Count: o.count, ExitAtEnd: o.exitAtEnd, PollTimeout: stream.EndCheck,
		BeforePoll: member.CommitIfDue, Printed: member.Printed}
	return loop.Run(cmd.Context(), member, stream.NewRecordWriter(cmd.OutOrStdout(), f.format))
}
