package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// pollN polls until n records arrived.
func pollN(t *testing.T, c *Consumer, n int) []*Record {
	t.Helper()
	ctx := testCtx(t)
	var out []*Record
	for len(out) < n {
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d records: %v", len(out), err)
		}
		out = append(out, recs...)
	}
	if len(out) != n {
		t.Fatalf("got %d records, want %d", len(out), n)
	}
	return out
}

func TestCompressionRoundTrip(t *testing.T) {
	cl := startRealCluster(t, 1)
	c := newTestClient(t, cl)
	ctx := testCtx(t)
	for _, codec := range []Compression{CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			topic := "t-" + codec.String()
			cl.createTopic(topic, 1)
			p := newTestProducer(t, c, ProducerConfig{Compression: codec})
			var d deliveries
			for i := range 50 {
				r := NewRecord(topic, fmt.Appendf(nil, "k%d", i), bytes.Repeat(fmt.Appendf(nil, "value %d ", i), 20))
				r.Headers = []Header{{Key: "h", Value: []byte("x")}}
				if err := p.Produce(ctx, r, d.cb()); err != nil {
					t.Fatal(err)
				}
			}
			d.wg.Wait()
			cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			if err := cons.Assign(ctx, map[TopicPartition]Offset{{topic, 0}: OffsetEarliest()}); err != nil {
				t.Fatal(err)
			}
			for i, r := range pollN(t, cons, 50) {
				want := bytes.Repeat(fmt.Appendf(nil, "value %d ", i), 20)
				if r.Offset != int64(i) || !bytes.Equal(r.Value, want) || string(r.Key) != fmt.Sprint("k", i) ||
					len(r.Headers) != 1 || string(r.Headers[0].Value) != "x" {
					t.Fatalf("record %d: %+v", i, r)
				}
			}
		})
	}
}

func TestConsumerOffsets(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	tp := TopicPartition{"t", 0}
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{Linger: time.Hour, LingerAlways: true})
	ctx := testCtx(t)
	t0 := time.UnixMilli(1_700_000_000_000)
	// Two batches (0-4, 5-9), so seeking inside one skips records.
	for i := range 10 {
		r := &Record{Topic: "t", Partition: 0, Value: fmt.Appendf(nil, "%d", i), Timestamp: t0.Add(time.Duration(i) * time.Second)}
		if err := p.Produce(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
		if i == 4 || i == 9 {
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()

	for _, tc := range []struct {
		off   Offset
		first int64
	}{
		{OffsetEarliest(), 0},
		{OffsetAt(5), 5},
		{OffsetAt(2), 2},
		{OffsetAt(10), 10},
		{OffsetFromEnd(3), 7},
		{OffsetFromEnd(100), 0},
		{OffsetAtTime(t0.Add(4 * time.Second)), 4},
		{OffsetAtTime(t0.Add(3500 * time.Millisecond)), 4},
	} {
		if err := cons.Seek(ctx, tp, tc.off); err != nil {
			t.Fatal(err)
		}
		if pos, ok := cons.Position(tp); !ok || pos != tc.first {
			t.Fatalf("%s: position %d, %t; want %d", tc.off, pos, ok, tc.first)
		}
		if tc.first == 10 {
			continue
		}
		recs := pollN(t, cons, int(10-tc.first))
		if recs[0].Offset != tc.first || string(recs[0].Value) != fmt.Sprint(tc.first) {
			t.Fatalf("%s: first record %d %q", tc.off, recs[0].Offset, recs[0].Value)
		}
		if pos, _ := cons.Position(tp); pos != 10 {
			t.Fatalf("%s: position after poll %d", tc.off, pos)
		}
		if hw, ok := cons.HighWatermark(tp); !ok || hw != 10 {
			t.Fatalf("high watermark %d, %t", hw, ok)
		}
	}

	// Latest: only what is produced afterwards, via a long poll.
	if err := cons.Seek(ctx, tp, OffsetLatest()); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("late")}, nil)
		_ = p.Flush(ctx)
	}()
	recs := pollN(t, cons, 1)
	if recs[0].Offset != 10 || string(recs[0].Value) != "late" {
		t.Fatalf("latest: %d %q", recs[0].Offset, recs[0].Value)
	}
}

