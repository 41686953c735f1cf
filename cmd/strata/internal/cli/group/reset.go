package group

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
)

// ResetTarget says where a reset puts each partition: a ListOffsets
// timestamp (-2 the log start, -1 the end, or ms), or an absolute offset
// when Offset >= 0.
type ResetTarget struct {
	Timestamp int64
	Offset    int64 // >= 0: absolute
}

// PlanRow is one partition of a reset plan.
type PlanRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Current   int64  `json:"current"` // -1: nothing committed
	New       int64  `json:"new"`
}

// Plan is a reset of a group's offsets on one topic: `strata group
// reset-offsets --output json`.
type Plan struct {
	Group    string    `json:"group"`
	Executed bool      `json:"executed"`
	Rows     []PlanRow `json:"plan"`
}

// PlanReset computes the new offsets of group for every partition of
// topic. A group with members is refused (G3).
func PlanReset(ctx context.Context, a Admin, group, topic string, target ResetTarget) (*Plan, error) {
	d, err := a.DescribeGroup(ctx, group)
	switch {
	case errors.Is(err, client.ErrUnknownGroup):
	case err != nil:
		return nil, err
	case len(d.GetMembers()) > 0:
		return nil, fmt.Errorf("group %s has %d members (state %s): stop them before resetting offsets", group, len(d.GetMembers()), d.GetState())
	}
	n, err := stream.PartitionCount(ctx, a, topic)
	if err != nil {
		return nil, err
	}
	var tps []client.TopicPartition
	for p := range n {
		tps = append(tps, client.TopicPartition{Topic: topic, Partition: p})
	}
	current, err := a.FetchOffsets(ctx, group, tps...)
	if err != nil {
		return nil, err
	}
	cur := map[client.TopicPartition]int64{}
	for _, co := range current {
		cur[client.TopicPartition{Topic: co.GetTopic(), Partition: co.GetPartition()}] = co.GetOffset()
	}
	plan := &Plan{Group: group}
	for _, tp := range tps {
		off, err := target.resolve(ctx, a, tp)
		if err != nil {
			return nil, err
		}
		current, ok := cur[tp]
		if !ok {
			current = -1
		}
		plan.Rows = append(plan.Rows, PlanRow{Topic: tp.Topic, Partition: tp.Partition, Current: current, New: off})
	}
	return plan, nil
}

// resolve is tp's new offset.
func (t ResetTarget) resolve(ctx context.Context, a Admin, tp client.TopicPartition) (int64, error) {
	if t.Offset >= 0 {
		lo, err := a.ListOffsets(ctx, tp, -2)
		if err != nil {
			return 0, err
		}
		return min(max(t.Offset, lo.GetLogStartOffset()), lo.GetHighWatermark()), nil
	}
	lo, err := a.ListOffsets(ctx, tp, t.Timestamp)
	if err != nil {
		return 0, err
	}
	return lo.GetOffset(), nil
}

// Execute commits the plan's new offsets.
func (p *Plan) Execute(ctx context.Context, a Admin) error {
	offsets := map[client.TopicPartition]int64{}
	for _, r := range p.Rows {
		offsets[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.New
	}
	if err := a.CommitGroupOffsets(ctx, p.Group, offsets); err != nil {
		return err
	}
	p.Executed = true
	return nil
}

// PrintPlan prints the plan: JSON, or a table and whether it was applied.
func PrintPlan(pr *cli.Printer, p *Plan) error {
	if pr.Format == cli.FormatJSON {
		return pr.JSON(p)
	}
	tw := tabwriter.NewWriter(pr.W, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW")
	for _, r := range p.Rows {
		curStr := "-"
		if r.Current >= 0 {
			curStr = fmt.Sprint(r.Current)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", r.Topic, r.Partition, curStr, r.New)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if p.Executed {
		_, err = fmt.Fprintf(pr.W, "committed new offsets of group %s\n", p.Group)
	} else {
		_, err = fmt.Fprintln(pr.W, "plan only: nothing changed (add --execute to apply)")
	}
	return err
}
