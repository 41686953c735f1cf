package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker/group"
)

// offsetCommit answers OffsetCommit v0-9. The commit is done in Handle,
// before later requests of the connection are handled: an OffsetFetch
// sent after it on the same connection sees it. v0 commits carry no
// generation (standalone); v6+ keep the committed leader epoch.
func (g *groupAPI) offsetCommit(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.OffsetCommitRequest)
	creq := group.OffsetCommitRequest{GroupID: req.Group, MemberID: req.MemberID, InstanceID: deref(req.InstanceID), Generation: req.Generation}
	if req.Version == 0 {
		creq.Generation = -1
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			epoch := int32(-1)
			if req.Version >= 6 {
				epoch = p.LeaderEpoch
			}
			creq.Offsets = append(creq.Offsets, group.OffsetCommit{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset,
				LeaderEpoch: epoch, Metadata: deref(p.Metadata)})
		}
	}
	results, err := g.groups.OffsetCommit(ctx, creq)
	byPartition := resultsByPartition(results)
	resp := kmsg.NewPtrOffsetCommitResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			perr := err
			if err == nil {
				perr = byPartition[tpKey{t.Topic, p.Partition}]
			}
			rp.ErrorCode = c.ErrorCode(8, commitCode(req.Version, perr))
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return Respond(resp), nil
}

// resultsByPartition indexes per-partition outcomes.
func resultsByPartition(results []group.PartitionResult) map[tpKey]error {
	out := make(map[tpKey]error, len(results))
	for _, r := range results {
		out[tpKey{r.Topic, r.Partition}] = r.Err
	}
	return out
}

// commitCode is a commit error's code; before v9 a commit to a group that
// does not exist answers ILLEGAL_GENERATION (Kafka's older behaviour).
func commitCode(version int16, err error) int16 {
	code := groupCodeOf(err)
	if code == kerr.GroupIDNotFound.Code && version < 9 {
		return kerr.IllegalGeneration.Code
	}
	return code
}

// offsetFetch answers OffsetFetch v0-9 (several groups from v8; each
// group's coordinator may be another broker: NOT_COORDINATOR for it).
func (g *groupAPI) offsetFetch(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.OffsetFetchRequest)
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrOffsetFetchResponse()
		if req.Version >= 8 {
			for _, rq := range req.Groups {
				fetched := g.fetchGroupOffsets(ctx, c, rq.Group, deref(rq.MemberID), rq.MemberEpoch, groupTopics(rq.Topics))
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = rq.Group, fetched.code
				for _, t := range fetched.topics {
					rt := kmsg.NewOffsetFetchResponseGroupTopic()
					rt.Topic = t.Topic
					for _, p := range t.Partitions {
						rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
						rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
						rt.Partitions = append(rt.Partitions, rp)
					}
					rg.Topics = append(rg.Topics, rt)
				}
				resp.Groups = append(resp.Groups, rg)
			}
			return resp, nil
		}
		var topics []group.TopicPartition
		if req.Topics != nil {
			topics = []group.TopicPartition{}
			for _, t := range req.Topics {
				for _, p := range t.Partitions {
					topics = append(topics, group.TopicPartition{Topic: t.Topic, Partition: p})
				}
			}
		}
		fetched := g.fetchGroupOffsets(ctx, c, req.Group, "", -1, topics)
		resp.ErrorCode, resp.Topics = fetched.code, fetched.topics
		if req.Version < 2 && fetched.code != 0 {
			// v0-1 have no top-level code: every partition carries it.
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					resp.Topics[i].Partitions[j].ErrorCode = fetched.code
				}
			}
		}
		return resp, nil
	}, nil
}

// groupTopics turns a v8+ group entry's topics into partitions (nil: all).
func groupTopics(ts []kmsg.OffsetFetchRequestGroupTopic) []group.TopicPartition {
	if ts == nil {
		return nil
	}
	out := []group.TopicPartition{}
	for _, t := range ts {
		for _, p := range t.Partitions {
			out = append(out, group.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	return out
}

// fetchedOffsets is one group's answer in the v0-7 shape.
type fetchedOffsets struct {
	code   int16
	topics []kmsg.OffsetFetchResponseTopic
}

// fetchGroupOffsets fetches one group's offsets: those asked for (each
// one; -1 when nothing is committed), or every committed one.
func (g *groupAPI) fetchGroupOffsets(ctx context.Context, c *Conn, groupID, memberID string, memberEpoch int32, parts []group.TopicPartition) fetchedOffsets {
	offsets, denied, err := g.groups.OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: groupID, Partitions: parts, MemberID: memberID, MemberEpoch: memberEpoch})
	if err != nil {
		code := c.ErrorCode(9, groupCodeOf(err))
		if code == kerr.GroupIDNotFound.Code {
			// Kafka answers a group it has no record of with no offsets.
			return fetchedOffsets{topics: unknownOffsets(parts, 0)}
		}
		out := fetchedOffsets{code: code}
		if parts != nil {
			out.topics = unknownOffsets(parts, code)
		}
		return out
	}
	var out fetchedOffsets
	index := map[string]int{}
	add := func(topic string, p kmsg.OffsetFetchResponseTopicPartition) {
		i, ok := index[topic]
		if !ok {
			i = len(out.topics)
			index[topic] = i
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = topic
			out.topics = append(out.topics, rt)
		}
		out.topics[i].Partitions = append(out.topics[i].Partitions, p)
	}
	for _, o := range offsets {
		p := kmsg.NewOffsetFetchResponseTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch = o.Partition, o.Offset, o.LeaderEpoch
		p.Metadata = kmsg.StringPtr(o.Metadata)
		add(o.Topic, p)
	}
	for _, tp := range parts {
		if d := denied[tp.Topic]; d != nil {
			p := kmsg.NewOffsetFetchResponseTopicPartition()
			p.Partition, p.Offset, p.ErrorCode = tp.Partition, -1, c.ErrorCode(9, codeOf(d))
			add(tp.Topic, p)
		}
	}
	return out
}

// unknownOffsets answers every partition asked for with offset -1 and
// code.
func unknownOffsets(parts []group.TopicPartition, code int16) []kmsg.OffsetFetchResponseTopic {
	var out []kmsg.OffsetFetchResponseTopic
	index := map[string]int{}
	for _, tp := range parts {
		i, ok := index[tp.Topic]
		if !ok {
			i = len(out)
			index[tp.Topic] = i
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = tp.Topic
			out = append(out, rt)
		}
		p := kmsg.NewOffsetFetchResponseTopicPartition()
		p.Partition, p.Offset, p.ErrorCode = tp.Partition, -1, code
		out[i].Partitions = append(out[i].Partitions, p)
	}
	return out
}

// offsetDelete answers OffsetDelete v0.
func (g *groupAPI) offsetDelete(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.OffsetDeleteRequest)
	var parts []group.TopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, group.TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrOffsetDeleteResponse()
		results, err := g.groups.DeleteOffsets(ctx, req.Group, parts)
		if err != nil {
			resp.ErrorCode = c.ErrorCode(47, groupCodeOf(err))
			return resp, nil
		}
		byPartition := resultsByPartition(results)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, c.ErrorCode(47, groupCodeOf(byPartition[tpKey{t.Topic, p.Partition}]))
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}, nil
}
