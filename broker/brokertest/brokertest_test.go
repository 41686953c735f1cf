package brokertest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Every goroutine a cluster starts ends at cleanup (BT2).
// The in-process metad's proposals wait on a Raft future from a goroutine
// of their own; a future that Raft's FSM had queued when it shut down is
// never answered, so that goroutine outlives the server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
}

// TestClusterProduceConsumeAndFailover: records produced through the real
// broker read back, and when the owner stops its partitions move to the
// other broker, which serves them with the same records.
func TestClusterProduceConsumeAndFailover(t *testing.T) {
	cl := brokertest.Start(t, brokertest.Options{Brokers: 2})
	cl.CreateTopic("t", 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		rec := client.NewRecord("t", nil, []byte("v"))
		rec.Partition = int32(i)
		if _, err := p.ProduceSync(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	owner, _ := cl.Owner("t", 0)
	stopped := 0
	if owner == cl.Brokers[1].ID {
		stopped = 1
	}
	cl.Brokers[stopped].Stop()
	other := cl.Brokers[1-stopped]
	testwait.Until(t, 30*time.Second, "partition 0 moves to "+other.ID, func() bool {
		id, _ := cl.Owner("t", 0)
		return id == other.ID
	})
	cons, err := c.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{{Topic: "t", Partition: 0}: client.OffsetEarliest()}); err != nil {
		t.Fatal(err)
	}
	recs, err := cons.Poll(ctx)
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "v" {
		t.Fatalf("poll after failover: %v %v", recs, err)
	}
}

// TestMovePartitionAndInterceptor: MovePartition hands a partition to the
// named broker (the real hand-over), and the interceptor sees the calls of
// the broker it wraps.
func TestMovePartitionAndInterceptor(t *testing.T) {
	var metadataCalls [2]atomic.Int64
	cl := brokertest.Start(t, brokertest.Options{Brokers: 2, Interceptor: func(i int) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if _, ok := req.(*brokerpb.MetadataRequest); ok {
				metadataCalls[i].Add(1)
			}
			return h(ctx, req)
		}
	}})
	cl.CreateTopic("t", 1, nil)
	from, _ := cl.Owner("t", 0)
	to := 0
	if from == cl.Brokers[0].ID {
		to = 1
	}
	if err := cl.MovePartition("t", 0, to); err != nil {
		t.Fatal(err)
	}
	if id, addr := cl.Owner("t", 0); id != cl.Brokers[to].ID || addr != cl.Brokers[to].Addr {
		t.Fatalf("owner %s at %s after the move to %s", id, addr, cl.Brokers[to].ID)
	}
	if metadataCalls[0].Load() == 0 {
		t.Fatal("the interceptor of broker 0 saw no Metadata call")
	}
}
