package group

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func assertSet(t *testing.T, what string, got []*brokerpb.TopicPartitions, want tpSet) {
	t.Helper()
	if g := tpSetFromProto(got); !g.equal(want) {
		t.Fatalf("%s = %v, want %v", what, g.sorted(), want.sorted())
	}
}

func describe(t *testing.T, c *Coordinator, group string) *brokerpb.DescribeGroupResponse {
	t.Helper()
	d, err := c.DescribeGroup(context.Background(), &brokerpb.DescribeGroupRequest{GroupId: group})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestHandOverWaitsForRevocation walks a join through the KIP-848
// reconciliation: the new member's partitions stay pending until the old
// owner reports it revoked them.
func TestHandOverWaitsForRevocation(t *testing.T) {
	e := newEnv(t, newTopics("a", 4))
	r := e.mustHB("g", "", 0, []string{"a"}, nil)
	m1 := r.MemberId
	if m1 == "" || r.MemberEpoch != 1 || r.HeartbeatIntervalMs != 1000 {
		t.Fatalf("join: %v", r)
	}
	assertSet(t, "m1 assignment", r.Assignment, tps("a", 0, 1, 2, 3))
	e.mustHB("g", m1, 1, nil, tps("a", 0, 1, 2, 3))
	if s := describe(t, e.c, "g").State; s != "STABLE" {
		t.Fatalf("state %s", s)
	}

	// m2 joins with its own id: epoch 2, its partitions are pending.
	r = e.mustHB("g", "m2", 0, []string{"a"}, nil)
	if r.MemberId != "m2" || r.MemberEpoch != 2 {
		t.Fatalf("m2 join: %v", r)
	}
	assertSet(t, "m2 assignment", r.Assignment, nil)
	assertSet(t, "m2 pending", r.Pending, tps("a", 2, 3))

	// m1 is told to keep 0,1; it stays at epoch 1 until it revokes.
	r = e.mustHB("g", m1, 1, nil, tps("a", 0, 1, 2, 3))
	if r.MemberEpoch != 1 {
		t.Fatalf("m1 advanced before revoking: %v", r)
	}
	assertSet(t, "m1 assignment", r.Assignment, tps("a", 0, 1))
	r = e.mustHB("g", "m2", 2, nil, nil)
	assertSet(t, "m2 still pending", r.Pending, tps("a", 2, 3))
	assertSet(t, "m2 assignment", r.Assignment, nil)
	if s := describe(t, e.c, "g").State; s != "RECONCILING" {
		t.Fatalf("state %s", s)
	}

	// m1 revokes: it advances, and m2 gets the partitions.
	r = e.mustHB("g", m1, 1, nil, tps("a", 0, 1))
	if r.MemberEpoch != 2 {
		t.Fatalf("m1 after revoking: %v", r)
	}
	r = e.mustHB("g", "m2", 2, nil, nil)
	assertSet(t, "m2 assignment", r.Assignment, tps("a", 2, 3))
	assertSet(t, "m2 pending", r.Pending, nil)
	e.mustHB("g", "m2", 2, nil, tps("a", 2, 3))
	d := describe(t, e.c, "g")
	if d.State != "STABLE" || d.GroupEpoch != 2 || len(d.Members) != 2 || d.CoordinatorId != "b1" {
		t.Fatalf("describe: %v", d)
	}

	// Leave: epoch -1, group epoch bumps, m1 gets everything once m2 is gone.
	r = e.mustHB("g", "m2", -1, nil, nil)
	if r.MemberEpoch != -1 {
		t.Fatalf("leave: %v", r)
	}
	r = e.mustHB("g", m1, 2, nil, tps("a", 0, 1))
	if r.MemberEpoch != 3 {
		t.Fatalf("after leave: %v", r)
	}
	assertSet(t, "m1 assignment", r.Assignment, tps("a", 0, 1, 2, 3))
	if _, err := e.hb("g", "m2", 2, nil, nil); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("left member: %v", err)
	}
}

