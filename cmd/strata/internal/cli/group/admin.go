package group

import (
	"context"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Admin is the part of *client.Client the group commands use.
type Admin interface {
	Metadata(ctx context.Context, topics ...string) (*brokerpb.MetadataResponse, error)
	DescribeGroup(ctx context.Context, group string) (*brokerpb.DescribeGroupResponse, error)
	ListOffsets(ctx context.Context, tp client.TopicPartition, timestampMs int64) (*brokerpb.ListOffsetsResponse, error)
	FetchOffsets(ctx context.Context, group string, tps ...client.TopicPartition) ([]*brokerpb.CommittedOffset, error)
	CommitGroupOffsets(ctx context.Context, group string, offsets map[client.TopicPartition]int64) error
}
