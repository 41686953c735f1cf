package group

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// The classic protocol through the Coordinator: parked calls, durability
// before answers (W6), failover (C8), commits (C9) and the one namespace
// of both kinds (K1).

type joinOutcome struct {
	r   JoinResult
	err error
}

// consumerSubscription encodes a ConsumerProtocolSubscription v0 of topics.
func consumerSubscription(topics ...string) []byte {
	b := []byte{0, 0, 0, 0, 0, byte(len(topics))}
	for _, t := range topics {
		b = append(b, 0, byte(len(t)))
		b = append(b, t...)
	}
	return append(b, 0xff, 0xff, 0xff, 0xff)
}

func classicJoin(group, member string, topics ...string) JoinRequest {
	return JoinRequest{
		GroupID: group, MemberID: member, ClientID: "cl", ClientHost: "h",
		SessionTimeout: testSession, RebalanceTimeout: testRebalance, ProtocolType: "consumer",
		Protocols: []Protocol{{Name: "range", Metadata: consumerSubscription(topics...)}},
	}
}

func (e *env) joinAsync(req JoinRequest) <-chan joinOutcome {
	ch := make(chan joinOutcome, 1)
	c := e.c
	go func() {
		r, err := c.Join(context.Background(), req)
		ch <- joinOutcome{r, err}
	}()
	return ch
}

func awaitJoin(t *testing.T, ch <-chan joinOutcome) JoinResult {
	t.Helper()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatalf("join: %v", o.err)
		}
		return o.r
	case <-time.After(10 * time.Second):
		t.Fatal("join still parked")
		return JoinResult{}
	}
}

func notYet[T any](t *testing.T, what string, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s answered: %v", what, v)
	case <-time.After(20 * time.Millisecond):
	}
}

// joinWithID does KIP-394's two joins: the first gets the member id.
func (e *env) joinWithID(req JoinRequest) <-chan joinOutcome {
	e.t.Helper()
	req.RequireMemberID = true
	r, err := e.c.Join(context.Background(), req)
	if !errors.Is(err, ErrMemberIDRequired) || r.MemberID == "" {
		e.t.Fatalf("first join: %+v %v", r, err)
	}
	req.MemberID = r.MemberID
	return e.joinAsync(req)
}

func (e *env) mustSync(req SyncRequest) SyncResult {
	e.t.Helper()
	r, err := e.c.Sync(context.Background(), req)
	if err != nil {
		e.t.Fatalf("sync %s: %v", req.MemberID, err)
	}
	return r
}

func (e *env) commitClassic(group, member string, gen int32, topic string, p int32, off int64) error {
	res, err := e.c.OffsetCommit(context.Background(), OffsetCommitRequest{
		GroupID: group, MemberID: member, Generation: gen,
		Offsets: []OffsetCommit{{Topic: topic, Partition: p, Offset: off, LeaderEpoch: 7, Metadata: "m"}},
	})
	if err != nil {
		return err
	}
	return res[0].Err
}

// twoMembers brings a and b (member ids from the coordinator) to a Stable
// generation where the leader gave each "assign-<id>".
func (e *env) twoMembers(group string) (leader, follower JoinResult) {
	e.t.Helper()
	ja := awaitJoin(e.t, e.joinWithID(classicJoin(group, "", "t")))
	e.mustSync(SyncRequest{GroupID: group, MemberID: ja.MemberID, Generation: ja.Generation,
		Assignments: []MemberAssignment{{ja.MemberID, []byte("solo")}}})
	chb := e.joinWithID(classicJoin(group, "", "t"))
	notYet(e.t, "b's join", chb)
	if err := e.c.ClassicHeartbeat(context.Background(), HeartbeatRequest{GroupID: group, MemberID: ja.MemberID, Generation: ja.Generation}); !errors.Is(err, ErrRebalanceInProgress) {
		e.t.Fatalf("a's heartbeat during the round: %v", err)
	}
	cha := e.joinAsync(classicJoin(group, ja.MemberID, "t"))
	ra, rb := awaitJoin(e.t, cha), awaitJoin(e.t, chb)
	if ra.Leader != ja.MemberID || ra.Generation != ja.Generation+1 || rb.Generation != ra.Generation || len(ra.Members) != 2 {
		e.t.Fatalf("round 2: %+v %+v", ra, rb)
	}
	syncB := async(func() error {
		r, err := e.c.Sync(context.Background(), SyncRequest{GroupID: group, MemberID: rb.MemberID, Generation: rb.Generation})
		if err == nil && string(r.Assignment) != "assign-"+rb.MemberID {
			e.t.Errorf("b got %q", r.Assignment)
		}
		return err
	})
	notYet(e.t, "b's sync", syncB)
	var as []MemberAssignment
	for _, m := range ra.Members {
		as = append(as, MemberAssignment{m.MemberID, []byte("assign-" + m.MemberID)})
	}
	if r := e.mustSync(SyncRequest{GroupID: group, MemberID: ra.MemberID, Generation: ra.Generation, ProtocolType: "consumer", Protocol: "range", Assignments: as}); string(r.Assignment) != "assign-"+ra.MemberID {
		e.t.Fatalf("leader got %q", r.Assignment)
	}
	if err := await(e.t, "b's sync", syncB); err != nil {
		e.t.Fatal(err)
	}
	return ra, rb
}