func TestEpochValidation(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	r := e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", r.MemberEpoch, nil, tps("a", 0, 1))
	e.mustHB("g", "m2", 0, []string{"a"}, nil)   // epoch 2
	r = e.mustHB("g", "m1", 1, nil, tps("a", 0)) // m1 revokes a/1, moves to 2
	if r.MemberEpoch != 2 {
		t.Fatalf("%v", r)
	}
	// The response was lost: m1 retries with epoch 1 (its previous): accepted.
	if r = e.mustHB("g", "m1", 1, nil, tps("a", 0)); r.MemberEpoch != 2 {
		t.Fatalf("lost response retry: %v", r)
	}
	for _, tc := range []struct {
		id    string
		epoch int32
		err   error
	}{
		{"m1", 3, ErrFencedMemberEpoch}, // from the future
		{"m1", 7, ErrFencedMemberEpoch}, //
		{"nope", 2, ErrUnknownMember},   //
		{"m1", -3, ErrInvalid},          // no such epoch
		{"", 0, ErrInvalid},             // join without subscription (below)
	} {
		var subs []string
		if _, err := e.hb("g", tc.id, tc.epoch, subs, nil); !errors.Is(err, tc.err) {
			t.Errorf("%s epoch %d: %v, want %v", tc.id, tc.epoch, err, tc.err)
		}
	}
	if _, err := e.hb("", "m1", 2, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("no group id: %v", err)
	}
	if _, err := e.c.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{
		GroupId: "g", MemberId: "m1", MemberEpoch: 2, SessionTimeoutMs: 10,
	}); !errors.Is(err, ErrInvalid) {
		t.Errorf("session timeout too small: %v", err)
	}
	if _, err := e.hb("other", "x", 3, nil, nil); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("unknown group: %v", err)
	}
	if _, err := e.c.DescribeGroup(context.Background(), &brokerpb.DescribeGroupRequest{GroupId: "other"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("failed join created a group: %v", err)
	}

	// m1 was fenced (it thinks): it drops everything and rejoins with epoch
	// 0 under its id; no rebalance.
	before := describe(t, e.c, "g").GroupEpoch
	r = e.mustHB("g", "m1", 0, nil, nil)
	if r.MemberEpoch != before {
		t.Fatalf("rejoin: %v (group epoch %d)", r, before)
	}
	assertSet(t, "rejoin assignment", r.Assignment, tps("a", 0))
	if got := describe(t, e.c, "g").GroupEpoch; got != before {
		t.Fatalf("rejoin bumped the group epoch %d -> %d", before, got)
	}
}

func TestSessionExpiryMovesPartitions(t *testing.T) {
	e := newEnv(t, newTopics("a", 4))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1, 2, 3))
	r := e.mustHB("g", "m2", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	r = e.mustHB("g", "m2", r.MemberEpoch, nil, nil)
	e.mustHB("g", "m2", r.MemberEpoch, nil, tps("a", 2, 3))

	// m1 keeps heartbeating, m2 goes silent.
	e.clock.Advance(6 * time.Second)
	e.mustHB("g", "m1", 2, nil, tps("a", 0, 1))
	e.clock.Advance(5 * time.Second) // m2's session (10s) is over
	if err := e.c.Tick(context.Background(), e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	d := describe(t, e.c, "g")
	if len(d.Members) != 1 || d.GroupEpoch != 3 {
		t.Fatalf("after expiry: %v", d)
	}
	r = e.mustHB("g", "m1", 2, nil, tps("a", 0, 1))
	if r.MemberEpoch != 3 {
		t.Fatalf("%v", r)
	}
	assertSet(t, "m1 after expiry", r.Assignment, tps("a", 0, 1, 2, 3))
	if _, err := e.hb("g", "m2", 2, nil, tps("a", 2, 3)); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("expired member: %v", err)
	}
	// The expiry is persisted: a new coordinator agrees.
	e.failover()
	if d := describe(t, e.c, "g"); len(d.Members) != 1 {
		t.Fatalf("after failover: %v", d)
	}

	// Expiry is also applied on calls, without Tick.
	e.clock.Advance(11 * time.Second)
	if d := describe(t, e.c, "g"); len(d.Members) != 1 {
		t.Fatalf("describe does not expire: %v", d)
	}
	if _, err := e.hb("g", "m1", 3, nil, nil); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("expired on heartbeat: %v", err)
	}
	if s := describe(t, e.c, "g").State; s != "EMPTY" {
		t.Fatalf("state %s", s)
	}
}

