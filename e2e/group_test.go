package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// groupSession is the members' session timeout: the coordinator's minimum.
const groupSession = 6 * time.Second

// TestGroup runs the consumer group scenarios on one cluster of
// real processes (3 metad, 3 bookies, 2 brokers); the last one kills a
// broker.
func TestGroup(t *testing.T) {
	skipShort(t)
	start := time.Now()
	c := startStrata(t, 2, "--offsets-partitions", "4", "--group-session-timeout", groupSession.String())
	cl := c.client(t)
	t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))
	steps := []struct {
		name string
		fn   func(*testing.T, *strataCluster, *client.Client)
	}{
		{"TwoGroupsIndependent", testTwoGroupsIndependent},
		{"ThreeMembersOneOwner", testThreeMembersOneOwner},
		{"PausedMemberFenced", testPausedMemberFenced},
		{"CLI", testGroupCLI},
		{"CoordinatorKilled", testCoordinatorKilled},
	}
	for _, s := range steps {
		began := time.Now()
		if !t.Run(s.name, func(t *testing.T) { s.fn(t, c, cl) }) {
			return
		}
		t.Logf("%s took %s", s.name, time.Since(began).Round(time.Millisecond))
	}
}

// produceN writes n records "<prefix>-<i>" round-robin over the
// partitions.
func produceN(t *testing.T, cl *client.Client, topic string, partitions int32, prefix string, from, n int) {
	t.Helper()
	if err := produceRecords(cl, topic, partitions, prefix, from, n); err != nil {
		t.Fatal(err)
	}
}

func produceRecords(cl *client.Client, topic string, partitions int32, prefix string, from, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cl.NewProducer(client.ProducerConfig{Linger: 2 * time.Millisecond})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var firstErr error
	for i := from; i < from+n; i++ {
		r := &client.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(prefix + "-" + strconv.Itoa(i))}
		if err := p.Produce(ctx, r, func(_ *client.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}); err != nil {
			_ = p.Close(ctx)
			return err
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}

// groupMember runs a GroupConsumer on its own client (so that closing the
// client kills it abruptly: no leave, no commit) and records what it
// consumed and, through the callbacks, when it owned which partition.
type groupMember struct {
	name   string
	cl     *client.Client
	gc     *client.GroupConsumer
	cancel context.CancelFunc
	done   chan struct{}
}

// ownershipLog collects ownership intervals and consumed values of a group.
type ownershipLog struct {
	mu        sync.Mutex
	intervals []interval
	dead      map[string]bool
	consumed  map[string]int
}

type interval struct {
	member     string
	tp         client.TopicPartition
	start, end time.Time // end zero: still open
}

func newOwnershipLog() *ownershipLog {
	return &ownershipLog{dead: map[string]bool{}, consumed: map[string]int{}}
}

func (o *ownershipLog) begin(member string, tps []client.TopicPartition) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dead[member] {
		return
	}
	for _, tp := range tps {
		o.intervals = append(o.intervals, interval{member: member, tp: tp, start: now})
	}
}

// end closes member's open intervals of tps (all when tps is nil).
func (o *ownershipLog) end(member string, tps []client.TopicPartition) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endLocked(member, tps, now)
}

func (o *ownershipLog) endLocked(member string, tps []client.TopicPartition, now time.Time) {
	for i := range o.intervals {
		iv := &o.intervals[i]
		if iv.member == member && iv.end.IsZero() && (tps == nil || slices.Contains(tps, iv.tp)) {
			iv.end = now
		}
	}
}

// kill marks member dead now: what it owned ends now, later callbacks are
// ignored.
func (o *ownershipLog) kill(member string) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endLocked(member, nil, now)
	o.dead[member] = true
}

// check fails when two intervals of one partition overlap.
func (o *ownershipLog) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	byTP := map[client.TopicPartition][]interval{}
	for _, iv := range o.intervals {
		byTP[iv.tp] = append(byTP[iv.tp], iv)
	}
	for tp, ivs := range byTP {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
		for i := 1; i < len(ivs); i++ {
			prev := ivs[i-1]
			if prev.end.IsZero() || prev.end.After(ivs[i].start) {
				t.Errorf("%s owned by %s from %s to %v and by %s from %s", tp, prev.member, prev.start.Format("15:04:05.000"),
					prev.end.Format("15:04:05.000"), ivs[i].member, ivs[i].start.Format("15:04:05.000"))
			}
		}
	}
}

