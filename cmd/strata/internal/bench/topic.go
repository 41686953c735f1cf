package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli/stream"
	"github.com/strata-log/strata/internal/rpcerror"
)

// Partitions returns the partition count of o.Topic for mode: consume
// reads an existing topic; the others create it with o.Partitions when
// missing and wait up to wait for its partitions to have owners.
func Partitions(ctx context.Context, c *client.Client, o *Options, mode string, wait time.Duration) (int32, error) {
	if mode == ModeConsume {
		return stream.PartitionCount(ctx, c, o.Topic)
	}
	return EnsureTopic(ctx, c, o.Topic, o.Partitions, wait)
}

// EnsureTopic returns the topic's partition count, creating it with
// partitions when it does not exist and waiting for owners.
func EnsureTopic(ctx context.Context, c *client.Client, topic string, partitions int32, wait time.Duration) (int32, error) {
	n, err := stream.PartitionCount(ctx, c, topic)
	if err == nil {
		return n, nil
	}
	desc, cerr := c.CreateTopic(ctx, topic, partitions, nil)
	if cerr != nil && rpcerror.Reason(cerr) != rpcerror.ReasonTopicExists {
		return 0, fmt.Errorf("create topic %s: %w (looking it up: %v)", topic, cerr, err)
	}
	stream.WaitOwned(ctx, c, topic, wait)
	if cerr == nil {
		return desc.GetPartitionCount(), nil
	}
	return stream.PartitionCount(ctx, c, topic)
}
