package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHostileInternalTopicConfig: cleanup.policy=delete with
// retention.ms=0 on __consumer_offsets would delete every group's
// committed offsets, and so would DeleteRecords up to its high watermark.
// Nobody can change an internal topic's settings but how its segments
// roll and how soon it is compacted: not through the CLI (gRPC), not over
// Kafka (IncrementalAlterConfigs and AlterConfigs); nor delete its
// records; and the topic's configs stay as they were.
func TestHostileInternalTopicConfig(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	env := []string{"STRATA_BROKER=" + strings.Join(c.brokerAddrs(), ",")}
	_, errOut, code := strata(t, env, "topic", "alter", "__consumer_offsets", "-c", "cleanup.policy=delete", "-c", "retention.ms=0")
	if code == 0 || !strings.Contains(errOut, "internal") {
		t.Fatalf("strata topic alter __consumer_offsets: exit %d, %q", code, errOut)
	}
	// How its segments roll and how soon it is compacted may change.
	if _, errOut, code := strata(t, env, "topic", "alter", "__consumer_offsets", "-c", "segment.bytes=1048576", "-c", "min.cleanable.dirty.ratio=0.2"); code != 0 {
		t.Fatalf("strata topic alter __consumer_offsets segment.bytes: exit %d, %q", code, errOut)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(c.brokers[0].KafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	adm := kadm.NewClient(kc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	del, zero := "delete", "0"
	inc, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &del}, {Name: "retention.ms", Value: &zero}}, "__consumer_offsets")
	if err != nil || len(inc) != 1 || inc[0].Err == nil {
		t.Fatalf("IncrementalAlterConfigs on __consumer_offsets: %v %+v", err, inc)
	}
	whole, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &zero}}, "__consumer_offsets")
	if err != nil || len(whole) != 1 || whole[0].Err == nil {
		t.Fatalf("AlterConfigs on __consumer_offsets: %v %+v", err, whole)
	}
	var all kadm.Offsets
	all.Add(kadm.Offset{Topic: "__consumer_offsets", Partition: 0, At: -1})
	deleted, err := adm.DeleteRecords(ctx, all)
	if err != nil {
		t.Fatalf("DeleteRecords on __consumer_offsets: %v", err)
	}
	if r, ok := deleted.Lookup("__consumer_offsets", 0); !ok || !errors.Is(r.Err, kerr.InvalidTopicException) {
		t.Fatalf("DeleteRecords on __consumer_offsets: %+v, want INVALID_TOPIC_EXCEPTION", r)
	}
	desc, err := c.client(t).DescribeTopic(ctx, "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range desc.Configs {
		if (e.Name == "cleanup.policy" && e.Value != "compact") || (e.Name == "retention.ms" && e.Value == "0") ||
			(e.Name == "segment.bytes" && e.Value != "1048576") {
			t.Fatalf("__consumer_offsets after the attempts: %s=%s", e.Name, e.Value)
		}
	}
}
