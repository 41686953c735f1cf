package containertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The image's brokers serve the Kafka protocol: franz-go, bootstrapped
// from both brokers' Kafka listeners, creates a topic, produces to it and
// reads every record back; deleting a topic that does not exist is
// answered UNKNOWN_TOPIC_OR_PARTITION. (The Kafka dashboard panels'
// metrics then have samples for testMonitoringNamesExistingMetrics.)
func testKafkaProtocol(t *testing.T, c *cluster) {
	const topic, records = "over-kafka", 100
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.nodes["broker-1"].kafkaAddr(), c.nodes["broker-2"].kafkaAddr()),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, topic); err != nil {
		t.Fatalf("create topic over Kafka: %v", err)
	}
	var batch []*kgo.Record
	for i := range records {
		batch = append(batch, &kgo.Record{Topic: topic, Key: []byte{byte(i)}, Value: []byte("over the Kafka protocol")})
	}
	if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
		t.Fatalf("produce over Kafka: %v", err)
	}
	seen := map[byte]bool{}
	for len(seen) < records {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records back: %v", len(seen), records, err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[r.Key[0]] = true })
	}
	if _, err := adm.DeleteTopic(ctx, "no-such-topic"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("delete a missing topic over Kafka: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}
