package group

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/proto/brokerpb"
)

// The coordinator's limits. These tests send
// over-limit requests and check that each is refused, counted, changes
// nothing, and that well-behaved members keep working.

func newLimitedEnv(t *testing.T, topics *fakeTopics, configure func(*Config)) *env {
	t.Helper()
	e := &env{t: t, log: &memLog{}, topics: topics, clock: newClock(), configure: func(c *Config) {
		c.Metrics = NewMetrics(prometheus.NewRegistry())
		if configure != nil {
			configure(c)
		}
	}}
	e.c = e.open()
	return e
}

func refusedCount(c *Coordinator, reason string) float64 {
	return metricValue(c.cfg.Metrics.refused.WithLabelValues(reason))
}

func names(prefix string, n, size int) []string {
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%s%d-", prefix, i)
		out[i] = s + strings.Repeat("x", size-len(s))
	}
	return out
}

// TestLimitsRefuseLongIDsAndHugeSubscriptions: ids, client strings, topic
// names and subscriptions past the limits are refused as INVALID before
// any work; exactly at the limits they are accepted.
func TestLimitsRefuseLongIDsAndHugeSubscriptions(t *testing.T) {
	topics := newTopics("a", 2)
	e := newLimitedEnv(t, topics, nil)
	at, over := strings.Repeat("i", 255), strings.Repeat("i", 256)
	for _, tc := range []struct {
		name   string
		req    *brokerpb.GroupHeartbeatRequest
		reason string
	}{
		{"group id", &brokerpb.GroupHeartbeatRequest{GroupId: over, SubscribedTopics: []string{"a"}}, refusedIDTooLong},
		{"member id", &brokerpb.GroupHeartbeatRequest{GroupId: "g", MemberId: over, SubscribedTopics: []string{"a"}}, refusedIDTooLong},
		{"client id", &brokerpb.GroupHeartbeatRequest{GroupId: "g", ClientId: over, SubscribedTopics: []string{"a"}}, refusedIDTooLong},
		{"client host", &brokerpb.GroupHeartbeatRequest{GroupId: "g", ClientHost: over, SubscribedTopics: []string{"a"}}, refusedIDTooLong},
		{"1001 topics", &brokerpb.GroupHeartbeatRequest{GroupId: "g", SubscribedTopics: names("t", 1001, 6)}, refusedTopics},
		{"topic name", &brokerpb.GroupHeartbeatRequest{GroupId: "g", SubscribedTopics: []string{strings.Repeat("t", 250)}}, refusedTopicName},
		{"owned topic name", &brokerpb.GroupHeartbeatRequest{GroupId: "g", SubscribedTopics: []string{"a"},
			Owned: []*brokerpb.TopicPartitions{{Topic: strings.Repeat("t", 250), Partitions: []int32{0}}}}, refusedTopicName},
	} {
		before := e.log.len()
		_, err := e.c.Heartbeat(context.Background(), tc.req)
		if !errors.Is(err, ErrInvalid) || refusalReason(err) != tc.reason {
			t.Errorf("%s: %v, want ErrInvalid (%s)", tc.name, err, tc.reason)
		}
		if e.log.len() != before {
			t.Errorf("%s: refused request wrote to the log", tc.name)
		}
	}
	if got := refusedCount(e.c, refusedIDTooLong); got != 4 {
		t.Errorf("refused{id_too_long} = %v, want 4", got)
	}
	if got := refusedCount(e.c, refusedTopicName); got != 2 {
		t.Errorf("refused{topic_name_too_long} = %v, want 2", got)
	}
	if l, _ := e.c.ListGroups(context.Background(), nil); len(l.Groups) != 0 {
		t.Fatalf("refused joins left groups: %v", l.Groups)
	}

	// Exactly at the limits: accepted, and the member works.
	r, err := e.c.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{
		GroupId: at, MemberId: at, ClientId: at, ClientHost: at, SubscribedTopics: []string{"a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	assertSet(t, "assignment", r.Assignment, tps("a", 0, 1))
	if d := describe(t, e.c, at); len(d.Members) != 1 || d.Members[0].ClientHost != at {
		t.Fatalf("describe: %v", d)
	}

	// 1000 names of 249 bytes are within the name limits, but the member
	// would take more than MaxMemberBytes of the record.
	_, err = e.hb("g2", "m", 0, names("t", 1000, 249), nil)
	if !errors.Is(err, ErrLimitExceeded) || refusalReason(err) != refusedMemberBytes {
		t.Fatalf("huge subscription: %v", err)
	}
	// So would a member reporting 100,000 owned partitions it was never given.
	many := &brokerpb.TopicPartitions{Topic: "a"}
	for p := range int32(100_000) {
		many.Partitions = append(many.Partitions, p)
	}
	_, err = e.c.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{
		GroupId: at, MemberId: at, MemberEpoch: r.MemberEpoch, Owned: []*brokerpb.TopicPartitions{many},
	})
	if !errors.Is(err, ErrLimitExceeded) || refusalReason(err) != refusedMemberBytes {
		t.Fatalf("huge owned set: %v", err)
	}
	// The member is unchanged and keeps working.
	r, err = e.c.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{
		GroupId: at, MemberId: at, MemberEpoch: r.MemberEpoch, Owned: tps("a", 0, 1).toProto(),
	})
	if err != nil || r.MemberEpoch != 1 {
		t.Fatalf("well-behaved heartbeat: %v %v", r, err)
	}
	if _, err := e.c.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{GroupId: "g2", SubscribedTopics: []string{"a"}}); err != nil {
		t.Fatalf("a small join after refusals: %v", err)
	}
}

