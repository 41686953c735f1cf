package loadtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
)

// Ack is one acknowledged record: value "Key:Seq", the Seq-th record of Key.
type Ack struct {
	Key       string
	Seq       int
	Partition int32
	Offset    int64
}

// Value is the record's value as written.
func (a Ack) Value() string { return a.Key + ":" + strconv.Itoa(a.Seq) }

// Config says what a Load writes.
type Config struct {
	Topic string
	// Keys: records cycle over keys k0..k(Keys-1) (default 1), each key's
	// records numbered from 0, so per-key order can be checked.
	Keys int
	// Rate in records a second; 0 writes as fast as the producer accepts
	// records, paced by a 1 ms pause every 64 so the load stays steady.
	Rate int
	// Producer configures the load's own producer.
	Producer client.ProducerConfig
}

// Result is what a stopped Load produced.
type Result struct {
	Acks   []Ack
	Failed int            // records whose callback reported an error
	Errs   map[string]int // those errors' messages, counted
	// MaxGap is the longest pause between two acknowledgements.
	MaxGap time.Duration
	// Stats are the producer's when it is a client.Producer.
	Stats client.ProducerStats
}

// Producer is what a Load writes with: Strata's client.Producer, or an
// adapter over another client (a Kafka one). Produce sends r (Partition
// -1: by key) and calls done once with r's partition and offset set, or
// an error; Close waits for every answer.
type Producer interface {
	Produce(ctx context.Context, r *client.Record, done func(*client.Record, error)) error
	Close(ctx context.Context) error
}

// Load is a running producer (Start).
type Load struct {
	cfg  Config
	p    Producer
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	acks    []Ack
	errs    map[string]int
	failed  int
	first   error
	lastAck time.Time
	maxGap  time.Duration
}

// Start runs a Load on a new producer of cl until Stop or Finish.
func Start(t testing.TB, cl *client.Client, cfg Config) *Load {
	t.Helper()
	p, err := cl.NewProducer(cfg.Producer)
	if err != nil {
		t.Fatal(err)
	}
	return StartWith(t, p, cfg)
}

// StartWith runs a Load on p (cfg.Producer unused) until Stop or Finish,
// which close p.
func StartWith(t testing.TB, p Producer, cfg Config) *Load {
	t.Helper()
	if cfg.Keys <= 0 {
		cfg.Keys = 1
	}
	l := &Load{cfg: cfg, p: p, stop: make(chan struct{}), done: make(chan struct{}), errs: map[string]int{}}
	go func() {
		defer close(l.done)
		l.run(t)
	}()
	return l
}

func (l *Load) run(t testing.TB) {
	seq := make([]int, l.cfg.Keys)
	start := time.Now()
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		k := i % l.cfg.Keys
		a := Ack{Key: "k" + strconv.Itoa(k), Seq: seq[k]}
		seq[k]++
		rec := &client.Record{Topic: l.cfg.Topic, Partition: -1, Key: []byte(a.Key), Value: []byte(a.Value())}
		if err := l.p.Produce(context.Background(), rec, func(r *client.Record, err error) { l.answered(a, r, err) }); err != nil {
			t.Errorf("produce: %v", err)
			return
		}
		switch {
		case l.cfg.Rate > 0:
			if ahead := time.Until(start.Add(time.Duration(i+1) * time.Second / time.Duration(l.cfg.Rate))); ahead > 0 {
				select {
				case <-l.stop:
					return
				case <-time.After(ahead):
				}
			}
		case i%64 == 0:
			time.Sleep(time.Millisecond)
		}
	}
}

func (l *Load) answered(a Ack, r *client.Record, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed++
		l.errs[err.Error()]++
		if l.first == nil {
			l.first = err
		}
		return
	}
	now := time.Now()
	if !l.lastAck.IsZero() && now.Sub(l.lastAck) > l.maxGap {
		l.maxGap = now.Sub(l.lastAck)
	}
	l.lastAck = now
	a.Partition, a.Offset = r.Partition, r.Offset
	l.acks = append(l.acks, a)
}

// Acks returns the acknowledgements so far.
func (l *Load) Acks() []Ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Ack(nil), l.acks...)
}

// Acked returns how many records are acknowledged so far.
func (l *Load) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// AwaitAcks waits up to 90 s until n records more than now are
// acknowledged: the load is running before a fault, or running again after
// one, which a fixed sleep only hopes for on a loaded machine. A failed
// record fails the test at once.
func (l *Load) AwaitAcks(t testing.TB, n int, what string) {
	t.Helper()
	want := l.Acked() + n
	testwait.UntilNil(t, 90*time.Second, fmt.Sprintf("%d more acknowledgements (%s)", n, what), func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.failed > 0 {
			t.Fatalf("%s: %d records failed; first: %v", what, l.failed, l.first)
		}
		if got := len(l.acks); got < want {
			return fmt.Errorf("%d of %d acknowledged", got, want)
		}
		return nil
	})
}

