package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/internal/ctxtime"
)

// The group-rebalance workload's shape.
const (
	// RebalanceFeedRate: records/s written to the topic in all, spread
	// evenly over its partitions, so that a partition's new owner has a
	// record to read within a few ms of taking it (16 partitions: one
	// every 16 ms each).
	RebalanceFeedRate = 1000.0
	// Repeats per scenario, in groups of their own, each group's event
	// rebalanceStagger after the one before: the repeats of a scenario
	// whose session is 45 s take one session, not five.
	rebalanceRepeats      = 5
	rebalanceQuickRepeats = 2
	// rebalanceStagger spreads the events over the coordinators' 1 s
	// ticks (five events: 0.2 s apart modulo a tick).
	rebalanceStagger = 1200 * time.Millisecond
	// rebalanceStableTimeout bounds the wait for every group of a
	// scenario to be balanced and consuming.
	rebalanceStableTimeout = 90 * time.Second
	// rebalanceWaitSlack: after the last event, the partitions must be
	// consumed again within the session timeout and this.
	rebalanceWaitSlack = 30 * time.Second
	rebalancePoll      = 20 * time.Millisecond
	// rebalanceFeedLimit bounds the feed, which the workload stops
	// long before.
	rebalanceFeedLimit = time.Hour
)

// rebalanceScenarios are the measurements, in order: each protocol, a
// clean leave and a member cut off.
var rebalanceScenarios = []struct{ protocol, event string }{
	{benchsuite.ProtocolCooperativeSticky, benchsuite.EventLeave}, {benchsuite.ProtocolCooperativeSticky, benchsuite.EventKill},
	{benchsuite.ProtocolKIP848, benchsuite.EventLeave}, {benchsuite.ProtocolKIP848, benchsuite.EventKill},
}

// rebalancer runs group-rebalance's scenarios on one topic.
type rebalancer struct {
	seeds      []string
	topic      string
	partitions int32
	gs         GroupSettings
	repeats    int
}

// GroupRebalance is group-rebalance: while a feed writes
// RebalanceFeedRate records/s to o.Topic (counted in run), for each
// protocol and event, repeats groups of benchsuite.GroupMembers franz-go
// members each consume it until balanced; then one member per group
// leaves or is cut off, and the time until the others read a record of
// each of its partitions is measured.
func GroupRebalance(ctx context.Context, progress io.Writer, c *client.Client, seeds []string, gs GroupSettings, repeats int,
	o *Options, run *Run) (*benchsuite.Rebalance, error) {
	stopFeed, err := startFeed(ctx, c, o, run)
	if err != nil {
		return nil, err
	}
	defer stopFeed()
	rb := &rebalancer{seeds: seeds, topic: o.Topic, partitions: run.Partitions, gs: gs, repeats: repeats}
	out := &benchsuite.Rebalance{Members: benchsuite.GroupMembers, Partitions: run.Partitions, FeedRecordsPerSec: RebalanceFeedRate,
		Repeats: repeats, StaggerMs: benchsuite.Millis(rebalanceStagger)}
	for _, sc := range rebalanceScenarios {
		s, err := rb.scenario(ctx, sc.protocol, sc.event)
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", sc.protocol, sc.event, err)
		}
		fmt.Fprintf(progress, "bench suite: group-rebalance: %s %s: median %.0f ms, max %.0f ms (%s ms)\n",
			sc.protocol, sc.event, s.MedianMs, s.MaxMs, benchsuite.FormatMs(s.SamplesMs))
		out.Scenarios = append(out.Scenarios, s)
	}
	return out, nil
}

