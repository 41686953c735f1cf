package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
)

// groupCluster is a Kafka cluster with short group timeouts, so a member
// cut off is noticed in about a second.
func groupCluster(t *testing.T, brokers int) *brokertest.Cluster {
	t.Helper()
	return brokertest.Start(t, brokertest.Options{Kafka: true, Brokers: brokers, Configure: func(_ int, cfg *broker.Config) {
		cfg.GroupMinSessionTimeout, cfg.GroupHeartbeatInterval, cfg.GroupTickInterval = time.Second, 200*time.Millisecond, 50*time.Millisecond
	}})
}

// produced numbers the records produceN writes, so that every value is
// new.
var produced atomic.Int64

// produceN writes n keyed records with values never written before.
func produceN(t *testing.T, c *brokertest.Cluster, topic string, n int) {
	t.Helper()
	p := kgoClient(t, c)
	ctx := testCtx(t)
	for range n {
		i := produced.Add(1)
		p.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// member is one group consumer the test can stop, cut off, and watch:
// what it holds, and what it read.
type member struct {
	name string
	cl   *kgo.Client
	cut  *cutter
	stop chan struct{}
	done chan struct{}
}

// ledger of a group test: which member holds which partition, and what
// was read.
type groupLedger struct {
	t    *testing.T
	mu   sync.Mutex
	held map[int32]string // partition -> member
	read map[string]int   // value -> times
	dead map[string]bool  // members cut off: their view no longer counts
	// onRevoke, when set, hears every non-empty revocation.
	onRevoke func(name string)
}

func (g *groupLedger) assigned(name string, parts map[string][]int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ps := range parts {
		for _, p := range ps {
			if other, ok := g.held[p]; ok && other != name && !g.dead[other] {
				g.t.Errorf("partition %d assigned to %s while %s holds it", p, name, other)
			}
			g.held[p] = name
		}
	}
}

func (g *groupLedger) revoked(name string, parts map[string][]int32) {
	if g.onRevoke != nil && len(parts) > 0 {
		g.onRevoke(name)
	}
	g.released(name, parts)
}

func (g *groupLedger) released(name string, parts map[string][]int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ps := range parts {
		for _, p := range ps {
			if g.held[p] == name {
				delete(g.held, p)
			}
		}
	}
}

func (g *groupLedger) distinct() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.read)
}

// startMember starts a group consumer that reads and commits as it goes
// (autocommit, and a commit before each revocation, as franz-go does).
func startMember(t *testing.T, c *brokertest.Cluster, g *groupLedger, name, groupID string, extra ...kgo.Opt) *member {
	t.Helper()
	m := &member{name: name, cut: &cutter{}, stop: make(chan struct{}), done: make(chan struct{})}
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.KafkaAddrs()...), kgo.Dialer(m.cut.dial),
		kgo.ConsumerGroup(groupID), kgo.ConsumeTopics("work"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond), kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.AutoCommitInterval(100 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { g.assigned(name, p) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, p map[string][]int32) {
			_ = cl.CommitMarkedOffsets(ctx)
			g.revoked(name, p)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { g.released(name, p) }),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			fs := cl.PollFetches(ctx)
			cancel()
			g.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { g.read[string(r.Value)]++ })
			g.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.close() })
	return m
}

// close leaves the group (a clean shutdown).
func (m *member) close() {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	m.cl.Close()
}

// kill cuts the member off the cluster, as a crash would: no leave, no
// heartbeat; its session expires on the coordinator.
func (m *member) kill(g *groupLedger) {
	g.mu.Lock()
	g.dead[m.name] = true
	g.mu.Unlock()
	m.cut.cutOff()
}

// cutter is a dialer whose connections can all be cut at once, and then
// refuses new ones.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
	off   bool
}

func (c *cutter) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return nil, errors.New("cut off")
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, host)
	if err == nil {
		c.conns = append(c.conns, nc)
	}
	return nc, err
}

func (c *cutter) cutOff() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
	for _, nc := range c.conns {
		_ = nc.Close()
	}
}