// TestGroupMaxSize: a join to a full group is refused with
// ErrGroupMaxSize and changes nothing; the members keep rebalancing; once
// one leaves, the join succeeds.
func TestGroupMaxSize(t *testing.T) {
	e := newLimitedEnv(t, newTopics("a", 6), func(c *Config) { c.Limits.MaxMembers = 3 })
	for _, m := range []string{"m1", "m2", "m3"} {
		e.mustHB("g", m, 0, []string{"a"}, nil)
	}
	before, records := describe(t, e.c, "g"), e.log.len()
	_, err := e.hb("g", "m4", 0, []string{"a"}, nil)
	if !errors.Is(err, ErrGroupMaxSize) || refusalReason(err) != refusedGroupMaxSize {
		t.Fatalf("4th join: %v", err)
	}
	if _, err := e.hb("g", "", 0, []string{"a"}, nil); !errors.Is(err, ErrGroupMaxSize) {
		t.Fatalf("4th join without an id: %v", err)
	}
	after := describe(t, e.c, "g")
	if len(after.Members) != 3 || after.GroupEpoch != before.GroupEpoch || e.log.len() != records {
		t.Fatalf("refused join changed the group: %v (log %d -> %d)", after, records, e.log.len())
	}
	if got := refusedCount(e.c, refusedGroupMaxSize); got != 2 {
		t.Fatalf("refused{group_max_size} = %v", got)
	}
	settle(t, e, "g", []string{"m1", "m2", "m3"})
	// A member rejoining with epoch 0 is not a new member.
	e.mustHB("g", "m1", 0, nil, nil)

	e.mustHB("g", "m3", -1, nil, nil)
	e.mustHB("g", "m4", 0, []string{"a"}, nil)
	settle(t, e, "g", []string{"m1", "m2", "m4"})
}

// settle heartbeats the members, reporting what they are told, until the
// group is STABLE with every partition of the group assigned once.
func settle(t *testing.T, e *env, group string, members []string) {
	t.Helper()
	epochs, owned := map[string]int32{}, map[string]tpSet{}
	for _, m := range describe(t, e.c, group).Members {
		epochs[m.MemberId], owned[m.MemberId] = m.MemberEpoch, tpSetFromProto(m.Owned)
	}
	for range 10 {
		for _, m := range members {
			r := e.mustHB(group, m, epochs[m], nil, owned[m])
			epochs[m], owned[m] = r.MemberEpoch, tpSetFromProto(r.Assignment)
		}
	}
	for _, m := range members {
		e.mustHB(group, m, epochs[m], nil, owned[m])
	}
	if d := describe(t, e.c, group); d.State != "STABLE" || len(d.Members) != len(members) {
		t.Fatalf("group did not settle: %v", d)
	}
}

