package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
	"weak"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/recordbatch"
)

// The in-process metad's proposals wait on a Raft future from a goroutine
// of their own; a future that Raft's FSM had queued when it shut down is
// never answered, so that goroutine outlives the server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newTestClient(t testing.TB, cl *realCluster) *Client {
	t.Helper()
	c, err := New(testCtx(t), Config{Brokers: cl.addrs()[:1], RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newTestProducer(t testing.TB, c *Client, cfg ProducerConfig) *Producer {
	t.Helper()
	p, err := c.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// deliveries records callbacks.
type deliveries struct {
	mu   sync.Mutex
	recs []Record
	errs []error
	wg   sync.WaitGroup
}

func (d *deliveries) cb() func(*Record, error) {
	d.wg.Add(1)
	return func(r *Record, err error) {
		d.mu.Lock()
		d.recs = append(d.recs, *r)
		d.errs = append(d.errs, err)
		d.mu.Unlock()
		d.wg.Done()
	}
}

func TestProduceOrderAndKeyedPartitioning(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.createTopic("t", 3)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{MaxInFlight: 5, Linger: time.Millisecond, BatchBytes: 2048})
	ctx := testCtx(t)
	var d deliveries
	const n = 600
	for i := range n {
		key := fmt.Appendf(nil, "key-%d", i%10)
		if err := p.Produce(ctx, NewRecord("t", key, fmt.Appendf(nil, "%d", i)), d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d.wg.Wait()
	last := map[int32]int64{0: -1, 1: -1, 2: -1}
	lastValue := map[string]int{}
	for i, r := range d.recs {
		if d.errs[i] != nil {
			t.Fatalf("record %d: %v", i, d.errs[i])
		}
		if want := recordbatch.PartitionForKey(r.Key, 3); r.Partition != want {
			t.Fatalf("key %s on partition %d, want %d", r.Key, r.Partition, want)
		}
		if r.Offset != last[r.Partition]+1 {
			t.Fatalf("partition %d: callback offset %d after %d", r.Partition, r.Offset, last[r.Partition])
		}
		last[r.Partition] = r.Offset
		var v int
		fmt.Sscan(string(r.Value), &v)
		if prev, ok := lastValue[string(r.Key)]; ok && v <= prev {
			t.Fatalf("key %s: value %d delivered after %d", r.Key, v, prev)
		}
		lastValue[string(r.Key)] = v
	}
	// The logs hold each key's values in produce order, no duplicates.
	total := 0
	for part := range int32(3) {
		seen := map[string]int{}
		for _, r := range cl.records(TopicPartition{"t", part}) {
			var v int
			fmt.Sscan(string(r.Value), &v)
			if prev, ok := seen[string(r.Key)]; ok && v <= prev {
				t.Fatalf("log of %d: key %s value %d after %d", part, r.Key, v, prev)
			}
			seen[string(r.Key)] = v
			total++
		}
	}
	if total != n {
		t.Fatalf("logs hold %d records, want %d", total, n)
	}
	if s := p.Stats(); s.RecordsDelivered != n || s.BufferedRecords != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestProduceSyncExplicitPartitionAndTimestamp(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 4)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{})
	ctx := testCtx(t)
	for i := range 3 {
		r, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 2, Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition != 2 || r.Offset != int64(i) || r.Timestamp.IsZero() {
			t.Fatalf("got %+v", r)
		}
	}
	if _, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 4}); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("partition 4: %v", err)
	}
	if _, err := p.ProduceSync(ctx, NewRecord("nope", nil, nil)); !errors.Is(err, ErrUnknownTopic) || rpcerror.Reason(err) != rpcerror.ReasonNotFound {
		t.Fatalf("unknown topic: %v (reason %q)", err, rpcerror.Reason(err))
	}
	// Keyless records stick to one partition per batch. The linger is long
	// and always waited so that the five are one linger window however
	// slow the machine (at the default 5 ms, a busy CI machine let the
	// window close between two of them and the partition moved, as it
	// should; without LingerAlways the first goes at once, and the others,
	// sent when its answer comes, move the partition if it comes before the
	// last of them is produced).
	sticky := newTestProducer(t, c, ProducerConfig{Linger: 2 * time.Second, LingerAlways: true})
	var d deliveries
	for range 5 {
		if err := sticky.Produce(ctx, NewRecord("t", nil, []byte("x")), d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	d.wg.Wait()
	for _, r := range d.recs {
		if r.Partition != d.recs[0].Partition {
			t.Fatalf("sticky partitioner spread one linger window over partitions %d and %d", d.recs[0].Partition, r.Partition)
		}
	}
}

func TestLingerBatchesIntoOneRequest(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 2)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{Linger: 100 * time.Millisecond, LingerAlways: true})
	ctx := testCtx(t)
	var d deliveries
	// Linger: 20 records of one partition go as one batch in one request.
	for range 20 {
		if err := p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("v")}, d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	d.wg.Wait()
	cl.mu.Lock()
	if cl.produceCalls != 1 || cl.batchCount(TopicPartition{"t", 0}) != 1 {
		t.Fatalf("%d produce calls, %d batches; want 1 and 1", cl.produceCalls, cl.batchCount(TopicPartition{"t", 0}))
	}
	cl.mu.Unlock()
	// Batches of several partitions on one broker share a request.
	p2 := newTestProducer(t, c, ProducerConfig{Linger: time.Hour, LingerAlways: true})
	for i := range 20 {
		if err := p2.Produce(ctx, &Record{Topic: "t", Partition: int32(i % 2), Value: []byte("v")}, d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	if err := p2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.produceCalls != 2 || cl.batchesPerCall[1] != 2 {
		t.Fatalf("%d produce calls with %v batches, want a second call with 2 batches", cl.produceCalls, cl.batchesPerCall)
	}
}

// produceUntilBlocked produces records of value to topic t until Produce
// blocks for 100ms, and returns how many it accepted; more than most fail
// the test.
func produceUntilBlocked(t *testing.T, p *Producer, d *deliveries, value []byte, most int) int {
	t.Helper()
	for produced := 0; ; produced++ {
		if produced > most {
			t.Fatal("Produce never blocked")
		}
		ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
		cb := d.cb()
		err := p.Produce(ctx, NewRecord("t", nil, value), cb)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			d.wg.Done()
			return produced
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBackPressure(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	release := cl.holdProduces()
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{MaxBufferedBytes: 1000, BatchBytes: 500, Linger: -1})
	ctx := testCtx(t)
	var d deliveries
	value := make([]byte, 200)
	produced := produceUntilBlocked(t, p, &d, value, 10)
	if s := p.Stats(); s.BufferedBytes > 1000 {
		t.Fatalf("buffered %d bytes, limit 1000", s.BufferedBytes)
	}
	release()
	if _, err := p.ProduceSync(ctx, NewRecord("t", nil, value)); err != nil {
		t.Fatal(err)
	}
	d.wg.Wait()
	if got := len(cl.records(TopicPartition{"t", 0})); got != produced+1 {
		t.Fatalf("log has %d records, want %d", got, produced+1)
	}
}

func TestNotOwnerRedirect(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.createTopic("t", 1)
	tp := TopicPartition{"t", 0}
	// Metadata points at broker 0, but broker 1 serves the partition.
	if err := cl.MovePartition("t", 0, 1); err != nil {
		t.Fatal(err)
	}
	cl.metaOwnr[tp] = 0
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{})
	ctx := testCtx(t)
	for i := range 3 {
		r, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != int64(i) {
			t.Fatalf("offset %d, want %d", r.Offset, i)
		}
	}
	cl.mu.Lock()
	redirects := cl.notOwnerAnswers
	cl.mu.Unlock()
	if redirects != 1 {
		t.Fatalf("%d NOT_OWNER answers, want 1 (the redirect is cached)", redirects)
	}
	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	cl.mu.Lock()
	delete(cl.metaOwnr, tp)
	cl.mu.Unlock()
	if err := cl.MovePartition("t", 0, 0); err != nil { // moves back; metadata is right again
		t.Fatal(err)
	}
	if err := cons.Assign(ctx, map[TopicPartition]Offset{tp: OffsetEarliest()}); err != nil {
		t.Fatal(err)
	}
	recs := pollN(t, cons, 3)
	if recs[2].Offset != 2 {
		t.Fatalf("last offset %d", recs[2].Offset)
	}
}

func TestLostResponseNotDuplicated(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{RetryBackoff: time.Millisecond})
	ctx := testCtx(t)
	cl.mu.Lock()
	cl.dropProduce = 3
	cl.mu.Unlock()
	r, err := p.ProduceSync(ctx, NewRecord("t", []byte("k"), []byte("v")))
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset != 0 {
		t.Fatalf("offset %d", r.Offset)
	}
	if got := len(cl.records(TopicPartition{"t", 0})); got != 1 {
		t.Fatalf("log has %d records after retries, want 1", got)
	}
	if s := p.Stats(); s.Retries != 3 {
		t.Fatalf("retries %d, want 3", s.Retries)
	}
}

// A partition that lost the producer's state (it expired on the broker)
// answers UNKNOWN_PRODUCER_ID to a batch past sequence 0: with nothing
// before it on its way, the producer takes a new producer id and sends it
// again, instead of failing it. Nothing is lost or written twice.
func TestUnknownProducerGetsNewID(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	tp := TopicPartition{"t", 0}
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{RetryBackoff: time.Millisecond})
	ctx := testCtx(t)
	for i := range 3 {
		if _, err := p.ProduceSync(ctx, NewRecord("t", nil, fmt.Appendf(nil, "%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	cl.mu.Lock()
	cl.forgetProducers = true // the broker's state expired
	pids := cl.nextPID
	cl.mu.Unlock()
	r, err := p.ProduceSync(ctx, NewRecord("t", nil, []byte("3")))
	if err != nil {
		t.Fatalf("after the broker forgot the producer: %v", err)
	}
	if r.Offset != 3 {
		t.Fatalf("offset %d, want 3", r.Offset)
	}
	if got := len(cl.records(tp)); got != 4 {
		t.Fatalf("log has %d records, want 4", got)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.nextPID != pids+1 {
		t.Fatalf("%d producer ids taken after the state was lost, want 1", cl.nextPID-pids)
	}
}

// A batch whose delivery timeout passes after it was sent breaks the
// partition's sequence numbers, and the partition takes a new producer id
// for what is pending. A pending batch that was sent too may be stored
// (its answer was lost): it must settle under its own numbers first,
// where the broker recognises it, not be sent again as new under the new
// id and stored twice.
func TestResetDoesNotRenumberBatchesThatMayBeStored(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	tp := TopicPartition{"t", 0}
	c := newTestClient(t, cl)
	const timeout = 6 * time.Second
	p := newTestProducer(t, c, ProducerConfig{Linger: -1, RetryBackoff: 20 * time.Millisecond, DeliveryTimeout: timeout})
	ctx := testCtx(t)
	cl.mu.Lock()
	cl.dropProduce = math.MaxInt // stored, every answer lost
	cl.mu.Unlock()
	sent := func(n int) func() bool {
		return func() bool {
			cl.mu.Lock()
			defer cl.mu.Unlock()
			return cl.produceCalls >= n
		}
	}
	expired := make(chan error, 1)
	if err := p.Produce(ctx, NewRecord("t", nil, []byte("first")), func(_ *Record, err error) {
		cl.mu.Lock()
		cl.dropProduce = 0 // the answers come back once the first expired
		cl.mu.Unlock()
		expired <- err
	}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "the first batch sent", sent(1))
	// The second batch's deadline comes half a timeout after the first's.
	time.Sleep(timeout / 2)
	second := make(chan *Record, 1)
	var secondErr error
	cl.mu.Lock()
	calls := cl.produceCalls
	cl.mu.Unlock()
	if err := p.Produce(ctx, NewRecord("t", nil, []byte("second")), func(r *Record, err error) {
		secondErr = err
		second <- r
	}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "the second batch sent", sent(calls+1))
	if err := testwait.Recv(t, 30*time.Second, "the first batch's expiry", expired); !errors.Is(err, ErrDeliveryTimeout) || !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("first batch: %v, want a delivery timeout with an unknown outcome", err)
	}
	r := testwait.Recv(t, 30*time.Second, "the second batch's answer", second)
	if secondErr != nil {
		t.Fatalf("second batch: %v", secondErr)
	}
	if _, err := p.ProduceSync(ctx, NewRecord("t", nil, []byte("third"))); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	var values []string
	for _, rec := range cl.records(tp) {
		values = append(values, string(rec.Value))
	}
	if want := []string{"first", "second", "third"}; !slices.Equal(values, want) || r.Offset != 1 {
		t.Fatalf("log %q, second acknowledged at %d; want %q, 1", values, r.Offset, want)
	}
}

func TestLostResponseWithoutIdempotenceDuplicates(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{DisableIdempotence: true})
	cl.mu.Lock()
	cl.dropProduce = 1
	cl.mu.Unlock()
	// Unavailable is retried (usually "could not connect"), so this one
	// duplicates: that is what turning idempotence off means.
	if _, err := p.ProduceSync(testCtx(t), NewRecord("t", nil, []byte("v"))); err != nil {
		t.Fatal(err)
	}
	if got := len(cl.records(TopicPartition{"t", 0})); got != 2 {
		t.Fatalf("log has %d records, want 2 (a duplicate)", got)
	}
}

func TestOwnerMovesWhileInFlight(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.createTopic("t", 2)
	tp := TopicPartition{"t", 0}
	cl.moveAfter, cl.moveTP, cl.moveTo = 3, tp, 1
	cl.dropProduce = 2
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{Linger: -1, RetryBackoff: time.Millisecond})
	ctx := testCtx(t)
	var d deliveries
	const n = 300
	for i := range n {
		if err := p.Produce(ctx, &Record{Topic: "t", Partition: int32(i % 2), Value: fmt.Appendf(nil, "%d", i)}, d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d.wg.Wait()
	for i, err := range d.errs {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	for part := range int32(2) {
		recs := cl.records(TopicPartition{"t", part})
		if len(recs) != n/2 {
			t.Fatalf("partition %d has %d records, want %d", part, len(recs), n/2)
		}
		for i, r := range recs {
			if want := fmt.Sprint(2*i + int(part)); string(r.Value) != want {
				t.Fatalf("partition %d offset %d: value %s, want %s", part, i, r.Value, want)
			}
		}
	}
}

func TestCloseFlushes(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p, err := c.NewProducer(ProducerConfig{Linger: time.Hour, LingerAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	var d deliveries
	for range 5 {
		if err := p.Produce(testCtx(t), NewRecord("t", nil, []byte("v")), d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if len(d.recs) != 5 {
		t.Fatalf("%d callbacks before Close returned", len(d.recs))
	}
	for _, err := range d.errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := len(cl.records(TopicPartition{"t", 0})); got != 5 {
		t.Fatalf("log has %d records", got)
	}
	if err := p.Produce(testCtx(t), NewRecord("t", nil, nil), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("produce after close: %v", err)
	}
}

func TestAcksNone(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{Acks: AcksNone})
	r, err := p.ProduceSync(testCtx(t), NewRecord("t", nil, []byte("v")))
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset != -1 {
		t.Fatalf("offset %d, want -1", r.Offset)
	}
	cl.mu.Lock()
	pids := cl.nextPID
	cl.mu.Unlock()
	if pids != 1000 {
		t.Fatal("AcksNone producer asked for a producer id")
	}
}

func TestRecordTooLarge(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{BatchBytes: 1000})
	if err := p.Produce(testCtx(t), NewRecord("t", nil, make([]byte, 1000)), nil); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]Acks{"none": AcksNone, "0": AcksNone, "one": AcksOne, "1": AcksOne, "quorum": AcksQuorum, "all": AcksAll, "-1": AcksAll} {
		if got, err := ParseAcks(s); err != nil || got != want {
			t.Errorf("ParseAcks(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseAcks("two"); err == nil {
		t.Error("ParseAcks(two) succeeded")
	}
	for s, want := range map[string]Compression{"none": CompressionNone, "gzip": CompressionGzip, "snappy": CompressionSnappy, "lz4": CompressionLZ4, "zstd": CompressionZstd} {
		if got, err := ParseCompression(s); err != nil || got != want {
			t.Errorf("ParseCompression(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseCompression("brotli"); err == nil {
		t.Error("ParseCompression(brotli) succeeded")
	}
}

func TestRejectedBatchResequences(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	cl.rejectValue = "bad"
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{Linger: -1})
	ctx := testCtx(t)
	var d deliveries
	values := []string{"a", "b", "bad", "c", "d"}
	for _, v := range values {
		if err := p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte(v)}, d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	d.wg.Wait()
	for i, v := range values {
		if got := string(d.recs[i].Value); got != v {
			t.Fatalf("callback %d for %q, want %q", i, got, v)
		}
		if (v == "bad") != errors.Is(d.errs[i], ErrRecordTooLarge) {
			t.Fatalf("%s: %v", v, d.errs[i])
		}
	}
	// The records after the rejected one are stored once, in order.
	var got []string
	for _, r := range cl.records(TopicPartition{"t", 0}) {
		got = append(got, string(r.Value))
	}
	if fmt.Sprint(got) != "[a b c d]" {
		t.Fatalf("log %v", got)
	}
}

func TestProducerFenced(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	cl.fenced = true
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{})
	ctx := testCtx(t)
	if _, err := p.ProduceSync(ctx, NewRecord("t", nil, nil)); !errors.Is(err, ErrProducerFenced) || rpcerror.Reason(err) != rpcerror.ReasonProducerFenced {
		t.Fatalf("got %v", err)
	}
	if err := p.Produce(ctx, NewRecord("t", nil, nil), nil); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("after fencing: %v", err)
	}
}

func TestDeliveryTimeout(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	release := cl.holdProduces()
	c, err := New(testCtx(t), Config{Brokers: cl.addrs(), RequestTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := newTestProducer(t, c, ProducerConfig{DeliveryTimeout: 300 * time.Millisecond, Linger: -1})
	ctx := testCtx(t)
	var d deliveries
	for range 3 {
		if err := p.Produce(ctx, NewRecord("t", nil, []byte("v")), d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	d.wg.Wait()
	for _, err := range d.errs {
		if !errors.Is(err, ErrDeliveryTimeout) {
			t.Fatalf("got %v", err)
		}
	}
	release()
}

// A partition with nothing in flight sends its first record at once; the
// records that follow batch up behind it and go when it is answered, not
// after the linger.
func TestIdlePartitionSendsAtOnce(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{Linger: time.Hour})
	ctx := testCtx(t)
	if _, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("warm")}); err != nil {
		t.Fatal(err) // an hour's linger would time the test out
	}
	release := cl.holdProduces()
	cl.mu.Lock()
	calls := cl.produceCalls
	cl.mu.Unlock()
	var d deliveries
	for range 10 {
		if err := p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("v")}, d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	// The first is in flight, held; the nine others wait behind it.
	testwait.UntilNil(t, 10*time.Second, "the first produce held", func() error {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		if cl.heldProduces == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	release()
	d.wg.Wait()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if got := cl.produceCalls - calls; got != 2 {
		t.Fatalf("%d produce calls for 10 records behind one in flight, want 2 (one alone, nine batched)", got)
	}
	if n := cl.batchCount(TopicPartition{"t", 0}); n != 3 {
		t.Fatalf("%d batches, want 3", n)
	}
}

// Keyless records are one stream per topic: when the sticky partition
// moves on while the topic has batches in flight, the first record of the
// next partition waits for the rest instead of going alone (it did, and
// under load half of all batches held one record), and the records left
// lingering go as soon as the whole topic is idle.
func TestKeylessMoveDoesNotSendOneRecordAlone(t *testing.T) {
	cl := startRealCluster(t, 1)
	const parts = 2 // the sticky partition moves to the other one
	cl.createTopic("t", parts)
	c := newTestClient(t, cl)
	// Four records of 100 bytes fill a batch (batch and record overheads
	// included); the linger is an hour, so no batch goes by its timer.
	const perBatch = 4
	p := newTestProducer(t, c, ProducerConfig{Linger: time.Hour, BatchBytes: batchOverheadBytes + perBatch*(100+recordOverheadBytes)})
	ctx := testCtx(t)
	value := bytes.Repeat([]byte("v"), 100)
	if _, err := p.ProduceSync(ctx, NewRecord("t", nil, value)); err != nil {
		t.Fatal(err) // the topic is idle: the first record goes at once
	}
	release := cl.holdProduces()
	// One record alone (the topic is idle), a full batch behind it in the
	// same partition, then two records in the other partition, which has
	// nothing in flight but its topic has.
	const n = 1 + perBatch + 2
	var d deliveries
	for range n {
		if err := p.Produce(ctx, NewRecord("t", nil, value), d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	release()
	testwait.UntilNil(t, 10*time.Second, "the last two records delivered once the topic went idle", func() error {
		if got := p.Stats().RecordsDelivered; got != n+1 {
			return fmt.Errorf("%d of %d delivered", got, n+1)
		}
		return nil
	})
	var sizes []int
	for part := range int32(parts) {
		for _, b := range cl.batches(TopicPartition{"t", part}) {
			h, err := recordbatch.ParseHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, int(h.LastOffsetDelta)+1)
		}
	}
	slices.Sort(sizes)
	if want := []int{1, 1, 2, perBatch}; !slices.Equal(sizes, want) {
		t.Fatalf("batches of %v records, want %v (only the first two alone, each when its topic was idle)", sizes, want)
	}
}

// An idempotent producer's sequence wraps from MaxInt32 to 0 as the
// broker's does: it overflowed to a negative number, which means "no
// sequence", and every later batch went out without a producer id (no
// duplicate detection, retries renumbered) for the next 2^31 records.
func TestSequenceWrapsAsTheBrokers(t *testing.T) {
	c := &Client{cfg: Config{MetadataMaxAge: time.Hour}}
	c.mu.topics = map[string]*topicInfo{"t": {owners: []string{"127.0.0.1:1"}, fetched: time.Now()}}
	p := &Producer{c: c, cfg: ProducerConfig{MaxInFlight: 5, DeliveryTimeout: time.Hour}.withDefaults(), idempotent: true}
	p.mu.pid = 7
	tp := TopicPartition{"t", 0}
	ps := &partState{tp: tp, havePID: true, pid: 7, nextSeq: math.MaxInt32 - 1}
	p.mu.parts = map[TopicPartition]*partState{tp: ps}
	p.mu.refreshing = map[string]bool{}
	batchOf3 := func() *batch {
		return &batch{tp: tp, recs: []pendingRecord{{rec: &Record{Value: []byte("a")}}, {rec: &Record{Value: []byte("b")}}, {rec: &Record{Value: []byte("c")}}},
			deadline: time.Now().Add(time.Hour), seq: -1, base: -1}
	}
	b1, b2 := batchOf3(), batchOf3()
	ps.batches = []*batch{b1, b2}
	p.collect(time.Now())
	p.collect(time.Now())
	enc, err := p.encode(b2)
	if err != nil {
		t.Fatal(err)
	}
	h, err := recordbatch.ParseHeader(enc)
	if err != nil || b1.seq != math.MaxInt32-1 || b2.seq != 1 || h.ProducerID != 7 || h.BaseSequence != 1 {
		t.Fatalf("sequences %d, %d; the second batch sent with producer id %d, base sequence %d (%v); want %d, 1, 7, 1",
			b1.seq, b2.seq, h.ProducerID, h.BaseSequence, err, math.MaxInt32-1)
	}
}

// A record's bytes count against MaxBufferedBytes until its callback has
// run: with a slow callback, Produce blocks instead of piling up finished
// records without bound (they were released at acknowledgement).
func TestSlowCallbacksHoldBufferSpace(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{MaxBufferedBytes: 10_000, BatchBytes: 1000, Linger: -1})
	gate := make(chan struct{})
	var ran sync.WaitGroup
	cb := func(*Record, error) { <-gate; ran.Done() }
	value := make([]byte, 200)
	accepted := 0
	for ; accepted < 500; accepted++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ran.Add(1)
		err := p.Produce(ctx, &Record{Topic: "t", Value: value}, cb)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			ran.Done()
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	ran.Wait()
	if max := 10_000 / recordBytes(&Record{Value: value}); accepted == 500 || accepted > max+1 {
		t.Fatalf("%d records of %d bytes accepted with MaxBufferedBytes 10000 and their callbacks blocked (at most %d fit)",
			accepted, recordBytes(&Record{Value: value}), max+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.ProduceSync(ctx, &Record{Topic: "t", Value: value}); err != nil {
		t.Fatalf("produce once the callbacks ran: %v", err)
	}
}

// Records and the encodings of their batches count against
// MaxBufferedBytes together: while a batch is unanswered the producer
// holds its records (for their callbacks) and its encoding (for retries),
// two copies of the same bytes. Counting only the records let the
// producer hold twice its budget; counting encodings once made (when a
// batch is first sent) still let the records fill the budget, and their
// encodings go past it. Each record reserves room for its encoding when
// Produce takes it.
func TestEncodingsCountAgainstBuffer(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	release := cl.holdProduces()
	c := newTestClient(t, cl)
	const limit = 20_000
	p := newTestProducer(t, c, ProducerConfig{MaxBufferedBytes: limit, BatchBytes: 2000, Linger: -1})
	t.Cleanup(release) // before the producer's Close, which waits for its batches
	var d deliveries
	value := make([]byte, 400)
	rec := NewRecord("t", nil, value)
	size := int64(recordBytes(rec))
	need := int64(recordMemory(rec, int(size))) + size // what Produce reserves for a record
	// Five batches of one record each in flight, held by the broker:
	// encoded, and kept encoded for retries.
	for i := range DefaultMaxInFlight {
		if err := p.Produce(testCtx(t), NewRecord("t", nil, value), d.cb()); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the batch sent", func() bool {
			cl.mu.Lock()
			defer cl.mu.Unlock()
			return cl.heldProduces >= i+1
		})
	}
	produced := DefaultMaxInFlight + produceUntilBlocked(t, p, &d, value, limit/int(size))
	// Produce refused the next record because the records and the
	// encodings together filled the budget, and not before; every
	// record's encoding counts, made or not.
	s := p.Stats()
	if total := s.BufferedBytes + s.EncodedBytes; total > limit || total+need <= limit {
		t.Fatalf("blocked with %d bytes of records and %d of encodings buffered (limit %d, records of %d bytes taking %d)",
			s.BufferedBytes, s.EncodedBytes, limit, size, need)
	}
	if s.EncodedBytes < int64(produced)*size {
		t.Fatalf("%d bytes of encodings counted for %d records of %d bytes", s.EncodedBytes, produced, size)
	}
	release()
	d.wg.Wait()
	testwait.Until(t, 10*time.Second, "every batch answered", func() bool {
		s := p.Stats()
		return s.BufferedBytes == 0 && s.EncodedBytes == 0
	})
}

// Acknowledged batches are not kept reachable by the producer once their
// callbacks ran: the partition's queue dropped them from its front but its
// array still pointed at them, which doubled the client's memory under
// load (the bench suite's client peak RSS went from 8.5x to 4.6x its
// buffers with the fix).
func TestFinishedBatchesAreReleased(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{BatchBytes: 300, Linger: -1})
	const n = 8
	var ran sync.WaitGroup
	var sent []weak.Pointer[Record]
	for range n {
		rec := &Record{Topic: "t", Partition: 0, Value: make([]byte, 150)} // a batch each
		sent = append(sent, weak.Make(rec))
		ran.Add(1)
		if err := p.Produce(testCtx(t), rec, func(_ *Record, err error) {
			if err != nil {
				t.Error(err)
			}
			ran.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	ran.Wait()
	testwait.Until(t, 5*time.Second, "every acknowledged record unreachable", func() bool {
		runtime.GC()
		for _, w := range sent {
			if w.Value() != nil {
				return false
			}
		}
		return true
	})
}

// recordingPool is a bufferPool that remembers what it handed out and
// what came back.
type recordingPool struct {
	mu       sync.Mutex
	got, put []*byte // the buffers' first bytes
}

func (r *recordingPool) Get(n int) *[]byte {
	b := make([]byte, n, n+64)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, unsafe.SliceData(b))
	return &b
}

func (r *recordingPool) Put(b *[]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.put = append(r.put, unsafe.SliceData(*b))
}

func (r *recordingPool) counts() (got, put int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got), len(r.put)
}

// An encoded batch's memory goes back to the pool once its only send
// was answered with success, and not when it was sent more than once:
// an earlier send that failed may still be queued in gRPC's transport,
// reading it.
func TestEncodingsReusedAfterSuccess(t *testing.T) {
	pool := &recordingPool{}
	saved := encodings
	encodings = pool
	t.Cleanup(func() { encodings = saved })
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{RetryBackoff: time.Millisecond, Linger: -1})
	ctx := testCtx(t)
	// The first batch's first answer is lost after the broker stored
	// it: the producer sends it again (a duplicate, answered so).
	cl.mu.Lock()
	cl.dropProduce = 1
	cl.mu.Unlock()
	const n = 5
	for i := range n {
		if _, err := p.ProduceSync(ctx, NewRecord("t", nil, []byte(fmt.Sprint("v", i)))); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Retries != 1 {
		t.Fatalf("retries %d, want 1", s.Retries)
	}
	got, put := pool.counts()
	if got != n {
		t.Fatalf("%d encodings, want %d (one per batch: a retry resends the same bytes)", got, n)
	}
	if put != n-1 {
		t.Fatalf("%d encodings given back, want %d: all but the retried batch's", put, n-1)
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if slices.Contains(pool.put, pool.got[0]) {
		t.Fatal("the retried batch's encoding was given back")
	}
	for _, b := range pool.got[1:] {
		if !slices.Contains(pool.put, b) {
			t.Fatal("a batch answered at its first send kept its encoding")
		}
	}
	if got := len(cl.records(TopicPartition{"t", 0})); got != n {
		t.Fatalf("log has %d records, want %d", got, n)
	}
}
