package group

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

func (e *env) hbReq(req *brokerpb.GroupHeartbeatRequest) (*brokerpb.GroupHeartbeatResponse, error) {
	if req.GroupId == "" {
		req.GroupId = "g"
	}
	return e.c.Heartbeat(context.Background(), req)
}

func (e *env) mustHBReq(req *brokerpb.GroupHeartbeatRequest) *brokerpb.GroupHeartbeatResponse {
	e.t.Helper()
	r, err := e.hbReq(req)
	if err != nil {
		e.t.Fatalf("heartbeat %+v: %v", req, err)
	}
	return r
}

// A regex subscription is resolved against the topics that exist, and
// re-resolved every RegexRefreshInterval: a topic created or deleted
// starts a new epoch. The regex survives a failover.
func TestRegexSubscription(t *testing.T) {
	topics := newTopics("t1", 2, "t2", 1, "x", 1)
	e := &env{t: t, log: &memLog{}, topics: topics, clock: newClock()}
	e.configure = func(cfg *Config) { cfg.RegexRefreshInterval = 2 * time.Second }
	e.c = e.open()
	if _, err := e.hbReq(&brokerpb.GroupHeartbeatRequest{MemberEpoch: 0, SubscribedTopicRegex: "("}); !errors.Is(err, ErrInvalidRegularExpression) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad regex: %v", err)
	}
	r := e.mustHBReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m", MemberEpoch: 0, SubscribedTopicRegex: "t.*"})
	assertSet(t, "assignment", r.Assignment, tps("t1", 0, 1, "t2", 0))
	owned := tpSetFromProto(r.Assignment)
	topics.set("t3", 1)
	tick := func(d time.Duration) {
		t.Helper()
		e.clock.Advance(d)
		e.mustHB("g", "m", r.MemberEpoch, nil, owned) // keeps the session
		if err := e.c.Tick(context.Background(), e.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	tick(time.Second)
	if d := describe(t, e.c, "g"); d.GroupEpoch != 1 {
		t.Fatalf("re-resolved before the interval: epoch %d", d.GroupEpoch)
	}
	tick(time.Second)
	r = e.mustHB("g", "m", r.MemberEpoch, nil, owned)
	assertSet(t, "assignment with t3", r.Assignment, tps("t1", 0, 1, "t2", 0, "t3", 0))
	owned = tpSetFromProto(r.Assignment)
	topics.remove("t1")
	tick(2 * time.Second)
	r = e.mustHB("g", "m", r.MemberEpoch, nil, owned.intersect(tps("t2", 0, "t3", 0)))
	assertSet(t, "assignment without t1", r.Assignment, tps("t2", 0, "t3", 0))
	owned = tpSetFromProto(r.Assignment)

	e.failover()
	r = e.mustHB("g", "m", r.MemberEpoch, nil, owned)
	assertSet(t, "assignment after failover", r.Assignment, tps("t2", 0, "t3", 0))
	d, err := e.c.Describe(context.Background(), "g")
	if err != nil || d.AssignorName != UniformAssignor || d.ConsumerMembers[0].SubscribedTopicRegex != "t.*" || len(d.ConsumerMembers[0].Target) != 2 {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if _, err := e.hbReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m", MemberEpoch: r.MemberEpoch, ServerAssignor: "cooperative"}); !errors.Is(err, ErrUnsupportedAssignor) {
		t.Fatalf("an unknown assignor: %v", err)
	}
	// Asking for range moves the group to it (its only member asks), and
	// a failover keeps it.
	if _, err := e.hbReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m", MemberEpoch: r.MemberEpoch, ServerAssignor: RangeAssignor}); err != nil {
		t.Fatalf("the range assignor: %v", err)
	}
	e.failover()
	if d, err := e.c.Describe(context.Background(), "g"); err != nil || d.AssignorName != RangeAssignor {
		t.Fatalf("assignor after asking for range and a failover: %q %v", d.AssignorName, err)
	}
}

