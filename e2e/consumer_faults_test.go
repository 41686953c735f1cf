package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// tailer is a consumer assigned to every partition of a topic from the
// earliest offset, polling with a context that has no deadline, as an
// application tailing a topic does. It keeps every record it reads and
// checks that each partition's offsets arrive exactly once, in order.
type tailer struct {
	cons   *client.Consumer
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	values map[int32][]string // per partition, indexed by offset
	errs   []error
}

func startTailer(t *testing.T, cl *client.Client, topic string, partitions int32) *tailer {
	t.Helper()
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	assign := map[client.TopicPartition]client.Offset{}
	for p := range partitions {
		assign[client.TopicPartition{Topic: topic, Partition: p}] = client.OffsetEarliest()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cons.Assign(ctx, assign); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(context.Background())
	tl := &tailer{cons: cons, cancel: pcancel, done: make(chan struct{}), values: map[int32][]string{}}
	go func() {
		defer close(tl.done)
		for {
			recs, err := cons.Poll(pctx) // no deadline: only the test's end cancels it
			if err != nil {
				if pctx.Err() == nil {
					tl.mu.Lock()
					tl.errs = append(tl.errs, fmt.Errorf("poll: %w", err))
					tl.mu.Unlock()
				}
				if errors.Is(err, client.ErrClosed) || pctx.Err() != nil {
					return
				}
				continue
			}
			tl.mu.Lock()
			for _, r := range recs {
				if want := int64(len(tl.values[r.Partition])); r.Offset != want {
					tl.errs = append(tl.errs, fmt.Errorf("partition %d: offset %d, want %d", r.Partition, r.Offset, want))
					continue
				}
				tl.values[r.Partition] = append(tl.values[r.Partition], string(r.Value))
			}
			tl.mu.Unlock()
		}
	}()
	t.Cleanup(tl.stop)
	return tl
}

func (tl *tailer) stop() {
	tl.cancel()
	<-tl.done
	_ = tl.cons.Close()
}

// has reports nil once the tailer read every record of acks, each at its
// acknowledged offset.
func (tl *tailer) has(acks []loadtest.Ack) error {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.errs) > 0 {
		return tl.errs[0]
	}
	for _, a := range acks {
		vals := tl.values[a.Partition]
		if a.Offset >= int64(len(vals)) {
			return fmt.Errorf("partition %d read up to %d, acknowledged %d", a.Partition, len(vals), a.Offset)
		}
		if want := a.Value(); vals[a.Offset] != want {
			return fmt.Errorf("partition %d offset %d is %q, acknowledged %q", a.Partition, a.Offset, vals[a.Offset], want)
		}
	}
	return nil
}

