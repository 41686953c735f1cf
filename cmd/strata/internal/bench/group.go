package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
)

// groupCloseTimeout bounds a group member's Close (its last commit and
// its leave).
const groupCloseTimeout = 10 * time.Second

// GroupSettings are the session timeout and heartbeat interval of the
// group workloads' members: a classic member asks for them, and the
// brokers give them to KIP-848 members (--group-session-timeout,
// --group-heartbeat-interval).
type GroupSettings struct {
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
}

// groupReadTracker counts what a group's members read of a topic from
// its start, each record once (one read again after its partition moved
// to a member that starts at the last commit counts as reread only), and
// notes when every partition reached the end it had at the start.
type groupReadTracker struct {
	run  *Run
	done chan struct{} // closed when every partition reached its end
	mu   struct {
		sync.Mutex
		ends        map[int32]int64
		next        map[int32]int64 // offset after the last record counted
		remaining   int             // partitions short of their end
		first       time.Time       // the first record
		reached     time.Time       // every end
		reread      int64
		assignments int
	}
}

func newGroupReadTracker(run *Run, ends map[int32]int64) *groupReadTracker {
	t := &groupReadTracker{run: run, done: make(chan struct{})}
	t.mu.ends, t.mu.next = ends, map[int32]int64{}
	for _, end := range ends {
		if end > 0 {
			t.mu.remaining++
		}
	}
	if t.mu.remaining == 0 {
		close(t.done)
	}
	return t
}

// record counts one record of partition p at offset of size bytes.
// REQUIRES: t.mu held.
func (t *groupReadTracker) recordLocked(p int32, offset int64, size int, now time.Time, n, b *int64) {
	next := t.mu.next[p]
	if offset < next {
		t.mu.reread++
		return
	}
	if t.mu.first.IsZero() {
		t.mu.first = now
	}
	*n, *b = *n+1, *b+int64(size)
	t.mu.next[p] = offset + 1
	if end := t.mu.ends[p]; next < end && offset+1 >= end {
		if t.mu.remaining--; t.mu.remaining == 0 {
			t.mu.reached = now
			close(t.done)
		}
	}
}

// readStrata counts what a Strata group member's Poll returned.
func (t *groupReadTracker) readStrata(recs []*client.Record) {
	now := time.Now()
	var n, b int64
	t.mu.Lock()
	for _, r := range recs {
		t.recordLocked(r.Partition, r.Offset, len(r.Key)+len(r.Value), now, &n, &b)
	}
	t.mu.Unlock()
	t.run.count(n, b)
}

// readKafka counts what a franz-go member's poll returned.
func (t *groupReadTracker) readKafka(fs kgo.Fetches) {
	now := time.Now()
	var n, b int64
	t.mu.Lock()
	fs.EachRecord(func(r *kgo.Record) { t.recordLocked(r.Partition, r.Offset, len(r.Key)+len(r.Value), now, &n, &b) })
	t.mu.Unlock()
	t.run.count(n, b)
}

func (t *groupReadTracker) assigned() {
	t.mu.Lock()
	t.mu.assignments++
	t.mu.Unlock()
}

// result is the GroupRead of the read, which started at start.
func (t *groupReadTracker) result(g benchsuite.GroupRead, start time.Time) *benchsuite.GroupRead {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.mu.first.IsZero() {
		g.JoinSeconds = t.mu.first.Sub(start).Seconds()
	}
	g.Reread, g.Assignments = t.mu.reread, t.mu.assignments
	return &g
}

// groupMember is one member of a group read: poll waits for records (nil
// when its ctx ends first) and counts them; close leaves the group.
type groupMember struct {
	poll  func(ctx context.Context) error
	close func()
}

// groupRead reads run.Topic from its start with benchsuite.GroupMembers
// members, made by join, until every partition reached the end it had
// at the start (ends) or o.Duration passed. run.Start is when the
// members are made, run.End when the last end was reached.
func groupRead(ctx context.Context, progress io.Writer, o *Options, run *Run, t *groupReadTracker,
	join func(ctx context.Context, i int) (groupMember, error)) error {
	run.Start = time.Now()
	var members []groupMember
	defer func() { closeAll(members, func(m groupMember) { m.close() }) }()
	for i := range benchsuite.GroupMembers {
		m, err := join(ctx, i)
		if err != nil {
			return err
		}
		members = append(members, m)
	}
	runCtx, cancel := context.WithDeadline(ctx, run.Start.Add(o.Duration))
	defer cancel()
	stopProgress := run.startProgress(runCtx, progress)
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			for runCtx.Err() == nil {
				if err := m.poll(runCtx); err != nil {
					if runCtx.Err() == nil {
						run.fail(err)
					}
					return
				}
			}
		})
	}
	select {
	case <-t.done:
	case <-runCtx.Done():
	}
	cancel()
	wg.Wait()
	stopProgress()
	t.mu.Lock()
	run.End = t.mu.reached
	t.mu.Unlock()
	return nil
}

