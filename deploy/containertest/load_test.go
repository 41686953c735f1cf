package containertest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
)

// load produces numbered records to a topic (idempotent, acks=quorum)
// until stopped, remembering what was acknowledged where.
type load struct {
	t      *testing.T
	topic  string
	cancel context.CancelFunc
	done   chan struct{}
	stats  client.ProducerStats // once done is closed

	mu struct {
		sync.Mutex
		acked    map[string]client.TopicPartition // value -> partition
		maxAcked map[int32]int64                  // partition -> highest acked offset
		failed   int
		errs     map[string]int // failure messages, counted
	}
}

// startLoad creates topic with partitions and produces about rate records
// a second to it until stop.
func startLoad(t *testing.T, cl *client.Client, topic string, partitions int32, rate int) *load {
	t.Helper()
	ctx := context.Background()
	if _, err := cl.CreateTopic(ctx, topic, partitions, nil); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	p, err := cl.NewProducer(client.ProducerConfig{Acks: client.AcksQuorum, DeliveryTimeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &load{t: t, topic: topic, cancel: cancel, done: make(chan struct{})}
	l.mu.acked = map[string]client.TopicPartition{}
	l.mu.maxAcked = map[int32]int64{}
	l.mu.errs = map[string]int{}
	go func() {
		defer close(l.done)
		// Close flushes: every record produced gets its callback before
		// stop returns.
		defer func() {
			fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer fcancel()
			if err := p.Close(fctx); err != nil {
				t.Errorf("producer close: %v", err)
			}
			l.stats = p.Stats()
		}()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			v := strconv.Itoa(i)
			r := client.NewRecord(topic, []byte("k"+v), []byte(v))
			err := p.Produce(lctx, r, func(r *client.Record, err error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				if err != nil {
					l.mu.failed++
					l.mu.errs[err.Error()]++
					return
				}
				l.mu.acked[string(r.Value)] = client.TopicPartition{Topic: topic, Partition: r.Partition}
				if r.Offset > l.mu.maxAcked[r.Partition] {
					l.mu.maxAcked[r.Partition] = r.Offset
				}
			})
			if err != nil {
				if lctx.Err() == nil {
					t.Errorf("produce: %v", err)
				}
				return
			}
		}
	}()
	return l
}

func (l *load) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.acked)
}

// waitAcked waits until n more records than now are acknowledged.
func (l *load) waitMoreAcked(n int, timeout time.Duration, what string) {
	l.t.Helper()
	base := l.ackedCount()
	testwait.Until(l.t, timeout, fmt.Sprintf("%d more acknowledged records %s", n, what), func() bool { return l.ackedCount() >= base+n })
}

// stop ends the load, waits for every callback, and returns the
// acknowledged values and the failures.
func (l *load) stop() (acked map[string]client.TopicPartition, failed int, errs map[string]int) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	acked = make(map[string]client.TopicPartition, len(l.mu.acked))
	for v, tp := range l.mu.acked {
		acked[v] = tp
	}
	return acked, l.mu.failed, l.mu.errs
}

// finish stops the load and checks that no record failed and that every
// acknowledged one is read back exactly once.
func (l *load) finish(t *testing.T, cl *client.Client, partitions int32) {
	t.Helper()
	acked, failed, errs := l.stop()
	t.Logf("producer: %d acknowledged, %d failed %v", len(acked), failed, errs)
	if failed > 0 {
		t.Errorf("%d records failed: %v", failed, errs)
	}
	verifyExactlyOnce(t, cl, l.topic, partitions, acked)
}

// verifyExactlyOnce reads every partition of topic from the start to its
// high watermark and checks that each acknowledged value is there exactly
// once, in the partition it was acknowledged in, and that no value appears
// twice.
func verifyExactlyOnce(t *testing.T, cl *client.Client, topic string, partitions int32, acked map[string]client.TopicPartition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cons, err := cl.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ends := map[int32]int64{}
	assign := map[client.TopicPartition]client.Offset{}
	for p := int32(0); p < partitions; p++ {
		tp := client.TopicPartition{Topic: topic, Partition: p}
		resp, err := cl.ListOffsets(ctx, tp, -1)
		if err != nil {
			t.Fatalf("list offsets %v: %v", tp, err)
		}
		ends[p] = resp.GetOffset()
		if ends[p] > 0 {
			assign[tp] = client.OffsetEarliest()
		}
	}
	if err := cons.Assign(ctx, assign); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for {
		done := true
		for p, end := range ends {
			if pos, _ := cons.Position(client.TopicPartition{Topic: topic, Partition: p}); pos < end {
				done = false
			}
		}
		if done {
			break
		}
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		for _, r := range recs {
			if r.Offset >= ends[r.Partition] {
				continue
			}
			seen[string(r.Value)]++
			if tp, ok := acked[string(r.Value)]; ok && tp.Partition != r.Partition {
				t.Errorf("value %s acknowledged in partition %d, read in %d", r.Value, tp.Partition, r.Partition)
			}
		}
	}
	lost, dups := 0, 0
	for v := range acked {
		if seen[v] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged record %s was not read", v)
			}
		}
	}
	for v, n := range seen {
		if n > 1 {
			dups++
			if dups <= 5 {
				t.Errorf("record %s read %d times", v, n)
			}
		}
	}
	t.Logf("%s: %d acknowledged, %d read, %d lost, %d duplicated", topic, len(acked), len(seen), lost, dups)
	if lost > 0 || dups > 0 {
		t.Fatalf("%d acknowledged records lost, %d duplicated", lost, dups)
	}
}
