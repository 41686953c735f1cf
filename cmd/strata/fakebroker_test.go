package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// fakeBroker is a one-broker, in-memory stand-in for the Broker service:
// enough of Metadata, Produce, Fetch, ListOffsets and the topic admin
// calls to run the record commands in-process.
type fakeBroker struct {
	brokerpb.UnimplementedBrokerServer
	addr string

	mu       sync.Mutex
	topics   map[string]int32
	logs     map[string][][]byte // topic/partition -> stamped batches
	next     map[string]int64
	nextPID  int64
	nextSeq  map[string]int32 // topic/partition/producer -> next sequence
	appended chan struct{}    // closed and replaced on every append
}

func startFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{addr: ln.Addr().String(), topics: map[string]int32{}, logs: map[string][][]byte{},
		next: map[string]int64{}, nextSeq: map[string]int32{}, appended: make(chan struct{})}
	srv := grpc.NewServer()
	brokerpb.RegisterBrokerServer(srv, fb)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return fb
}

func tpKey(topic string, p int32) string { return fmt.Sprintf("%s/%d", topic, p) }

func (fb *fakeBroker) Metadata(_ context.Context, req *brokerpb.MetadataRequest) (*brokerpb.MetadataResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	resp := &brokerpb.MetadataResponse{ControllerId: "k1", Brokers: []*brokerpb.BrokerInfo{{Id: "k1", Address: fb.addr}}}
	names := req.Topics
	if len(names) == 0 {
		for n := range fb.topics {
			names = append(names, n)
		}
	}
	for _, name := range names {
		n, ok := fb.topics[name]
		tm := &brokerpb.TopicMetadata{Name: name}
		if !ok {
			tm.Error = &brokerpb.PartitionError{Code: int32(codes.NotFound), Info: rpcerror.Info(
				rpcerror.New(codes.NotFound, rpcerror.ReasonNotFound, false, "no topic")), Message: "no topic " + name}
		}
		for p := range n {
			tm.Partitions = append(tm.Partitions, &brokerpb.PartitionMetadata{Partition: p, OwnerId: "k1", OwnerAddress: fb.addr, OwnerEpoch: 1})
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

func (fb *fakeBroker) CreateTopic(_ context.Context, req *brokerpb.CreateTopicRequest) (*brokerpb.CreateTopicResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if _, ok := fb.topics[req.Name]; ok {
		return nil, rpcerror.New(codes.AlreadyExists, rpcerror.ReasonTopicExists, false, "topic exists")
	}
	fb.topics[req.Name] = req.Partitions
	return &brokerpb.CreateTopicResponse{Topic: &brokerpb.TopicDescription{Name: req.Name, PartitionCount: req.Partitions}}, nil
}

func (fb *fakeBroker) InitProducerID(context.Context, *brokerpb.InitProducerIDRequest) (*brokerpb.InitProducerIDResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.nextPID++
	return &brokerpb.InitProducerIDResponse{ProducerId: fb.nextPID}, nil
}

func (fb *fakeBroker) Produce(ctx context.Context, req *brokerpb.ProduceRequest) (*brokerpb.ProduceResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	// Like the broker: an idempotent batch that arrived before its
	// predecessors (pipelined requests race) waits for them.
	deadline := time.Now().Add(2 * time.Second)
	for fb.sequenceGapLocked(req) && time.Now().Before(deadline) {
		appended := fb.appended
		fb.mu.Unlock()
		select {
		case <-appended:
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
		fb.mu.Lock()
	}
	resp := &brokerpb.ProduceResponse{}
	for _, pp := range req.Partitions {
		res := &brokerpb.ProducePartitionResult{Topic: pp.Topic, Partition: pp.Partition}
		resp.Partitions = append(resp.Partitions, res)
		hdr, err := recordbatch.Verify(pp.Records)
		if err != nil || pp.Partition < 0 || pp.Partition >= fb.topics[pp.Topic] {
			res.Error = &brokerpb.PartitionError{Code: int32(codes.InvalidArgument), Message: fmt.Sprintf("bad produce: %v", err)}
			continue
		}
		k := tpKey(pp.Topic, pp.Partition)
		if hdr.ProducerID >= 0 {
			fb.nextSeq[fmt.Sprintf("%s/%d", k, hdr.ProducerID)] = hdr.BaseSequence + hdr.RecordCount
		}
		buf := bytes.Clone(pp.Records)
		recordbatch.SetBaseOffset(buf, fb.next[k])
		res.BaseOffset = fb.next[k]
		fb.logs[k] = append(fb.logs[k], buf)
		fb.next[k] += int64(hdr.RecordCount)
	}
	close(fb.appended)
	fb.appended = make(chan struct{})
	return resp, nil
}

// sequenceGapLocked reports whether a batch of req is ahead of its
// producer's next sequence.
func (fb *fakeBroker) sequenceGapLocked(req *brokerpb.ProduceRequest) bool {
	for _, pp := range req.Partitions {
		hdr, err := recordbatch.ParseHeader(pp.Records)
		if err != nil || hdr.ProducerID < 0 {
			continue
		}
		if hdr.BaseSequence > fb.nextSeq[fmt.Sprintf("%s/%d", tpKey(pp.Topic, pp.Partition), hdr.ProducerID)] {
			return true
		}
	}
	return false
}

func (fb *fakeBroker) Fetch(ctx context.Context, req *brokerpb.FetchRequest) (*brokerpb.FetchResponse, error) {
	deadline := time.Now().Add(time.Duration(req.MaxWaitMs) * time.Millisecond)
	for {
		fb.mu.Lock()
		resp := &brokerpb.FetchResponse{}
		n := 0
		for _, fp := range req.Partitions {
			k := tpKey(fp.Topic, fp.Partition)
			res := &brokerpb.FetchPartitionResult{Topic: fp.Topic, Partition: fp.Partition, HighWatermark: fb.next[k]}
			for _, b := range fb.logs[k] {
				if h, _ := recordbatch.ParseHeader(b); h.LastOffset() >= fp.Offset {
					res.Records = append(res.Records, b...)
				}
			}
			n += len(res.Records)
			resp.Partitions = append(resp.Partitions, res)
		}
		appended := fb.appended
		fb.mu.Unlock()
		if n > 0 || !time.Now().Before(deadline) {
			return resp, nil
		}
		select {
		case <-appended:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (fb *fakeBroker) ListOffsets(_ context.Context, req *brokerpb.ListOffsetsRequest) (*brokerpb.ListOffsetsResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	k := tpKey(req.Topic, req.Partition)
	resp := &brokerpb.ListOffsetsResponse{HighWatermark: fb.next[k], Timestamp: -1, Offset: fb.next[k]}
	switch req.Timestamp {
	case -2:
		resp.Offset = 0
	case -1:
	default:
		for _, b := range fb.logs[k] {
			_, recs, _ := recordbatch.Decode(b)
			for _, r := range recs {
				if r.TimestampMs >= req.Timestamp {
					resp.Offset, resp.Timestamp = r.Offset, r.TimestampMs
					return resp, nil
				}
			}
		}
	}
	return resp, nil
}

func (fb *fakeBroker) DescribeCluster(context.Context, *brokerpb.DescribeClusterRequest) (*brokerpb.DescribeClusterResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return &brokerpb.DescribeClusterResponse{ControllerId: "k1", Topics: int32(len(fb.topics)),
		Brokers: []*brokerpb.BrokerDescription{{Info: &brokerpb.BrokerInfo{Id: "k1", Address: fb.addr}}}}, nil
}

func (fb *fakeBroker) DescribeTopic(_ context.Context, req *brokerpb.DescribeTopicRequest) (*brokerpb.DescribeTopicResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	n, ok := fb.topics[req.Name]
	if !ok {
		return nil, rpcerror.New(codes.NotFound, rpcerror.ReasonNotFound, false, "no topic "+req.Name)
	}
	d := &brokerpb.TopicDescription{Name: req.Name, Id: "id-" + req.Name, PartitionCount: n, Configs: []*brokerpb.ConfigEntry{
		{Name: "retention.ms", Value: "604800000", IsDefault: true}, {Name: "cleanup.policy", Value: "compact"}}}
	for p := range n {
		// Stale numbers on purpose: describe must show the live ones.
		d.Partitions = append(d.Partitions, &brokerpb.PartitionDescription{Partition: p, OwnerId: "k1", OwnerAddress: fb.addr,
			OwnerEpoch: 1, HighWatermark: 0, Bytes: 2048,
			Ledgers: []*brokerpb.LedgerDescription{{LedgerId: 7, FirstOffset: 0, LastOffset: -1}}})
	}
	return &brokerpb.DescribeTopicResponse{Topic: d}, nil
}

func (fb *fakeBroker) ListTopics(context.Context, *brokerpb.ListTopicsRequest) (*brokerpb.ListTopicsResponse, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	resp := &brokerpb.ListTopicsResponse{}
	for n, p := range fb.topics {
		resp.Topics = append(resp.Topics, &brokerpb.TopicSummary{Name: n, Partitions: p})
	}
	return resp, nil
}