func TestRebalanceTimeoutFencesSlowRevoker(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	e.mustHB("g", "m2", 0, []string{"a"}, nil)
	// m1 heartbeats on time but never gives up a/1.
	for i := 0; i < 3; i++ {
		e.clock.Advance(7 * time.Second)
		e.mustHB("g", "m2", 2, nil, nil)
		r, err := e.hb("g", "m1", 1, nil, tps("a", 0, 1))
		if i < 2 {
			if err != nil || r.MemberEpoch != 1 {
				t.Fatalf("round %d: %v %v", i, r, err)
			}
			continue
		}
		if !errors.Is(err, ErrUnknownMember) { // 21s > 20s rebalance timeout
			t.Fatalf("slow revoker not fenced: %v %v", r, err)
		}
	}
	r := e.mustHB("g", "m2", 2, nil, nil)
	assertSet(t, "m2 after m1 fenced", r.Assignment, tps("a", 0, 1))
}

func TestSubscriptionAndPartitionCountChanges(t *testing.T) {
	topics := newTopics("a", 2, "b", 2)
	e := newEnv(t, topics)
	r := e.mustHB("g", "m1", 0, []string{"a"}, nil)
	assertSet(t, "m1", r.Assignment, tps("a", 0, 1))
	topics.set("a", 3)
	r = e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	if r.MemberEpoch != 2 {
		t.Fatalf("partition count change did not bump: %v", r)
	}
	assertSet(t, "m1 grown", r.Assignment, tps("a", 0, 1, 2))
	r = e.mustHB("g", "m1", 2, []string{"b"}, tps("a", 0, 1, 2))
	if r.MemberEpoch != 2 {
		t.Fatalf("advanced while owning a: %v", r)
	}
	assertSet(t, "m1 switching", r.Assignment, nil)
	assertSet(t, "m1 pending", r.Pending, tps("b", 0, 1))
	r = e.mustHB("g", "m1", 2, nil, nil)
	if r.MemberEpoch != 3 {
		t.Fatalf("%v", r)
	}
	assertSet(t, "m1 switched", r.Assignment, tps("b", 0, 1))
	// A subscription to a missing topic is fine: nothing to assign.
	r = e.mustHB("g", "m1", 3, []string{"nope"}, tps("b", 0, 1))
	r = e.mustHB("g", "m1", r.MemberEpoch, nil, nil)
	assertSet(t, "missing topic", r.Assignment, nil)
	topics.set("nope", 1)
	r = e.mustHB("g", "m1", r.MemberEpoch, nil, nil)
	assertSet(t, "topic created", r.Assignment, tps("nope", 0))
}

func commit(c *Coordinator, group, member string, epoch int32, offsets ...*brokerpb.OffsetCommit) (*brokerpb.CommitOffsetsResponse, error) {
	return c.Commit(context.Background(), &brokerpb.CommitOffsetsRequest{GroupId: group, MemberId: member, MemberEpoch: epoch, Offsets: offsets})
}

func oc(topic string, p int32, off int64) *brokerpb.OffsetCommit {
	return &brokerpb.OffsetCommit{Topic: topic, Partition: p, Offset: off, Metadata: "md"}
}

