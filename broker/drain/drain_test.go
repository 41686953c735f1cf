package drain_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/broker/drain"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// describe returns each broker's assigned partitions and drained flag as
// DescribeCluster reports them.
func describe(t *testing.T, c *brokertest.Cluster) (map[string]int32, map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Client(0).DescribeCluster(ctx, &brokerpb.DescribeClusterRequest{})
	if err != nil {
		t.Fatal(err)
	}
	assigned, drained := map[string]int32{}, map[string]bool{}
	for _, b := range resp.Brokers {
		assigned[b.Info.Id] = b.PartitionsAssigned
		drained[b.Info.Id] = b.Drained
	}
	return assigned, drained
}

// TestDrainAndUndrain: a drained broker ends with no partition (D2) and
// stays registered (D3), a new topic puts nothing on it (D1), and after
// Withdraw balancing gives it partitions again.
func TestDrainAndUndrain(t *testing.T) {
	c := brokertest.Start(t, brokertest.Options{Brokers: 3})
	c.CreateTopic("orders", 12, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := drain.Request(ctx, c.Meta, "k9", time.Now()); !errors.Is(err, drain.ErrUnknownBroker) {
		t.Fatalf("drain of an unknown broker: %v, want ErrUnknownBroker", err)
	}
	if _, err := drain.Progress(ctx, c.Meta, "k2"); !errors.Is(err, drain.ErrNotDrained) {
		t.Fatalf("progress of an undrained broker: %v, want ErrNotDrained", err)
	}
	req, err := drain.Request(ctx, c.Meta, "k2", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	again, err := drain.Request(ctx, c.Meta, "k2", time.Now().Add(time.Hour))
	if err != nil || again.RequestedAtMs != req.RequestedAtMs {
		t.Fatalf("a second request: %v, %v; want the first one back", again, err)
	}
	testwait.UntilNil(t, 30*time.Second, "k2 drained", func() error {
		s, err := drain.Progress(ctx, c.Meta, "k2")
		if err != nil {
			return err
		}
		if !s.Drained() || !s.Registered {
			return fmt.Errorf("%s (registered %v)", s, s.Registered)
		}
		return nil
	})
	if _, drained := describe(t, c); !drained["k2"] || drained["k1"] {
		t.Fatalf("DescribeCluster drained flags %v, want k2 only", drained)
	}
	c.CreateTopic("fresh", 6, nil)
	if assigned, _ := describe(t, c); assigned["k2"] != 0 {
		t.Fatalf("drained k2 got %d partitions: %v", assigned["k2"], assigned)
	}
	// Draining k3 too would leave only k1: allowed. Draining k1 then
	// would leave none: refused.
	if _, err := drain.Request(ctx, c.Meta, "k3", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := drain.Request(ctx, c.Meta, "k1", time.Now()); !errors.Is(err, drain.ErrNoOtherBroker) {
		t.Fatalf("draining the last active broker: %v, want ErrNoOtherBroker", err)
	}
	for _, id := range []string{"k2", "k3"} {
		if ok, err := drain.Withdraw(ctx, c.Meta, id); !ok || err != nil {
			t.Fatalf("withdraw %s: %v %v", id, ok, err)
		}
	}
	if ok, err := drain.Withdraw(ctx, c.Meta, "k2"); ok || err != nil {
		t.Fatalf("withdraw twice: %v %v, want false", ok, err)
	}
	// 12 + 6 + 1 (__consumer_offsets) partitions: 6 or 7 each.
	testwait.UntilNil(t, 60*time.Second, "balanced again", func() error {
		assigned, _ := describe(t, c)
		for _, id := range []string{"k1", "k2", "k3"} {
			if assigned[id] < 6 {
				return fmt.Errorf("assigned %v", assigned)
			}
		}
		return nil
	})
}
