package client

import (
	"context"

	"github.com/strata-log/strata/proto/brokerpb"
)

// Metadata returns the cluster's brokers and the owners of topics' partitions
// (every topic when none is named) and refreshes the client's cache.
func (c *Client) Metadata(ctx context.Context, topics ...string) (*brokerpb.MetadataResponse, error) {
	return c.refresh(ctx, topics...)
}

// CreateTopic creates a topic; configs override the defaults.
func (c *Client) CreateTopic(ctx context.Context, name string, partitions int32, configs map[string]string) (*brokerpb.TopicDescription, error) {
	var resp *brokerpb.CreateTopicResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: name, Partitions: partitions, Configs: configs})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.invalidate(name)
	return resp.Topic, nil
}

// DeleteTopic deletes a topic.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) error {
		_, err := b.DeleteTopic(ctx, &brokerpb.DeleteTopicRequest{Name: name})
		return err
	})
	c.mu.Lock()
	delete(c.mu.topics, name)
	c.mu.Unlock()
	return err
}

// ListTopics lists topics, internal ones too when includeInternal. It
// is one broker's view of metad, which follows changes within moments: a
// topic just created through another broker may be missing from it
// briefly (Metadata and DescribeTopic of a named topic ask metad when
// the broker does not know it yet).
func (c *Client) ListTopics(ctx context.Context, includeInternal bool) ([]*brokerpb.TopicSummary, error) {
	var resp *brokerpb.ListTopicsResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.ListTopics(ctx, &brokerpb.ListTopicsRequest{IncludeInternal: includeInternal})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Topics, nil
}

// DescribeTopic returns a topic's configs and partitions (owners, offsets,
// ledgers).
func (c *Client) DescribeTopic(ctx context.Context, name string) (*brokerpb.TopicDescription, error) {
	var resp *brokerpb.DescribeTopicResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.DescribeTopic(ctx, &brokerpb.DescribeTopicRequest{Name: name})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Topic, nil
}

// AlterTopicConfigs sets and deletes (resets to default) topic configs.
func (c *Client) AlterTopicConfigs(ctx context.Context, name string, set map[string]string, del []string) (*brokerpb.TopicDescription, error) {
	var resp *brokerpb.AlterTopicConfigsResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.AlterTopicConfigs(ctx, &brokerpb.AlterTopicConfigsRequest{Name: name, Set: set, Delete: del})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Topic, nil
}

// AddPartitions raises a topic's partition count to total.
func (c *Client) AddPartitions(ctx context.Context, name string, total int32) (*brokerpb.TopicDescription, error) {
	var resp *brokerpb.AddPartitionsResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.AddPartitions(ctx, &brokerpb.AddPartitionsRequest{Name: name, Total: total})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.invalidate(name)
	return resp.Topic, nil
}

// DescribeCluster returns the brokers and partition counts.
func (c *Client) DescribeCluster(ctx context.Context) (*brokerpb.DescribeClusterResponse, error) {
	var resp *brokerpb.DescribeClusterResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.DescribeCluster(ctx, &brokerpb.DescribeClusterRequest{})
		return err
	})
	return resp, err
}

// ListOffsets asks tp's owner for the offset of timestampMs: -2 earliest,
// -1 latest (high watermark), otherwise the first record at or after the
// timestamp in ms.
func (c *Client) ListOffsets(ctx context.Context, tp TopicPartition, timestampMs int64) (*brokerpb.ListOffsetsResponse, error) {
	var resp *brokerpb.ListOffsetsResponse
	err := c.onOwner(ctx, tp, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.ListOffsets(ctx, &brokerpb.ListOffsetsRequest{Topic: tp.Topic, Partition: tp.Partition, Timestamp: timestampMs})
		return err
	})
	return resp, err
}