func fetch(t *testing.T, c *Coordinator, group string, parts ...*brokerpb.TopicPartitions) map[TopicPartition]int64 {
	t.Helper()
	r, err := c.FetchOffsets(context.Background(), &brokerpb.FetchOffsetsRequest{GroupId: group, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	out := map[TopicPartition]int64{}
	for _, o := range r.Offsets {
		out[TopicPartition{o.Topic, o.Partition}] = o.Offset
	}
	return out
}

func TestCommitFencing(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	e.mustHB("g", "m2", 0, []string{"a"}, nil)                        // epoch 2, a/1 pending for m2
	r, err := commit(e.c, "g", "m1", 1, oc("a", 0, 5), oc("a", 1, 7)) // a/1 being revoked: allowed
	if err != nil || r.Results[0].Error != nil || r.Results[1].Error != nil {
		t.Fatalf("commit: %v %v", r, err)
	}
	r, err = commit(e.c, "g", "m2", 2, oc("a", 1, 9)) // not m2's yet
	if err != nil || refusedWith(r.Results[0].Error) != ErrPartitionNotHeld {
		t.Fatalf("commit of a pending partition: %v %v", r, err)
	}
	e.mustHB("g", "m1", 1, nil, tps("a", 0)) // m1 revokes, moves to epoch 2 (prev 1)
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 6)); err != nil {
		t.Fatalf("commit with the previous epoch: %v", err)
	}
	r, _ = commit(e.c, "g", "m1", 2, oc("a", 1, 8))
	if refusedWith(r.Results[0].Error) != ErrPartitionNotHeld {
		t.Fatalf("commit of a revoked partition: %v", r)
	}
	for _, tc := range []struct {
		member string
		epoch  int32
		want   error
	}{
		{"m1", 3, ErrFencedMemberEpoch},
		{"zz", 2, ErrUnknownMember},
		{"", -1, ErrGroupNotEmpty},
		{"m1", 0, ErrInvalid},
	} {
		if _, err := commit(e.c, "g", tc.member, tc.epoch, oc("a", 0, 1)); !errors.Is(err, tc.want) {
			t.Errorf("commit %s/%d: %v, want %v", tc.member, tc.epoch, err, tc.want)
		}
	}
	// A stale epoch: m1 moves on twice.
	e.mustHB("g", "m3", 0, []string{"a"}, nil) // epoch 3
	e.mustHB("g", "m1", 2, nil, tps("a", 0))   // m1 at 3 (m3 takes nothing from it? then prev 2)
	e.mustHB("g", "m3", -1, nil, nil)          // epoch 4
	e.mustHB("g", "m1", 3, nil, tps("a", 0))   // m1 at 4, prev 3
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 1)); !errors.Is(err, ErrStaleMemberEpoch) {
		t.Errorf("old epoch: %v", err)
	}
	if got := fetch(t, e.c, "g"); got[TopicPartition{"a", 0}] != 6 || got[TopicPartition{"a", 1}] != 7 {
		t.Fatalf("offsets %v", got)
	}
	if got := fetch(t, e.c, "g", &brokerpb.TopicPartitions{Topic: "a", Partitions: []int32{1, 5}}); got[TopicPartition{"a", 5}] != -1 || got[TopicPartition{"a", 1}] != 7 {
		t.Fatalf("offsets %v", got)
	}

	// Admin commits: only for empty groups, existing partitions, offsets >= 0.
	e.mustHB("g", "m1", 4, nil, nil)
	e.mustHB("g", "m1", -1, nil, nil)
	e.mustHB("g", "m2", -1, nil, nil)
	r, err = commit(e.c, "g", "", -1, oc("a", 0, 0), oc("a", 2, 0), oc("a", 1, -3), oc("zz", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	wantRefusals := []error{nil, ErrUnknownPartition, ErrInvalid, ErrUnknownPartition}
	for i, res := range r.Results {
		if got := refusedWith(res.Error); got != wantRefusals[i] {
			t.Errorf("admin result %d: %v, want %v", i, got, wantRefusals[i])
		}
	}
	if got := fetch(t, e.c, "g"); got[TopicPartition{"a", 0}] != 0 {
		t.Fatalf("reset: %v", got)
	}
	// An admin commit creates a group with offsets only.
	if _, err := commit(e.c, "fresh", "", -1, oc("a", 1, 3)); err != nil {
		t.Fatal(err)
	}
	if d := describe(t, e.c, "fresh"); d.State != "EMPTY" || len(d.Offsets) != 1 {
		t.Fatalf("%v", d)
	}
}

// refusedWith returns the sentinel a per-partition refusal wraps (the default
// Config.PartitionError keeps only the message; the broker's table turns
// it into a status, see broker/errors_test.go), nil for none.
func refusedWith(pe *brokerpb.PartitionError) error {
	if pe == nil {
		return nil
	}
	for _, s := range []error{ErrInvalid, ErrPartitionNotHeld, ErrUnknownPartition} {
		if strings.HasPrefix(pe.GetMessage(), s.Error()) {
			return s
		}
	}
	return errors.New(pe.GetMessage())
}

func TestLoadRestoresOffsetsAndMembers(t *testing.T) {
	e := newEnv(t, newTopics("a", 4, "b", 1))
	e.mustHB("g", "m1", 0, []string{"a", "b"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1, 2, 3, "b", 0))
	e.mustHB("g", "m2", 0, []string{"a"}, nil)
	r := e.mustHB("g", "m1", 1, nil, tps("a", 0, 1, 2, 3, "b", 0)) // told to revoke a/2, a/3
	assertSet(t, "m1", r.Assignment, tps("a", 0, 1, "b", 0))
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 10), oc("a", 3, 30)); err != nil {
		t.Fatal(err)
	}
	if _, err := commit(e.c, "other", "", -1, oc("b", 0, 5)); err != nil {
		t.Fatal(err)
	}
	before := describe(t, e.c, "g")

	e.failover()
	after := describe(t, e.c, "g")
	if after.GroupEpoch != before.GroupEpoch || len(after.Members) != 2 || after.State != "RECONCILING" {
		t.Fatalf("after load: %v", after)
	}
	for i, m := range after.Members {
		b := before.Members[i]
		if m.MemberId != b.MemberId || m.MemberEpoch != b.MemberEpoch ||
			!tpSetFromProto(m.Owned).equal(tpSetFromProto(b.Owned)) ||
			!tpSetFromProto(m.Assignment).equal(tpSetFromProto(b.Assignment)) {
			t.Fatalf("member %d: %v, before %v", i, m, b)
		}
	}
	if got := fetch(t, e.c, "g"); got[TopicPartition{"a", 0}] != 10 || got[TopicPartition{"a", 3}] != 30 {
		t.Fatalf("offsets %v", got)
	}
	if got := fetch(t, e.c, "other"); got[TopicPartition{"b", 0}] != 5 {
		t.Fatalf("offsets %v", got)
	}
	// The hand-over survives: m1 still holds a/2, a/3, so m2 waits.
	r = e.mustHB("g", "m2", 2, nil, nil)
	assertSet(t, "m2 after failover", r.Pending, tps("a", 2, 3))
	r = e.mustHB("g", "m1", 1, nil, tps("a", 0, 1, "b", 0))
	if r.MemberEpoch != 2 {
		t.Fatalf("%v", r)
	}
	r = e.mustHB("g", "m2", 2, nil, nil)
	assertSet(t, "m2", r.Assignment, tps("a", 2, 3))

	snap := e.c.Offsets()
	if len(snap) != 3 || snap[0].Group != "g" || snap[2].Group != "other" {
		t.Fatalf("Offsets() = %v", snap)
	}
	l, err := e.c.ListGroups(context.Background(), &brokerpb.ListGroupsRequest{})
	if err != nil || len(l.Groups) != 2 || l.Groups[0].Members != 2 || l.Groups[1].State != "EMPTY" {
		t.Fatalf("ListGroups: %v %v", l, err)
	}
}

