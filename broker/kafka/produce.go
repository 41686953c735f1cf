package kafka

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/partlog"
)

// Offsets into a v2 record batch's header (recordbatch/doc.go).
const (
	batchMagicAt      = 16
	batchAttributesAt = 21
	batchHeaderBytes  = 61
	compressionMask   = 0x07
	compressionZstd   = 4
)

// produceAcks maps Kafka's acks to Strata's: 0 none (no response), 1 one
// bookie fsynced, -1 the topic's ack quorum (Strata's strongest promise).
var produceAcks = map[int16]partlog.Acks{0: partlog.AcksNone, 1: partlog.AcksOne, -1: partlog.AcksQuorum}

// slot is where one partition of a Produce request is answered.
type slot struct {
	// name: the partition's topic (resolved from its id on versions
	// that name topics by id).
	name        string
	topic, part int
	// index into the service request; -1 when refused before it.
	index int
	code  int16
	err   error
}

// produce answers Produce v3-11 (v0-2 are advertised, because librdkafka
// turns compression off when the range does not start at 0, and refused
// per partition: their message sets are not v2 batches). Handle places
// every batch in its partition's log, in request order, and the Reply
// waits for the acks: a connection's produces are stored in the order
// sent, answered in that order, and wait concurrently.
func (a *Adapter) produce(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.ProduceRequest)
	acks, acksOK := produceAcks[req.Acks]
	sreq := &broker.ProduceRequest{Acks: acks, Timeout: time.Duration(req.TimeoutMillis) * time.Millisecond}
	var slots []slot
	seen := map[tpKey]bool{}
	for ti, t := range req.Topics {
		name, nameErr := a.topicOf(t.Topic, t.TopicID, req.Version >= 13)
		for pi, p := range t.Partitions {
			s := slot{name: name, topic: ti, part: pi, index: -1}
			k := tpKey{name, p.Partition}
			switch {
			case nameErr != 0:
				s.code = nameErr
			case req.TransactionID != nil:
				s.code, s.err = kerr.InvalidRequest.Code, errUnsupported("transactions are not supported by this cluster")
			case !acksOK:
				s.code = kerr.InvalidRequiredAcks.Code
			case req.Version < 3:
				s.code, s.err = kerr.UnsupportedVersion.Code, errUnsupported("produce v%d carries message sets older than v2 record batches; use v3 or later", req.Version)
			case seen[k]:
				s.code, s.err = kerr.InvalidRequest.Code, errUnsupported("partition %s/%d named twice", name, p.Partition)
			default:
				s.code, s.err = checkBatch(p.Records, req.Version)
			}
			seen[k] = true
			if s.code == 0 {
				s.index = len(sreq.Partitions)
				sreq.Partitions = append(sreq.Partitions, broker.ProducePartition{Topic: name, Partition: p.Partition, Records: p.Records})
			}
			slots = append(slots, s)
		}
	}
	wait, err := a.startProduce(ctx, sreq)
	return func(ctx context.Context) (kmsg.Response, error) {
		results := wait()
		if req.Acks == 0 {
			return nil, nil
		}
		return a.produceResponse(c, req, slots, results, err), nil
	}, nil
}

// startProduce starts the service's produce, when there is something to
// produce; wait returns the results (nil when the call failed whole).
func (a *Adapter) startProduce(ctx context.Context, sreq *broker.ProduceRequest) (func() []broker.ProduceResult, error) {
	none := func() []broker.ProduceResult { return nil }
	if len(sreq.Partitions) == 0 {
		return none, nil
	}
	wait, err := a.svc.StartProduce(ctx, sreq)
	if err != nil {
		return none, err
	}
	return wait, nil
}

