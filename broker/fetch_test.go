package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// A long poll on 1,000 empty partitions reads each once, then, when one
// of them gets a batch, reads that one again and no other: before, every
// high-watermark change re-read every partition of the request, so a
// consumer of many quiet partitions cost the broker a read of each per
// append to any of them.
func TestLongPollRereadsOnlyThePartitionThatChanged(t *testing.T) {
	const partitions = 1000
	cl := brokertest.Start(t, brokertest.Options{})
	cl.CreateTopic("wide", partitions, nil)
	b := cl.Brokers[0].Broker
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &brokerpb.FetchRequest{MaxWaitMs: 30_000, MinBytes: 1}
	for p := range int32(partitions) {
		req.Partitions = append(req.Partitions, &brokerpb.FetchPartition{Topic: "wide", Partition: p})
	}
	before := broker.FetchPartitionReads(b)
	type answer struct {
		resp *brokerpb.FetchResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := cl.Client(0).Fetch(ctx, req)
		done <- answer{resp, err}
	}()
	testwait.Until(t, 30*time.Second, "the long poll's first round", func() bool {
		return broker.FetchPartitionReads(b)-before >= partitions
	})
	produceBatch(t, cl, "wide", 7, "the one that changed")
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		t.Fatal("the long poll did not return after the append")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if reads := broker.FetchPartitionReads(b) - before; reads != partitions+1 {
		t.Fatalf("%v partition reads, want %d: the first round, then partition 7 alone", reads, partitions+1)
	}
	for _, r := range a.resp.Partitions {
		changed := r.Partition == 7
		if want := map[bool]int64{true: 1}[changed]; r.Error != nil || changed != (len(r.AllRecords()) > 0) || r.HighWatermark != want {
			t.Fatalf("partition %d: %d bytes, high watermark %d (want %d), error %v", r.Partition, len(r.AllRecords()), r.HighWatermark, want, r.Error)
		}
	}
}

// produceBatch appends one record to a partition.
func produceBatch(t *testing.T, cl *brokertest.Cluster, topic string, partition int32, value string) {
	t.Helper()
	batch, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		Records: []recordbatch.Record{{TimestampMs: time.Now().UnixMilli(), Value: []byte(value)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Client(0).Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: topic, Partition: partition, Records: batch}}})
	if err != nil || resp.Partitions[0].Error != nil {
		t.Fatalf("produce to %s/%d: %v %v", topic, partition, err, resp.GetPartitions())
	}
}
