package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// gateLog is a memLog whose appends carrying an offset record of one group
// block, once armed, until released: a quorum write whose bookies do not
// answer. (Appends of the group's metadata alone go through.)
type gateLog struct {
	*memLog
	mu      sync.Mutex
	group   string        // armed: appends with an offset record of it block
	entered chan string   // one value per append that blocked
	release chan struct{} // closed to let the blocked appends through
}

func newGateLog(l *memLog) *gateLog {
	return &gateLog{memLog: l, entered: make(chan string, 16)}
}

// arm makes appends of group block until the returned release is called
// (at the latest when t ends, so a failed test leaves nothing blocked).
func (l *gateLog) arm(t *testing.T, group string) (release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.group, l.release = group, make(chan struct{})
	ch := l.release
	release = sync.OnceFunc(func() {
		l.mu.Lock()
		l.group = ""
		l.mu.Unlock()
		close(ch)
	})
	t.Cleanup(release)
	return release
}

func (l *gateLog) Append(ctx context.Context, records []recordbatch.Record) error {
	l.mu.Lock()
	group, release := l.group, l.release
	l.mu.Unlock()
	if group != "" {
		for _, r := range records {
			if d, err := decodeRecord(r); err == nil && d.key.GroupId == group && d.key.Topic != "" {
				l.entered <- group
				<-release
				break
			}
		}
	}
	return l.memLog.Append(ctx, records)
}

// newGatedEnv is newEnv over a gateLog.
func newGatedEnv(t *testing.T, topics *fakeTopics) (*env, *gateLog) {
	t.Helper()
	e := &env{t: t, log: &memLog{}, topics: topics, clock: newClock()}
	gl := newGateLog(e.log)
	e.configure = func(cfg *Config) { cfg.Log = gl }
	e.c = e.open()
	return e, gl
}

// async runs f on its own goroutine; the channel yields its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// await fails t unless ch yields within a bound far above any append of
// memLog: the call it waits for must not be blocked by the gate.
func await(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still blocked (it waits for another group's or another request's append)", what)
		return nil
	}
}

func commitAsync(c *Coordinator, group, member string, epoch int32, offsets ...*brokerpb.OffsetCommit) <-chan error {
	return async(func() error {
		r, err := commit(c, group, member, epoch, offsets...)
		if err == nil {
			for _, res := range r.Results {
				if res.Error != nil {
					return fmt.Errorf("%s/%d refused: %s", res.Topic, res.Partition, res.Error.GetMessage())
				}
			}
		}
		return err
	})
}

// held waits until group's side batch completed and its write waits for
// the lane's batch in flight (W6).
func held(t *testing.T, c *Coordinator, group string) {
	t.Helper()
	testwait.Until(t, 10*time.Second, "a side write of group "+group+" held behind its lane's batch", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		g := c.mu.groups[group]
		return g != nil && g.lane.held != nil
	})
}

// queued waits until group's lane holds n writes waiting behind the
// append in flight.
func queued(t *testing.T, c *Coordinator, group string, n int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%d writes queued in group %s's lane", n, group), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		g := c.mu.groups[group]
		return g != nil && len(g.lane.queue) == n
	})
}

