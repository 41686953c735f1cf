package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/proto/brokerpb"
)

// metadata answers Metadata v0-12: the Kafka-serving brokers, the cluster
// id, a controller, and each topic's partitions with leader = owner,
// leader epoch = owner epoch and replicas = ISR = [leader]. A partition
// whose owner is unknown or serves no Kafka listener answers
// LEADER_NOT_AVAILABLE with leader -1 (never a guessed one).
func (a *Adapter) metadata(ctx context.Context, _ *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.MetadataRequest)
	resp := kmsg.NewPtrMetadataResponse()
	names, byID, unknownIDs := a.requestedTopics(req)
	md, err := a.svc.Metadata(ctx, names)
	if err != nil {
		// Too many topics named: answer each with the error, a name
		// repeated once (the list is a set, as in Kafka), so that a
		// request's repeats cannot make the answer grow past its
		// distinct names.
		seen := make(map[string]bool, len(names))
		for _, name := range names {
			if seen[name] {
				continue
			}
			seen[name] = true
			t := kmsg.NewMetadataResponseTopic()
			t.Topic, t.ErrorCode = kmsg.StringPtr(name), codeOf(err)
			resp.Topics = append(resp.Topics, t)
		}
		return Respond(resp), nil
	}
	ns := nodes(md.Brokers)
	a.fillBrokers(ctx, resp, md, ns)
	autoCreate := a.cfg.AutoCreateTopics && (req.Version < 4 || req.AllowAutoTopicCreation)
	for _, tm := range md.Topics {
		if autoCreate && errors.Is(tm.Err, broker.ErrUnknownTopic) {
			tm.Err = a.autoCreate(ctx, tm.Name)
		}
		t := topicMetadata(ns, tm)
		if id, ok := byID[tm.Name]; ok {
			t.TopicID = id
		}
		resp.Topics = append(resp.Topics, t)
	}
	for _, id := range unknownIDs {
		t := kmsg.NewMetadataResponseTopic()
		t.TopicID, t.ErrorCode = id, kerr.UnknownTopicID.Code
		resp.Topics = append(resp.Topics, t)
	}
	return Respond(resp), nil
}

// requestedTopics is the names a Metadata request asks for (nil: all;
// v0's empty list means all, v1+'s empty list means none), resolving
// topic ids (v10+).
func (a *Adapter) requestedTopics(req *kmsg.MetadataRequest) (names []string, byID map[string][16]byte, unknownIDs [][16]byte) {
	if req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0) {
		return nil, nil, nil
	}
	names = []string{}
	byID = map[string][16]byte{}
	for _, t := range req.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
			continue
		}
		name, ok := a.svc.TopicName(topicIDString(t.TopicID))
		if !ok {
			unknownIDs = append(unknownIDs, t.TopicID)
			continue
		}
		names = append(names, name)
		byID[name] = t.TopicID
	}
	if len(names) == 0 {
		// Only unknown ids: describe no topic (nil would be all).
		names = []string{}
	}
	return names, byID, unknownIDs
}

// fillBrokers sets the response's brokers, cluster id and controller.
func (a *Adapter) fillBrokers(ctx context.Context, resp *kmsg.MetadataResponse, md *broker.Metadata, ns map[string]node) {
	for _, bi := range md.Brokers {
		n, ok := ns[bi.Id]
		if !ok {
			continue
		}
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = n.id, n.host, n.port, n.rack
		resp.Brokers = append(resp.Brokers, b)
	}
	if id, err := a.svc.ClusterID(ctx); err == nil {
		resp.ClusterID = &id
	}
	resp.ControllerID = a.controller(ns, md.ControllerID)
}

// topicMetadata is one topic's answer.
func topicMetadata(ns map[string]node, tm broker.TopicMetadata) kmsg.MetadataResponseTopic {
	t := kmsg.NewMetadataResponseTopic()
	name := tm.Name
	t.Topic, t.ErrorCode = &name, codeOf(tm.Err)
	if tm.Err != nil {
		if errors.Is(tm.Err, broker.ErrInvalid) {
			t.ErrorCode = kerr.InvalidTopicException.Code
		}
		return t
	}
	t.TopicID, t.IsInternal = topicUUID(tm.ID), tm.Internal
	t.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, len(tm.Partitions))
	for _, pm := range tm.Partitions {
		t.Partitions = append(t.Partitions, partitionMetadata(ns, pm))
	}
	return t
}

func partitionMetadata(ns map[string]node, pm broker.PartitionMetadata) kmsg.MetadataResponseTopicPartition {
	p := kmsg.NewMetadataResponseTopicPartition()
	p.Partition = pm.Partition
	n, epoch, ok := leader(ns, pm.Owner)
	if !ok {
		p.ErrorCode, p.Leader, p.LeaderEpoch = kerr.LeaderNotAvailable.Code, -1, -1
		p.Replicas, p.ISR = []int32{}, []int32{}
		return p
	}
	p.Leader, p.LeaderEpoch = n.id, epoch
	p.Replicas, p.ISR = []int32{n.id}, []int32{n.id}
	return p
}

// autoCreate creates a missing topic with the defaults; the topic is then
// answered LEADER_NOT_AVAILABLE (it has no owner yet), as Kafka does,
// and the client asks again.
func (a *Adapter) autoCreate(ctx context.Context, name string) error {
	_, err := a.admin.CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: name, Partitions: a.cfg.DefaultPartitions})
	switch {
	case err == nil, errors.Is(err, broker.ErrTopicExists):
		a.log.Info("topic created by a metadata request", "topic", name, "partitions", a.cfg.DefaultPartitions)
		return errLeaderNotAvailable
	default:
		return err
	}
}

// errLeaderNotAvailable answers a topic that exists but is not served yet.
var errLeaderNotAvailable = errors.New("kafka: the topic has no leader yet")