// Stop ends the load and closes its producer, which waits for every
// record's answer, and returns what it produced.
func (l *Load) Stop(t testing.TB) Result {
	t.Helper()
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := l.p.Close(ctx); err != nil {
		t.Errorf("producer close: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make(map[string]int, len(l.errs))
	for m, n := range l.errs {
		errs[m] = n
	}
	r := Result{Acks: append([]Ack(nil), l.acks...), Failed: l.failed, Errs: errs, MaxGap: l.maxGap}
	if sp, ok := l.p.(interface{ Stats() client.ProducerStats }); ok {
		r.Stats = sp.Stats()
	}
	return r
}

// Finish stops the load; a failed record fails the test.
func (l *Load) Finish(t testing.TB) Result {
	t.Helper()
	r := l.Stop(t)
	if r.Failed > 0 {
		t.Fatalf("%d records failed: %v", r.Failed, r.Errs)
	}
	return r
}

// ReadAll reads every partition of topic from the earliest offset to the
// high watermark at the time of the call.
func ReadAll(t testing.TB, cl *client.Client, topic string, partitions int32) map[int32][]*client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ends := map[int32]int64{}
	assign := map[client.TopicPartition]client.Offset{}
	for p := int32(0); p < partitions; p++ {
		tp := client.TopicPartition{Topic: topic, Partition: p}
		lo, err := cl.ListOffsets(ctx, tp, -1)
		if err != nil {
			t.Fatalf("list offsets %v: %v", tp, err)
		}
		ends[p] = lo.Offset
		if lo.Offset > 0 {
			assign[tp] = client.OffsetEarliest()
		}
	}
	out := map[int32][]*client.Record{}
	if len(assign) == 0 {
		return out
	}
	cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, assign); err != nil {
		t.Fatal(err)
	}
	for !Reached(ends, out, func(r *client.Record) int64 { return r.Offset }) {
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("consume %s: %v (have %v of ends %v)", topic, err, Counts(out), ends)
		}
		for _, r := range recs {
			if r.Offset < ends[r.Partition] {
				out[r.Partition] = append(out[r.Partition], r)
			}
		}
	}
	return out
}

// Reached reports whether out, records read per partition in offset
// order, holds the record just before each partition's end (ends: the
// high watermarks read up to; a partition ending at 0 needs none).
func Reached[R any](ends map[int32]int64, out map[int32][]R, offset func(R) int64) bool {
	for p, end := range ends {
		if n := len(out[p]); end > 0 && (n == 0 || offset(out[p][n-1]) < end-1) {
			return false
		}
	}
	return true
}

// Counts returns how many records each partition of a ReadAll holds.
func Counts(m map[int32][]*client.Record) map[int32]int {
	out := map[int32]int{}
	for p, rs := range m {
		out[p] = len(rs)
	}
	return out
}

// CheckExactlyOnce checks that every acknowledged record is in log exactly once, at
// its acknowledged partition and offset, no record appears twice, and each
// key's records are in sequence order.
func CheckExactlyOnce(t testing.TB, log map[int32][]*client.Record, acks []Ack) {
	t.Helper()
	type place struct {
		partition int32
		offset    int64
	}
	seen := map[string]place{} // "key:seq" -> where it is stored
	lastSeq := map[string]int{}
	for p, recs := range log {
		for i, r := range recs {
			if i > 0 && r.Offset <= recs[i-1].Offset {
				t.Fatalf("partition %d: offset %d after %d", p, r.Offset, recs[i-1].Offset)
			}
			v := string(r.Value)
			if prev, dup := seen[v]; dup {
				t.Fatalf("record %s stored twice: partition %d offset %d and partition %d offset %d", v, prev.partition, prev.offset, p, r.Offset)
			}
			seen[v] = place{p, r.Offset}
			key, s, _ := strings.Cut(v, ":")
			n, _ := strconv.Atoi(s)
			if last, ok := lastSeq[key]; ok && n <= last {
				t.Fatalf("key %s: seq %d after %d (per-key order broken) in partition %d", key, n, last, p)
			}
			lastSeq[key] = n
		}
	}
	for _, a := range acks {
		got, ok := seen[a.Value()]
		if !ok {
			t.Fatalf("acknowledged record %s (partition %d offset %d) is lost", a.Value(), a.Partition, a.Offset)
		}
		if got != (place{a.Partition, a.Offset}) {
			t.Fatalf("acknowledged record %s at partition %d offset %d is stored at partition %d offset %d",
				a.Value(), a.Partition, a.Offset, got.partition, got.offset)
		}
	}
}

// Verify reads topic back (ReadAll) and checks it against acks
// (CheckExactlyOnce).
func Verify(t testing.TB, cl *client.Client, topic string, partitions int32, acks []Ack) {
	t.Helper()
	log := ReadAll(t, cl, topic, partitions)
	CheckExactlyOnce(t, log, acks)
	t.Logf("%s: %d acknowledged records, each read back exactly once at its offset", topic, len(acks))
}