// C2-C4 and C9 over the coordinator: KIP-394 joins, a parked barrier, a
// parked follower sync, fenced commits, the committed leader epoch and
// metadata, and what List and Describe show.
func TestClassicGroupServes(t *testing.T) {
	e := newEnv(t, newTopics("t", 2, "u", 1))
	ra, rb := e.twoMembers("g")
	gen := ra.Generation
	if err := e.commitClassic("g", rb.MemberID, gen, "t", 1, 42); err != nil {
		t.Fatalf("commit: %v", err)
	}
	for _, tc := range []struct {
		member string
		gen    int32
		topic  string
		want   error
	}{
		{rb.MemberID, gen - 1, "t", ErrIllegalGeneration},
		{"nobody", gen, "t", ErrUnknownMember},
		{"", -1, "t", ErrUnknownMember}, // standalone: the group has members
		{rb.MemberID, gen, "nope", ErrUnknownPartition},
	} {
		if err := e.commitClassic("g", tc.member, tc.gen, tc.topic, 0, 1); !errors.Is(err, tc.want) {
			t.Errorf("commit %s gen %d %s: %v, want %v", tc.member, tc.gen, tc.topic, err, tc.want)
		}
	}
	if err := e.commitClassic("nogroup", "m", 3, "t", 0, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("member commit to no group: %v", err)
	}
	offs, err := e.c.OffsetFetch(context.Background(), OffsetFetchRequest{GroupID: "g", Partitions: []TopicPartition{{"t", 1}, {"t", 0}}})
	if err != nil || len(offs) != 2 || offs[0].Offset != 42 || offs[0].LeaderEpoch != 7 || offs[0].Metadata != "m" ||
		offs[1].Offset != -1 || offs[1].LeaderEpoch != -1 {
		t.Fatalf("fetch: %+v %v", offs, err)
	}
	list, _ := e.c.List(context.Background())
	if len(list) != 1 || list[0] != (GroupListing{GroupID: "g", Type: TypeClassic, ProtocolType: "consumer", State: "Stable"}) {
		t.Fatalf("list: %+v", list)
	}
	d, err := e.c.Describe(context.Background(), "g")
	if err != nil || d.State != "Stable" || d.Protocol != "range" || d.Generation != gen || len(d.Members) != 2 ||
		string(d.Members[0].Assignment) != "assign-"+d.Members[0].MemberID || d.Members[0].ClientID != "cl" {
		t.Fatalf("describe: %+v %v", d, err)
	}
	// b leaves: a round starts; a's commit of the generation still goes
	// through (Kafka allows it while the round is being prepared).
	res, err := e.c.Leave(context.Background(), LeaveRequest{GroupID: "g", Members: []LeavingMember{{MemberID: rb.MemberID}, {MemberID: "x"}}})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, ErrUnknownMember) {
		t.Fatalf("leave: %+v %v", res, err)
	}
	if err := e.commitClassic("g", ra.MemberID, gen, "t", 0, 5); err != nil {
		t.Fatalf("commit while preparing: %v", err)
	}
	r := awaitJoin(t, e.joinAsync(classicJoin("g", ra.MemberID, "t")))
	if err := e.commitClassic("g", ra.MemberID, gen, "t", 0, 6); !errors.Is(err, ErrIllegalGeneration) {
		t.Fatalf("commit of the old generation after the barrier: %v", err)
	}
	if err := e.commitClassic("g", ra.MemberID, r.Generation, "t", 0, 6); !errors.Is(err, ErrRebalanceInProgress) {
		t.Fatalf("commit before the leader's sync: %v", err)
	}
}