// owners returns the current owner of each partition per the callbacks.
func (o *ownershipLog) owners() map[client.TopicPartition]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[client.TopicPartition]string{}
	for _, iv := range o.intervals {
		if iv.end.IsZero() {
			out[iv.tp] = iv.member
		}
	}
	return out
}

func (o *ownershipLog) consumedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.consumed)
}

func startGroupMember(t *testing.T, c *strataCluster, o *ownershipLog, name string, cfg client.GroupConfig) *groupMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Brokers: c.brokerAddrs(), ClientID: name, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnAssigned = func(_ context.Context, tps []client.TopicPartition) { o.begin(name, tps) }
	cfg.OnRevoked = func(_ context.Context, tps []client.TopicPartition) { o.end(name, tps) }
	cfg.OnLost = func(_ context.Context, tps []client.TopicPartition) { o.end(name, tps) }
	gc, err := cl.NewGroupConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(context.Background())
	m := &groupMember{name: name, cl: cl, gc: gc, cancel: pcancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			recs, err := gc.Poll(pctx)
			if err != nil {
				return
			}
			o.mu.Lock()
			for _, r := range recs {
				o.consumed[string(r.Value)]++
			}
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.leave(t) })
	return m
}

// leave closes the member cleanly (commit, leave the group).
func (m *groupMember) leave(t *testing.T) {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.cancel = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.gc.Close(ctx); err != nil {
		t.Logf("%s: close: %v", m.name, err)
	}
	m.cl.Close()
}

// kill stops the member abruptly: its connections close, it neither
// commits nor leaves; the coordinator notices when its session expires.
func (m *groupMember) kill(o *ownershipLog) {
	o.kill(m.name)
	m.cl.Close()
	m.cancel()
	<-m.done
	m.cancel = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = m.gc.Close(ctx) // releases its goroutines; everything fails: the client is closed
}

func memberConfig(group, topic string) client.GroupConfig {
	return client.GroupConfig{Group: group, Topics: []string{topic}, SessionTimeout: groupSession,
		AutoCommitInterval: 300 * time.Millisecond, ResetOffset: client.OffsetEarliest(),
		Consumer: client.ConsumerConfig{MaxWait: 200 * time.Millisecond}}
}

// groupStable checks that the group is STABLE with members members that
// own partitions partitions in all.
func groupStable(cl *client.Client, group string, members, partitions int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, err := cl.DescribeGroup(ctx, group)
	if err != nil {
		return err
	}
	owned := 0
	for _, m := range d.GetMembers() {
		for _, tp := range m.GetOwned() {
			owned += len(tp.GetPartitions())
		}
	}
	if d.GetState() != "STABLE" || len(d.GetMembers()) != members || owned != partitions {
		return fmt.Errorf("state %s, %d members, %d partitions owned", d.GetState(), len(d.GetMembers()), owned)
	}
	return nil
}

// testTwoGroupsIndependent: two groups (of two members and of one) each
// read the whole topic.
func testTwoGroupsIndependent(t *testing.T, c *strataCluster, cl *client.Client) {
	createTopic(t, cl, "shared", 4, nil)
	produceN(t, cl, "shared", 4, "s", 0, 400)
	a, b := newOwnershipLog(), newOwnershipLog()
	startGroupMember(t, c, a, "a1", memberConfig("ga", "shared"))
	startGroupMember(t, c, a, "a2", memberConfig("ga", "shared"))
	startGroupMember(t, c, b, "b1", memberConfig("gb", "shared"))
	produceN(t, cl, "shared", 4, "s", 400, 200)
	for name, o := range map[string]*ownershipLog{"ga": a, "gb": b} {
		testwait.UntilNil(t, 20*time.Second, name+" consumed all 600", func() error {
			if n := o.consumedCount(); n != 600 {
				return fmt.Errorf("%d distinct records", n)
			}
			return nil
		})
		o.check(t)
		o.mu.Lock()
		for v, n := range o.consumed {
			if n > 1 {
				t.Errorf("group %s consumed %s %d times", name, v, n)
			}
		}
		o.mu.Unlock()
	}
	testwait.UntilNil(t, 10*time.Second, "ga stable", func() error { return groupStable(cl, "ga", 2, 4) })
}