// TestTooManyGroups: past MaxGroups a join or an admin commit that would
// create a group is refused; the coordinators of a broker share the count
// (through their Metrics); deleting a group makes room.
func TestTooManyGroups(t *testing.T) {
	topics := newTopics("a", 1)
	e := newLimitedEnv(t, topics, func(c *Config) { c.Limits.MaxGroups = 3 })
	// A second coordinator of the same broker (another partition).
	cfg := testConfig(&memLog{}, topics, e.clock)
	cfg.Partition, cfg.Metrics, cfg.Limits.MaxGroups = 4, e.c.cfg.Metrics, 3
	other := New(cfg)
	if err := other.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	e.mustHB("g1", "m", 0, []string{"a"}, nil)
	if _, err := commit(e.c, "g2", "", -1, oc("a", 0, 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{GroupId: "g3", MemberId: "m", SubscribedTopics: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	records := e.log.len()
	if _, err := e.hb("g4", "m", 0, []string{"a"}, nil); !errors.Is(err, ErrLimitExceeded) || refusalReason(err) != refusedMaxGroups {
		t.Fatalf("4th group by join: %v", err)
	}
	if _, err := commit(e.c, "g4", "", -1, oc("a", 0, 5)); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("4th group by admin commit: %v", err)
	}
	if _, err := other.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{GroupId: "g5", SubscribedTopics: []string{"a"}}); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("4th group on the other coordinator: %v", err)
	}
	if e.log.len() != records {
		t.Fatal("refused requests wrote to the log")
	}
	if got := refusedCount(e.c, refusedMaxGroups); got != 3 {
		t.Fatalf("refused{too_many_groups} = %v", got)
	}
	// Existing groups keep working.
	e.mustHB("g1", "m", 1, nil, tps("a", 0))
	if _, err := commit(e.c, "g2", "", -1, oc("a", 0, 6)); err != nil {
		t.Fatal(err)
	}
	// Deleting one makes room.
	if _, err := e.c.DeleteGroup(context.Background(), &brokerpb.DeleteGroupRequest{GroupId: "g2"}); err != nil {
		t.Fatal(err)
	}
	e.mustHB("g4", "m", 0, []string{"a"}, nil)
	// Closing a coordinator (its partition moves) releases its groups.
	_ = other.Close()
	if n := e.c.cfg.Metrics.groups.load(); n != 2 {
		t.Fatalf("groups counted after Close: %d", n)
	}
	e.mustHB("g5", "m", 0, []string{"a"}, nil)
}

// TestGroupRecordBounded: joins that would grow the group's record past
// MaxGroupBytes are refused; the members already in keep rebalancing
// (reporting owned what they were given is not growth) and every persisted
// record stays within the bound.
func TestGroupRecordBounded(t *testing.T) {
	topics := newTopics()
	subs := names("topic", 10, 100)
	for _, s := range subs {
		topics.set(s, 4)
	}
	e := newLimitedEnv(t, topics, func(c *Config) {
		c.Limits.MaxGroupBytes, c.Limits.MaxMemberBytes = 16<<10, 8<<10
	})
	var members []string
	var err error
	for i := range 20 {
		id := fmt.Sprintf("member-%02d", i)
		if _, err = e.hb("g", id, 0, subs, nil); err != nil {
			break
		}
		members = append(members, id)
	}
	if !errors.Is(err, ErrLimitExceeded) || refusalReason(err) != refusedGroupBytes {
		t.Fatalf("join past the group bound: %v", err)
	}
	if len(members) < 2 {
		t.Fatalf("only %d members joined", len(members))
	}
	settle(t, e, "g", members)
	size := lastMetadataBytes(t, e.log, "g")
	if size > 16<<10 {
		t.Fatalf("persisted record of %d bytes > bound", size)
	}
	t.Logf("%d members joined; settled record %d bytes", len(members), size)
	// A well-behaved member leaving makes room for one more.
	e.mustHB("g", members[0], -1, nil, nil)
	e.mustHB("g", "late", 0, subs, nil)
	settle(t, e, "g", append(members[1:], "late"))
	if size := lastMetadataBytes(t, e.log, "g"); size > 16<<10 {
		t.Fatalf("persisted record of %d bytes > bound", size)
	}
}