// W6, W2: while a commit's append is blocked (the bookies do not answer),
// the committing member's heartbeats are answered, another member's join
// to its group is written next to the blocked append (a metadata write of
// the same group) and answered once the commit is applied, another group
// of the same __consumer_offsets partition joins and commits, and reads
// see the last durable offset; a second commit of the same group waits
// its turn and lands after the first, in memory and in the log.
func TestBlockedAppendBlocksOnlyItsGroup(t *testing.T) {
	e, gl := newGatedEnv(t, newTopics("a", 2))
	e.mustHB("g1", "m1", 0, []string{"a"}, nil)
	e.mustHB("g1", "m1", 1, nil, tps("a", 0, 1))
	if _, err := commit(e.c, "g1", "m1", 1, oc("a", 0, 1)); err != nil {
		t.Fatal(err)
	}

	release := gl.arm(t, "g1")
	first := commitAsync(e.c, "g1", "m1", 1, oc("a", 0, 10))
	if g := <-gl.entered; g != "g1" {
		t.Fatalf("blocked append of %s", g)
	}
	second := commitAsync(e.c, "g1", "m1", 1, oc("a", 0, 20))
	queued(t, e.c, "g1", 1)

	hb := async(func() error {
		r, err := e.hb("g1", "m1", 1, nil, tps("a", 0, 1))
		if err == nil && len(r.Assignment) != 1 {
			err = fmt.Errorf("assignment %v", r.Assignment)
		}
		return err
	})
	if err := await(t, "heartbeat of the committing member", hb); err != nil {
		t.Fatal(err)
	}
	join1 := async(func() error {
		r, err := e.hb("g1", "m2", 0, []string{"a"}, nil)
		if err == nil && r.MemberEpoch != 2 {
			err = fmt.Errorf("joined at epoch %d, want 2", r.MemberEpoch)
		}
		return err
	})
	held(t, e.c, "g1")
	join := async(func() error { _, err := e.hb("g2", "n1", 0, []string{"a"}, nil); return err })
	if err := await(t, "join to another group", join); err != nil {
		t.Fatal(err)
	}
	d := describe(t, e.c, "g2")
	other := commitAsync(e.c, "g2", "n1", d.Members[0].MemberEpoch, oc("a", 0, 7))
	if err := await(t, "commit to another group", other); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, e.c, "g1")[TopicPartition{"a", 0}]; got != 1 {
		t.Fatalf("offset while its commit is in flight: %d, want the durable 1", got)
	}

	release()
	if err := await(t, "join to the committing member's group", join1); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "first commit", first); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "second commit", second); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, e.c, "g1")[TopicPartition{"a", 0}]; got != 20 {
		t.Fatalf("offset after both commits: %d, want 20", got)
	}
	e.failover()
	if got := fetch(t, e.c, "g1")[TopicPartition{"a", 0}]; got != 20 {
		t.Fatalf("offset after failover: %d, want 20 (the log's order is the order applied)", got)
	}
	if got := fetch(t, e.c, "g2")[TopicPartition{"a", 0}]; got != 7 {
		t.Fatalf("g2's offset after failover: %d, want 7", got)
	}
	if d := describe(t, e.c, "g1"); len(d.Members) != 2 || d.GroupEpoch != 2 {
		t.Fatalf("g1 after failover: %v", d)
	}
}

// W4: a commit whose append fails changes nothing: the committed offset
// stays what it was, in memory and after a failover, and the next commit
// works.
func TestFailedCommitLeavesOffset(t *testing.T) {
	e := newEnv(t, newTopics("a", 1))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0))
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 5)); err != nil {
		t.Fatal(err)
	}
	e.log.mu.Lock()
	e.log.failNext = 1
	e.log.mu.Unlock()
	if _, err := commit(e.c, "g", "m1", 1, oc("a", 0, 9)); !errors.Is(err, errInjected) {
		t.Fatalf("commit with a failing log: %v", err)
	}
	if got := fetch(t, e.c, "g")[TopicPartition{"a", 0}]; got != 5 {
		t.Fatalf("offset after a failed commit: %d, want 5", got)
	}
	if got := e.c.Offsets(); len(got) != 1 || got[0].Offset != 5 {
		t.Fatalf("Offsets() after a failed commit: %v", got)
	}
	e.failover()
	if got := fetch(t, e.c, "g")[TopicPartition{"a", 0}]; got != 5 {
		t.Fatalf("offset after failover: %d, want 5", got)
	}
	d := describe(t, e.c, "g")
	if _, err := commit(e.c, "g", "m1", d.Members[0].MemberEpoch, oc("a", 0, 6)); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, e.c, "g")[TopicPartition{"a", 0}]; got != 6 {
		t.Fatalf("offset after the next commit: %d, want 6", got)
	}
}