// GroupConsume is group-catch-up: o.Topic read from its start by the
// members of a Strata group consumer (each with its own client of
// brokers), group group.
func GroupConsume(ctx context.Context, progress io.Writer, c *client.Client, brokers []string, group string, gs GroupSettings,
	o *Options, run *Run) (*benchsuite.GroupRead, error) {
	tpEnds, err := partitionEnds(ctx, c, o.Topic, run.Partitions)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for tp, end := range tpEnds {
		ends[tp.Partition] = end
	}
	t := newGroupReadTracker(run, ends)
	err = groupRead(ctx, progress, o, run, t, func(ctx context.Context, i int) (groupMember, error) {
		return strataMember(ctx, brokers, group, gs, o.Topic, t)
	})
	return t.result(benchsuite.GroupRead{Group: group, Protocol: benchsuite.ProtocolKIP848, Client: "Strata client",
		Members: benchsuite.GroupMembers}, run.Start), err
}

// strataMember joins group with a client of its own.
func strataMember(ctx context.Context, brokers []string, group string, gs GroupSettings, topic string, t *groupReadTracker) (groupMember, error) {
	cl, err := client.New(ctx, client.Config{Brokers: brokers, ClientID: kafkaClientID})
	if err != nil {
		return groupMember{}, err
	}
	gc, err := cl.NewGroupConsumer(client.GroupConfig{Group: group, Topics: []string{topic}, SessionTimeout: gs.SessionTimeout,
		ResetOffset: client.OffsetEarliest(), OnAssigned: func(context.Context, []client.TopicPartition) { t.assigned() }})
	if err != nil {
		cl.Close()
		return groupMember{}, err
	}
	return groupMember{
		poll: func(ctx context.Context) error {
			pollCtx, cancel := context.WithTimeout(ctx, consumePollTimeout)
			defer cancel()
			recs, err := gc.Poll(pollCtx)
			t.readStrata(recs)
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
		close: func() {
			closeCtx, cancel := context.WithTimeout(context.Background(), groupCloseTimeout)
			defer cancel()
			_ = gc.Close(closeCtx)
			cl.Close()
		},
	}, nil
}

// KafkaGroupConsume is kafka-group-catch-up: o.Topic read from its start
// by franz-go members of a classic cooperative-sticky group, group.
func KafkaGroupConsume(ctx context.Context, progress io.Writer, seeds []string, group string, gs GroupSettings,
	o *Options, run *Run) (*benchsuite.GroupRead, error) {
	ends, err := kafkaEnds(ctx, seeds, o.Topic, run.Partitions)
	if err != nil {
		return nil, err
	}
	t := newGroupReadTracker(run, ends)
	err = groupRead(ctx, progress, o, run, t, func(ctx context.Context, i int) (groupMember, error) {
		cl, err := kgo.NewClient(append(kafkaGroupOpts(seeds, group, o.Topic, gs),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { t.assigned() }))...)
		if err != nil {
			return groupMember{}, err
		}
		return groupMember{poll: func(ctx context.Context) error {
			pollCtx, cancel := context.WithTimeout(ctx, consumePollTimeout)
			defer cancel()
			fs := cl.PollFetches(pollCtx)
			t.readKafka(fs)
			return pollError(fs)
		}, close: cl.Close}, nil
	})
	return t.result(benchsuite.GroupRead{Group: group, Protocol: benchsuite.ProtocolCooperativeSticky, Client: "franz-go",
		Members: benchsuite.GroupMembers}, run.Start), err
}

// kafkaGroupOpts are a franz-go group member's options: the fetch bounds
// of the other Kafka workloads, and gs (which KIP-848 members take from
// the broker instead).
func kafkaGroupOpts(seeds []string, group, topic string, gs GroupSettings) []kgo.Opt {
	return append(kafkaFetchOpts(), kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.SessionTimeout(gs.SessionTimeout), kgo.HeartbeatInterval(gs.HeartbeatInterval))
}

// pollError is a poll's first error, nil for the end of its context.
func pollError(fs kgo.Fetches) error {
	err := fetchError(fs)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("group member: %w", err)
	}
	return nil
}

// closeAll closes every item with close, all at once (a group's members
// leave at the same time, as a stopping application's would), and waits
// for them.
func closeAll[T any](items []T, close func(T)) {
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(func() { close(it) })
	}
	wg.Wait()
}