// lastMetadataBytes returns the size of the last metadata record of group.
func lastMetadataBytes(t *testing.T, log *memLog, group string) int {
	t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	size := -1
	for _, r := range log.records {
		d, err := decodeRecord(r)
		if err == nil && d.key.GroupId == group && d.key.Topic == "" {
			size = len(r.Value)
		}
	}
	return size
}

// TestGroupBoundFollowsTheLog: the coordinator keeps a record within half
// the log's batch bound (max.message.bytes of __consumer_offsets) when that
// is below MaxGroupBytes.
func TestGroupBoundFollowsTheLog(t *testing.T) {
	topics := newTopics()
	subs := names("topic", 10, 100)
	for _, s := range subs {
		topics.set(s, 1)
	}
	e := newLimitedEnv(t, topics, nil)
	e.log.maxBatch = 16 << 10
	var err error
	for i := range 20 {
		if _, err = e.hb("g", fmt.Sprintf("m%d", i), 0, subs, nil); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrLimitExceeded) || refusalReason(err) != refusedGroupBytes {
		t.Fatalf("join past half the batch bound: %v", err)
	}
	if size := lastMetadataBytes(t, e.log, "g"); size > 8<<10 {
		t.Fatalf("persisted record of %d bytes > half the batch bound", size)
	}
}

// TestTickSplitsBatches: one Tick that changes many large groups writes
// them in batches the log accepts, instead of one batch too large for all.
func TestTickSplitsBatches(t *testing.T) {
	topics := newTopics()
	subs := names("topic", 10, 100)
	for _, s := range subs {
		topics.set(s, 1)
	}
	e := newLimitedEnv(t, topics, nil)
	e.log.maxBatch = 32 << 10
	for g := range 20 {
		for m := range 3 {
			e.mustHB(fmt.Sprintf("g%d", g), fmt.Sprintf("m%d", m), 0, subs, nil)
		}
	}
	// Keep one member per group alive: every group changes at the tick.
	e.clock.Advance(testSession / 2)
	for g := range 20 {
		d := describe(t, e.c, fmt.Sprintf("g%d", g))
		e.mustHB(d.GroupId, "m0", d.Members[0].MemberEpoch, nil, nil)
	}
	e.clock.Advance(testSession/2 + 1)
	if err := e.c.Tick(context.Background(), e.clock.Now()); err != nil {
		t.Fatalf("tick: %v", err)
	}
	e.failover()
	for g := range 20 {
		if d := describe(t, e.c, fmt.Sprintf("g%d", g)); len(d.Members) != 1 {
			t.Fatalf("after failover: %v", d)
		}
	}
	if e.log.largestBatch > 32<<10 {
		t.Fatalf("batch of %d bytes", e.log.largestBatch)
	}
}