// W4: a heartbeat whose metadata write fails is undone: the group is back
// to what the log holds (the joiner is gone, the epoch is the old one), so
// what memory says never runs ahead of what a failover would load.
func TestFailedMetadataWriteReverts(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	e.log.mu.Lock()
	e.log.failNext = 1
	e.log.mu.Unlock()
	if _, err := e.hb("g", "m2", 0, []string{"a"}, nil); !errors.Is(err, errInjected) {
		t.Fatalf("join with a failing log: %v", err)
	}
	d := describe(t, e.c, "g")
	if len(d.Members) != 1 || d.GroupEpoch != 1 || d.State != "STABLE" {
		t.Fatalf("after the failed join: %v", d)
	}
	// The member that stayed keeps its assignment and its epoch.
	if r := e.mustHB("g", "m1", 1, nil, tps("a", 0, 1)); r.MemberEpoch != 1 || len(r.Assignment[0].Partitions) != 2 {
		t.Fatalf("heartbeat after the failed join: %v", r)
	}
	// A join that fails in a group it would create leaves no group.
	e.log.mu.Lock()
	e.log.failNext = 1
	e.log.mu.Unlock()
	if _, err := e.hb("new", "x", 0, []string{"a"}, nil); !errors.Is(err, errInjected) {
		t.Fatalf("join with a failing log: %v", err)
	}
	if _, err := e.c.DescribeGroup(context.Background(), &brokerpb.DescribeGroupRequest{GroupId: "new"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("group of a failed join: %v", err)
	}
	if n := e.c.cfg.Metrics.groups.load(); n != 1 {
		t.Fatalf("groups counted: %d, want 1", n)
	}
}

// W3: a commit decided before a rebalance but not yet written when the
// member left is checked again at its turn: it is refused, and only what
// was acknowledged is in memory and in the log.
func TestQueuedCommitOfAMemberThatLeft(t *testing.T) {
	e, gl := newGatedEnv(t, newTopics("a", 1))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0))
	release := gl.arm(t, "g")
	first := commitAsync(e.c, "g", "m1", 1, oc("a", 0, 3))
	<-gl.entered
	stale := commitAsync(e.c, "g", "m1", 1, oc("a", 0, 4))
	queued(t, e.c, "g", 1)
	// The leave is written next to the commit in flight, and answered
	// once the commit is applied (W6): whoever is handed the partition
	// next reads the commit.
	leave := async(func() error { _, err := e.hb("g", "m1", -1, nil, nil); return err })
	held(t, e.c, "g")
	release()
	if err := await(t, "leave", leave); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, e.c, "g")[TopicPartition{"a", 0}]; got != 3 {
		t.Fatalf("offset when the leave is answered: %d, want the commit before it, 3", got)
	}
	if err := await(t, "commit in flight", first); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "stale commit", stale); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("commit of a member that left before its turn: %v, want ErrUnknownMember", err)
	}
	for _, when := range []string{"in memory", "after failover"} {
		if got := fetch(t, e.c, "g")[TopicPartition{"a", 0}]; got != 3 {
			t.Fatalf("offset %s: %d, want 3", when, got)
		}
		if d := describe(t, e.c, "g"); len(d.Members) != 0 {
			t.Fatalf("members %s: %v", when, d.Members)
		}
		e.failover()
	}
}