// Three members share six partitions (eager range, cooperative-sticky,
// and KIP-848's server-side assignment); one leaves cleanly, one is cut
// off (its session expires): every record is read, no partition is
// assigned to a live member while another live member holds it, and the
// group's commits reach the end of every partition.
func TestGroupRebalances(t *testing.T) {
	for _, tc := range []struct {
		name, groupType string
		opts            []kgo.Opt
	}{
		{"range", "classic", []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}},
		{"cooperative-sticky", "classic", []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}},
		// franz-go speaks KIP-848 only with the range or sticky balancer.
		{"kip-848", "consumer", []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := groupCluster(t, 1)
			c.CreateTopic("work", 6, nil)
			g := &groupLedger{t: t, held: map[int32]string{}, read: map[string]int{}, dead: map[string]bool{}}
			const n = 600
			produceN(t, c, "work", n/3)
			var ms []*member
			for i := range 3 {
				ms = append(ms, startMember(t, c, g, fmt.Sprintf("m%d", i), "g-"+tc.name, tc.opts...))
			}
			testwait.UntilNil(t, 30*time.Second, "the first third read", func() error {
				if got := g.distinct(); got < n/3 {
					return fmt.Errorf("%d read", got)
				}
				return nil
			})
			listed, err := kadm.NewClient(kgoClient(t, c)).ListGroups(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := listed["g-"+tc.name].GroupType; got != tc.groupType {
				t.Fatalf("the group is of type %q, want %q", got, tc.groupType)
			}
			ms[2].close()
			produceN(t, c, "work", n/3)
			ms[1].kill(g)
			produceN(t, c, "work", n/3)
			testwait.UntilNil(t, 60*time.Second, "every record read", func() error {
				if got := g.distinct(); got < n {
					return fmt.Errorf("%d of %d read", got, n)
				}
				return nil
			})
			testwait.UntilNil(t, 30*time.Second, "commits at the end of every partition", func() error {
				return committedAtEnd(t, c, "g-"+tc.name)
			})
		})
	}
}

// committedAtEnd is nil when the group's committed offsets reach the end
// of every partition of "work".
func committedAtEnd(t *testing.T, c *brokertest.Cluster, groupID string) error {
	adm := kadm.NewClient(kgoClient(t, c))
	ctx := testCtx(t)
	lag, err := adm.Lag(ctx, groupID)
	if err != nil {
		return err
	}
	l := lag[groupID]
	if err := l.Error(); err != nil {
		return err
	}
	if total := l.Lag.Total(); total != 0 {
		return fmt.Errorf("lag %d", total)
	}
	return nil
}

// A static member (group.instance.id) that restarts gets its partitions
// back without the other members giving up theirs.
func TestStaticMemberRestart(t *testing.T) {
	c := groupCluster(t, 1)
	c.CreateTopic("work", 6, nil)
	g := &groupLedger{t: t, held: map[int32]string{}, read: map[string]int{}, dead: map[string]bool{}}
	produceN(t, c, "work", 60)
	revokes := make(chan string, 64)
	g.onRevoke = func(name string) { revokes <- name }
	var ms []*member
	for i := range 3 {
		name := fmt.Sprintf("s%d", i)
		ms = append(ms, startMember(t, c, g, name, "static", kgo.InstanceID(name), kgo.Balancers(kgo.CooperativeStickyBalancer())))
	}
	testwait.UntilNil(t, 30*time.Second, "every partition held", func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.held) != 6 {
			return fmt.Errorf("%d held", len(g.held))
		}
		return nil
	})
	g.mu.Lock()
	before := map[int32]string{}
	for p, m := range g.held {
		before[p] = m
	}
	g.mu.Unlock()
	// The revocations of the group's first rounds (members joined one by
	// one) are not the restart's.
	for len(revokes) > 0 {
		<-revokes
	}
	// A static member's Close does not leave the group (KIP-345): the
	// coordinator keeps its partitions for it.
	ms[0].close()
	g.released("s0", partitionsOf(before, "s0"))
	ms[0] = startMember(t, c, g, "s0", "static", kgo.InstanceID("s0"), kgo.Balancers(kgo.CooperativeStickyBalancer()))
	testwait.UntilNil(t, 30*time.Second, "s0's partitions back", func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		for p, m := range before {
			if g.held[p] != m {
				return fmt.Errorf("partition %d held by %q, was %q", p, g.held[p], m)
			}
		}
		return nil
	})
	for {
		select {
		case name := <-revokes:
			if name != "s0" {
				t.Fatalf("%s gave up partitions when s0 restarted", name)
			}
		default:
			return
		}
	}
}

func partitionsOf(held map[int32]string, name string) map[string][]int32 {
	out := map[string][]int32{}
	for p, m := range held {
		if m == name {
			out["work"] = append(out["work"], p)
		}
	}
	return out
}