// testThreeMembersOneOwner: members join, leave cleanly and are killed;
// no partition ever has two owners; the group converges within the
// session timeout + 5 s of a kill.
func testThreeMembersOneOwner(t *testing.T, c *strataCluster, cl *client.Client) {
	const group = "trio"
	createTopic(t, cl, "six", 6, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var (
		produced   int
		produceErr error
	)
	wg.Add(1)
	go func() { // a steady trickle of records while the group changes
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if produceErr = produceRecords(cl, "six", 6, "x", produced, 12); produceErr != nil {
				return
			}
			produced += 12
		}
	}()
	o := newOwnershipLog()
	cfg := memberConfig(group, "six")
	stable := func(members int, within time.Duration) time.Duration {
		t.Helper()
		began := time.Now()
		testwait.UntilNil(t, within, fmt.Sprintf("%d members stable", members), func() error { return groupStable(cl, group, members, 6) })
		o.check(t)
		return time.Since(began)
	}
	m1 := startGroupMember(t, c, o, "m1", cfg)
	stable(1, 10*time.Second)
	startGroupMember(t, c, o, "m2", cfg)
	m3 := startGroupMember(t, c, o, "m3", cfg)
	stable(3, 10*time.Second)
	m1.leave(t)
	t.Logf("m1 left: converged in %s", stable(2, 10*time.Second).Round(time.Millisecond))
	startGroupMember(t, c, o, "m4", cfg)
	stable(3, 10*time.Second)
	m3.kill(o)
	took := stable(2, groupSession+5*time.Second)
	t.Logf("m3 killed: converged in %s (session %s)", took.Round(time.Millisecond), groupSession)
	close(stop)
	wg.Wait()
	if produceErr != nil {
		t.Fatal(produceErr)
	}
	testwait.UntilNil(t, 20*time.Second, "every record consumed", func() error {
		if n := o.consumedCount(); n != produced {
			return fmt.Errorf("%d of %d", n, produced)
		}
		return nil
	})
	if owners := o.owners(); len(owners) != 6 {
		t.Errorf("owners per the callbacks: %v", owners)
	}
	o.check(t)
}