func TestCallsDuringLoadAndAfterClose(t *testing.T) {
	log := &memLog{gate: make(chan struct{})}
	clock := newClock()
	c := New(testConfig(log, newTopics("a", 1), clock))
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- c.Load(ctx) }()
	if _, err := c.Heartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: "g", SubscribedTopics: []string{"a"}}); !errors.Is(err, ErrLoading) {
		t.Fatalf("heartbeat while loading: %v", err)
	}
	if _, err := c.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: "g", MemberEpoch: -1}); !errors.Is(err, ErrLoading) {
		t.Fatalf("commit while loading: %v", err)
	}
	if _, err := c.FetchOffsets(ctx, &brokerpb.FetchOffsetsRequest{GroupId: "g"}); !errors.Is(err, ErrLoading) {
		t.Fatalf("fetch while loading: %v", err)
	}
	if _, err := c.ListGroups(ctx, &brokerpb.ListGroupsRequest{}); !errors.Is(err, ErrLoading) {
		t.Fatalf("list while loading: %v", err)
	}
	if err := c.Tick(ctx, clock.Now()); !errors.Is(err, ErrLoading) {
		t.Fatalf("tick while loading: %v", err)
	}
	close(log.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Heartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: "g", SubscribedTopics: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if _, err := c.FetchOffsets(ctx, &brokerpb.FetchOffsetsRequest{GroupId: "g"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if err := c.Load(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("load after close: %v", err)
	}
}

func TestDeleteGroup(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 4), oc("a", 1, 2)); err != nil {
		t.Fatal(err)
	}
	del := func(g string) error {
		_, err := e.c.DeleteGroup(context.Background(), &brokerpb.DeleteGroupRequest{GroupId: g})
		return err
	}
	if err := del("g"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("delete non-empty: %v", err)
	}
	if err := del("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}
	e.mustHB("g", "m1", -1, nil, nil)
	n := e.log.len()
	if err := del("g"); err != nil {
		t.Fatal(err)
	}
	if got := e.log.len() - n; got != 3 {
		t.Fatalf("delete wrote %d records, want 3 tombstones", got)
	}
	if got := fetch(t, e.c, "g"); len(got) != 0 {
		t.Fatalf("offsets after delete: %v", got)
	}
	if _, err := e.c.DescribeGroup(context.Background(), &brokerpb.DescribeGroupRequest{GroupId: "g"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("describe deleted: %v", err)
	}
	e.failover()
	if _, err := e.c.DescribeGroup(context.Background(), &brokerpb.DescribeGroupRequest{GroupId: "g"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted group came back after failover: %v", err)
	}
	// The group can be created again from scratch.
	if r := e.mustHB("g", "m9", 0, []string{"a"}, nil); r.MemberEpoch != 1 {
		t.Fatalf("recreated: %v", r)
	}
}

func TestPersistFailure(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	e.log.failNext = 1
	if _, err := e.hb("g", "m2", 0, []string{"a"}, nil); !errors.Is(err, errInjected) {
		t.Fatalf("join with a failing log: %v", err)
	}
	// The join retried (same id) succeeds; the state is persisted then.
	r := e.mustHB("g", "m2", 0, []string{"a"}, nil)
	if r.MemberEpoch != 2 {
		t.Fatalf("%v", r)
	}
	e.log.failNext = 1
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 1)); !errors.Is(err, errInjected) {
		t.Fatalf("commit with a failing log: %v", err)
	}
	if got := fetch(t, e.c, "g"); len(got) != 0 {
		t.Fatalf("failed commit applied: %v", got)
	}
	e.failover()
	if d := describe(t, e.c, "g"); len(d.Members) != 2 || d.GroupEpoch != 2 {
		t.Fatalf("%v", d)
	}
}

func TestBackgroundLoopAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	log, clock := &memLog{}, newClock()
	cfg := testConfig(log, newTopics("a", 1), clock)
	cfg.TickInterval = 5 * time.Millisecond
	cfg.Metrics = metrics
	c := New(cfg)
	defer c.Close()
	if err := c.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, log: log, clock: clock, c: c}
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m2", 0, []string{"a"}, nil)
	if got := metricValue(metrics.members.WithLabelValues("g")); got != 2 {
		t.Fatalf("members gauge %v", got)
	}
	clock.Advance(testSession + time.Second)
	testwait.Until(t, 10*time.Second, "the background loop to expire the members", func() bool {
		return metricValue(metrics.members.WithLabelValues("g")) == 0
	})
	if got := metricValue(metrics.expired); got != 2 {
		t.Fatalf("expired %v", got)
	}
	if got := metricValue(metrics.rebalances.WithLabelValues("g")); got != 3 {
		t.Fatalf("rebalances %v", got)
	}
}