func TestConsumerOutOfRange(t *testing.T) {
	cl := startRealCluster(t, 1)
	cl.createTopic("t", 1)
	tp := TopicPartition{"t", 0}
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{})
	ctx := testCtx(t)
	if _, err := p.ProduceSync(ctx, NewRecord("t", nil, []byte("v"))); err != nil {
		t.Fatal(err)
	}
	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, map[TopicPartition]Offset{tp: OffsetAt(100)}); err != nil {
		t.Fatal(err)
	}
	_, err = cons.Poll(ctx)
	var oor *OffsetOutOfRangeError
	if !errors.Is(err, ErrOffsetOutOfRange) || !errors.As(err, &oor) {
		t.Fatalf("poll: %v", err)
	}
	if oor.Offset != 100 || oor.LogStartOffset != 0 || oor.HighWatermark != 1 || oor.TopicPartition != tp {
		t.Fatalf("error %+v", oor)
	}
	// Not reset silently: a Seek recovers.
	if err := cons.Seek(ctx, tp, OffsetEarliest()); err != nil {
		t.Fatal(err)
	}
	if recs := pollN(t, cons, 1); string(recs[0].Value) != "v" {
		t.Fatalf("got %q", recs[0].Value)
	}
}

func TestConsumerManyPartitionsTwoBrokers(t *testing.T) {
	cl := startRealCluster(t, 2)
	cl.createTopic("t", 4)
	c := newTestClient(t, cl)
	p := newTestProducer(t, c, ProducerConfig{})
	ctx := testCtx(t)
	var d deliveries
	for i := range 200 {
		if err := p.Produce(ctx, &Record{Topic: "t", Partition: int32(i % 4), Value: fmt.Appendf(nil, "%d", i)}, d.cb()); err != nil {
			t.Fatal(err)
		}
	}
	d.wg.Wait()
	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 50 * time.Millisecond, PartitionMaxBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	parts := map[TopicPartition]Offset{}
	for i := range int32(4) {
		parts[TopicPartition{"t", i}] = OffsetEarliest()
	}
	if err := cons.Assign(ctx, parts); err != nil {
		t.Fatal(err)
	}
	next := map[int32]int64{}
	for _, r := range pollN(t, cons, 200) {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	cons.Unassign(TopicPartition{"t", 0})
	if _, ok := cons.Position(TopicPartition{"t", 0}); ok {
		t.Fatal("position of an unassigned partition")
	}
}

func TestAdmin(t *testing.T) {
	cl := startRealCluster(t, 2)
	c := newTestClient(t, cl)
	ctx := testCtx(t)
	if _, err := c.CreateTopic(ctx, "a", 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic(ctx, "a", 3, nil); err == nil {
		t.Fatal("created twice")
	}
	// A broker lists topics from its mirror of metad, which follows a
	// create made through the other broker within moments (as Kafka's
	// metadata does): the listing is waited for, not expected at once.
	testwait.UntilNil(t, 10*time.Second, "the new topic listed", func() error {
		topics, err := c.ListTopics(ctx, false)
		if err != nil || len(topics) != 1 || topics[0].Partitions != 3 {
			return fmt.Errorf("list: %v %v", topics, err)
		}
		return nil
	})
	md, err := c.Metadata(ctx, "a")
	if err != nil || len(md.Topics[0].Partitions) != 3 || len(md.Brokers) != 2 {
		t.Fatalf("metadata %v %v", md, err)
	}
	off, err := c.ListOffsets(ctx, TopicPartition{"a", 1}, -1)
	if err != nil || off.Offset != 0 {
		t.Fatalf("list offsets %v %v", off, err)
	}
}

// A metadata refresh held by a caller without a deadline, while no broker
// answers, neither blocks other callers past their own deadlines nor
// holds on for longer than RequestTimeout (it held a mutex for ever, and
// every Close waiting for a background refresh hung behind it).
func TestRefreshHolderDoesNotBlockOthers(t *testing.T) {
	cl := startRealCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := New(ctx, Config{Brokers: cl.addrs()[:1], RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl.down[0].Store(true)
	holder := make(chan error, 1)
	go func() { _, err := c.partitionCount(context.Background(), "other"); holder <- err }()
	testwait.Until(t, 10*time.Second, "a refresh holds the slot", func() bool { return len(c.refreshSem) == 1 })
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	waiter := make(chan error, 1)
	go func() { _, err := c.partitionCount(short, "t"); waiter <- err }()
	for what, ch := range map[string]chan error{"a caller with a deadline behind the holder": waiter, "the holder, bounded by RequestTimeout": holder} {
		select {
		case err := <-ch:
			if err == nil {
				t.Fatalf("%s found metadata with no broker answering", what)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: still blocked after 15s", what)
		}
	}
}