// W1-W3 under load: many committers and joiners on one partition, with
// appends that overlap; afterwards a coordinator loaded from the log holds
// exactly what the live one held (the log's order per group is the order
// memory applied), and every acknowledged commit is the last one of its
// partition or was overtaken by a later one.
func TestConcurrentWritesReplayToTheSameState(t *testing.T) {
	e := newEnv(t, newTopics("a", 4))
	log := &slowLog{memLog: memLog{}, latency: 0}
	e.log = &log.memLog
	e.configure = func(cfg *Config) { cfg.Log = log }
	e.failover()
	const groups, committers, commits = 4, 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, groups*committers)
	for g := range groups {
		for k := range committers {
			wg.Go(func() {
				group := fmt.Sprintf("g%d", g)
				for i := range commits {
					if k == 0 && i%5 == 0 { // membership churn in other groups of the partition
						if _, err := e.c.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{GroupId: group + "-members", MemberId: fmt.Sprintf("m%d", i), SubscribedTopics: []string{"a"}}); err != nil {
							errs <- err
							return
						}
					}
					if _, err := commit(e.c, group, "", -1, oc("a", int32(k%4), int64(i*committers+k))); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	live := e.c.Offsets()
	if len(live) != groups*4 {
		t.Fatalf("%d offsets, want %d", len(live), groups*4)
	}
	e.failover()
	if loaded := e.c.Offsets(); fmt.Sprint(loaded) != fmt.Sprint(live) {
		t.Fatalf("loaded from the log:\n%v\nlive:\n%v", loaded, live)
	}
}

// W5: a delete queued behind an admin commit of a new partition builds its
// tombstones when its turn comes, so they cover that commit: the group is
// gone in memory and after a failover (tombstones built when the delete
// was decided would leave the new partition's offset to come back).
func TestDeleteQueuedBehindACommit(t *testing.T) {
	e, gl := newGatedEnv(t, newTopics("a", 2))
	if _, err := commit(e.c, "g", "", -1, oc("a", 0, 1)); err != nil {
		t.Fatal(err)
	}
	release := gl.arm(t, "g")
	admin := commitAsync(e.c, "g", "", -1, oc("a", 1, 5))
	<-gl.entered
	del := async(func() error {
		_, err := e.c.DeleteGroup(context.Background(), &brokerpb.DeleteGroupRequest{GroupId: "g"})
		return err
	})
	queued(t, e.c, "g", 1)
	release()
	if err := await(t, "admin commit", admin); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "delete", del); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"in memory", "after failover"} {
		if _, err := e.c.DescribeGroup(context.Background(), &brokerpb.DescribeGroupRequest{GroupId: "g"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted group %s: %v", when, err)
		}
		if got := e.c.Offsets(); len(got) != 0 {
			t.Fatalf("offsets %s: %v", when, got)
		}
		e.failover()
	}
}

// W4, W6: a join written next to a blocked commit fails: the group reverts
// to what the log holds while the commit is still in flight, and the
// commit, decided on that durable metadata, still lands.
func TestFailedSideWriteNextToACommit(t *testing.T) {
	e, gl := newGatedEnv(t, newTopics("a", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	release := gl.arm(t, "g")
	first := commitAsync(e.c, "g", "m1", 1, oc("a", 0, 3))
	<-gl.entered
	e.log.mu.Lock()
	e.log.failNext = 1
	e.log.mu.Unlock()
	join := async(func() error { _, err := e.hb("g", "m2", 0, []string{"a"}, nil); return err })
	if err := await(t, "join", join); !errors.Is(err, errInjected) {
		t.Fatalf("join with a failing log: %v", err)
	}
	if d := describe(t, e.c, "g"); len(d.Members) != 1 || d.GroupEpoch != 1 {
		t.Fatalf("after the failed join: %v", d)
	}
	release()
	if err := await(t, "commit", first); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"in memory", "after failover"} {
		if d := describe(t, e.c, "g"); len(d.Members) != 1 || d.GroupEpoch != 1 || len(d.Offsets) != 1 || d.Offsets[0].Offset != 3 {
			t.Fatalf("%s: %v", when, d)
		}
		e.failover()
	}
}

// metaGateLog blocks, once armed, every append carrying the metadata
// record of one group until the test releases it (entered yields one
// release channel per blocked append).
type metaGateLog struct {
	*memLog
	mu      sync.Mutex
	group   string
	entered chan chan struct{}
}

func (l *metaGateLog) Append(ctx context.Context, records []recordbatch.Record) error {
	l.mu.Lock()
	group := l.group
	l.mu.Unlock()
	for _, r := range records {
		if d, err := decodeRecord(r); group != "" && err == nil && d.key.GroupId == group && d.key.Topic == "" {
			release := make(chan struct{})
			l.entered <- release
			<-release
			break
		}
	}
	return l.memLog.Append(ctx, records)
}

// W2: a heartbeat that changes the metadata while the lane has a leader
// that has not formed its batch yet does not go in a side batch: the
// leader's batch will carry the metadata as memory has it then, and two
// metadata records of one group in flight could land in either order (an
// acknowledged leave was lost after failover, and the group epoch went
// back, before the fix).
func TestNoSideBatchBeforeTheLanesBatchIsFormed(t *testing.T) {
	e := &env{t: t, log: &memLog{}, topics: newTopics("a", 2), clock: newClock()}
	gl := &metaGateLog{memLog: e.log, entered: make(chan chan struct{}, 4)}
	e.configure = func(cfg *Config) { cfg.Log = gl }
	e.c = e.open()
	c := e.c
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))

	c.mu.Lock()
	g := c.mu.groups["g"]
	leader := newWrite(g, func() prepared { return prepared{} }) // a commit that leads, not yet running
	c.w.enqueueLocked(leader)
	c.mu.Unlock()
	gl.mu.Lock()
	gl.group = "g"
	gl.mu.Unlock()
	join := async(func() error { _, err := e.hb("g", "m2", 0, []string{"a"}, nil); return err })
	queued(t, c, "g", 2) // the leader and the join's flush: no side batch
	leave := async(func() error { _, err := e.hb("g", "m1", -1, nil, nil); return err })
	queued(t, c, "g", 3)
	lead := async(func() error { return c.w.wait(context.Background(), leader) })
	close(<-gl.entered) // the leader's batch: the metadata after the leave
	for what, ch := range map[string]<-chan error{"leader": lead, "join": join, "leave": leave} {
		if err := await(t, what, ch); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	select {
	case <-gl.entered:
		t.Fatal("a second metadata batch was appended")
	default:
	}
	live := describe(t, c, "g")
	e.failover()
	if after := describe(t, e.c, "g"); after.GroupEpoch != live.GroupEpoch || len(after.Members) != 1 || len(live.Members) != 1 {
		t.Fatalf("live: epoch %d, %d members; after failover: epoch %d, %d members", live.GroupEpoch, len(live.Members), after.GroupEpoch, len(after.Members))
	}
}

// W2, W4: a failed metadata write with heartbeats queued behind it fails
// them and hands the lane on: a commit after it is answered (the lane was
// left busy with no leader before the fix, and every later write of the
// group hung).
func TestFailedMetadataWriteLeavesTheLaneUsable(t *testing.T) {
	e := newEnv(t, newTopics("a", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	c := e.c
	c.mu.Lock()
	g := c.mu.groups["g"]
	g.consumer.members["m1"].clientHost = "h2" // a heartbeat's change, not yet written
	g.consumer.dirty = true
	leader := c.w.flushLocked(g) // an idle lane: it leads
	c.mu.Unlock()
	join := async(func() error { _, err := e.hb("g", "m2", 0, []string{"a"}, nil); return err })
	queued(t, c, "g", 2)
	e.log.mu.Lock()
	e.log.failNext = 1
	e.log.mu.Unlock()
	if err := c.w.wait(context.Background(), leader); !errors.Is(err, errInjected) {
		t.Fatalf("leader: %v", err)
	}
	if err := await(t, "join", join); !errors.Is(err, errInjected) {
		t.Fatalf("join: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: "g", MemberId: "m1", MemberEpoch: 1,
		Offsets: []*brokerpb.OffsetCommit{oc("a", 0, 5)}}); err != nil {
		t.Fatalf("commit after the failed write: %v", err)
	}
}

// landsButFailsLog stores an append and then reports it failed, once
// armed: a log that reports a failure whose records landed (an ack lost
// on the way, a fencing after the quorum wrote).
type landsButFailsLog struct {
	*memLog
	mu   sync.Mutex
	once bool
}

func (l *landsButFailsLog) Append(ctx context.Context, records []recordbatch.Record) error {
	err := l.memLog.Append(ctx, records)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.once && err == nil {
		l.once = false
		return errors.New("outcome unknown: no acknowledgement within the write timeout")
	}
	return err
}

// W4: a metadata write that fails but lands anyway is overwritten by the
// reverted metadata at the group's next write, so the log ends as memory
// is (a join reported failed came back after failover before the fix).
func TestUnknownOutcomeRevertIsWrittenBack(t *testing.T) {
	e := &env{t: t, log: &memLog{}, topics: newTopics("a", 2), clock: newClock()}
	ll := &landsButFailsLog{memLog: e.log}
	e.configure = func(cfg *Config) { cfg.Log = ll }
	e.c = e.open()
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	ll.mu.Lock()
	ll.once = true
	ll.mu.Unlock()
	if _, err := e.hb("g", "m2", 0, []string{"a"}, nil); err == nil {
		t.Fatal("the join was answered though its append failed")
	}
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1)) // writes the reverted metadata
	live := describe(t, e.c, "g")
	e.failover()
	after := describe(t, e.c, "g")
	if len(live.Members) != 1 || len(after.Members) != 1 || after.GroupEpoch != live.GroupEpoch {
		t.Fatalf("live: epoch %d, %d members; after failover: epoch %d, %d members", live.GroupEpoch, len(live.Members), after.GroupEpoch, len(after.Members))
	}
}

// W4: a revert recomputes targets with the partition counts the durable
// metadata was computed with. A failed leave of the only member
// subscribed to a topic used to leave that topic's count out, so the
// restored member's target was empty and its next heartbeat started a
// needless rebalance.
func TestRevertKeepsTheDurablePartitionCounts(t *testing.T) {
	e := newEnv(t, newTopics("a", 2, "b", 2))
	e.mustHB("g", "m1", 0, []string{"a"}, nil)
	e.mustHB("g", "m1", 1, nil, tps("a", 0, 1))
	r := e.mustHB("g", "m2", 0, []string{"b"}, nil)
	epoch := r.MemberEpoch
	e.mustHB("g", "m2", epoch, nil, tps("b", 0, 1))
	if r := e.mustHB("g", "m1", 1, nil, tps("a", 0, 1)); r.MemberEpoch != epoch {
		t.Fatalf("m1 at epoch %d, want %d", r.MemberEpoch, epoch)
	}
	before := describe(t, e.c, "g").GroupEpoch
	e.log.mu.Lock()
	e.log.failNext = 1
	e.log.mu.Unlock()
	if _, err := e.hb("g", "m2", -1, nil, nil); !errors.Is(err, errInjected) {
		t.Fatalf("leave with a failing log: %v", err)
	}
	r = e.mustHB("g", "m2", epoch, nil, tps("b", 0, 1))
	assertSet(t, "m2 assignment after the revert", r.Assignment, tps("b", 0, 1))
	e.mustHB("g", "m1", epoch, nil, tps("a", 0, 1))
	if d := describe(t, e.c, "g"); d.GroupEpoch != before || len(d.Members) != 2 {
		t.Fatalf("after the failed leave: epoch %d (was %d), %d members", d.GroupEpoch, before, len(d.Members))
	}
}
