package containertest

import (
	"context"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
)

// startLoad creates topic with partitions and runs the fault-under-load
// skeleton on it: about rate keyed records a second from an idempotent
// producer with acks=quorum and a delivery timeout long enough to retry
// through every fault these tests inject.
func startLoad(t *testing.T, cl *client.Client, topic string, partitions int32, rate int) *loadtest.Load {
	t.Helper()
	if _, err := cl.CreateTopic(context.Background(), topic, partitions, nil); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	return loadtest.Start(t, cl, loadtest.Config{Topic: topic, Keys: 64, Rate: rate,
		Producer: client.ProducerConfig{Acks: client.AcksQuorum, DeliveryTimeout: 90 * time.Second}})
}
