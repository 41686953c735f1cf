package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A producer and a consumer with more partitions on one broker than one
// request may name (maxRequestPartitions) send several requests, and every
// record arrives. Before, every produce to a 10,000-partition topic failed
// with INVALID_ARGUMENT ("produce request names 4715 partitions, at most
// 1000"), and a consumer of it was refused the same way.
func TestMorePartitionsThanOneRequestNames(t *testing.T) {
	const n = 2*maxRequestPartitions + 500
	cl := startRealCluster(t, 1)
	cl.createTopic("wide", n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := New(ctx, Config{Brokers: cl.addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(ProducerConfig{Linger: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	var firstErr atomic.Value
	for i := range n {
		r := &Record{Topic: "wide", Partition: int32(i), Value: fmt.Appendf(nil, "v%d", i)}
		if err := p.Produce(ctx, r, func(_ *Record, err error) {
			if err != nil && failed.Add(1) == 1 {
				firstErr.Store(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d records failed, the first: %v", f, n, firstErr.Load())
	}

	cons, err := c.NewConsumer(ConsumerConfig{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	parts := map[TopicPartition]Offset{}
	for i := range n {
		parts[TopicPartition{"wide", int32(i)}] = OffsetEarliest()
	}
	if err := cons.Assign(ctx, parts); err != nil {
		t.Fatal(err)
	}
	got := map[int32]string{}
	for len(got) < n {
		recs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll with %d of %d records read: %v", len(got), n, err)
		}
		for _, r := range recs {
			if prev, dup := got[r.Partition]; dup {
				t.Fatalf("partition %d read twice: %q, %q", r.Partition, prev, r.Value)
			}
			got[r.Partition] = string(r.Value)
		}
	}
	for i := range int32(n) {
		if want := fmt.Sprintf("v%d", i); got[i] != want {
			t.Fatalf("partition %d holds %q, want %q", i, got[i], want)
		}
	}
}