// C6, C8: a new coordinator restores the classic group from the log: its
// members heartbeat and commit with their generation, older generations
// stay fenced, and a round completing at the failover is finished by the
// leader's sync.
func TestClassicFailover(t *testing.T) {
	e := newEnv(t, newTopics("t", 2))
	ra, rb := e.twoMembers("g")
	gen := ra.Generation
	e.failover()
	for _, id := range []string{ra.MemberID, rb.MemberID} {
		if err := e.c.ClassicHeartbeat(context.Background(), HeartbeatRequest{GroupID: "g", MemberID: id, Generation: gen}); err != nil {
			t.Fatalf("heartbeat after failover: %v", err)
		}
	}
	if r := e.mustSync(SyncRequest{GroupID: "g", MemberID: rb.MemberID, Generation: gen}); string(r.Assignment) != "assign-"+rb.MemberID {
		t.Fatalf("sync after failover: %q", r.Assignment)
	}
	if err := e.commitClassic("g", rb.MemberID, gen, "t", 0, 9); err != nil {
		t.Fatalf("commit after failover: %v", err)
	}
	if err := e.commitClassic("g", rb.MemberID, gen-1, "t", 0, 9); !errors.Is(err, ErrIllegalGeneration) {
		t.Fatalf("old generation after failover: %v", err)
	}
	// A round whose barrier completed (and was persisted) before the
	// failover: the leader's sync completes it on the new coordinator.
	cha := e.joinAsync(classicJoin("g", ra.MemberID, "t")) // the leader's join starts a round
	waitState(t, e.c, "g", "PreparingRebalance")
	chb := e.joinAsync(classicJoin("g", rb.MemberID, "t"))
	r := awaitJoin(t, cha)
	awaitJoin(t, chb)
	e.failover()
	if d, _ := e.c.Describe(context.Background(), "g"); d.State != "CompletingRebalance" || d.Generation != r.Generation {
		t.Fatalf("restored %+v", d)
	}
	syncB := async(func() error {
		_, err := e.c.Sync(context.Background(), SyncRequest{GroupID: "g", MemberID: rb.MemberID, Generation: r.Generation})
		return err
	})
	e.mustSync(SyncRequest{GroupID: "g", MemberID: ra.MemberID, Generation: r.Generation,
		Assignments: []MemberAssignment{{ra.MemberID, []byte("x")}, {rb.MemberID, []byte("y")}}})
	if err := await(t, "b's sync", syncB); err != nil {
		t.Fatal(err)
	}
	// Parked calls end with the coordinator.
	ch := e.joinAsync(classicJoin("g", "", "t"))
	waitState(t, e.c, "g", "PreparingRebalance")
	_ = e.c.Close()
	if o := <-ch; !errors.Is(o.err, ErrClosed) {
		t.Fatalf("parked join at close: %v", o.err)
	}
}

// W6, C6: a join is answered only once the barrier's record is durable,
// and a failed write of the leader's sync fails the parked syncs and
// leaves the group as the log has it (W4): the leader syncs again.
func TestClassicAnswersWaitForTheLog(t *testing.T) {
	e := &env{t: t, log: &memLog{}, topics: newTopics("t", 2), clock: newClock()}
	gl := &metaGateLog{memLog: e.log, entered: make(chan chan struct{}, 4)}
	e.configure = func(cfg *Config) { cfg.Log = gl }
	e.c = e.open()
	gl.mu.Lock()
	gl.group = "g"
	gl.mu.Unlock()
	ch := e.joinAsync(classicJoin("g", "", "t"))
	release := <-gl.entered
	notYet(t, "join before its barrier is durable", ch)
	close(release)
	r := awaitJoin(t, ch)
	gl.mu.Lock()
	gl.group = ""
	gl.mu.Unlock()

	e.log.mu.Lock()
	e.log.failNext = 1
	e.log.mu.Unlock()
	_, err := e.c.Sync(context.Background(), SyncRequest{GroupID: "g", MemberID: r.MemberID, Generation: r.Generation,
		Assignments: []MemberAssignment{{r.MemberID, []byte("a")}}})
	if !errors.Is(err, errInjected) {
		t.Fatalf("sync whose write failed: %v", err)
	}
	if d, _ := e.c.Describe(context.Background(), "g"); d.State != "CompletingRebalance" {
		t.Fatalf("after the failed write: %s", d.State)
	}
	if got := e.mustSync(SyncRequest{GroupID: "g", MemberID: r.MemberID, Generation: r.Generation,
		Assignments: []MemberAssignment{{r.MemberID, []byte("a")}}}); string(got.Assignment) != "a" {
		t.Fatalf("retried sync: %q", got.Assignment)
	}
}