// TestOverLimitGroupStillLoads: limits apply to requests, not to what is
// stored. A group stored with more members than the limit now allows, and
// more groups than MaxGroups, load; their members heartbeat and leave; only
// growth is refused.
func TestOverLimitGroupStillLoads(t *testing.T) {
	e := newLimitedEnv(t, newTopics("a", 8), nil)
	members := []string{"m1", "m2", "m3", "m4", "m5"}
	for _, m := range members {
		e.mustHB("g", m, 0, []string{"a"}, nil)
	}
	settle(t, e, "g", members)
	e.mustHB("h1", "m", 0, []string{"a"}, nil)
	e.mustHB("h2", "m", 0, []string{"a"}, nil)

	e.configure = func(c *Config) {
		c.Metrics = NewMetrics(prometheus.NewRegistry())
		c.Limits.MaxMembers, c.Limits.MaxGroups = 2, 1
		c.Limits.MaxIDBytes = 1 // every stored id is longer
	}
	e.failover()
	if l, _ := e.c.ListGroups(context.Background(), nil); len(l.Groups) != 3 {
		t.Fatalf("groups after load: %v", l.Groups)
	}
	if d := describe(t, e.c, "g"); len(d.Members) != 5 {
		t.Fatalf("members after load: %v", d)
	}
	e.configure = func(c *Config) {
		c.Metrics = NewMetrics(prometheus.NewRegistry())
		c.Limits.MaxMembers, c.Limits.MaxGroups = 2, 1
	}
	e.failover()
	settle(t, e, "g", members)
	if _, err := e.hb("g", "m6", 0, []string{"a"}, nil); !errors.Is(err, ErrGroupMaxSize) {
		t.Fatalf("join to an over-full group: %v", err)
	}
	if _, err := e.hb("h3", "m", 0, []string{"a"}, nil); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("new group past MaxGroups: %v", err)
	}
	e.mustHB("g", "m5", -1, nil, nil)
	settle(t, e, "g", members[:4])
}

func TestLimitsConfig(t *testing.T) {
	cfg := testConfig(&memLog{}, newTopics(), newClock())
	cfg.Limits.MaxMembers = -1
	if err := cfg.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative limit: %v", err)
	}
	cfg.Limits = Limits{}
	cfg.setDefaults()
	if cfg.Limits != DefaultLimits() {
		t.Fatalf("defaults: %v", cfg.Limits)
	}
	if s := cfg.String(); !strings.Contains(s, "MaxMembers: 1000") {
		t.Fatalf("String() = %s", s)
	}
}

// A group with more offsets than one batch holds tombstones for is deleted
// (DeleteGroup) and expired (Tick, OffsetsRetention) in several writes the
// log accepts: all tombstones in one batch passed max.message.bytes, and
// the delete, or the expiry at every tick, failed for good.
func TestManyOffsetsDeletedInSeveralWrites(t *testing.T) {
	const parts = 1000
	for _, how := range []string{"delete", "expire"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, newTopics("a", parts))
			e.log.maxBatch = 16 << 10
			ctx := context.Background()
			for p := 0; p < parts; p += 100 {
				req := &brokerpb.CommitOffsetsRequest{GroupId: "g", MemberEpoch: -1}
				for q := p; q < p+100; q++ {
					req.Offsets = append(req.Offsets, &brokerpb.OffsetCommit{Topic: "a", Partition: int32(q), Offset: 1})
				}
				if _, err := e.c.Commit(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			batches := e.log.batches
			switch how {
			case "delete":
				if _, err := e.c.DeleteGroup(ctx, &brokerpb.DeleteGroupRequest{GroupId: "g"}); err != nil {
					t.Fatalf("delete: %v", err)
				}
			case "expire":
				e.clock.Advance(e.c.cfg.OffsetsRetention + time.Minute)
				for i := 0; len(e.c.Offsets()) > 0; i++ {
					if i == 20 {
						t.Fatalf("%d offsets left after %d ticks", len(e.c.Offsets()), i)
					}
					if err := e.c.Tick(ctx, e.clock.Now()); err != nil {
						t.Fatalf("tick: %v", err)
					}
				}
			}
			if writes := e.log.batches - batches; writes < 2 || e.log.largestBatch > 16<<10 {
				t.Fatalf("%d writes, the largest batch %d bytes (bound %d)", writes, e.log.largestBatch, 16<<10)
			}
			for _, when := range []string{"in memory", "after failover"} {
				if _, err := e.c.DescribeGroup(ctx, &brokerpb.DescribeGroupRequest{GroupId: "g"}); !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s: the group is still there: %v", when, err)
				}
				if got := e.c.Offsets(); len(got) != 0 {
					t.Fatalf("%s: %d offsets left", when, len(got))
				}
				e.failover()
			}
		})
	}
}
