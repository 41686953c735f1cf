package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
)

// fetch answers Fetch v4-16 without fetch sessions (KIP-227 allows it:
// SessionID 0 in the answer means none was created, and clients then
// send full requests). Batches go out as stored; the long poll runs in the
// Reply, so later requests of the connection are read meanwhile.
func (a *Adapter) fetch(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.FetchRequest)
	resp := kmsg.NewPtrFetchResponse()
	if req.SessionID != 0 || req.SessionEpoch > 0 {
		// An incremental request of a session never created here.
		resp.ErrorCode = c.ErrorCode(1, kerr.FetchSessionIDNotFound.Code)
		return Respond(resp), nil
	}
	sreq := &broker.FetchRequest{MaxWait: time.Duration(req.MaxWaitMillis) * time.Millisecond,
		MinBytes: int(req.MinBytes), MaxBytes: int(req.MaxBytes)}
	var slots []slot
	for ti, t := range req.Topics {
		name, code := a.topicOf(t.Topic, t.TopicID, req.Version >= 13)
		for pi, p := range t.Partitions {
			s := slot{name: name, topic: ti, part: pi, index: -1, code: code}
			if code == 0 {
				epoch := int32(-1)
				if req.Version >= 9 {
					epoch = p.CurrentLeaderEpoch
				}
				s.index = len(sreq.Partitions)
				sreq.Partitions = append(sreq.Partitions, broker.FetchPartition{Topic: name, Partition: p.Partition,
					Offset: p.FetchOffset, MaxBytes: int(p.PartitionMaxBytes), LeaderEpoch: epoch})
			}
			slots = append(slots, s)
		}
	}
	fc := a.fetchConn(c)
	return func(ctx context.Context) (kmsg.Response, error) {
		var results []broker.FetchResult
		var err error
		release := func() {}
		if len(sreq.Partitions) > 0 {
			results, release, err = a.svc.Fetch(broker.WithFetchConn(ctx, fc), sreq)
		}
		a.fetchResponse(c, req, resp, slots, results, err)
		// The records are held from the fetch budget until the connection
		// has written them.
		return Held{Response: resp, Release: release}, nil
	}, nil
}

// fetchConn is c's share of the broker's fetch budget, made at its first
// Fetch (Handle runs on the connection's reader) and closed once the
// connection has ended (Conn.dropUnwritten).
func (a *Adapter) fetchConn(c *Conn) *broker.FetchConn {
	if c.fetches == nil {
		c.fetches = a.svc.NewFetchConn()
	}
	return c.fetches
}

// fetchResponse fills resp in the request's shape.
func (a *Adapter) fetchResponse(c *Conn, req *kmsg.FetchRequest, resp *kmsg.FetchResponse, slots []slot, results []broker.FetchResult, callErr error) {
	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	for ti, t := range req.Topics {
		rt := &resp.Topics[ti]
		*rt = kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
	}
	var hints leaderHints
	for _, s := range slots {
		rp := &resp.Topics[s.topic].Partitions[s.part]
		*rp = kmsg.NewFetchResponseTopicPartition()
		rp.Partition = req.Topics[s.topic].Partitions[s.part].Partition
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
		// Never null: librdkafka fails on a null record set.
		rp.RecordBatches = []byte{}
		rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
		code := s.code
		switch {
		case s.index < 0:
		case callErr != nil:
			code = codeOf(callErr)
		default:
			r := &results[s.index]
			code = codeOf(r.Err)
			rp.HighWatermark, rp.LogStartOffset = r.HighWatermark, r.LogStartOffset
			// No transactions: everything below the high watermark is
			// stable.
			rp.LastStableOffset = r.HighWatermark
			rp.RecordBatches = joinBatches(r.Batches)
		}
		rp.ErrorCode = c.ErrorCode(1, code)
		if (code == kerr.NotLeaderForPartition.Code || code == kerr.FencedLeaderEpoch.Code) && req.Version >= 16 {
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = hints.leader(a.svc, s.name, rp.Partition)
		}
	}
	for _, n := range hints.used {
		b := kmsg.NewFetchResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = n.id, n.host, n.port, n.rack
		resp.Brokers = append(resp.Brokers, b)
	}
}

// joinBatches puts a partition's batches in one buffer (Kafka's records
// field is one byte string): one copy, at memory speed.
func joinBatches(batches [][]byte) []byte {
	switch len(batches) {
	case 0:
		return []byte{}
	case 1:
		return batches[0]
	}
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	out := make([]byte, 0, n)
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}