// scenario measures one protocol and event rb.repeats times.
func (rb *rebalancer) scenario(ctx context.Context, protocol, event string) (benchsuite.RebalanceScenario, error) {
	s := benchsuite.RebalanceScenario{Protocol: protocol, Event: event, SessionTimeoutMs: benchsuite.Millis(rb.gs.SessionTimeout),
		HeartbeatIntervalMs: benchsuite.Millis(rb.gs.HeartbeatInterval), SetBy: "client"}
	if protocol == benchsuite.ProtocolKIP848 {
		s.SetBy = "broker"
	}
	var groups []*rebalanceGroup
	defer func() { closeAll(groups, (*rebalanceGroup).close) }()
	for i := range rb.repeats {
		g, err := rb.startGroup(fmt.Sprintf("%s-%s-%s-%d", rb.topic, protocol, event, i), protocol)
		if err != nil {
			return s, err
		}
		groups = append(groups, g)
	}
	if err := rb.waitStable(ctx, groups, protocol); err != nil {
		return s, err
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i, g := range groups {
		if err := ctxtime.Sleep(ctx, time.Until(start.Add(time.Duration(i)*rebalanceStagger))); err != nil {
			return s, err
		}
		wg.Go(func() { g.event(event, i%benchsuite.GroupMembers) })
	}
	deadline := time.Now().Add(rb.gs.SessionTimeout + rebalanceWaitSlack)
	for _, g := range groups {
		select {
		case <-g.back:
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(time.Until(deadline)):
		}
	}
	wg.Wait()
	for _, g := range groups {
		took, moved, ok := g.took(deadline)
		if !ok {
			s.TimedOut++
		}
		s.SamplesMs = append(s.SamplesMs, benchsuite.Millis(took))
		s.Moved = append(s.Moved, moved)
	}
	s.Fill()
	return s, nil
}

// startGroup starts benchsuite.GroupMembers franz-go members of group
// id, each with a dialer it can cut.
func (rb *rebalancer) startGroup(id, protocol string) (*rebalanceGroup, error) {
	g := newRebalanceGroup(id)
	for i := range benchsuite.GroupMembers {
		m := &rebalanceMember{cut: &cutDialer{}, done: make(chan struct{})}
		opts := append(kafkaGroupOpts(rb.seeds, id, rb.topic, rb.gs), kgo.Dialer(m.cut.dial),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { g.assigned(i, p[rb.topic]) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { g.released(i, p[rb.topic]) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { g.released(i, p[rb.topic]) }))
		if protocol == benchsuite.ProtocolKIP848 {
			// KIP-848 with franz-go needs a balancer it can name to the
			// coordinator (sticky: "uniform"); with cooperative-sticky
			// it stays classic.
			opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
		} else {
			opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return g, err
		}
		m.cl = cl
		ctx, cancel := context.WithCancel(context.Background())
		m.stop = cancel
		go func() {
			defer close(m.done)
			for ctx.Err() == nil {
				pollCtx, cancelPoll := context.WithTimeout(ctx, consumePollTimeout)
				fs := cl.PollFetches(pollCtx)
				cancelPoll()
				g.read(i, fs)
			}
		}()
		g.members = append(g.members, m)
	}
	return g, nil
}

// waitStable waits until every group holds every partition, balanced
// (within one of each other), each read since it was assigned, and, for
// KIP-848, until the coordinator lists every group as a KIP-848
// ("consumer") group.
func (rb *rebalancer) waitStable(ctx context.Context, groups []*rebalanceGroup, protocol string) error {
	ctx, cancel := context.WithTimeout(ctx, rebalanceStableTimeout)
	defer cancel()
	for {
		var unstable []string
		for _, g := range groups {
			if why := g.unstable(rb.partitions); why != "" {
				unstable = append(unstable, g.id+": "+why)
			}
		}
		if len(unstable) == 0 {
			break
		}
		if ctxtime.Sleep(ctx, rebalancePoll) != nil {
			return fmt.Errorf("groups not balanced and consuming within %s: %v", rebalanceStableTimeout, unstable)
		}
	}
	if protocol != benchsuite.ProtocolKIP848 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(rb.seeds...), kgo.ClientID(kafkaClientID))
	if err != nil {
		return err
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListGroupsByType(ctx, []string{"consumer"})
	if err != nil {
		return fmt.Errorf("listing KIP-848 groups: %w", err)
	}
	for _, g := range groups {
		if _, ok := listed[g.id]; !ok {
			return fmt.Errorf("group %s is not a KIP-848 group: franz-go fell back to the classic protocol", g.id)
		}
	}
	return nil
}

// rebalanceMember is one franz-go member of a rebalanceGroup.
type rebalanceMember struct {
	cl   *kgo.Client
	cut  *cutDialer
	stop context.CancelFunc // ends the poll loop
	done chan struct{}      // closed when the poll loop ended
	once sync.Once
}

// close ends the poll loop and leaves the group, unless cut off: then it
// only stops the client.
func (m *rebalanceMember) close() {
	m.once.Do(func() {
		m.stop()
		<-m.done
		if m.cut.isOff() {
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			_ = m.cl.LeaveGroupContext(cancelled)
		}
		m.cl.Close()
	})
}

// rebalanceGroup is one group of a scenario: what its members hold and
// read, and, after the event, when the victim's partitions were read by
// the others.
type rebalanceGroup struct {
	id      string
	members []*rebalanceMember
	back    chan struct{} // closed when every moved partition was read again
	mu      struct {
		sync.Mutex
		held      map[int32]int  // partition -> member
		consuming map[int32]bool // read by its holder since assigned
		victim    int            // -1 before the event
		eventAt   time.Time
		moved     map[int32]time.Time // the victim's partitions -> first read by another member
		pending   int                 // moved partitions not read yet
	}
}

func newRebalanceGroup(id string) *rebalanceGroup {
	g := &rebalanceGroup{id: id, back: make(chan struct{})}
	g.mu.held, g.mu.consuming, g.mu.victim = map[int32]int{}, map[int32]bool{}, -1
	return g
}

func (g *rebalanceGroup) assigned(member int, parts []int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range parts {
		g.mu.held[p], g.mu.consuming[p] = member, false
	}
}

func (g *rebalanceGroup) released(member int, parts []int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range parts {
		if h, ok := g.mu.held[p]; ok && h == member {
			delete(g.mu.held, p)
			delete(g.mu.consuming, p)
		}
	}
}

// read notes the partitions a member's poll returned records of.
func (g *rebalanceGroup) read(member int, fs kgo.Fetches) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		if h, ok := g.mu.held[p.Partition]; ok && h == member {
			g.mu.consuming[p.Partition] = true
		}
		if g.mu.victim < 0 || member == g.mu.victim {
			return
		}
		if at, ok := g.mu.moved[p.Partition]; ok && at.IsZero() {
			g.mu.moved[p.Partition] = now
			if g.mu.pending--; g.mu.pending == 0 {
				close(g.back)
			}
		}
	})
}