// testPausedMemberFenced: a member (spoken to the coordinator directly, so
// that its heartbeats can be suspended while it stays able to commit)
// stops heartbeating past its session; another member takes its
// partitions; its later commit is rejected and changes nothing.
func testPausedMemberFenced(t *testing.T, c *strataCluster, cl *client.Client) {
	const group = "paused"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	fc, err := brokerStub(t, c, cl, group)
	if err != nil {
		t.Fatal(err)
	}
	var hb *brokerpb.GroupHeartbeatResponse
	testwait.UntilNil(t, 10*time.Second, "zombie joins", func() error {
		hb, err = fc.GroupHeartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: group, MemberEpoch: 0,
			SubscribedTopics: []string{"shared"}, SessionTimeoutMs: int32(groupSession.Milliseconds()), ClientId: "zombie"})
		return err
	})
	if n := len(hb.GetAssignment()); n != 1 || len(hb.GetAssignment()[0].GetPartitions()) != 4 {
		t.Fatalf("zombie assignment %v", hb.GetAssignment())
	}
	zombieCommit := func(offset int64) error {
		resp, err := fc.CommitOffsets(ctx, &brokerpb.CommitOffsetsRequest{GroupId: group, MemberId: hb.GetMemberId(),
			MemberEpoch: hb.GetMemberEpoch(), Offsets: []*brokerpb.OffsetCommit{{Topic: "shared", Partition: 0, Offset: offset}}})
		if err == nil && resp.GetResults()[0].GetError() != nil {
			err = errors.New(resp.GetResults()[0].GetError().GetMessage())
		}
		return err
	}
	if err := zombieCommit(7); err != nil {
		t.Fatal(err)
	}
	paused := time.Now() // the zombie sends no more heartbeats

	o := newOwnershipLog()
	live := startGroupMember(t, c, o, "live", memberConfig(group, "shared"))
	testwait.UntilNil(t, groupSession+5*time.Second, "the live member owns all 4 partitions", func() error {
		return groupStable(cl, group, 1, 4)
	})
	t.Logf("partitions moved %s after the zombie's last heartbeat", time.Since(paused).Round(time.Millisecond))
	if pos, ok := live.gc.Position(client.TopicPartition{Topic: "shared", Partition: 0}); !ok || pos < 7 {
		t.Errorf("live member starts shared/0 at %d (owned %t), want >= the zombie's commit 7", pos, ok)
	}
	testwait.UntilNil(t, 10*time.Second, "live member commits everything", func() error {
		offs, err := cl.FetchOffsets(ctx, group, client.TopicPartition{Topic: "shared", Partition: 0})
		if err != nil {
			return err
		}
		if offs[0].GetOffset() != 150 {
			return fmt.Errorf("shared/0 committed %d, want 150", offs[0].GetOffset())
		}
		return nil
	})
	err = zombieCommit(3)
	switch rpcerror.Reason(err) {
	case rpcerror.ReasonUnknownMemberID, rpcerror.ReasonFencedMemberEpoch:
		t.Logf("zombie commit rejected: %v", err)
	default:
		t.Fatalf("zombie commit after its session expired: %v, want UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH", err)
	}
	offs, err := cl.FetchOffsets(ctx, group, client.TopicPartition{Topic: "shared", Partition: 0})
	if err != nil || offs[0].GetOffset() != 150 {
		t.Fatalf("after the zombie's commit: %v %v, want 150", offs, err)
	}
	if err := live.gc.Commit(ctx); err != nil {
		t.Fatalf("live member's commit: %v", err)
	}
	o.check(t)
}

// brokerStub connects to the coordinator of group directly.
func brokerStub(t *testing.T, c *strataCluster, cl *client.Client, group string) (brokerpb.BrokerClient, error) {
	t.Helper()
	var addr string
	testwait.UntilNil(t, 10*time.Second, "find coordinator", func() error {
		var err error
		addr, err = coordinatorOf(cl, c, group)
		return err
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.Close() })
	return brokerpb.NewBrokerClient(conn), nil
}

