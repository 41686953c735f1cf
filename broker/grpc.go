package broker

import (
	"context"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/proto/brokerpb"
)

// grpcService is the gRPC adapter (brokerpb.BrokerServer) over the
// service layer: it translates messages and errors (classify), nothing
// else.
type grpcService struct {
	brokerpb.UnimplementedBrokerServer
	s      *Service
	admin  *Admin
	groups *Groups
}

// GRPC returns the broker's gRPC service.
func (b *Broker) GRPC() brokerpb.BrokerServer {
	return &grpcService{s: b.Service(), admin: b.Admin(), groups: b.Groups()}
}

func (g *grpcService) Produce(ctx context.Context, req *brokerpb.ProduceRequest) (*brokerpb.ProduceResponse, error) {
	if _, ok := brokerpb.Acks_name[int32(req.Acks)]; !ok {
		return nil, rpcError(invalidf("acks %d: want ACKS_QUORUM (0), ACKS_NONE (1), ACKS_ONE (2) or ACKS_ALL (3)", req.Acks))
	}
	sreq := &ProduceRequest{Acks: partlog.Acks(req.Acks), Timeout: time.Duration(req.TimeoutMs) * time.Millisecond,
		Partitions: make([]ProducePartition, len(req.Partitions))}
	for i, pp := range req.Partitions {
		sreq.Partitions[i] = ProducePartition{Topic: pp.Topic, Partition: pp.Partition, Records: pp.Records}
	}
	results, err := g.s.Produce(ctx, sreq)
	if err != nil {
		return nil, rpcError(err)
	}
	out := make([]*brokerpb.ProducePartitionResult, len(results))
	for i, r := range results {
		pp := req.Partitions[i]
		out[i] = &brokerpb.ProducePartitionResult{Topic: pp.Topic, Partition: pp.Partition, BaseOffset: r.BaseOffset,
			LogStartOffset: r.LogStartOffset, Duplicate: r.Duplicate, Error: partitionError(r.Err)}
	}
	return &brokerpb.ProduceResponse{Partitions: out}, nil
}

func (g *grpcService) Fetch(ctx context.Context, req *brokerpb.FetchRequest) (*brokerpb.FetchResponse, error) {
	sreq := &FetchRequest{MaxWait: time.Duration(req.MaxWaitMs) * time.Millisecond, MinBytes: int(req.MinBytes),
		MaxBytes: int(req.MaxBytes), Partitions: make([]FetchPartition, len(req.Partitions))}
	for i, fp := range req.Partitions {
		sreq.Partitions[i] = FetchPartition{Topic: fp.Topic, Partition: fp.Partition, Offset: fp.Offset,
			MaxBytes: int(fp.MaxBytes), LeaderEpoch: -1}
	}
	results, release, err := g.s.Fetch(ctx, sreq)
	if err != nil {
		return nil, rpcError(err)
	}
	// The budget is released once gRPC has written the response
	// (grpcfetch.go).
	holdUntilSent(ctx, release)
	out := make([]*brokerpb.FetchPartitionResult, len(results))
	for i, r := range results {
		fp := req.Partitions[i]
		res := &brokerpb.FetchPartitionResult{Topic: fp.Topic, Partition: fp.Partition,
			HighWatermark: r.HighWatermark, LogStartOffset: r.LogStartOffset, Error: partitionError(r.Err)}
		// The batches go out as they are, shared with the tail cache: the
		// copy-free encoding frames them without a copy.
		if len(r.Batches) > 0 {
			res.Records, res.RecordsMore = r.Batches[0], r.Batches[1:]
		}
		out[i] = res
	}
	return &brokerpb.FetchResponse{Partitions: out}, nil
}

func (g *grpcService) ListOffsets(ctx context.Context, req *brokerpb.ListOffsetsRequest) (*brokerpb.ListOffsetsResponse, error) {
	r, err := g.s.ListOffsets(ctx, req.Topic, req.Partition, req.Timestamp, -1)
	if err != nil {
		return nil, rpcError(err)
	}
	return &brokerpb.ListOffsetsResponse{Offset: r.Offset, Timestamp: r.Timestamp, LogStartOffset: r.LogStartOffset, HighWatermark: r.HighWatermark}, nil
}

func (g *grpcService) InitProducerID(ctx context.Context, _ *brokerpb.InitProducerIDRequest) (*brokerpb.InitProducerIDResponse, error) {
	id, epoch, err := g.s.InitProducerID(ctx)
	if err != nil {
		return nil, rpcError(err)
	}
	return &brokerpb.InitProducerIDResponse{ProducerId: id, ProducerEpoch: int32(epoch)}, nil
}

