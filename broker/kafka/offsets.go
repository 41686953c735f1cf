package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
)

// listOffsetsMinVersion: the version each special timestamp needs.
var listOffsetsMinVersion = map[int64]int16{
	broker.ListLatest: 0, broker.ListEarliest: 0, broker.ListMaxTimestamp: 7, broker.ListEarliestLocal: 8,
}

// listOffsets answers ListOffsets v0-8: latest (the high watermark; no
// transactions, so read_committed's answer too), earliest (the log
// start), max timestamp, earliest local, or the first offset at or after
// a time, across both tiers. A time after every record answers -1, -1, as
// Kafka does. v0 answers in OldStyleOffsets (librdkafka 1.7's resets).
func (a *Adapter) listOffsets(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := kmsg.NewPtrListOffsetsResponse()
	seen := map[tpKey]bool{}
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			k := tpKey{t.Topic, p.Partition}
			code := a.listOffset(ctx, req, t.Topic, p, &rp)
			if seen[k] {
				code = kerr.InvalidRequest.Code
			}
			seen[k] = true
			rp.ErrorCode = c.ErrorCode(2, code)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return Respond(resp), nil
}

// listOffset resolves one partition's timestamp into rp; the error code.
func (a *Adapter) listOffset(ctx context.Context, req *kmsg.ListOffsetsRequest, topic string, p kmsg.ListOffsetsRequestTopicPartition, rp *kmsg.ListOffsetsResponseTopicPartition) int16 {
	if p.Timestamp < 0 {
		if v, ok := listOffsetsMinVersion[p.Timestamp]; !ok || req.Version < v {
			return kerr.UnsupportedVersion.Code
		}
	}
	epoch := int32(-1)
	if req.Version >= 4 {
		epoch = p.CurrentLeaderEpoch
	}
	r, err := a.svc.ListOffsets(ctx, topic, p.Partition, p.Timestamp, epoch)
	if err != nil {
		return codeOf(err)
	}
	if p.Timestamp >= 0 && r.Timestamp < 0 {
		// No record at or after the time.
		r.Offset = -1
	}
	rp.Offset, rp.Timestamp, rp.LeaderEpoch = r.Offset, r.Timestamp, int32(r.Epoch)
	if req.Version == 0 {
		rp.OldStyleOffsets = []int64{}
		if r.Offset >= 0 && p.MaxNumOffsets > 0 {
			rp.OldStyleOffsets = []int64{r.Offset}
		}
	}
	return 0
}

// offsetForLeaderEpoch answers OffsetForLeaderEpoch v0-4 from each
// partition's epoch history (partlog P10): the largest epoch at or below
// the one asked and where it ended, never past what a consumer of it can
// have read, so a failover never looks like a truncation.
func (a *Adapter) offsetForLeaderEpoch(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := kmsg.NewPtrOffsetForLeaderEpochResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition = p.Partition
			current := int32(-1)
			if req.Version >= 2 {
				current = p.CurrentLeaderEpoch
			}
			epoch, end, err := a.svc.EpochEnd(ctx, t.Topic, p.Partition, p.LeaderEpoch, current)
			if err == nil {
				rp.LeaderEpoch, rp.EndOffset = epoch, end
			}
			rp.ErrorCode = c.ErrorCode(23, codeOf(err))
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return Respond(resp), nil
}

var _ = errors.Is
