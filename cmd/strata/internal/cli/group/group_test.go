package group

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// fakeAdmin is a cluster of topics with log starts and ends, and one
// group's description and commits.
type fakeAdmin struct {
	partitions map[string]int // topic -> partitions
	start, end map[client.TopicPartition]int64
	group      *brokerpb.DescribeGroupResponse
	committed  map[client.TopicPartition]int64
}

func (f *fakeAdmin) Metadata(_ context.Context, topics ...string) (*brokerpb.MetadataResponse, error) {
	md := &brokerpb.MetadataResponse{}
	for _, t := range topics {
		n, ok := f.partitions[t]
		if !ok {
			continue
		}
		tm := &brokerpb.TopicMetadata{Name: t}
		for p := range n {
			tm.Partitions = append(tm.Partitions, &brokerpb.PartitionMetadata{Partition: int32(p)})
		}
		md.Topics = append(md.Topics, tm)
	}
	return md, nil
}

func (f *fakeAdmin) DescribeGroup(context.Context, string) (*brokerpb.DescribeGroupResponse, error) {
	if f.group == nil {
		return nil, client.ErrUnknownGroup
	}
	return f.group, nil
}

func (f *fakeAdmin) ListOffsets(_ context.Context, tp client.TopicPartition, ts int64) (*brokerpb.ListOffsetsResponse, error) {
	if _, ok := f.partitions[tp.Topic]; !ok {
		return nil, client.ErrUnknownTopic
	}
	r := &brokerpb.ListOffsetsResponse{LogStartOffset: f.start[tp], HighWatermark: f.end[tp]}
	switch ts {
	case -2:
		r.Offset = f.start[tp]
	case -1:
		r.Offset = f.end[tp]
	default:
		r.Offset = f.start[tp] + 1 // "the first record at or after ts"
	}
	return r, nil
}

