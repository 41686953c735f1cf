package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/internal/testwait"
)

// groupBrokerArgs run brokers with 4 __consumer_offsets partitions and a
// 1 s shortest session timeout, so that a member killed is noticed within
// the short session its test asks for.
var groupBrokerArgs = []string{"--offsets-partitions", "4", "--group-min-session-timeout", "1s", "--group-heartbeat-interval", "500ms"}

// startGroupCluster starts a cluster of brokers (groupBrokerArgs) and
// creates topic; it returns the cluster, its Kafka listeners and a kadm
// client of them.
func startGroupCluster(t *testing.T, brokers int, topic string, partitions int32) (*strataCluster, []string, *kadm.Client) {
	t.Helper()
	c := startStrata(t, brokers, groupBrokerArgs...)
	addrs := groupKafkaAddrs(c)
	createTopic(t, c.client(t), topic, partitions, nil)
	return c, addrs, groupKafkaAdmin(t, addrs)
}

// groupKafkaAddrs lists the Kafka listeners of the cluster's brokers.
func groupKafkaAddrs(c *strataCluster) []string {
	var addrs []string
	for _, b := range c.brokers {
		addrs = append(addrs, b.KafkaAddr)
	}
	return addrs
}

// groupKafkaClient is a franz-go client of addrs, closed when the test
// ends.
func groupKafkaClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RetryTimeout(30 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// groupKafkaAdmin is a kadm client of addrs, closed when the test ends.
func groupKafkaAdmin(t testing.TB, addrs []string, opts ...kgo.Opt) *kadm.Client {
	t.Helper()
	return kadm.NewClient(groupKafkaClient(t, addrs, opts...))
}

// groupProducer writes numbered records "<prefix>-<i>" over Kafka, record
// i to partition i % partitions.
type groupProducer struct {
	cl         *kgo.Client
	topic      string
	partitions int32
	prefix     string
	next       int
}

func newGroupProducer(t testing.TB, addrs []string, topic string, partitions int32, prefix string) *groupProducer {
	t.Helper()
	cl := groupKafkaClient(t, addrs, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
	return &groupProducer{cl: cl, topic: topic, partitions: partitions, prefix: prefix}
}

// produce writes the next n records and waits for their acknowledgement.
func (p *groupProducer) produce(ctx context.Context, n int) error {
	var recs []*kgo.Record
	for range n {
		recs = append(recs, &kgo.Record{Topic: p.topic, Partition: int32(p.next) % p.partitions, Value: []byte(p.prefix + "-" + strconv.Itoa(p.next))})
		p.next++
	}
	return p.cl.ProduceSync(ctx, recs...).FirstErr()
}

func (p *groupProducer) mustProduce(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.produce(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// startGroupStream produces 4 records every 10 ms with p until the
// returned stop is called (at the latest by the test's cleanup), which
// fails the test if a produce failed.
func startGroupStream(t *testing.T, ctx context.Context, p *groupProducer) (stop func()) {
	t.Helper()
	quit, result := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond) // the stream's pace, not a wait
		defer tick.Stop()
		for {
			select {
			case <-quit:
				result <- nil
				return
			case <-tick.C:
			}
			if err := p.produce(ctx, 4); err != nil {
				result <- err
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(quit)
			if err := testwait.Recv(t, 30*time.Second, "the record stream to stop", result); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitKafkaGroupStable waits until group is Stable with an assignment of
// topic (partitions by member client id) that ok accepts, and returns it.
func waitKafkaGroupStable(t *testing.T, ctx context.Context, adm *kadm.Client, group, topic, what string, ok func(map[string][]int32) bool) map[string][]int32 {
	t.Helper()
	var owned map[string][]int32
	testwait.UntilNil(t, 60*time.Second, what, func() error {
		d, err := describeKafkaGroup(ctx, adm, group)
		if err != nil {
			return err
		}
		owned = memberPartitions(d, topic)
		if d.State != "Stable" || !ok(owned) {
			return fmt.Errorf("state %s, assignment %v", d.State, owned)
		}
		return nil
	})
	return owned
}

// groupCommitted reads a group's committed offsets of topic over Kafka,
// by partition (partitions without a commit are absent).
func groupCommitted(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	resps, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	if err := resps.Error(); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for p, r := range resps[topic] {
		if r.At >= 0 {
			out[p] = r.At
		}
	}
	return out, nil
}

// waitKafkaCommitted waits until group has committed offset want on each
// of topic's partitions.
func waitKafkaCommitted(t *testing.T, ctx context.Context, adm *kadm.Client, group, topic string, partitions int32, want int64) {
	t.Helper()
	testwait.UntilNil(t, 30*time.Second, fmt.Sprintf("%s to commit %d on every partition", group, want), func() error {
		committed, err := groupCommitted(ctx, adm, group, topic)
		if err != nil {
			return err
		}
		for part := range partitions {
			if committed[part] != want {
				return fmt.Errorf("committed %v", committed)
			}
		}
		return nil
	})
}

// groupEnds reads the end offsets of topic's partitions over Kafka.
func groupEnds(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := listed.Error(); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for p, o := range listed[topic] {
		out[p] = o.Offset
	}
	return out, nil
}

// describeKafkaGroup describes group over Kafka, the group's error
// included.
func describeKafkaGroup(ctx context.Context, adm *kadm.Client, group string) (kadm.DescribedGroup, error) {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return kadm.DescribedGroup{}, err
	}
	d, ok := described[group]
	if !ok {
		return kadm.DescribedGroup{}, fmt.Errorf("group %s not in the answer", group)
	}
	return d, d.Err
}

// memberPartitions maps each member of a described group, by client id,
// to the partitions of topic it was assigned.
func memberPartitions(d kadm.DescribedGroup, topic string) map[string][]int32 {
	out := map[string][]int32{}
	for _, m := range d.Members {
		out[m.ClientID] = nil
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range ca.Topics {
				if tp.Topic == topic {
					out[m.ClientID] = append(out[m.ClientID], tp.Partitions...)
				}
			}
		}
	}
	return out
}

// franzMember is a franz-go group consumer (the classic protocol) that
// reads in the background and auto-commits what it has read; it records
// each record's partition and offset, the errors the group management
// loop reports and how many requests of each API it wrote.
type franzMember struct {
	name string
	cl   *kgo.Client
	stop chan struct{}
	done chan struct{}

	mu struct {
		sync.Mutex
		read   map[int32][]int64 // offsets, in the order read
		values map[string]int    // value -> times read
		errs   []error
		writes map[int16]int       // requests written, by API key
		last   map[int16]time.Time // when the last one was written
	}
}

// OnBrokerWrite implements kgo.HookBrokerWrite: it counts the requests
// written whole, by API key.
func (m *franzMember) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.writes[key]++
	m.mu.last[key] = time.Now()
}

// written is how many requests of API key the member has written, and
// when the last was.
func (m *franzMember) written(key int16) (int, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.writes[key], m.mu.last[key]
}

// OnGroupManageError implements kgo.HookGroupManageError.
func (m *franzMember) OnGroupManageError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.errs = append(m.mu.errs, err)
}

// startFranzMember starts a member of group reading topic, with client id
// name; opts add to (or override) its defaults: 6 s session, auto-commit
// every 200 ms, reading from the start when nothing is committed. The
// test's cleanup closes it (leaving the group).
func startFranzMember(t testing.TB, addrs []string, group, topic, name string, opts ...kgo.Opt) *franzMember {
	t.Helper()
	m := &franzMember{name: name, stop: make(chan struct{}), done: make(chan struct{})}
	m.mu.read, m.mu.values = map[int32][]int64{}, map[string]int{}
	m.mu.writes, m.mu.last = map[int16]int{}, map[int16]time.Time{}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ClientID(name),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6 * time.Second), kgo.AutoCommitInterval(200 * time.Millisecond),
		kgo.FetchMaxWait(200 * time.Millisecond), kgo.WithHooks(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	go m.poll()
	t.Cleanup(m.close)
	return m
}

func (m *franzMember) poll() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := m.cl.PollFetches(ctx)
		cancel()
		m.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			m.mu.read[r.Partition] = append(m.mu.read[r.Partition], r.Offset)
			m.mu.values[string(r.Value)]++
		})
		m.mu.Unlock()
	}
}

// close stops reading and leaves the group, committing what was read.
func (m *franzMember) close() {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	m.cl.Close()
}

// offsets returns a copy of what the member read: offsets per partition.
func (m *franzMember) offsets() map[int32][]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int32][]int64{}
	for p, offs := range m.mu.read {
		out[p] = slices.Clone(offs)
	}
	return out
}

// errors returns the group management errors seen so far.
func (m *franzMember) errors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mu.errs)
}

// valuesRead returns how many times the member read each value.
func (m *franzMember) valuesRead() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.mu.values)
}