// coordinatorOf asks a broker which broker coordinates group.
func coordinatorOf(cl *client.Client, c *strataCluster, group string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var lastErr error
	for _, addr := range c.brokerAddrs() {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return "", err
		}
		resp, err := brokerpb.NewBrokerClient(conn).FindCoordinator(ctx, &brokerpb.FindCoordinatorRequest{GroupId: group})
		conn.Close()
		if err == nil && resp.GetAddress() != "" {
			return resp.GetAddress(), nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("no coordinator for %s: %v", group, lastErr)
}

// testCoordinatorKilled: kill -9 the broker that coordinates a consuming
// group: commits made before survive, the group goes on to consume
// everything, and no committed offset ever moves backwards.
func testCoordinatorKilled(t *testing.T, c *strataCluster, cl *client.Client) {
	const group = "durable"
	const topic = "durable"
	createTopic(t, cl, topic, 4, nil)
	o := newOwnershipLog()
	cfg := memberConfig(group, topic)
	cfg.SessionTimeout = 10 * time.Second // ride out the failover without losing the session
	startGroupMember(t, c, o, "d1", cfg)
	startGroupMember(t, c, o, "d2", cfg)
	produceN(t, cl, topic, 4, "d", 0, 400)

	// Watch the committed offsets: they must never move backwards.
	var (
		mu       sync.Mutex
		highest  = map[int32]int64{}
		backward []string
	)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for watchCtx.Err() == nil {
			ctx, cancel := context.WithTimeout(watchCtx, time.Second)
			offs, err := cl.FetchOffsets(ctx, group)
			cancel()
			if err == nil {
				mu.Lock()
				for _, co := range offs {
					if co.GetOffset() < highest[co.GetPartition()] {
						backward = append(backward, fmt.Sprintf("%s/%d: %d after %d", co.GetTopic(), co.GetPartition(), co.GetOffset(), highest[co.GetPartition()]))
					}
					highest[co.GetPartition()] = max(highest[co.GetPartition()], co.GetOffset())
				}
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond) // the watcher samples at this rate: pacing, not a wait
		}
	}()
	defer func() { stopWatch(); wg.Wait() }()

	testwait.UntilNil(t, 20*time.Second, "the first 400 records committed", func() error { return committedAll(cl, group, topic, 4, 100) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before, err := cl.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := coordinatorOf(cl, c, group)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.brokerAt(addr)
	victim.Kill()
	killed := time.Now()
	t.Logf("killed %s, the coordinator of %s", victim.ID, group)

	// Commits made before the kill are there once another broker serves
	// the group.
	testwait.UntilNil(t, 20*time.Second, "offsets served again", func() error {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		defer acancel()
		after, err := cl.FetchOffsets(actx, group)
		if err != nil {
			return err
		}
		got := map[int32]int64{}
		for _, co := range after {
			got[co.GetPartition()] = co.GetOffset()
		}
		for _, co := range before {
			if got[co.GetPartition()] < co.GetOffset() {
				return fmt.Errorf("%s/%d committed %d before the kill, %d after", co.GetTopic(), co.GetPartition(), co.GetOffset(), got[co.GetPartition()])
			}
		}
		return nil
	})
	t.Logf("offsets served again %s after the kill", time.Since(killed).Round(time.Millisecond))

	produceN(t, cl, topic, 4, "d", 400, 200)
	testwait.UntilNil(t, 30*time.Second, "the group consumes and commits everything", func() error {
		if err := committedAll(cl, group, topic, 4, 150); err != nil {
			return err
		}
		if n := o.consumedCount(); n != 600 {
			return fmt.Errorf("%d of 600 consumed", n)
		}
		return nil
	})
	t.Logf("group caught up %s after the kill", time.Since(killed).Round(time.Millisecond))
	o.check(t)
	mu.Lock()
	defer mu.Unlock()
	if len(backward) > 0 {
		t.Fatalf("committed offsets moved backwards: %v", backward)
	}
}

// committedAll checks that every partition of topic has committed offset
// want.
func committedAll(cl *client.Client, group, topic string, partitions int32, want int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var tps []client.TopicPartition
	for p := range partitions {
		tps = append(tps, client.TopicPartition{Topic: topic, Partition: p})
	}
	offs, err := cl.FetchOffsets(ctx, group, tps...)
	if err != nil {
		return err
	}
	for _, co := range offs {
		if co.GetOffset() != want {
			return fmt.Errorf("%s/%d committed %d, want %d", co.GetTopic(), co.GetPartition(), co.GetOffset(), want)
		}
	}
	return nil
}

// describeJSON is the part of `strata group describe --output json` the
// test reads.
type describeJSON struct {
	State   string `json:"state"`
	Members []struct {
		ID     string `json:"id"`
		Client string `json:"client"`
	} `json:"members"`
	Partitions []struct {
		Partition int32 `json:"partition"`
		Committed int64 `json:"committed"`
		End       int64 `json:"end"`
		Lag       int64 `json:"lag"`
		LagMs     int64 `json:"lag_ms"`
	} `json:"partitions"`
}

// testGroupCLI drives `strata group` (and `strata consume -g`) against
// the groups the earlier steps left: ga committed all 600 records of
// "shared" (150 per partition). Skipped while the strata binary has no
// group commands.
func testGroupCLI(t *testing.T, c *strataCluster, cl *client.Client) {
	broker := "--broker=" + strings.Join(c.brokerAddrs(), ",")
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, errOut, code := strata(t, nil, append([]string{broker}, args...)...)
		if code != wantCode {
			t.Fatalf("strata %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, wantCode, out, errOut)
		}
		return out + errOut
	}
	describe := func(group string) describeJSON {
		t.Helper()
		var d describeJSON
		out := run(0, "group", "describe", group, "--output", "json")
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("describe %s: %v: %s", group, err, out)
		}
		return d
	}
	checkLag := func(d describeJSON, committed, end int64) {
		t.Helper()
		if len(d.Partitions) != 4 {
			t.Fatalf("describe: %+v", d)
		}
		for _, p := range d.Partitions {
			if p.Committed != committed || p.End != end || p.Lag != end-committed || (p.Lag == 0) != (p.LagMs == 0) || p.LagMs < 0 {
				t.Fatalf("partition %d: %+v, want committed %d end %d", p.Partition, p, committed, end)
			}
		}
	}
	if out := run(0, "group", "list"); !strings.Contains(out, "ga ") || !strings.Contains(out, "EMPTY") {
		t.Fatalf("group list:\n%s", out)
	}
	d := describe("ga")
	if d.State != "EMPTY" {
		t.Fatalf("ga state %s", d.State)
	}
	checkLag(d, 150, 150)
	produceN(t, cl, "shared", 4, "s", 600, 8)
	checkLag(describe("ga"), 150, 152)
	t.Log(run(0, "group", "describe", "ga"))

	plan := run(0, "group", "reset-offsets", "ga", "--topic", "shared", "--to-earliest")
	if !strings.Contains(plan, "nothing changed") {
		t.Fatalf("reset plan:\n%s", plan)
	}
	checkLag(describe("ga"), 150, 152)
	run(0, "group", "reset-offsets", "ga", "--topic", "shared", "--to-offset", "10", "--execute")
	checkLag(describe("ga"), 10, 152)
	run(0, "group", "reset-offsets", "ga", "--topic", "shared", "--to-latest", "--execute")
	checkLag(describe("ga"), 152, 152)
	run(2, "group", "reset-offsets", "ga", "--topic", "shared")

	// A group with a member refuses resets and deletes.
	o := newOwnershipLog()
	m := startGroupMember(t, c, o, "cli-live", memberConfig("cli-live", "shared"))
	testwait.UntilNil(t, 10*time.Second, "cli-live stable", func() error { return groupStable(cl, "cli-live", 1, 4) })
	if out := run(1, "group", "reset-offsets", "cli-live", "--topic", "shared", "--to-earliest", "--execute"); !strings.Contains(out, "members") {
		t.Fatalf("reset of a live group: %s", out)
	}
	run(1, "group", "delete", "cli-live")
	m.leave(t)

	run(0, "group", "delete", "ga")
	run(1, "group", "describe", "ga")

	// consume -g reads everything once, then resumes.
	out := run(0, "consume", "shared", "-g", "cg", "-o", "earliest", "-e")
	if n := strings.Count(out, "\n"); n < 608 {
		t.Fatalf("consume -g printed %d lines, want 608 (+ stderr notes)", n)
	}
	checkLag(describe("cg"), 152, 152)
	produceN(t, cl, "shared", 4, "s", 608, 4)
	out = run(0, "consume", "shared", "-g", "cg", "-e", "--output", "json")
	if n := strings.Count(out, `"value"`); n != 4 {
		t.Fatalf("resumed consume -g printed %d records, want 4:\n%s", n, out)
	}

	// Two `consume -g` processes share the topic: each record is printed
	// by exactly one of them.
	var outs [2]lockedBuffer
	for i := range outs {
		cmd := exec.Command(bins["strata"], broker, "consume", "shared", "-g", "pair", "-o", "latest", "-f", "%p:%o\n")
		cmd.Stdout = &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	testwait.UntilNil(t, 20*time.Second, "pair stable", func() error { return groupStable(cl, "pair", 2, 4) })
	produceN(t, cl, "shared", 4, "s", 612, 40)
	testwait.UntilNil(t, 15*time.Second, "40 records printed once across both", func() error {
		seen := map[string]int{}
		per := [2]int{}
		for i := range outs {
			for _, line := range strings.Fields(outs[i].String()) {
				seen[line]++
				per[i]++
			}
		}
		for line, n := range seen {
			if n > 1 {
				t.Fatalf("%s printed %d times", line, n)
			}
		}
		if len(seen) != 40 || per[0] == 0 || per[1] == 0 {
			return fmt.Errorf("%d distinct records, %v per process", len(seen), per)
		}
		return nil
	})
}

// lockedBuffer is a bytes.Buffer a child process writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
