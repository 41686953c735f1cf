package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// produceValues writes n records "v<i>" round-robin over the partitions.
func produceValues(t *testing.T, c *Client, topic string, partitions int32, from, n int) {
	t.Helper()
	p := newTestProducer(t, c, ProducerConfig{Linger: time.Millisecond})
	for i := from; i < from+n; i++ {
		r := &Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte("v" + strconv.Itoa(i))}
		if _, err := p.ProduceSync(testCtx(t), r); err != nil {
			t.Fatal(err)
		}
	}
}

// ownership records, per partition, who owned it when, from the callbacks.
type ownership struct {
	t  *testing.T
	mu sync.Mutex
	// open: partition -> member currently owning it (per the callbacks).
	open      map[TopicPartition]string
	overlaps  []string
	consumed  map[string]int // value -> times
	assigned  map[string]int
	lostCalls int
}

func newOwnership(t *testing.T) *ownership {
	return &ownership{t: t, open: map[TopicPartition]string{}, consumed: map[string]int{}, assigned: map[string]int{}}
}

func (o *ownership) config(name string, cfg GroupConfig) GroupConfig {
	cfg.OnAssigned = func(_ context.Context, tps []TopicPartition) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, tp := range tps {
			if cur, ok := o.open[tp]; ok {
				o.overlaps = append(o.overlaps, fmt.Sprintf("%s assigned to %s while %s owns it", tp, name, cur))
			}
			o.open[tp] = name
			o.assigned[name]++
		}
	}
	end := func(lost bool) func(context.Context, []TopicPartition) {
		return func(_ context.Context, tps []TopicPartition) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if lost {
				o.lostCalls++
			}
			for _, tp := range tps {
				if o.open[tp] == name {
					delete(o.open, tp)
				}
			}
		}
	}
	cfg.OnRevoked, cfg.OnLost = end(false), end(true)
	return cfg
}

func (o *ownership) owners() map[TopicPartition]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[TopicPartition]string{}
	for tp, m := range o.open {
		out[tp] = m
	}
	return out
}

func (o *ownership) check() {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.overlaps) > 0 {
		o.t.Fatalf("partitions owned twice: %v", o.overlaps)
	}
}

// member polls a group consumer in the background, recording values.
type member struct {
	gc     *GroupConsumer
	cancel context.CancelFunc
	done   chan struct{}
}

