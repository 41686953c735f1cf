package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/brokertest"
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