func (f *fakeAdmin) FetchOffsets(_ context.Context, _ string, tps ...client.TopicPartition) ([]*brokerpb.CommittedOffset, error) {
	var out []*brokerpb.CommittedOffset
	for _, tp := range tps {
		if off, ok := f.committed[tp]; ok {
			out = append(out, &brokerpb.CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
		}
	}
	return out, nil
}

func (f *fakeAdmin) CommitGroupOffsets(_ context.Context, _ string, offsets map[client.TopicPartition]int64) error {
	for tp, off := range offsets {
		f.committed[tp] = off
	}
	return nil
}

func tp(t string, p int32) client.TopicPartition {
	return client.TopicPartition{Topic: t, Partition: p}
}

func cluster() *fakeAdmin {
	return &fakeAdmin{
		partitions: map[string]int{"orders": 2},
		start:      map[client.TopicPartition]int64{tp("orders", 0): 0, tp("orders", 1): 50},
		end:        map[client.TopicPartition]int64{tp("orders", 0): 10, tp("orders", 1): 100},
		committed:  map[client.TopicPartition]int64{},
	}
}

func TestDescribe(t *testing.T) {
	a := cluster()
	a.group = &brokerpb.DescribeGroupResponse{GroupId: "g", State: "Stable", GroupEpoch: 3, CoordinatorId: "k1",
		Members: []*brokerpb.GroupMember{{MemberId: "m1", ClientId: "c", ClientHost: "h", MemberEpoch: 3,
			SubscribedTopics: []string{"orders"}, Assignment: []*brokerpb.TopicPartitions{{Topic: "orders", Partitions: []int32{0, 1}}}}},
		Offsets: []*brokerpb.CommittedOffset{
			{Topic: "orders", Partition: 0, Offset: 10}, // caught up
			{Topic: "orders", Partition: 1, Offset: 20}, // below the log start
			{Topic: "gone", Partition: 3, Offset: 7},    // G2: a deleted topic's commit
		}}
	d, lagging, err := describe(context.Background(), a, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Partitions) != 3 || d.Partitions[0].Topic != "gone" {
		t.Fatalf("partitions: %+v", d.Partitions)
	}
	gone, p0, p1 := d.Partitions[0], d.Partitions[1], d.Partitions[2]
	if gone.Committed != 7 || gone.Owner != "" {
		t.Errorf("deleted topic's commit: %+v", gone)
	}
	if p0.Lag != 0 || p0.LagMs != 0 || p0.Owner != "m1" {
		t.Errorf("caught up (G1): %+v", p0)
	}
	if p1.Lag != 80 || p1.LagMs != -1 || !p1.BelowLogStart || lagging[tp("orders", 1)] != 20 {
		t.Errorf("behind and below the log start: %+v, lagging %v", p1, lagging)
	}
	now := time.Unix(1000, 0)
	d.fillLagTimes(map[client.TopicPartition]time.Time{tp("orders", 1): now.Add(-90 * time.Second)}, now)
	if d.Partitions[2].LagMs != 90000 {
		t.Errorf("lag time: %+v", d.Partitions[2])
	}

	var out bytes.Buffer
	if err := Print(&cli.Printer{W: &out, Format: cli.FormatText}, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"group g: state Stable, epoch 3, coordinator k1, 1 members\n",
		"m1      c       h     3      orders/0,orders/1",
		"orders  1          20*        100  80   1m30s     m1",
		"gone    3          7          -    -    -         -",
		"* committed offset below the log start:\n  orders/1: committed 20, log start 50 (30 records deleted by retention before the group read them)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := Print(&cli.Printer{W: &out, Format: cli.FormatJSON}, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"lag_ms":90000`) || !strings.Contains(out.String(), `"below_log_start":true`) {
		t.Errorf("JSON: %s", out.String())
	}
}

func TestPlanReset(t *testing.T) {
	ctx := context.Background()
	a := cluster()
	a.committed[tp("orders", 0)] = 3
	// G3: an absolute offset is clamped to [log start, end].
	plan, err := PlanReset(ctx, a, "g", "orders", ResetTarget{Offset: 30})
	if err != nil {
		t.Fatal(err)
	}
	want := []PlanRow{{"orders", 0, 3, 10}, {"orders", 1, -1, 50}}
	if len(plan.Rows) != 2 || plan.Rows[0] != want[0] || plan.Rows[1] != want[1] {
		t.Fatalf("plan %+v, want %+v", plan.Rows, want)
	}
	var out bytes.Buffer
	if err := PrintPlan(&cli.Printer{W: &out, Format: cli.FormatText}, plan); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "TOPIC   PARTITION  CURRENT  NEW\norders  0          3        10\norders  1          -        50\nplan only: nothing changed (add --execute to apply)\n" {
		t.Fatalf("plan text:\n%s", got)
	}
	if a.committed[tp("orders", 1)] != 0 {
		t.Fatal("a plan changed offsets (G3)")
	}
	if err := plan.Execute(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a.committed[tp("orders", 0)] != 10 || a.committed[tp("orders", 1)] != 50 {
		t.Fatalf("executed: %v", a.committed)
	}
	out.Reset()
	if err := PrintPlan(&cli.Printer{W: &out, Format: cli.FormatJSON}, plan); err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || !back.Executed || len(back.Rows) != 2 ||
		!strings.HasPrefix(out.String(), `{"group":"g","executed":true,"plan":[`) {
		t.Fatalf("plan JSON: %v %s", err, out.String())
	}
	// By time: the offset the broker finds for the timestamp.
	plan, err = PlanReset(ctx, a, "g", "orders", ResetTarget{Timestamp: 1700000000000, Offset: -1})
	if err != nil || plan.Rows[1].New != 51 {
		t.Fatalf("by time: %+v %v", plan, err)
	}
	// G3: a group with members is refused.
	a.group = &brokerpb.DescribeGroupResponse{State: "Stable", Members: []*brokerpb.GroupMember{{MemberId: "m1"}}}
	if _, err := PlanReset(ctx, a, "g", "orders", ResetTarget{Timestamp: -2, Offset: -1}); err == nil ||
		!strings.Contains(err.Error(), "has 1 members (state Stable): stop them") {
		t.Fatalf("members: %v", err)
	}
}

func TestPrintList(t *testing.T) {
	groups := []*brokerpb.GroupSummary{{GroupId: "g1", State: "Empty", Members: 0, CoordinatorId: "k1"}}
	var out bytes.Buffer
	if err := PrintList(&cli.Printer{W: &out, Format: cli.FormatText}, groups); err != nil {
		t.Fatal(err)
	}
	if out.String() != "GROUP  STATE  MEMBERS  COORDINATOR\ng1     Empty  0        k1\n" {
		t.Fatalf("%q", out.String())
	}
	out.Reset()
	if err := PrintList(&cli.Printer{W: &out, Format: cli.FormatJSON}, nil); err != nil || strings.TrimSpace(out.String()) != "[]" {
		t.Fatalf("no groups in JSON: %v %q", err, out.String())
	}
}
