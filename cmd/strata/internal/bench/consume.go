package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/strata-log/strata/client"
)

// consumePollTimeout bounds one poll of Consume, so that it notices the
// end of the topic and of o.Duration.
const consumePollTimeout = time.Second

// Consume reads the topic from the earliest offset until every partition
// reached the end it had when the benchmark started, or o.Duration
// passed.
func Consume(ctx context.Context, progress io.Writer, c *client.Client, o *Options, run *Run) error {
	ends, err := partitionEnds(ctx, c, o.Topic, run.Partitions)
	if err != nil {
		return err
	}
	cons, err := assignAll(ctx, c, ends, func(int64) client.Offset { return client.OffsetEarliest() })
	if err != nil {
		return err
	}
	defer cons.Close()
	run.Start = time.Now()
	runCtx, cancel := context.WithDeadline(ctx, run.Start.Add(o.Duration))
	defer cancel()
	defer run.startProgress(runCtx, progress)()
	for !reachedEnds(ends, cons.Position) {
		pollCtx, cancelPoll := context.WithTimeout(runCtx, consumePollTimeout)
		recs, err := cons.Poll(pollCtx)
		cancelPoll()
		if runCtx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			run.fail(err)
			return nil
		}
		var b int64
		for _, r := range recs {
			b += int64(len(r.Key) + len(r.Value))
		}
		run.count(int64(len(recs)), b)
	}
	return nil
}

// reachedEnds reports whether every partition's position reached its
// end; an empty partition (end 0) without a position has.
func reachedEnds(ends map[client.TopicPartition]int64, position func(client.TopicPartition) (int64, bool)) bool {
	for tp, end := range ends {
		if pos, ok := position(tp); !ok || pos < end {
			if !ok && end == 0 {
				continue
			}
			return false
		}
	}
	return true
}

// assignAll returns a consumer assigned every partition of ends, each at
// at(its end).
func assignAll(ctx context.Context, c *client.Client, ends map[client.TopicPartition]int64,
	at func(end int64) client.Offset) (*client.Consumer, error) {
	cons, err := c.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		return nil, err
	}
	assign := map[client.TopicPartition]client.Offset{}
	for tp, end := range ends {
		assign[tp] = at(end)
	}
	if err := cons.Assign(ctx, assign); err != nil {
		cons.Close()
		return nil, err
	}
	return cons, nil
}

// partitionEnds returns each partition's current high watermark.
func partitionEnds(ctx context.Context, c *client.Client, topic string, n int32) (map[client.TopicPartition]int64, error) {
	ends := map[client.TopicPartition]int64{}
	for p := range n {
		tp := client.TopicPartition{Topic: topic, Partition: p}
		resp, err := c.ListOffsets(ctx, tp, -1)
		if err != nil {
			return nil, fmt.Errorf("end of %s: %w", tp, err)
		}
		ends[tp] = resp.GetOffset()
	}
	return ends, nil
}