func startMember(t *testing.T, c *Client, cfg GroupConfig, o *ownership) *member {
	t.Helper()
	gc, err := c.NewGroupConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{gc: gc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			recs, err := gc.Poll(ctx)
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
	t.Cleanup(func() { m.stop(t) })
	return m
}

func (m *member) stop(t *testing.T) {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.cancel = nil
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.gc.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

func groupCfg(topic string) GroupConfig {
	return GroupConfig{Group: "g", Topics: []string{topic}, SessionTimeout: time.Second,
		AutoCommitInterval: 100 * time.Millisecond, ResetOffset: OffsetEarliest(),
		Consumer: ConsumerConfig{MaxWait: 50 * time.Millisecond}}
}

// TestGroupConsumeCommitResume: one member reads everything and commits; a
// later member of the same group resumes after it; another group reads
// everything again.
func TestGroupConsumeCommitResume(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.waitCoordinator()
	cl.createTopic("t", 4)
	c := newTestClient(t, cl)
	produceValues(t, c, "t", 4, 0, 40)

	o := newOwnership(t)
	m := startMember(t, c, o.config("a", groupCfg("t")), o)
	testwait.UntilNil(t, 10*time.Second, "40 records consumed", func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.consumed) != 40 {
			return fmt.Errorf("%d consumed", len(o.consumed))
		}
		return nil
	})
	m.stop(t) // commits on close
	offs, err := c.FetchOffsets(testCtx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 4 {
		t.Fatalf("committed %v", offs)
	}
	for _, co := range offs {
		if co.Offset != 10 {
			t.Errorf("%s/%d committed %d, want 10", co.Topic, co.Partition, co.Offset)
		}
	}

	produceValues(t, c, "t", 4, 40, 8)
	o2 := newOwnership(t)
	startMember(t, c, o2.config("b", groupCfg("t")), o2)
	testwait.UntilNil(t, 10*time.Second, "the 8 new records", func() error {
		o2.mu.Lock()
		defer o2.mu.Unlock()
		if len(o2.consumed) != 8 {
			return fmt.Errorf("%d consumed", len(o2.consumed))
		}
		return nil
	})
	o2.mu.Lock()
	for v := range o2.consumed {
		if n, _ := strconv.Atoi(v[1:]); n < 40 {
			t.Errorf("resumed member read %s again", v)
		}
	}
	o2.mu.Unlock()

	other := groupCfg("t")
	other.Group = "other"
	o3 := newOwnership(t)
	startMember(t, c, o3.config("c", other), o3)
	testwait.UntilNil(t, 10*time.Second, "the other group reads all 48", func() error {
		o3.mu.Lock()
		defer o3.mu.Unlock()
		if len(o3.consumed) != 48 {
			return fmt.Errorf("%d consumed", len(o3.consumed))
		}
		return nil
	})
}

// TestGroupRebalanceHandOver: members join and leave; no partition ever
// has two owners and every record is consumed.
func TestGroupRebalanceHandOver(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.waitCoordinator()
	cl.mu.Lock()
	cl.staleFind = 1 // the first lookup names the wrong broker
	cl.mu.Unlock()
	cl.createTopic("t", 6)
	c := newTestClient(t, cl)
	produceValues(t, c, "t", 6, 0, 60)

	o := newOwnership(t)
	var members []*member
	for i := range 3 {
		members = append(members, startMember(t, c, o.config(fmt.Sprint("m", i), groupCfg("t")), o))
		testwait.UntilNil(t, 10*time.Second, "stable", func() error { return stable(c, 6, i+1) })
		o.check()
	}
	produceValues(t, c, "t", 6, 60, 60)
	members[0].stop(t)
	testwait.UntilNil(t, 10*time.Second, "stable after a leave", func() error { return stable(c, 6, 2) })
	o.check()
	testwait.UntilNil(t, 10*time.Second, "all consumed", func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.consumed) != 120 {
			return fmt.Errorf("%d of 120 consumed", len(o.consumed))
		}
		return nil
	})
	if owners := o.owners(); len(owners) != 6 {
		t.Fatalf("owners %v", owners)
	}
	cl.mu.Lock()
	redirects := cl.redirects
	cl.mu.Unlock()
	if redirects == 0 {
		t.Error("no NOT_COORDINATOR redirect was followed")
	}
}

// stable checks the group is STABLE with members owning every partition.
func stable(c *Client, partitions, members int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, err := c.DescribeGroup(ctx, "g")
	if err != nil {
		return err
	}
	owned := 0
	for _, m := range d.Members {
		for _, tp := range m.Owned {
			owned += len(tp.Partitions)
		}
	}
	if d.State != "STABLE" || len(d.Members) != members || owned != partitions {
		return fmt.Errorf("state %s, %d members, %d owned", d.State, len(d.Members), owned)
	}
	return nil
}

// TestGroupPausedMemberFenced: a member whose heartbeats stop past its
// session is removed; its commit is rejected with ErrMemberFenced, and once
// it runs again it gives up its partitions (OnLost) and rejoins.
func TestGroupPausedMemberFenced(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.waitCoordinator()
	cl.createTopic("t", 2)
	c := newTestClient(t, cl)
	produceValues(t, c, "t", 2, 0, 10)
	o := newOwnership(t)
	cfg := groupCfg("t")
	cfg.DisableAutoCommit = true
	m := startMember(t, c, o.config("a", cfg), o)
	testwait.UntilNil(t, 10*time.Second, "stable", func() error { return stable(c, 2, 1) })
	testwait.UntilNil(t, 10*time.Second, "10 consumed", func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.consumed) != 10 {
			return fmt.Errorf("%d", len(o.consumed))
		}
		return nil
	})
	if err := m.gc.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	m.gc.hbPaused.Store(true)
	testwait.UntilNil(t, 10*time.Second, "member removed", func() error {
		d, err := c.DescribeGroup(testCtx(t), "g")
		if err != nil {
			return err
		}
		if len(d.Members) != 0 {
			return fmt.Errorf("%d members", len(d.Members))
		}
		return nil
	})
	err := m.gc.CommitOffsets(testCtx(t), map[TopicPartition]int64{{"t", 0}: 1})
	if !errors.Is(err, ErrMemberFenced) {
		t.Fatalf("zombie commit: %v, want ErrMemberFenced", err)
	}
	offs, err := c.FetchOffsets(testCtx(t), "g", TopicPartition{"t", 0})
	if err != nil || offs[0].Offset != 5 {
		t.Fatalf("committed %v, %v; want 5", offs, err)
	}
	m.gc.hbPaused.Store(false)
	testwait.UntilNil(t, 10*time.Second, "lost, rejoined and stable", func() error {
		o.mu.Lock()
		lost := o.lostCalls
		o.mu.Unlock()
		if lost == 0 {
			return errors.New("OnLost not called")
		}
		return stable(c, 2, 1)
	})
	o.check()
}