// K1: one namespace: a group with members of one kind refuses the other
// kind; a group without members (offsets only, or emptied) takes either.
func TestGroupKinds(t *testing.T) {
	e := newEnv(t, newTopics("t", 2))
	// Offsets only (a standalone commit): a classic member joins.
	if err := e.commitClassic("g", "", -1, "t", 0, 3); err != nil {
		t.Fatalf("standalone commit: %v", err)
	}
	if l, _ := e.c.List(context.Background()); len(l) != 1 || l[0].Type != TypeClassic || l[0].ProtocolType != "" || l[0].State != "Empty" {
		t.Fatalf("offsets-only group: %+v", l)
	}
	r := awaitJoin(t, e.joinAsync(classicJoin("g", "", "t")))
	if _, err := e.hb("g", "", 0, []string{"t"}, nil); !errors.Is(err, ErrInconsistentGroupProtocol) {
		t.Fatalf("KIP-848 join of a classic group: %v", err)
	}
	if _, err := e.c.Leave(context.Background(), LeaveRequest{GroupID: "g", Members: []LeavingMember{{MemberID: r.MemberID}}}); err != nil {
		t.Fatal(err)
	}
	// Empty now: a refused KIP-848 join changes nothing; a KIP-848 member
	// takes the group over, offsets kept.
	if _, err := e.hb("g", "", 0, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("join without subscription: %v", err)
	}
	if l, _ := e.c.List(context.Background()); l[0].Type != TypeClassic || l[0].ProtocolType != "consumer" {
		t.Fatalf("a refused join changed the group: %+v", l)
	}
	hb := e.mustHB("g", "", 0, []string{"t"}, nil)
	if _, err := e.c.Join(context.Background(), classicJoin("g", "", "t")); !errors.Is(err, ErrInconsistentGroupProtocol) {
		t.Fatalf("classic join of a KIP-848 group: %v", err)
	}
	if l, _ := e.c.List(context.Background()); l[0].Type != TypeConsumer || l[0].ProtocolType != "consumer" {
		t.Fatalf("list: %+v", l)
	}
	if err := e.commitClassic("g", hb.MemberId, hb.MemberEpoch+1, "t", 1, 4); !errors.Is(err, ErrFencedMemberEpoch) {
		t.Fatalf("KIP-848 commit with a newer epoch: %v", err)
	}
	if err := e.commitClassic("g", hb.MemberId, hb.MemberEpoch, "t", 1, 4); err != nil {
		t.Fatalf("KIP-848 commit through OffsetCommit: %v", err)
	}
	e.failover()
	offs, _ := e.c.OffsetFetch(context.Background(), OffsetFetchRequest{GroupID: "g"})
	if len(offs) != 2 || offs[0].Offset != 3 || offs[1].Offset != 4 || offs[1].LeaderEpoch != 7 {
		t.Fatalf("offsets: %+v", offs)
	}
	if _, err := e.c.OffsetFetch(context.Background(), OffsetFetchRequest{GroupID: "g", MemberID: hb.MemberId, MemberEpoch: hb.MemberEpoch + 1}); !errors.Is(err, ErrStaleMemberEpoch) {
		t.Fatalf("member fetch with another epoch: %v", err)
	}
}