// A static member leaving with epoch -2 keeps its partitions, without a
// rebalance, until it rejoins under its instance id (a new member id takes
// over its assignment) or its session expires.
func TestStaticMemberAway(t *testing.T) {
	e := newEnv(t, newTopics("a", 4))
	r1 := e.mustHBReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m1", InstanceId: "i1", SubscribedTopics: []string{"a"}})
	e.mustHB("g", "m1", r1.MemberEpoch, nil, tpSetFromProto(r1.Assignment))
	r2 := e.mustHB("g", "m2", 0, []string{"a"}, nil)
	r1 = e.mustHB("g", "m1", r1.MemberEpoch, nil, tps("a", 0, 1, 2, 3))
	r1 = e.mustHB("g", "m1", r1.MemberEpoch, nil, tpSetFromProto(r1.Assignment)) // revoked
	r2 = e.mustHB("g", "m2", r2.MemberEpoch, nil, nil)
	r2 = e.mustHB("g", "m2", r2.MemberEpoch, nil, tpSetFromProto(r2.Assignment))
	mine := tpSetFromProto(r1.Assignment)
	if len(mine) != 2 {
		t.Fatalf("m1 holds %v", mine.sorted())
	}
	epoch := describe(t, e.c, "g").GroupEpoch

	if r := e.mustHBReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m1", InstanceId: "i1", MemberEpoch: -2}); r.MemberEpoch != -2 {
		t.Fatalf("leave for a while: %v", r)
	}
	r2 = e.mustHB("g", "m2", r2.MemberEpoch, nil, tpSetFromProto(r2.Assignment))
	if d := describe(t, e.c, "g"); d.GroupEpoch != epoch || len(tpSetFromProto(r2.Assignment).intersect(mine)) > 0 {
		t.Fatalf("the away member's partitions moved: epoch %d -> %d, m2 %v", epoch, d.GroupEpoch, r2.Assignment)
	}
	if _, err := e.hbReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m3", InstanceId: "i2", SubscribedTopics: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.hbReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m4", InstanceId: "i2", SubscribedTopics: []string{"a"}}); !errors.Is(err, ErrUnreleasedInstanceID) {
		t.Fatalf("instance of an active member: %v", err)
	}
	if _, err := e.hbReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m3", MemberEpoch: -1}); err != nil {
		t.Fatal(err)
	}
	epoch = describe(t, e.c, "g").GroupEpoch

	// The instance comes back under a new member id: m1's assignment.
	r := e.mustHBReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m1b", InstanceId: "i1"})
	assertSet(t, "taken over", r.Assignment, mine)
	if d := describe(t, e.c, "g"); d.GroupEpoch != epoch || len(d.Members) != 2 {
		t.Fatalf("takeover rebalanced: %v", d)
	}
	if _, err := e.hbReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m1", InstanceId: "i1", MemberEpoch: r1.MemberEpoch}); !errors.Is(err, ErrFencedInstanceID) {
		t.Fatalf("old member id: %v", err)
	}
	// Away again, and gone for good when its session expires.
	e.mustHBReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m1b", InstanceId: "i1", MemberEpoch: -2})
	e.clock.Advance(testSession / 2)
	r2 = e.mustHB("g", "m2", r2.MemberEpoch, nil, tpSetFromProto(r2.Assignment))
	e.clock.Advance(testSession/2 + time.Second)
	if err := e.c.Tick(context.Background(), e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	r2 = e.mustHB("g", "m2", r2.MemberEpoch, nil, tpSetFromProto(r2.Assignment))
	assertSet(t, "m2 after the away member expired", r2.Assignment, tps("a", 0, 1, 2, 3))
}

// A heartbeat that leaves owned out (Kafka's null Topics) keeps what the
// member last reported: its partitions stay held.
func TestOwnedOmitted(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	r := e.mustHB("g", "m1", 0, []string{"a"}, nil)
	r = e.mustHB("g", "m1", r.MemberEpoch, nil, tps("a", 0, 1))
	r2 := e.mustHB("g", "m2", 0, []string{"a"}, nil)
	r = e.mustHBReq(&brokerpb.GroupHeartbeatRequest{MemberId: "m1", MemberEpoch: r.MemberEpoch, OwnedOmitted: true})
	r2 = e.mustHB("g", "m2", r2.MemberEpoch, nil, nil)
	if len(r2.Assignment) != 0 {
		t.Fatalf("m2 got partitions m1 still owns: %v (m1 told %v)", r2.Assignment, r.Assignment)
	}
}