// unstable says why the group is not yet balanced and consuming, "" when
// it is.
func (g *rebalanceGroup) unstable(partitions int32) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if int32(len(g.mu.held)) != partitions {
		return fmt.Sprintf("%d of %d partitions assigned", len(g.mu.held), partitions)
	}
	counts := make([]int, len(g.members))
	for p, m := range g.mu.held {
		if !g.mu.consuming[p] {
			return fmt.Sprintf("partition %d not read since assigned", p)
		}
		counts[m]++
	}
	if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 1 {
		return fmt.Sprintf("unbalanced: %v partitions per member", counts)
	}
	return ""
}

// event makes member victim leave (Close) or cuts it off, noting which
// partitions it held and when.
func (g *rebalanceGroup) event(event string, victim int) {
	g.mu.Lock()
	g.mu.victim, g.mu.eventAt, g.mu.moved = victim, time.Now(), map[int32]time.Time{}
	for p, m := range g.mu.held {
		if m == victim {
			g.mu.moved[p] = time.Time{}
		}
	}
	g.mu.pending = len(g.mu.moved)
	if g.mu.pending == 0 {
		close(g.back)
	}
	g.mu.Unlock()
	m := g.members[victim]
	if event == benchsuite.EventKill {
		m.cut.cutOff()
		return
	}
	m.close()
}

// took is how long after the event the last moved partition was read
// again (until deadline when one was not: ok false), and how many
// partitions moved.
func (g *rebalanceGroup) took(deadline time.Time) (time.Duration, int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	last, ok := g.mu.eventAt, true
	for _, at := range g.mu.moved {
		if at.IsZero() {
			last, ok = deadline, false
			break
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(g.mu.eventAt), len(g.mu.moved), ok
}

// close stops every member (B3).
func (g *rebalanceGroup) close() { closeAll(g.members, (*rebalanceMember).close) }

// cutDialer dials TCP and can cut every connection it made at once, as
// a crash would, and then refuses new ones.
type cutDialer struct {
	mu    sync.Mutex
	conns []net.Conn
	off   bool
}

var errCutOff = errors.New("bench: cut off")

func (c *cutDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return nil, errCutOff
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, host)
	if err == nil {
		c.conns = append(c.conns, nc)
	}
	return nc, err
}

func (c *cutDialer) cutOff() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
	for _, nc := range c.conns {
		_ = nc.Close()
	}
	c.conns = nil
}

func (c *cutDialer) isOff() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.off
}

// startFeed writes RebalanceFeedRate records/s of o.RecordSize bytes to
// o.Topic, to each of its partitions in turn, counted in run from now
// (publish->ack from each record's scheduled time, B1), until the
// returned stop, which flushes them.
func startFeed(ctx context.Context, c *client.Client, o *Options, run *Run) (stop func(), err error) {
	pcfg, err := o.ProducerConfig()
	if err != nil {
		return nil, err
	}
	prods, err := openProducers(c, pcfg, 1)
	if err != nil {
		return nil, err
	}
	payload := randomPayload(o.RecordSize)
	feedCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	run.Start = time.Now()
	s := newSchedule(run.Start, run.Start.Add(rebalanceFeedLimit), RebalanceFeedRate, 0, 1)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			sched, ok := s.wait(feedCtx)
			if !ok {
				return
			}
			rec := &client.Record{Topic: o.Topic, Partition: int32(i % int(run.Partitions)), Value: Value(payload, sched, false), Offset: -1}
			err := prods[0].Produce(ctx, rec, func(r *client.Record, err error) {
				now := time.Now()
				if err != nil {
					run.fail(err)
					return
				}
				run.acknowledged(sched, now, len(r.Value), r.Partition, r.Offset, nil)
			})
			if err != nil && ctx.Err() == nil {
				run.fail(err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		closeProducers(ctx, prods, run)
	}, nil
}