// produceResponse builds the answer in the request's shape.
func (a *Adapter) produceResponse(c *Conn, req *kmsg.ProduceRequest, slots []slot, results []broker.ProduceResult, callErr error) *kmsg.ProduceResponse {
	resp := kmsg.NewPtrProduceResponse()
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for ti, t := range req.Topics {
		rt := &resp.Topics[ti]
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
	}
	var hints leaderHints
	for _, s := range slots {
		rp := &resp.Topics[s.topic].Partitions[s.part]
		*rp = kmsg.NewProduceResponseTopicPartition()
		rp.Partition = req.Topics[s.topic].Partitions[s.part].Partition
		rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
		code, err := s.code, s.err
		switch {
		case s.index < 0:
		case callErr != nil:
			code, err = codeOf(callErr), callErr
		default:
			r := results[s.index]
			code, err = codeOf(r.Err), r.Err
			if r.Err == nil {
				// A retried batch gets its original offsets (Kafka's
				// answer since 1.1, not DUPLICATE_SEQUENCE_NUMBER).
				rp.BaseOffset, rp.LogStartOffset = r.BaseOffset, r.LogStartOffset
			}
		}
		rp.ErrorCode = c.ErrorCode(0, code)
		if code != 0 {
			rp.ErrorMessage = messageOf(err)
		}
		if code == kerr.NotLeaderForPartition.Code && req.Version >= 10 {
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = hints.leader(a.svc, s.name, rp.Partition)
		}
	}
	for _, n := range hints.used {
		b := kmsg.NewProduceResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = n.id, n.host, n.port, n.rack
		resp.Brokers = append(resp.Brokers, b)
	}
	return resp
}

// checkBatch applies Kafka's rules for a produced partition's bytes that
// the log does not know: a v2 batch (magic 2), zstd only from v7. The log
// checks the rest (one batch, CRC, sizes, sequences).
func checkBatch(records []byte, version int16) (int16, error) {
	switch {
	case len(records) < batchHeaderBytes:
		return kerr.CorruptMessage.Code, errUnsupported("%d bytes are not a record batch", len(records))
	case records[batchMagicAt] != 2:
		return kerr.UnsupportedForMessageFormat.Code, errUnsupported("record batch magic %d: only v2 batches (magic 2) are accepted", records[batchMagicAt])
	case binary.BigEndian.Uint16(records[batchAttributesAt:])&compressionMask == compressionZstd && version < 7:
		return kerr.UnsupportedCompressionType.Code, errUnsupported("zstd needs produce v7 or later")
	}
	return 0, nil
}

// tpKey names a partition in a request.
type tpKey struct {
	topic     string
	partition int32
}

// topicOf is a request entry's topic name: by id on versions that carry
// ids (UNKNOWN_TOPIC_ID when none has it), else the name.
func (a *Adapter) topicOf(name string, id [16]byte, byID bool) (string, int16) {
	if !byID {
		return name, 0
	}
	n, ok := a.svc.TopicName(topicIDString(id))
	if !ok {
		return "", kerr.UnknownTopicID.Code
	}
	return n, 0
}

// leaderHints collects KIP-951's answers to NOT_LEADER_OR_FOLLOWER: the
// current leader of a partition and its node, so a client skips a
// metadata round trip.
type leaderHints struct {
	nodes map[string]node
	used  map[int32]node
}

// leader is the partition's leader and epoch (-1, -1 unknown), recording
// its node for the response's broker list.
func (h *leaderHints) leader(svc *broker.Service, topic string, partition int32) (int32, int32) {
	if h.nodes == nil {
		h.nodes, h.used = nodes(svc.Brokers()), map[int32]node{}
	}
	n, epoch, ok := leader(h.nodes, svc.Owner(topic, partition))
	if !ok {
		return -1, -1
	}
	h.used[n.id] = n
	return n.id, epoch
}

// initProducerID answers InitProducerId v0-4 for idempotent producers:
// a fresh id at epoch 0 whatever id and epoch were sent (Kafka's answer
// without a transactional id). A transactional id is refused:
// transactions are not supported.
func (a *Adapter) initProducerID(ctx context.Context, _ *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := kmsg.NewPtrInitProducerIDResponse()
	if req.TransactionalID != nil {
		// INVALID_REQUEST: Kafka's answer to a request an incompatible
		// broker cannot serve (the response has no message field).
		resp.ErrorCode = kerr.InvalidRequest.Code
		return Respond(resp), nil
	}
	id, epoch, err := a.svc.InitProducerID(ctx)
	if err != nil {
		resp.ErrorCode = codeOf(err)
		return Respond(resp), nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, epoch
	return Respond(resp), nil
}
