package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// witness is a consumer assigned to every partition from the earliest
// offset, polling with a context that has no deadline (as an application
// tails a topic). It checks that each partition's records arrive exactly
// once and in order.
type witness struct {
	cons   *Consumer
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	next map[int32]int64 // next offset expected per partition
	errs []error
}

func startWitness(t *testing.T, c *Client, topic string, partitions int32) *witness {
	t.Helper()
	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	assign := map[TopicPartition]Offset{}
	for p := range partitions {
		assign[TopicPartition{topic, p}] = OffsetEarliest()
	}
	if err := cons.Assign(testCtx(t), assign); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &witness{cons: cons, cancel: cancel, done: make(chan struct{}), next: map[int32]int64{}}
	go func() {
		defer close(w.done)
		for {
			recs, err := cons.Poll(ctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
					w.fail(fmt.Errorf("poll: %w", err))
				}
				return
			}
			w.mu.Lock()
			for _, r := range recs {
				if r.Offset != w.next[r.Partition] {
					w.errs = append(w.errs, fmt.Errorf("partition %d: offset %d, want %d", r.Partition, r.Offset, w.next[r.Partition]))
				}
				w.next[r.Partition] = r.Offset + 1
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *witness) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
}

func (w *witness) stop() {
	w.cancel()
	<-w.done
	_ = w.cons.Close()
}

// caughtUp reports nil once every partition reached the offsets in ends.
func (w *witness) caughtUp(ends map[int32]int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		return w.errs[0]
	}
	for p, end := range ends {
		if w.next[p] < end {
			return fmt.Errorf("partition %d at %d of %d", p, w.next[p], end)
		}
	}
	return nil
}

// ackLog records the acknowledged offsets of a producer.
type ackLog struct {
	mu     sync.Mutex
	ends   map[int32]int64 // 1 + highest acknowledged offset per partition
	values map[string]bool
	wg     sync.WaitGroup
}

func newAckLog() *ackLog { return &ackLog{ends: map[int32]int64{}, values: map[string]bool{}} }

func (a *ackLog) cb() func(*Record, error) {
	a.wg.Add(1)
	return func(r *Record, err error) {
		defer a.wg.Done()
		if err != nil {
			return // unknown outcome: it may or may not be in the log
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ends[r.Partition] = max(a.ends[r.Partition], r.Offset+1)
		a.values[string(r.Value)] = true
	}
}

func (a *ackLog) snapshot() (map[int32]int64, map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ends, values := map[int32]int64{}, map[string]bool{}
	for p, e := range a.ends {
		ends[p] = e
	}
	for v := range a.values {
		values[v] = true
	}
	return ends, values
}

// produceUntil writes numbered records round-robin until stop closes.
func produceUntil(ctx context.Context, t *testing.T, p *Producer, topic string, partitions int32, acks *ackLog, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		r := &Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte("v" + strconv.Itoa(i))}
		if err := p.Produce(ctx, r, acks.cb()); err != nil {
			t.Errorf("produce: %v", err)
			return
		}
		if i%8 == 0 {
			time.Sleep(time.Millisecond) // pacing the load, not a wait for a condition
		}
	}
}

// TestConsumerDoesNotStallOnStaleMetadata guards against a stall: the
// fetcher's per-broker loops re-read the shared metadata cache after being
// woken, so a producer (or anything) marking the topic stale at that moment
// stranded partitions until Poll was called with records to return, which
// never came. A consumer polling without a deadline must see every record
// while the cache is invalidated and refreshed all the time.
func TestConsumerDoesNotStallOnStaleMetadata(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.createTopic("t", 4)
	c := newTestClient(t, cl)
	w := startWitness(t, c, "t", 4)
	p := newTestProducer(t, c, ProducerConfig{Linger: time.Millisecond, MaxInFlight: 1})
	acks := newAckLog()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); produceUntil(testCtx(t), t, p, "t", 4, acks, stop) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
				c.invalidate("t")
			}
		}
	}()
	time.Sleep(1500 * time.Millisecond) // how long the load runs, not a wait for a condition
	close(stop)
	wg.Wait()
	start := time.Now()
	t.Logf("acks in %s", time.Since(start))
	ends, _ := acks.snapshot()
	testwait.UntilNil(t, 10*time.Second, "the witness to read every acknowledged record", func() error { return w.caughtUp(ends) })
	t.Logf("caught up in %s", time.Since(start))
}

// TestClientLifecycleRandomized races the client's lifecycle calls (Close,
// Seek, Assign, Unassign, group members joining and leaving) with fetch and
// produce responses while the cluster moves partitions, takes brokers
// down (with metadata still naming them) and the cache goes stale. Nothing
// may panic or deadlock, every goroutine ends (TestMain's leak check), a
// long-lived consumer reads every acknowledged record exactly once in
// order, and the group reads each at least once, within a bound after the
// faults end.
func TestClientLifecycleRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { lifecycleRun(t, seed) })
	}
}

