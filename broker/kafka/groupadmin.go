package kafka

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/proto/brokerpb"
)

// describeGroups answers DescribeGroups v0-5: classic groups with their
// members' metadata and assignments (while Stable), KIP-848 groups (and
// Strata's own groups) with their state and members.
func (g *groupAPI) describeGroups(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrDescribeGroupsResponse()
		for _, id := range req.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group = id
			d, err := g.groups.Describe(ctx, id)
			switch code := groupCodeOf(err); {
			case err == nil:
				describedGroup(&rg, d)
			case code == kerrGroupIDNotFound:
				// Kafka describes a group it does not know as Dead.
				rg.State = "Dead"
			default:
				rg.ErrorCode, rg.ErrorMessage = c.ErrorCode(15, code), messageOf(err)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil
	}, nil
}

func describedGroup(rg *kmsg.DescribeGroupsResponseGroup, d group.GroupDescription) {
	rg.State, rg.ProtocolType, rg.Protocol = d.State, d.ProtocolType, d.Protocol
	for _, m := range d.Members {
		rm := kmsg.NewDescribeGroupsResponseGroupMember()
		rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.MemberID, optional(m.InstanceID), m.ClientID, m.ClientHost
		rm.ProtocolMetadata, rm.MemberAssignment = orEmpty(m.Metadata), orEmpty(m.Assignment)
		rg.Members = append(rg.Members, rm)
	}
	for _, m := range d.ConsumerMembers {
		rm := kmsg.NewDescribeGroupsResponseGroupMember()
		rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.MemberID, optional(m.InstanceID), m.ClientID, m.ClientHost
		rm.ProtocolMetadata, rm.MemberAssignment = []byte{}, []byte{}
		rg.Members = append(rg.Members, rm)
	}
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// listGroups answers ListGroups v0-5: the groups this broker coordinates
// (clients ask every broker), filtered by state (v4+, case-insensitive)
// and type (v5+: classic, consumer).
func (g *groupAPI) listGroups(ctx context.Context, _ *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.ListGroupsRequest)
	resp := kmsg.NewPtrListGroupsResponse()
	for _, l := range g.groups.List(ctx) {
		if len(req.StatesFilter) > 0 && !slices.ContainsFunc(req.StatesFilter, func(s string) bool { return strings.EqualFold(s, l.State) }) {
			continue
		}
		if len(req.TypesFilter) > 0 && !slices.ContainsFunc(req.TypesFilter, func(s string) bool { return strings.EqualFold(s, string(l.Type)) }) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = l.GroupID, l.ProtocolType, l.State, string(l.Type)
		resp.Groups = append(resp.Groups, rg)
	}
	return Respond(resp), nil
}

// deleteGroups answers DeleteGroups v0-2: only empty groups go, with
// their offsets.
func (g *groupAPI) deleteGroups(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.DeleteGroupsRequest)
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrDeleteGroupsResponse()
		for _, id := range req.Groups {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group = id
			err := g.groups.Delete(ctx, id)
			rg.ErrorCode, rg.ErrorMessage = c.ErrorCode(42, groupCodeOf(err)), messageOf(err)
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil
	}, nil
}