func (g *grpcService) Metadata(ctx context.Context, req *brokerpb.MetadataRequest) (*brokerpb.MetadataResponse, error) {
	topics := req.Topics
	if len(topics) == 0 {
		topics = nil // the gRPC API's empty list means every topic
	}
	md, err := g.s.Metadata(ctx, topics)
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &brokerpb.MetadataResponse{Brokers: md.Brokers, ControllerId: md.ControllerID}
	for _, t := range md.Topics {
		tm := &brokerpb.TopicMetadata{Name: t.Name, Internal: t.Internal, Error: partitionError(t.Err)}
		for _, p := range t.Partitions {
			pm := &brokerpb.PartitionMetadata{Partition: p.Partition}
			if o := p.Owner; o != nil {
				pm.OwnerId, pm.OwnerAddress, pm.OwnerEpoch = o.BrokerId, o.Address, o.Epoch
			}
			tm.Partitions = append(tm.Partitions, pm)
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

// Calls whose service method speaks brokerpb already.

func (g *grpcService) CreateTopic(ctx context.Context, req *brokerpb.CreateTopicRequest) (*brokerpb.CreateTopicResponse, error) {
	return adapt(g.admin.CreateTopic(ctx, req))
}

func (g *grpcService) DeleteTopic(ctx context.Context, req *brokerpb.DeleteTopicRequest) (*brokerpb.DeleteTopicResponse, error) {
	return adapt(g.admin.DeleteTopic(ctx, req))
}

func (g *grpcService) ListTopics(ctx context.Context, req *brokerpb.ListTopicsRequest) (*brokerpb.ListTopicsResponse, error) {
	return adapt(g.admin.ListTopics(ctx, req))
}

func (g *grpcService) DescribeTopic(ctx context.Context, req *brokerpb.DescribeTopicRequest) (*brokerpb.DescribeTopicResponse, error) {
	return adapt(g.admin.DescribeTopic(ctx, req))
}

func (g *grpcService) AlterTopicConfigs(ctx context.Context, req *brokerpb.AlterTopicConfigsRequest) (*brokerpb.AlterTopicConfigsResponse, error) {
	return adapt(g.admin.AlterTopicConfigs(ctx, req))
}

func (g *grpcService) AddPartitions(ctx context.Context, req *brokerpb.AddPartitionsRequest) (*brokerpb.AddPartitionsResponse, error) {
	return adapt(g.admin.AddPartitions(ctx, req))
}

func (g *grpcService) DescribeCluster(ctx context.Context, req *brokerpb.DescribeClusterRequest) (*brokerpb.DescribeClusterResponse, error) {
	return adapt(g.admin.DescribeCluster(ctx, req))
}

func (g *grpcService) FindCoordinator(ctx context.Context, req *brokerpb.FindCoordinatorRequest) (*brokerpb.FindCoordinatorResponse, error) {
	return adapt(g.groups.FindCoordinator(ctx, req))
}

func (g *grpcService) GroupHeartbeat(ctx context.Context, req *brokerpb.GroupHeartbeatRequest) (*brokerpb.GroupHeartbeatResponse, error) {
	return adapt(g.groups.GroupHeartbeat(ctx, req))
}

func (g *grpcService) CommitOffsets(ctx context.Context, req *brokerpb.CommitOffsetsRequest) (*brokerpb.CommitOffsetsResponse, error) {
	return adapt(g.groups.CommitOffsets(ctx, req))
}

func (g *grpcService) FetchOffsets(ctx context.Context, req *brokerpb.FetchOffsetsRequest) (*brokerpb.FetchOffsetsResponse, error) {
	return adapt(g.groups.FetchOffsets(ctx, req))
}

func (g *grpcService) ListGroups(ctx context.Context, req *brokerpb.ListGroupsRequest) (*brokerpb.ListGroupsResponse, error) {
	return adapt(g.groups.ListGroups(ctx, req))
}

func (g *grpcService) DescribeGroup(ctx context.Context, req *brokerpb.DescribeGroupRequest) (*brokerpb.DescribeGroupResponse, error) {
	return adapt(g.groups.DescribeGroup(ctx, req))
}

func (g *grpcService) DeleteGroup(ctx context.Context, req *brokerpb.DeleteGroupRequest) (*brokerpb.DeleteGroupResponse, error) {
	return adapt(g.groups.DeleteGroup(ctx, req))
}

// adapt turns a service result into a gRPC one: the error through
// classify; a response that comes with an error is dropped.
func adapt[T any](resp *T, err error) (*T, error) {
	if err != nil {
		return nil, rpcError(err)
	}
	return resp, nil
}