func lifecycleRun(t *testing.T, seed uint64) {
	const partitions = 6
	cl := startRealCluster(t, 3)
	cl.waitCoordinator()
	cl.createTopic("t", partitions)
	c := newTestClient(t, cl)
	w := startWitness(t, c, "t", partitions)
	o := newOwnership(t)
	longMember := startMember(t, c, o.config("long", groupCfg("t")), o)

	p := newTestProducer(t, c, ProducerConfig{Linger: time.Millisecond, MaxInFlight: 1})
	acks := newAckLog()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); produceUntil(testCtx(t), t, p, "t", partitions, acks, stop) }()

	wg.Add(1)
	go func() { defer wg.Done(); chaos(cl, c, rand.New(rand.NewPCG(seed, 1)), stop) }()
	for i := range 2 {
		wg.Add(2)
		go func() { defer wg.Done(); churnConsumers(t, c, rand.New(rand.NewPCG(seed, uint64(10+i))), stop) }()
		go func() {
			defer wg.Done()
			churnMembers(t, c, o, fmt.Sprint("churn", i), rand.New(rand.NewPCG(seed, uint64(20+i))), stop)
		}()
	}
	time.Sleep(1500 * time.Millisecond) // how long the faults run, not a wait for a condition
	close(stop)
	wg.Wait()
	healed := time.Now()
	acks.wg.Wait()
	ends, values := acks.snapshot()
	testwait.UntilNil(t, 15*time.Second, "the witness to read every acknowledged record", func() error { return w.caughtUp(ends) })
	testwait.UntilNil(t, 20*time.Second, "the group to read every acknowledged record", func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		missing := 0
		for v := range values {
			if o.consumed[v] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d records not consumed by the group", missing, len(values))
		}
		return nil
	})
	redelivered := 0
	o.mu.Lock()
	for _, n := range o.consumed {
		redelivered += n - 1
	}
	o.mu.Unlock()
	t.Logf("seed %d: %d records acknowledged; caught up %s after the faults ended; group redeliveries %d",
		seed, len(values), time.Since(healed).Round(time.Millisecond), redelivered)
	longMember.stop(t)
}

// chaos moves partitions, takes brokers down and up, makes Metadata lie
// and invalidates the client's cache until stop closes; then it heals
// everything. A move is one hand-over at a time (MovePartition returns
// once the new owner serves it; the controller may move partitions back
// to balance); a "down" broker keeps its metad session, but its clients'
// calls fail, as a partitioned broker's whose lease has not run out yet.
func chaos(cl *realCluster, c *Client, rng *rand.Rand, stop <-chan struct{}) {
	n := len(cl.Brokers)
	defer func() {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		for i := range cl.down {
			cl.down[i].Store(false)
		}
		clear(cl.metaOwnr)
	}()
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(1+rng.IntN(10)) * time.Millisecond):
		}
		tp := TopicPartition{"t", rng.Int32N(6)}
		switch rng.IntN(6) {
		case 0, 1: // ownership moves; Metadata may lag behind
			old := cl.ownerIndex(tp)
			if cl.MovePartition(tp.Topic, tp.Partition, rng.IntN(n)) != nil {
				continue // raced the controller
			}
			cl.mu.Lock()
			if rng.IntN(2) == 0 && old >= 0 {
				cl.metaOwnr[tp] = old
			} else {
				delete(cl.metaOwnr, tp)
			}
			cl.mu.Unlock()
		case 2: // Metadata catches up
			cl.mu.Lock()
			clear(cl.metaOwnr)
			cl.mu.Unlock()
		case 3: // a broker dies (or comes back); its partitions move
			i := rng.IntN(n)
			if cl.down[i].Load() {
				cl.down[i].Store(false)
				continue
			}
			cl.down[i].Store(true)
			for p := range int32(6) {
				tp := TopicPartition{"t", p}
				if cl.ownerIndex(tp) != i {
					continue
				}
				if cl.MovePartition(tp.Topic, tp.Partition, (i+1+rng.IntN(n-1))%n) == nil {
					cl.mu.Lock()
					cl.metaOwnr[tp] = i // its lease has not run out yet
					cl.mu.Unlock()
				}
			}
		default:
			c.invalidate("t")
		}
	}
}

// churnConsumers creates consumers, repositions them at random and closes
// them while a goroutine polls each without a deadline.
func churnConsumers(t *testing.T, c *Client, rng *rand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		cons, err := c.NewConsumer(ConsumerConfig{MaxWait: time.Duration(1+rng.IntN(50)) * time.Millisecond, PartitionMaxBytes: 1 + rng.IntN(4096)})
		if err != nil {
			t.Error(err)
			return
		}
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				_, err := cons.Poll(context.Background())
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil && !errors.Is(err, ErrOffsetOutOfRange) {
					t.Errorf("poll: %v", err)
					return
				}
			}
		}()
		for range 1 + rng.IntN(8) {
			tp := TopicPartition{"t", rng.Int32N(6)}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			switch rng.IntN(4) {
			case 0:
				_ = cons.Assign(ctx, map[TopicPartition]Offset{tp: OffsetEarliest()})
			case 1:
				_ = cons.Seek(ctx, tp, OffsetAt(rng.Int64N(200)))
			case 2:
				_ = cons.Seek(ctx, tp, OffsetLatest())
			default:
				cons.Unassign(tp)
			}
			cancel()
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // a random gap between calls, not a wait
		}
		_ = cons.Close() // while Poll waits, and fetches are in flight
		<-polled
	}
}

// churnMembers joins the group and leaves it again, over and over.
func churnMembers(t *testing.T, c *Client, o *ownership, name string, rng *rand.Rand, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		gc, err := c.NewGroupConsumer(o.config(fmt.Sprint(name, "-", i), groupCfg("t")))
		if err != nil {
			t.Error(err)
			return
		}
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				recs, err := gc.Poll(context.Background())
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
		time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond) // a member for a random while, not a wait
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = gc.Close(ctx) // while Poll waits
		cancel()
		<-polled
	}
}
