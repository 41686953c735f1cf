package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/client"
)

// TestKafkaLoads runs the Kafka loads against real brokers' Kafka
// listeners: the e2e load consumes every record it had acknowledged and
// measures each of its latencies once per record; the max-rate load
// acknowledges records without an error; and the catch-up read from the
// earliest offset reads exactly what both wrote, to each partition's end,
// and stops there, long before its duration.
func TestKafkaLoads(t *testing.T) {
	c := brokertest.Start(t, brokertest.Options{Brokers: 2, Kafka: true})
	const topic, partitions = "kbench", 4
	c.CreateTopic(topic, partitions, nil)
	seeds := c.KafkaAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	o := validOptions()
	o.Topic, o.Partitions, o.Rate, o.Duration = topic, partitions, 2000, 500*time.Millisecond
	e2e := NewRun(ModeE2E, topic, partitions)
	if err := ExecuteKafka(ctx, io.Discard, seeds, &o, e2e); err != nil {
		t.Fatal(err)
	}
	s := Summarize(e2e, time.Since(e2e.Start))
	if s.Errors != 0 || s.Records < 900 || s.Records > 1000 {
		t.Fatalf("e2e at 2,000 records/s for 0.5 s: %d records, %d errors (%s)", s.Records, s.Errors, s.FirstError)
	}
	for _, l := range s.Latency {
		if l.Count != uint64(s.Records) || l.P50 <= 0 {
			t.Errorf("e2e %s: %d observations of %d records, p50 %v ms", l.Kind, l.Count, s.Records, l.P50)
		}
	}

	o.Rate, o.Duration = 0, 300*time.Millisecond
	produce := NewRun(ModeProduce, topic, partitions)
	if err := ExecuteKafka(ctx, io.Discard, seeds, &o, produce); err != nil {
		t.Fatal(err)
	}
	if err := produce.Err(); err != nil || produce.records.Load() == 0 {
		t.Fatalf("max-rate produce: %d records, %v", produce.records.Load(), err)
	}

	written := e2e.records.Load() + produce.records.Load()
	o.Duration = 30 * time.Second
	catchUp := NewRun(ModeConsume, topic, partitions)
	if err := ExecuteKafka(ctx, io.Discard, seeds, &o, catchUp); err != nil {
		t.Fatal(err)
	}
	if err := catchUp.Err(); err != nil || catchUp.records.Load() != written || catchUp.bytes.Load() != written*int64(o.RecordSize) {
		t.Fatalf("catch-up read %d records, %d bytes (%v); want the %d written, %d bytes",
			catchUp.records.Load(), catchUp.bytes.Load(), err, written, written*int64(o.RecordSize))
	}
	if took := time.Since(catchUp.Start); took > 20*time.Second {
		t.Fatalf("catch-up took %s: it did not stop at the ends", took)
	}
}

// The Kafka producer is the Strata client's load in Kafka's terms, and an
// acks Kafka cannot ask for is refused.
func TestKafkaProducerOpts(t *testing.T) {
	o := validOptions()
	cl := kafkaProducerOf(t, &o)
	for _, tc := range []struct {
		key  string
		want any
	}{
		{"ProducerLinger", time.Duration(0)},
		{"MaxBufferedBytes", int64(client.DefaultMaxBufferedBytes)},
		{"MaxBufferedRecords", int64(2 * client.DefaultMaxBufferedBytes / 1024)},
		{"DisableIdempotentWrite", false},
	} {
		if got := cl.OptValue(tc.key); got != tc.want {
			t.Errorf("%s = %v (%T), want %v", tc.key, got, got, tc.want)
		}
	}
	if batch := cl.OptValue("ProducerBatchMaxBytes"); batch != int32(client.DefaultBatchBytes) {
		t.Errorf("batch bound %v, want the Strata client's %d", cl.OptValue("ProducerBatchMaxBytes"), client.DefaultBatchBytes)
	}
	if p, want := fmt.Sprintf("%T", cl.OptValue("RecordPartitioner")), fmt.Sprintf("%T", kgo.StickyKeyPartitioner(nil)); p != want {
		t.Errorf("partitioner %s, want KIP-480 sticky (%s)", p, want)
	}
	if codecs, ok := cl.OptValue("ProducerBatchCompression").([]kgo.CompressionCodec); !ok || len(codecs) != 1 || codecs[0] != kgo.NoCompression() {
		t.Errorf("compression %v, want none only", cl.OptValue("ProducerBatchCompression"))
	}
	o.Acks = "all"
	if _, err := kafkaProducerOpts(&o); err == nil || !strings.Contains(err.Error(), "--acks all") {
		t.Fatalf("acks all: %v", err)
	}
	o.Acks = "one"
	if one := kafkaProducerOf(t, &o); one.OptValue("DisableIdempotentWrite") != true {
		t.Error("acks one: idempotent (kgo requires acks=all for it)")
	}
}

// kafkaProducerOf is a client with o's producer options (it connects to
// nothing until used), closed by the test's cleanup.
func kafkaProducerOf(t *testing.T, o *Options) *kgo.Client {
	t.Helper()
	opts, err := kafkaProducerOpts(o)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
