package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHostileInternalTopicConfig: cleanup.policy=delete with
// retention.ms=0 on __consumer_offsets would delete every group's
// committed offsets. Nobody can change an internal topic's settings:
// not through the CLI (gRPC), not over Kafka (IncrementalAlterConfigs and
// AlterConfigs), and the topic's configs stay as they were.
func TestHostileInternalTopicConfig(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	env := []string{"STRATA_BROKER=" + strings.Join(c.brokerAddrs(), ",")}
	_, errOut, code := strata(t, env, "topic", "alter", "__consumer_offsets", "-c", "cleanup.policy=delete", "-c", "retention.ms=0")
	if code == 0 || !strings.Contains(errOut, "internal") {
		t.Fatalf("strata topic alter __consumer_offsets: exit %d, %q", code, errOut)
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
	desc, err := c.client(t).DescribeTopic(ctx, "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range desc.Configs {
		if (e.Name == "cleanup.policy" && e.Value != "compact") || (e.Name == "retention.ms" && e.Value == "0") {
			t.Fatalf("__consumer_offsets after the attempts: %s=%s", e.Name, e.Value)
		}
	}
}