// consumerGroupHeartbeat answers ConsumerGroupHeartbeat v0-1 (KIP-848) on
// the coordinator's server-side assignment: partitions go by topic id both
// ways; a null subscription or owned list means unchanged.
func (g *groupAPI) consumerGroupHeartbeat(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.ConsumerGroupHeartbeatRequest)
	hreq := &brokerpb.GroupHeartbeatRequest{GroupId: req.Group, MemberId: req.MemberID, MemberEpoch: req.MemberEpoch,
		ClientId: c.ClientID(), ClientHost: host(c), RebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		SubscribedTopics: req.SubscribedTopicNames, SubscribedTopicRegex: deref(req.SubscribedTopicRegex),
		InstanceId: deref(req.InstanceID), ServerAssignor: deref(req.ServerAssignor), OwnedOmitted: req.Topics == nil}
	for _, t := range req.Topics {
		name, ok := g.svc.TopicName(topicIDString(t.TopicID))
		if !ok {
			continue // a deleted topic: nothing to own
		}
		hreq.Owned = append(hreq.Owned, &brokerpb.TopicPartitions{Topic: name, Partitions: t.Partitions})
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
		r, err := g.groups.GroupHeartbeat(ctx, hreq)
		if err != nil {
			resp.ErrorCode, resp.ErrorMessage = c.ErrorCode(68, groupCodeOf(err)), messageOf(err)
			return resp, nil
		}
		resp.MemberID, resp.MemberEpoch, resp.HeartbeatIntervalMillis = kmsg.StringPtr(r.MemberId), r.MemberEpoch, r.HeartbeatIntervalMs
		assignment := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		for _, tp := range r.Assignment {
			id := g.svc.TopicID(tp.Topic)
			if id == "" {
				continue
			}
			at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			at.TopicID, at.Partitions = topicUUID(id), tp.Partitions
			assignment.Topics = append(assignment.Topics, at)
		}
		resp.Assignment = &assignment
		return resp, nil
	}, nil
}

// consumerGroupDescribe answers ConsumerGroupDescribe v0 for KIP-848
// groups (a classic group answers GROUP_ID_NOT_FOUND, as Kafka does).
func (g *groupAPI) consumerGroupDescribe(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.ConsumerGroupDescribeRequest)
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrConsumerGroupDescribeResponse()
		for _, id := range req.Groups {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group = id
			d, err := g.groups.Describe(ctx, id)
			if err == nil && d.Type != group.TypeConsumer {
				err = errGroupNotConsumer
			}
			if err != nil {
				code := groupCodeOf(err)
				if err == errGroupNotConsumer {
					code = kerrGroupIDNotFound
				}
				rg.ErrorCode, rg.ErrorMessage = c.ErrorCode(69, code), messageOf(err)
			} else {
				g.describedConsumerGroup(&rg, d)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil
	}, nil
}

var errGroupNotConsumer = errUnsupported("the group uses the classic protocol: describe it with DescribeGroups")

func (g *groupAPI) describedConsumerGroup(rg *kmsg.ConsumerGroupDescribeResponseGroup, d group.GroupDescription) {
	rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = d.State, d.GroupEpoch, d.AssignmentEpoch, d.AssignorName
	for _, m := range d.ConsumerMembers {
		rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		rm.MemberID, rm.InstanceID, rm.MemberEpoch, rm.ClientID, rm.ClientHost = m.MemberID, optional(m.InstanceID), m.MemberEpoch, m.ClientID, m.ClientHost
		rm.SubscribedTopics, rm.SubscribedTopicRegex = m.SubscribedTopicNames, optional(m.SubscribedTopicRegex)
		rm.Assignment, rm.TargetAssignment = g.assignment(m.Assignment), g.assignment(m.Target)
		rg.Members = append(rg.Members, rm)
	}
}

// assignment is partitions as KIP-848's topic-id assignment.
func (g *groupAPI) assignment(tps []group.TopicPartition) kmsg.Assignment {
	out := kmsg.NewAssignment()
	index := map[string]int{}
	for _, tp := range tps {
		i, ok := index[tp.Topic]
		if !ok {
			id := g.svc.TopicID(tp.Topic)
			if id == "" {
				continue
			}
			i = len(out.TopicPartitions)
			index[tp.Topic] = i
			t := kmsg.NewAssignmentTopicPartition()
			t.TopicID, t.Topic = topicUUID(id), tp.Topic
			out.TopicPartitions = append(out.TopicPartitions, t)
		}
		out.TopicPartitions[i].Partitions = append(out.TopicPartitions[i].Partitions, tp.Partition)
	}
	return out
}
