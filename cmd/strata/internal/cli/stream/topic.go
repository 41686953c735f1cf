package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// MetadataSource is the part of *client.Client the topic lookups need.
type MetadataSource interface {
	Metadata(ctx context.Context, topics ...string) (*brokerpb.MetadataResponse, error)
}

// PartitionCount asks the brokers how many partitions topic has. An
// unknown topic is client.ErrUnknownTopic.
func PartitionCount(ctx context.Context, c MetadataSource, topic string) (int32, error) {
	md, err := c.Metadata(ctx, topic)
	if err != nil {
		return 0, err
	}
	for _, t := range md.GetTopics() {
		if t.GetName() != topic {
			continue
		}
		if e := t.GetError(); e != nil {
			return 0, fmt.Errorf("topic %s: %s", topic, e.GetMessage())
		}
		if len(t.GetPartitions()) == 0 {
			return 0, fmt.Errorf("topic %s has no partitions", topic)
		}
		return int32(len(t.GetPartitions())), nil
	}
	return 0, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
}

// ownedPollInterval is how often WaitOwned asks again.
const ownedPollInterval = 100 * time.Millisecond

// WaitOwned polls the topic's metadata until every partition has an owner,
// for at most wait. It reports whether they all do.
func WaitOwned(ctx context.Context, c MetadataSource, topic string, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		if md, err := c.Metadata(ctx, topic); err == nil && AllOwned(md, topic) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(ownedPollInterval):
		}
	}
}

// AllOwned reports whether md lists topic with partitions that all have
// an owner.
func AllOwned(md *brokerpb.MetadataResponse, topic string) bool {
	for _, t := range md.GetTopics() {
		if t.GetName() != topic || t.GetError() != nil || len(t.GetPartitions()) == 0 {
			continue
		}
		for _, p := range t.GetPartitions() {
			if p.GetOwnerAddress() == "" {
				return false
			}
		}
		return true
	}
	return false
}

// ClientOffset is the client's starting offset for a parsed -o.
func ClientOffset(o cli.OffsetSpec) client.Offset {
	switch o.Kind {
	case cli.OffsetEarliest:
		return client.OffsetEarliest()
	case cli.OffsetAbsolute:
		return client.OffsetAt(o.N)
	case cli.OffsetFromEnd:
		return client.OffsetFromEnd(o.N)
	case cli.OffsetTimestamp:
		return client.OffsetAtTime(o.Time)
	}
	return client.OffsetLatest()
}