// TestGroupAdmin: list, describe, admin commits only while empty, delete.
func TestGroupAdmin(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.waitCoordinator()
	cl.createTopic("t", 2)
	c := newTestClient(t, cl)
	ctx := testCtx(t)
	produceValues(t, c, "t", 2, 0, 10)
	if _, err := c.DescribeGroup(ctx, "g"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("describe missing group: %v", err)
	}
	if err := c.CommitGroupOffsets(ctx, "g", map[TopicPartition]int64{{"t", 0}: 3, {"t", 1}: 4}); err != nil {
		t.Fatal(err)
	}
	o := newOwnership(t)
	m := startMember(t, c, o.config("a", groupCfg("t")), o)
	testwait.UntilNil(t, 10*time.Second, "stable", func() error { return stable(c, 2, 1) })
	testwait.UntilNil(t, 10*time.Second, "the records after the committed offsets", func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.consumed) != 3 {
			return fmt.Errorf("%d consumed, want 3 (from 3 and 4 on)", len(o.consumed))
		}
		return nil
	})
	groups, err := c.ListGroups(ctx)
	if err != nil || len(groups) != 1 || groups[0].GroupId != "g" || groups[0].Members != 1 {
		t.Fatalf("list: %v %v", groups, err)
	}
	if err := c.CommitGroupOffsets(ctx, "g", map[TopicPartition]int64{{"t", 0}: 0}); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("admin commit to a live group: %v", err)
	}
	if err := c.DeleteGroup(ctx, "g"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("delete live group: %v", err)
	}
	m.stop(t)
	if err := c.DeleteGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if offs, err := c.FetchOffsets(ctx, "g"); err != nil || len(offs) != 0 {
		t.Fatalf("offsets after delete: %v %v", offs, err)
	}
}

// A member whose position left the log, and whose reset to ResetOffset
// fails once, tries the reset again at its next Poll: the fetcher reports
// the position once, and the partition stayed stopped until the next
// rebalance.
func TestGroupResetRetriedAfterAFailure(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.waitCoordinator()
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	produceValues(t, c, "t", 1, 0, 5)
	tp := TopicPartition{"t", 0}
	if err := c.CommitGroupOffsets(testCtx(t), "g", map[TopicPartition]int64{tp: 100}); err != nil {
		t.Fatal(err)
	}
	cl.mu.Lock()
	cl.failListOffsets = 1 // the reset's ListOffsets
	cl.mu.Unlock()
	g, err := c.NewGroupConsumer(groupCfg("t")) // ResetOffset: earliest
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var oor *OffsetOutOfRangeError
	if _, err := g.Poll(ctx); !errors.As(err, &oor) {
		t.Fatalf("first poll: %v, want the out-of-range position whose reset failed", err)
	}
	var got []*Record
	for len(got) < 5 {
		recs, err := g.Poll(ctx)
		if err != nil {
			t.Fatalf("after %d records: %v (the partition stalled)", len(got), err)
		}
		got = append(got, recs...)
	}
	if got[0].Offset != 0 {
		t.Fatalf("first record at offset %d, want 0 (reset to earliest)", got[0].Offset)
	}
}