// DeleteOffsets refuses the topics a classic "consumer" group subscribes
// to; Delete refuses a group with members.
func TestDeleteOffsetsAndGroups(t *testing.T) {
	e := newEnv(t, newTopics("t", 2, "u", 1))
	ra, _ := e.twoMembers("g")
	for _, tp := range []TopicPartition{{"t", 0}, {"u", 0}} {
		if err := e.commitClassic("g", ra.MemberID, ra.Generation, tp.Topic, tp.Partition, 1); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.c.DeleteOffsets(context.Background(), "g", []TopicPartition{{"t", 0}, {"u", 0}})
	if err != nil || !errors.Is(res[0].Err, ErrGroupSubscribedToTopic) || res[1].Err != nil {
		t.Fatalf("delete offsets: %+v %v", res, err)
	}
	offs, _ := e.c.OffsetFetch(context.Background(), OffsetFetchRequest{GroupID: "g"})
	if len(offs) != 1 || offs[0].Topic != "t" {
		t.Fatalf("offsets left: %+v", offs)
	}
	if err := e.c.Delete(context.Background(), "g"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("delete of a group with members: %v", err)
	}
	if _, err := e.c.DeleteOffsets(context.Background(), "none", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete offsets of no group: %v", err)
	}
	d, _ := e.c.Describe(context.Background(), "g")
	var leaving []LeavingMember
	for _, m := range d.Members {
		leaving = append(leaving, LeavingMember{MemberID: m.MemberID})
	}
	if _, err := e.c.Leave(context.Background(), LeaveRequest{GroupID: "g", Members: leaving}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(context.Background(), "g"); err != nil {
		t.Fatalf("delete of an empty group: %v", err)
	}
	e.failover()
	if l, _ := e.c.List(context.Background()); len(l) != 0 {
		t.Fatalf("deleted group listed after failover: %+v", l)
	}
}

func waitState(t *testing.T, c *Coordinator, group, state string) {
	t.Helper()
	testwait.Until(t, 10*time.Second, "group "+group+" "+state, func() bool {
		d, _ := c.Describe(context.Background(), group)
		return d.State == state
	})
}

// C3: the first round of an empty group waits for the initial delay
// (through Tick here; the parked joins wake themselves in real time).
func TestClassicInitialDelayThroughTick(t *testing.T) {
	e := newEnv(t, newTopics("t", 1))
	e.configure = func(cfg *Config) { cfg.InitialRebalanceDelay = time.Hour }
	e.failover()
	cha := e.joinAsync(classicJoin("g", "", "t"))
	chb := e.joinAsync(classicJoin("g", "", "t"))
	testwait.Until(t, 10*time.Second, "two members joined", func() bool {
		d, _ := e.c.Describe(context.Background(), "g")
		return len(d.Members) == 2
	})
	notYet(t, "join during the delay", cha)
	e.clock.Advance(testRebalance) // the rebalance timeout bounds the delay
	if err := e.c.Tick(context.Background(), e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	ra, rb := awaitJoin(t, cha), awaitJoin(t, chb)
	if ra.Generation != 1 || rb.Generation != 1 {
		t.Fatalf("%+v %+v", ra, rb)
	}
}

// A parked join whose caller goes away still counts for the barrier; the
// member is removed when it does not sync.
func TestClassicAbandonedJoin(t *testing.T) {
	e := newEnv(t, newTopics("t", 1))
	ra, rb := e.twoMembers("g")
	ctx, cancel := context.WithCancel(context.Background())
	// b's subscription changed: its join starts a round.
	errc := async(func() error { _, err := e.c.Join(ctx, classicJoin("g", rb.MemberID, "t", "u")); return err })
	waitState(t, e.c, "g", "PreparingRebalance")
	cancel()
	if err := await(t, "cancelled join", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled join: %v", err)
	}
	r := awaitJoin(t, e.joinAsync(classicJoin("g", ra.MemberID, "t")))
	if len(r.Members) != 2 {
		t.Fatalf("the abandoned join did not count: %+v", r)
	}
	e.mustSync(SyncRequest{GroupID: "g", MemberID: ra.MemberID, Generation: r.Generation})
	e.clock.Advance(testSession + time.Second)
	if err := e.c.Tick(context.Background(), e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	d, _ := e.c.Describe(context.Background(), "g")
	if slices.ContainsFunc(d.Members, func(m ClassicMemberDescription) bool { return m.MemberID == rb.MemberID }) {
		t.Fatalf("silent member kept: %+v", d)
	}
}

// C3 with the real clock and no Tick: parked joins wake at the initial
// delay's end and complete the barrier themselves.
func TestClassicInitialDelayWakesParkedJoins(t *testing.T) {
	e := newEnv(t, newTopics("t", 1))
	e.configure = func(cfg *Config) {
		cfg.Now = time.Now
		cfg.InitialRebalanceDelay = 500 * time.Millisecond
	}
	e.failover()
	cha := e.joinAsync(classicJoin("g", "", "t"))
	chb := e.joinAsync(classicJoin("g", "", "t"))
	ra, rb := awaitJoin(t, cha), awaitJoin(t, chb)
	if ra.Generation != rb.Generation || ra.Leader != rb.Leader {
		t.Fatalf("%+v %+v", ra, rb)
	}
}