func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return -1
}

// Offsets of a group without members expire after OffsetsRetention (older
// ones first); a group with members keeps them; the group goes with its
// last offset, and stays gone after a failover.
func TestOffsetsRetention(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	ctx := context.Background()
	const retention = 7 * 24 * time.Hour
	commit := func(group string, p int32, off int64) {
		t.Helper()
		resp, err := e.c.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: group, MemberEpoch: -1,
			Offsets: []*brokerpb.OffsetCommit{{Topic: "a", Partition: p, Offset: off}}})
		if err != nil || resp.Results[0].Error != nil {
			t.Fatalf("commit: %v %v", err, resp)
		}
	}
	commit("idle", 0, 5)
	commit("busy", 0, 3)
	e.clock.Advance(retention / 2)
	commit("idle", 1, 7)
	e.clock.Advance(retention/2 + time.Minute)
	// "busy" has a member now: its offsets do not expire.
	e.mustHB("busy", "m1", 0, []string{"a"}, nil)
	if err := e.c.Tick(ctx, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	offsets := func(group string) []*brokerpb.CommittedOffset {
		resp, err := e.c.FetchOffsets(ctx, &brokerpb.FetchOffsetsRequest{GroupId: group})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Offsets
	}
	if got := offsets("idle"); len(got) != 1 || got[0].Partition != 1 {
		t.Fatalf("after one retention: %v, want only partition 1's offset", got)
	}
	if got := offsets("busy"); len(got) != 1 || got[0].Offset != 3 {
		t.Fatalf("offsets of the group with a member: %v", got)
	}
	e.clock.Advance(retention / 2)
	if err := e.c.Tick(ctx, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if got := offsets("idle"); len(got) != 0 {
		t.Fatalf("after the last offset expired: %v", got)
	}
	if _, err := e.c.DescribeGroup(ctx, &brokerpb.DescribeGroupRequest{GroupId: "idle"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("describe an expired group: %v", err)
	}
	e.failover()
	if _, err := e.c.DescribeGroup(ctx, &brokerpb.DescribeGroupRequest{GroupId: "idle"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired group back after failover: %v", err)
	}
}

// Group coordinators must not be bricked across restarts: 16
// undecodable batches in __consumer_offsets made every load fail with
// "corrupt batch", for good. A batch the log cannot decode is now skipped,
// counted and logged; the groups of the other records load.
func TestLoadSkipsUndecodableBatches(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	ctx := context.Background()
	resp, err := e.c.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: "g1", MemberEpoch: -1,
		Offsets: []*brokerpb.OffsetCommit{{Topic: "a", Partition: 0, Offset: 42}}})
	if err != nil || resp.Results[0].Error != nil {
		t.Fatalf("commit: %v %v", err, resp)
	}
	e.log.mu.Lock()
	e.log.poison = []int64{7, 9}
	e.log.mu.Unlock()

	metrics := NewMetrics(prometheus.NewRegistry())
	cfg := testConfig(e.log, e.topics, e.clock)
	cfg.Metrics = metrics
	_ = e.c.Close()
	c := New(cfg)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Load(ctx); err != nil {
		t.Fatalf("Load with poison batches: %v", err)
	}
	if got := metricValue(metrics.skippedBatches); got != 2 {
		t.Fatalf("skipped batches metric %v, want 2", got)
	}
	r, err := c.FetchOffsets(ctx, &brokerpb.FetchOffsetsRequest{GroupId: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Offsets) != 1 || r.Offsets[0].Offset != 42 {
		t.Fatalf("offsets after load: %v, want a/0 at 42", r.Offsets)
	}
}

// A coordinator whose broker's metad session may have expired (a paused
// or cut-off broker: another may serve the partition now) answers nothing
// from memory, reads included: every call is ErrClosed (NOT_COORDINATOR)
// until the session is known alive again.
func TestNoAnswerWithoutAuthority(t *testing.T) {
	var authority atomic.Bool
	authority.Store(true)
	e := &env{t: t, log: &memLog{}, topics: newTopics("a", 2), clock: newClock()}
	e.configure = func(cfg *Config) { cfg.Authority = authority.Load }
	e.c = e.open()
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 5)); err != nil {
		t.Fatal(err)
	}

	authority.Store(false)
	if _, err := e.c.FetchOffsets(context.Background(), &brokerpb.FetchOffsetsRequest{GroupId: "g"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("FetchOffsets without authority: %v, want ErrClosed", err)
	}
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 6)); !errors.Is(err, ErrClosed) {
		t.Fatalf("commit without authority: %v, want ErrClosed", err)
	}
	if _, err := e.hb("g", "m1", 1, nil, tps("a", 0, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("heartbeat without authority: %v, want ErrClosed", err)
	}
	if _, err := e.c.Describe(context.Background(), "g"); !errors.Is(err, ErrClosed) {
		t.Fatalf("describe without authority: %v, want ErrClosed", err)
	}

	authority.Store(true)
	if got := fetch(t, e.c, "g")[TopicPartition{"a", 0}]; got != 5 {
		t.Fatalf("offset once the session is alive again: %d, want 5 (the refused commit wrote nothing)", got)
	}
}