// TestConsumersThroughFaults: long-lived consumers tail
// a topic through kill -9 and restart of brokers, bookies and metad
// members, several times each, while an idempotent producer writes. An
// assigned consumer must read every acknowledged record exactly once, in
// order; a consumer group (whose third member is closed and replaced during
// the run) at least once. After each fault the test waits until both read
// everything acknowledged until then, and logs how long that took from the
// kill.
func TestConsumersThroughFaults(t *testing.T) {
	skipShort(t)
	const partitions = 8
	c := startStrata(t, 2)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "tail", partitions, nil)

	tl := startTailer(t, cl, "tail", partitions)
	o := newOwnershipLog()
	members := []*groupMember{
		startGroupMember(t, c, o, "m1", memberConfig("tailers", "tail")),
		startGroupMember(t, c, o, "m2", memberConfig("tailers", "tail")),
		startGroupMember(t, c, o, "m3-0", memberConfig("tailers", "tail")),
	}

	load := loadtest.Start(t, cl, loadtest.Config{Topic: "tail", Keys: 64, Rate: 2000,
		Producer: client.ProducerConfig{Acks: client.AcksQuorum, Linger: 2 * time.Millisecond}})

	// caughtUp waits until the tailer and the group read every record
	// acknowledged so far, and says how long after since that took.
	caughtUp := func(what string, since time.Time) {
		t.Helper()
		acks := load.Acks()
		testwait.UntilNil(t, 60*time.Second, what+": the tailer reads every acknowledged record", func() error { return tl.has(acks) })
		tailer := time.Since(since)
		testwait.UntilNil(t, 60*time.Second, what+": the group reads every acknowledged record", func() error {
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, a := range acks {
				if o.consumed[a.Value()] == 0 {
					return fmt.Errorf("%s:%d (partition %d offset %d) not consumed by the group; %s",
						a.Key, a.Seq, a.Partition, a.Offset, describeMembers(cl, members))
				}
			}
			return nil
		})
		t.Logf("%s: %d acknowledged; tailer caught up %s after the kill, group %s",
			what, len(acks), tailer.Round(time.Millisecond), time.Since(since).Round(time.Millisecond))
	}

	mc := newMetaClient(t, c.meta)
	replaced := 0
	replaceMember := func() { // the churned member leaves, a new one joins
		members[2].leave(t)
		replaced++
		members[2] = startGroupMember(t, c, o, fmt.Sprintf("m3-%d", replaced), memberConfig("tailers", "tail"))
	}
	// Each fault kills a process; it says which (a different one each
	// round) and how to tell that it is back.
	type fault struct {
		name string
		pick func(round int) (*proctest.Process, func(context.Context) error)
	}
	faults := []fault{
		{"broker", func(round int) (*proctest.Process, func(context.Context) error) {
			b := c.brokers[round%len(c.brokers)]
			return b.Process, b.WaitReady
		}},
		{"bookie", func(round int) (*proctest.Process, func(context.Context) error) {
			b := c.bookies[round%len(c.bookies)]
			return b.Process, b.WaitReady
		}},
		{"metad leader", func(int) (*proctest.Process, func(context.Context) error) {
			lead, err := leader(ctx, mc)
			if err != nil {
				t.Fatal(err)
			}
			m := c.meta.Member(lead)
			return m.Process, m.WaitReady
		}},
	}
	load.AwaitAcks(t, 1000, "the first acknowledgements")
	caughtUp("warm-up", time.Now())
	for round := range 2 {
		for _, f := range faults {
			proc, ready := f.pick(round)
			what := fmt.Sprintf("round %d, %s killed", round+1, f.name)
			proc.Kill()
			killed := time.Now()
			acksAtKill := load.Acked()
			// Until the process is back (after 3 s down) and the tailer
			// has resumed: it holds every record acknowledged so far,
			// including some acknowledged after the kill. The tailer may
			// resume before the restart (the time is logged), so one poll
			// watches for both.
			var resumed time.Duration
			restarted := false
			testwait.UntilNil(t, 60*time.Second, what+": the process back and the tailer resumed", func() error {
				if !restarted && time.Since(killed) >= 3*time.Second {
					proc.Restart(t)
					wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					if err := ready(wctx); err != nil {
						t.Fatal(err)
					}
					cancel()
					restarted = true
				}
				acks := load.Acks()
				if resumed == 0 && len(acks) > acksAtKill && tl.has(acks) == nil {
					resumed = time.Since(killed)
				}
				switch {
				case resumed == 0 && len(acks) <= acksAtKill:
					return errors.New("the tailer has not resumed: nothing acknowledged since the kill")
				case resumed == 0:
					return fmt.Errorf("the tailer has not resumed: %w", tl.has(acks))
				case !restarted:
					return errors.New("the process is still down (3 s)")
				}
				return nil
			})
			t.Logf("%s: the tailer held every acknowledged record again %s after the kill", what, resumed.Round(time.Millisecond))
			caughtUp(what, killed)
			replaceMember()
		}
	}
	failed := load.Stop(t).Failed
	caughtUp("end", time.Now())
	redelivered := 0
	o.mu.Lock()
	for _, n := range o.consumed {
		redelivered += n - 1
	}
	o.mu.Unlock()
	t.Logf("%d records failed (unknown outcome allowed under faults); group redeliveries %d; member replaced %d times",
		failed, redelivered, replaced)
}

// describeMembers says what the coordinator and each member think, for a
// failure message.
func describeMembers(cl *client.Client, members []*groupMember) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var b strings.Builder
	if d, err := cl.DescribeGroup(ctx, "tailers"); err != nil {
		fmt.Fprintf(&b, "describe: %v", err)
	} else {
		fmt.Fprintf(&b, "group %s epoch %d:", d.GetState(), d.GetGroupEpoch())
		for _, m := range d.GetMembers() {
			fmt.Fprintf(&b, " [%s epoch %d assigned %v owned %v]", m.GetMemberId(), m.GetMemberEpoch(), m.GetAssignment(), m.GetOwned())
		}
	}
	for _, m := range members {
		fmt.Fprintf(&b, "; %s (%s epoch %d) owns", m.name, m.gc.MemberID(), m.gc.MemberEpoch())
		for _, tp := range m.gc.Assignment() {
			pos, _ := m.gc.Position(tp)
			hw, _ := m.gc.HighWatermark(tp)
			fmt.Fprintf(&b, " %d@%d/%d", tp.Partition, pos, hw)
		}
	}
	return b.String()
}
