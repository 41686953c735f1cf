package group

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Description is `strata group describe` in JSON.
type Description struct {
	Group       string      `json:"group"`
	State       string      `json:"state"`
	Epoch       int32       `json:"epoch"`
	Coordinator string      `json:"coordinator"`
	Members     []Member    `json:"members"`
	Partitions  []Partition `json:"partitions"`
}

// Member is one member of a described group.
type Member struct {
	ID         string   `json:"id"`
	Client     string   `json:"client"`
	Host       string   `json:"host"`
	Epoch      int32    `json:"epoch"`
	Topics     []string `json:"topics"`
	Assignment []string `json:"assignment"`
	Owned      []string `json:"owned"`
}

// Partition is one partition's progress (G1). LagMs is how old the first
// unconsumed record is. BelowLogStart: retention deleted records the
// group had not consumed (the committed offset is below the log start,
// LogStart; -1 when unknown); the group resumes at the log start (or its
// reset policy) and those records are lost to it.
type Partition struct {
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

// Describe collects the group's members and per-partition lag, the lag
// in time as of now.
func Describe(ctx context.Context, c *client.Client, group string, now time.Time) (*Description, error) {
	out, lagging, err := describe(ctx, c, group)
	if err != nil {
		return nil, err
	}
	if len(lagging) > 0 {
		out.fillLagTimes(FirstTimestamps(ctx, c, lagging), now)
	}
	return out, nil
}

// describe is Describe without the lag in time; lagging is, for each
// partition behind its end, the committed offset.
func describe(ctx context.Context, a Admin, group string) (*Description, map[client.TopicPartition]int64, error) {
	d, err := a.DescribeGroup(ctx, group)
	if err != nil {
		return nil, nil, err
	}
	out := &Description{Group: d.GetGroupId(), State: d.GetState(), Epoch: d.GetGroupEpoch(), Coordinator: d.GetCoordinatorId(),
		Members: []Member{}, Partitions: []Partition{}}
	topics, owner := out.addMembers(d.GetMembers())
	committed := map[client.TopicPartition]int64{}
	for _, o := range d.GetOffsets() {
		committed[client.TopicPartition{Topic: o.GetTopic(), Partition: o.GetPartition()}] = o.GetOffset()
		topics[o.GetTopic()] = true
	}
	lagging := map[client.TopicPartition]int64{}
	for _, tp := range partitionsOf(ctx, a, topics, committed) {
		row := Partition{Topic: tp.Topic, Partition: tp.Partition, Committed: -1, LogStart: -1, End: -1, Lag: -1, LagMs: -1, Owner: owner[tp]}
		if off, ok := committed[tp]; ok {
			row.Committed = off
		}
		if lo, err := a.ListOffsets(ctx, tp, -1); err == nil {
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
	return out, lagging, nil
}

// addMembers adds members; it returns the topics they subscribe to and
// the owner of each assigned partition.
func (out *Description) addMembers(members []*brokerpb.GroupMember) (map[string]bool, map[client.TopicPartition]string) {
	topics := map[string]bool{}
	owner := map[client.TopicPartition]string{}
	for _, m := range members {
		out.Members = append(out.Members, Member{ID: m.GetMemberId(), Client: m.GetClientId(), Host: m.GetClientHost(),
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
	return topics, owner
}

// partitionsOf lists every partition of topics, sorted; of a topic that
// no longer exists, the partitions with commits (G2).
func partitionsOf(ctx context.Context, a Admin, topics map[string]bool, committed map[client.TopicPartition]int64) []client.TopicPartition {
	var tps []client.TopicPartition
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		n, err := stream.PartitionCount(ctx, a, t)
		if err != nil {
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
	return tps
}

// fillLagTimes sets LagMs of the partitions ts has a first unconsumed
// record's timestamp for.
func (out *Description) fillLagTimes(ts map[client.TopicPartition]time.Time, now time.Time) {
	for i := range out.Partitions {
		row := &out.Partitions[i]
		if t, ok := ts[client.TopicPartition{Topic: row.Topic, Partition: row.Partition}]; ok {
			row.LagMs = max(now.Sub(t).Milliseconds(), 0)
		}
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

// Bounds of FirstTimestamps.
const (
	firstTimestampsWait     = 3 * time.Second
	firstTimestampsMaxWait  = 200 * time.Millisecond
	firstTimestampsMaxBytes = 64 << 10
)

// FirstTimestamps reads, for each partition, the first record at or after
// the given offset and returns its timestamp (within 3 s; partitions that
// yield nothing are left out).
func FirstTimestamps(ctx context.Context, c *client.Client, from map[client.TopicPartition]int64) map[client.TopicPartition]time.Time {
	out := map[client.TopicPartition]time.Time{}
	cons, err := c.NewConsumer(client.ConsumerConfig{MaxWait: firstTimestampsMaxWait, PartitionMaxBytes: firstTimestampsMaxBytes})
	if err != nil {
		return out
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(ctx, firstTimestampsWait)
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

// Print prints d: JSON, or a header line, a member table, a partition
// table and the partitions whose commit retention overtook.
func Print(p *cli.Printer, d *Description) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(d)
	}
	return printText(p.W, d)
}

func printText(w io.Writer, g *Description) error {
	fmt.Fprintf(w, "group %s: state %s, epoch %d, coordinator %s, %d members\n", g.Group, g.State, g.Epoch, g.Coordinator, len(g.Members))
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	if len(g.Members) > 0 {
		fmt.Fprintln(tw, "\nMEMBER\tCLIENT\tHOST\tEPOCH\tASSIGNMENT")
		for _, m := range g.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.ID, m.Client, m.Host, m.Epoch, strings.Join(m.Assignment, ","))
		}
	}
	fmt.Fprintln(tw, "\nTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tLAG-TIME\tOWNER")
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

// dash prints n, or "-" for a negative (unknown) n.
func dash(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