// kadm's group administration: list (with state and type), describe
// (members and assignments), lag, offset delete and group delete; and
// the gRPC API sees the same group.
func TestGroupAdmin(t *testing.T) {
	c := groupCluster(t, 1)
	c.CreateTopic("work", 2, nil)
	g := &groupLedger{t: t, held: map[int32]string{}, read: map[string]int{}, dead: map[string]bool{}}
	produceN(t, c, "work", 20)
	m := startMember(t, c, g, "a", "admin-group")
	testwait.UntilNil(t, 30*time.Second, "everything read and committed", func() error {
		if g.distinct() < 20 {
			return fmt.Errorf("%d read", g.distinct())
		}
		return committedAtEnd(t, c, "admin-group")
	})
	adm := kadm.NewClient(kgoClient(t, c))
	ctx := testCtx(t)
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lg, ok := listed["admin-group"]
	if !ok || lg.State != "Stable" || lg.ProtocolType != "consumer" {
		t.Fatalf("listed %+v", listed)
	}
	described, err := adm.DescribeGroups(ctx, "admin-group")
	if err != nil {
		t.Fatal(err)
	}
	dg := described["admin-group"]
	if dg.Err != nil || len(dg.Members) != 1 {
		t.Fatalf("described %+v", dg)
	}
	if ca, ok := dg.Members[0].Assigned.AsConsumer(); !ok || len(ca.Topics) != 1 || len(ca.Topics[0].Partitions) != 2 {
		t.Fatalf("member assignment %+v", dg.Members[0].Assigned)
	}
	gc, err := client.New(ctx, client.Config{Brokers: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	gd, err := gc.DescribeGroup(ctx, "admin-group")
	if err != nil || len(gd.Members) != 1 || len(gd.Offsets) != 2 {
		t.Fatalf("the gRPC API's description of a Kafka group: %+v %v", gd, err)
	}
	if a := gd.Members[0].Assignment; len(a) != 1 || a[0].Topic != "work" || len(a[0].Partitions) != 2 {
		t.Fatalf("the gRPC API's view of a classic member's assignment: %v", a)
	}
	m.close()
	// Empty now: its offsets can go, then the group.
	var os kadm.TopicsSet
	os.Add("work", 0)
	dels, err := adm.DeleteOffsets(ctx, "admin-group", os)
	if err != nil || dels.Error() != nil {
		t.Fatalf("offset delete: %v %v", err, dels.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, "admin-group")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fetched.Lookup("work", 0); ok {
		t.Fatal("partition 0's offset still committed after OffsetDelete")
	}
	if _, ok := fetched.Lookup("work", 1); !ok {
		t.Fatal("partition 1's offset went with partition 0's")
	}
	if _, err := adm.DeleteGroup(ctx, "admin-group"); err != nil {
		t.Fatal(err)
	}
	if listed, _ := adm.ListGroups(ctx); len(listed) != 0 {
		t.Fatalf("groups after the delete: %+v", listed)
	}
}

// The gRPC API resets a Kafka group's offsets while it is empty, and the
// next Kafka member resumes at the reset position.
func TestGRPCResetOfKafkaGroup(t *testing.T) {
	c := groupCluster(t, 1)
	c.CreateTopic("work", 1, nil)
	g := &groupLedger{t: t, held: map[int32]string{}, read: map[string]int{}, dead: map[string]bool{}}
	produceN(t, c, "work", 10)
	m := startMember(t, c, g, "a", "resettable")
	testwait.UntilNil(t, 30*time.Second, "committed", func() error {
		if g.distinct() < 10 {
			return fmt.Errorf("%d read", g.distinct())
		}
		return committedAtEnd(t, c, "resettable")
	})
	m.close()
	ctx := testCtx(t)
	gc, err := client.New(ctx, client.Config{Brokers: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if err := gc.CommitGroupOffsets(ctx, "resettable", map[client.TopicPartition]int64{{Topic: "work"}: 4}); err != nil {
		t.Fatal(err)
	}
	g2 := &groupLedger{t: t, held: map[int32]string{}, read: map[string]int{}, dead: map[string]bool{}}
	startMember(t, c, g2, "b", "resettable")
	testwait.UntilNil(t, 30*time.Second, "read from the reset position", func() error {
		if n := g2.distinct(); n != 6 {
			return fmt.Errorf("%d read", n)
		}
		return nil
	})
	g2.mu.Lock()
	defer g2.mu.Unlock()
	for v := range g2.read {
		if g.read[v] == 0 {
			t.Fatalf("%s read after the reset was never read before", v)
		}
	}
}
