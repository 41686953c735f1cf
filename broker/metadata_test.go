package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// A topic is known to every broker as soon as CreateTopic returns, even to
// one whose metadata mirror has not caught up yet: a client that creates a
// topic through one broker and then asks another for its metadata (or
// describes it) must not be told it does not exist (a produce right after
// create failed with "unknown topic" in the container fault tests).
func TestTopicKnownEverywhereOnceCreated(t *testing.T) {
	cl := brokertest.Start(t, brokertest.Options{Brokers: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	create, other := cl.Client(0), cl.Client(1)
	for i := range 30 {
		name := fmt.Sprintf("t%d", i)
		if _, err := create.CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: name, Partitions: 2}); err != nil {
			t.Fatal(err)
		}
		md, err := other.Metadata(ctx, &brokerpb.MetadataRequest{Topics: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) != 2 {
			t.Fatalf("metadata of %s from the other broker right after create: %v", name, md.Topics)
		}
		if _, err := other.DescribeTopic(ctx, &brokerpb.DescribeTopicRequest{Name: name}); err != nil {
			t.Fatalf("describe %s from the other broker right after create: %v", name, err)
		}
	}
	md, err := other.Metadata(ctx, &brokerpb.MetadataRequest{Topics: []string{"never-created"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error == nil {
		t.Fatalf("metadata of a topic that does not exist: %v", md.Topics)
	}
}

// An assignment made again after it was deleted starts at epoch 1, below
// the owner epoch the partition's log recorded after a move; the owner's
// Open then refused it for ever and the partition was never served again.
// The owner now raises the assignment's epoch above the log's, and serves.
func TestAssignmentEpochBelowTheLogsIsRaised(t *testing.T) {
	cl := brokertest.Start(t, brokertest.Options{Brokers: 2})
	cl.CreateTopic("t", 1, nil)
	id, _ := cl.Owner("t", 0)
	to := 0
	if id == cl.Brokers[0].ID {
		to = 1
	}
	if err := cl.MovePartition("t", 0, to); err != nil { // epoch 2
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cl.Meta.Delete(ctx, "/strata/assignments/t/0"); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 30*time.Second, "t/0 served again at an epoch above 2", func() error {
		var a brokerpb.Assignment
		var o brokerpb.Ownership
		kv, err := cl.Meta.Get(ctx, "/strata/assignments/t/0")
		if err == nil {
			err = proto.Unmarshal(kv.Value, &a)
		}
		if err != nil {
			return err
		}
		if kv, err = cl.Meta.Get(ctx, "/strata/owners/t/0"); err == nil {
			err = proto.Unmarshal(kv.Value, &o)
		}
		if err != nil {
			return err
		}
		if o.Epoch != a.Epoch || a.Epoch <= 2 {
			return fmt.Errorf("assignment %s@%d, owner %s@%d", a.BrokerId, a.Epoch, o.BrokerId, o.Epoch)
		}
		return nil
	})
}
