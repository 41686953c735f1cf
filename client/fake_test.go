package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/commonpb"
	"github.com/strata-log/strata/recordbatch"
)

// fakeCluster is an in-memory stand-in for a set of brokers: per-partition
// logs of stamped record batches, idempotent dedup by producer id and
// sequence, long-polling fetch, and knobs to inject routing changes and
// lost responses.
type fakeCluster struct {
	t       *testing.T
	brokers []*fakeBroker

	mu       sync.Mutex
	topics   map[string]int32
	logs     map[TopicPartition]*fakeLog
	owner    map[TopicPartition]int // broker index serving the partition
	metaOwnr map[TopicPartition]int // what Metadata claims, when set
	nextPID  int64
	appended chan struct{} // closed and replaced on every append

	// knobs and counters
	dropProduce     int           // apply the next n Produce requests, then fail them (unknown outcome)
	holdProduce     chan struct{} // when set, Produce waits for it to close
	heldProduces    int           // Produce calls that waited on holdProduce
	moveAfter       int           // after this many produce requests, moveTo takes over moveTP
	moveTP          TopicPartition
	moveTo          int
	rejectValue     string // batches holding a record with this value are TOO_LARGE
	fenced          bool   // answer PRODUCER_FENCED
	produceCalls    int
	batchesPerCall  []int
	notOwnerAnswers int
}

type fakeLog struct {
	batches   [][]byte
	start     int64
	next      int64
	producers map[int64]*fakeProducer
}

type fakeProducer struct {
	epoch   int16
	lastSeq int32
	recent  []fakeSeq // last 5 batches
}

type fakeSeq struct {
	seq  int32
	base int64
}

type fakeBroker struct {
	brokerpb.UnimplementedBrokerServer
	cl   *fakeCluster
	idx  int
	addr string
	// down makes every call fail with Unavailable, as a dead broker's
	// would, while Metadata elsewhere may still name it (its lease has not
	// run out yet).
	down atomic.Bool
}

// unavailableWhenDown fails every call to a broker that is down.
func (b *fakeBroker) unavailableWhenDown(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if b.down.Load() {
		return nil, status.Error(codes.Unavailable, "fake: broker down")
	}
	return h(ctx, req)
}

// newFakeCluster starts n fake brokers on 127.0.0.1:0.
func newFakeCluster(t *testing.T, n int) *fakeCluster {
	t.Helper()
	cl := &fakeCluster{
		t: t, topics: map[string]int32{}, logs: map[TopicPartition]*fakeLog{},
		owner: map[TopicPartition]int{}, metaOwnr: map[TopicPartition]int{},
		appended: make(chan struct{}), nextPID: 1000,
	}
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &fakeBroker{cl: cl, idx: i, addr: ln.Addr().String()}
		srv := grpc.NewServer(grpc.UnaryInterceptor(b.unavailableWhenDown))
		brokerpb.RegisterBrokerServer(srv, b)
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Stop(); <-done })
		cl.brokers = append(cl.brokers, b)
	}
	return cl
}

func (cl *fakeCluster) addrs() []string {
	var out []string
	for _, b := range cl.brokers {
		out = append(out, b.addr)
	}
	return out
}

// createTopic adds a topic whose partition p is owned by broker p % n.
func (cl *fakeCluster) createTopic(name string, partitions int32) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.topics[name] = partitions
	for p := range partitions {
		tp := TopicPartition{name, p}
		cl.logs[tp] = &fakeLog{producers: map[int64]*fakeProducer{}}
		cl.owner[tp] = int(p) % len(cl.brokers)
	}
}

// records returns every record of tp's log, decoded.
func (cl *fakeCluster) records(tp TopicPartition) []recordbatch.Record {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []recordbatch.Record
	for _, b := range cl.logs[tp].batches {
		_, recs, err := recordbatch.Decode(b)
		if err != nil {
			cl.t.Errorf("decode stored batch: %v", err)
		}
		out = append(out, recs...)
	}
	return out
}

func notOwner(redirect string) *brokerpb.PartitionError {
	return &brokerpb.PartitionError{Code: int32(codes.FailedPrecondition),
		Info: &commonpb.ErrorInfo{Reason: rpcerror.ReasonNotOwner, Retryable: true, Redirect: redirect}, Message: "not owner"}
}

func pErr(code codes.Code, reason string, retryable bool, msg string) *brokerpb.PartitionError {
	return &brokerpb.PartitionError{Code: int32(code), Info: &commonpb.ErrorInfo{Reason: reason, Retryable: retryable}, Message: msg}
}

// checkLocked returns the partition's log, or the error to answer.
// REQUIRES: cl.mu held.
func (b *fakeBroker) checkLocked(topic string, partition int32) (*fakeLog, *brokerpb.PartitionError) {
	tp := TopicPartition{topic, partition}
	l := b.cl.logs[tp]
	if l == nil {
		return nil, pErr(codes.NotFound, rpcerror.ReasonNotFound, false, "no such partition "+tp.String())
	}
	if o := b.cl.owner[tp]; o != b.idx {
		b.cl.notOwnerAnswers++
		return nil, notOwner(b.cl.brokers[o].addr)
	}
	return l, nil
}

func (b *fakeBroker) Metadata(_ context.Context, req *brokerpb.MetadataRequest) (*brokerpb.MetadataResponse, error) {
	cl := b.cl
	cl.mu.Lock()
	defer cl.mu.Unlock()
	resp := &brokerpb.MetadataResponse{ControllerId: "b0"}
	for _, fb := range cl.brokers {
		resp.Brokers = append(resp.Brokers, &brokerpb.BrokerInfo{Id: fmt.Sprint("b", fb.idx), Address: fb.addr})
	}
	names := req.Topics
	if len(names) == 0 {
		for n := range cl.topics {
			names = append(names, n)
		}
	}
	for _, name := range names {
		n, ok := cl.topics[name]
		tm := &brokerpb.TopicMetadata{Name: name}
		if !ok {
			tm.Error = pErr(codes.NotFound, rpcerror.ReasonNotFound, false, "no topic "+name)
		}
		for p := range n {
			tp := TopicPartition{name, p}
			o := cl.owner[tp]
			if m, ok := cl.metaOwnr[tp]; ok {
				o = m
			}
			tm.Partitions = append(tm.Partitions, &brokerpb.PartitionMetadata{Partition: p, OwnerId: fmt.Sprint("b", o), OwnerAddress: cl.brokers[o].addr, OwnerEpoch: 1})
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

func (b *fakeBroker) InitProducerID(context.Context, *brokerpb.InitProducerIDRequest) (*brokerpb.InitProducerIDResponse, error) {
	b.cl.mu.Lock()
	defer b.cl.mu.Unlock()
	b.cl.nextPID++
	return &brokerpb.InitProducerIDResponse{ProducerId: b.cl.nextPID, ProducerEpoch: 0}, nil
}

func (b *fakeBroker) Produce(ctx context.Context, req *brokerpb.ProduceRequest) (*brokerpb.ProduceResponse, error) {
	cl := b.cl
	cl.mu.Lock()
	hold := cl.holdProduce
	if hold != nil {
		cl.heldProduces++
	}
	cl.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.produceCalls++
	cl.batchesPerCall = append(cl.batchesPerCall, len(req.Partitions))
	if cl.moveAfter > 0 && cl.produceCalls == cl.moveAfter {
		cl.owner[cl.moveTP] = cl.moveTo
	}
	resp := &brokerpb.ProduceResponse{}
	for _, pp := range req.Partitions {
		res := &brokerpb.ProducePartitionResult{Topic: pp.Topic, Partition: pp.Partition, BaseOffset: -1}
		resp.Partitions = append(resp.Partitions, res)
		l, perr := b.checkLocked(pp.Topic, pp.Partition)
		if perr != nil {
			res.Error = perr
			continue
		}
		hdr, err := recordbatch.Verify(pp.Records)
		if err != nil {
			res.Error = pErr(codes.InvalidArgument, rpcerror.ReasonCorruptBatch, false, err.Error())
			continue
		}
		if cl.fenced {
			res.Error = pErr(codes.FailedPrecondition, rpcerror.ReasonProducerFenced, false, "fenced")
			continue
		}
		if cl.rejectValue != "" {
			_, recs, _ := recordbatch.Decode(pp.Records)
			if slices.ContainsFunc(recs, func(r recordbatch.Record) bool { return string(r.Value) == cl.rejectValue }) {
				res.Error = pErr(codes.InvalidArgument, rpcerror.ReasonTooLarge, false, "too large")
				continue
			}
		}
		var ps *fakeProducer
		if hdr.ProducerID >= 0 {
			ps = l.producers[hdr.ProducerID]
			if ps == nil && hdr.BaseSequence != 0 {
				// As the broker does once its wait for predecessors ends.
				res.Error = pErr(codes.FailedPrecondition, rpcerror.ReasonUnknownProducerID, false,
					fmt.Sprintf("producer %d is unknown here and its batch starts at sequence %d", hdr.ProducerID, hdr.BaseSequence))
				continue
			}
			if ps == nil {
				ps = &fakeProducer{epoch: hdr.ProducerEpoch, lastSeq: -1}
				l.producers[hdr.ProducerID] = ps
			}
			if hdr.ProducerEpoch < ps.epoch {
				res.Error = pErr(codes.FailedPrecondition, rpcerror.ReasonProducerFenced, false, "fenced")
				continue
			}
			dup := false
			for _, s := range ps.recent {
				if s.seq == hdr.BaseSequence {
					res.BaseOffset, res.Duplicate, dup = s.base, true, true
				}
			}
			if dup {
				continue
			}
			if hdr.BaseSequence != ps.lastSeq+1 {
				res.Error = pErr(codes.FailedPrecondition, rpcerror.ReasonOutOfOrderSequence, false,
					fmt.Sprintf("sequence %d, expected %d", hdr.BaseSequence, ps.lastSeq+1))
				continue
			}
		}
		buf := bytes.Clone(pp.Records)
		recordbatch.SetBaseOffset(buf, l.next)
		res.BaseOffset = l.next
		if ps != nil {
			ps.lastSeq = hdr.BaseSequence + hdr.RecordCount - 1
			ps.recent = append(ps.recent, fakeSeq{hdr.BaseSequence, l.next})
			if len(ps.recent) > 5 {
				ps.recent = ps.recent[1:]
			}
		}
		l.batches = append(l.batches, buf)
		l.next += int64(hdr.RecordCount)
		if req.Acks == brokerpb.Acks_ACKS_NONE {
			res.BaseOffset = -1
		}
	}
	close(cl.appended)
	cl.appended = make(chan struct{})
	if cl.dropProduce > 0 {
		cl.dropProduce--
		return nil, status.Error(codes.Unavailable, "fake: response lost")
	}
	return resp, nil
}

func (b *fakeBroker) Fetch(ctx context.Context, req *brokerpb.FetchRequest) (*brokerpb.FetchResponse, error) {
	deadline := time.Now().Add(time.Duration(req.MaxWaitMs) * time.Millisecond)
	for {
		b.cl.mu.Lock()
		resp, n := b.fetchLocked(req)
		appended := b.cl.appended
		b.cl.mu.Unlock()
		if n >= int(max(req.MinBytes, 1)) || !time.Now().Before(deadline) {
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

// fetchLocked answers req from the logs; n is the record bytes returned
// (errors count as 1 so they are returned at once).
// REQUIRES: b.cl.mu held.
func (b *fakeBroker) fetchLocked(req *brokerpb.FetchRequest) (*brokerpb.FetchResponse, int) {
	resp := &brokerpb.FetchResponse{}
	n := 0
	for _, fp := range req.Partitions {
		res := &brokerpb.FetchPartitionResult{Topic: fp.Topic, Partition: fp.Partition}
		resp.Partitions = append(resp.Partitions, res)
		l, perr := b.checkLocked(fp.Topic, fp.Partition)
		if perr != nil {
			res.Error, n = perr, n+1
			continue
		}
		res.HighWatermark, res.LogStartOffset = l.next, l.start
		if fp.Offset < l.start || fp.Offset > l.next {
			res.Error = pErr(codes.OutOfRange, rpcerror.ReasonOutOfRange, false,
				fmt.Sprintf("offset %d not in [%d, %d]", fp.Offset, l.start, l.next))
			n++
			continue
		}
		for _, batch := range l.batches {
			hdr, _ := recordbatch.ParseHeader(batch)
			if hdr.LastOffset() < fp.Offset {
				continue
			}
			if len(res.Records) > 0 && len(res.Records)+len(batch) > int(fp.MaxBytes) {
				break
			}
			res.Records = append(res.Records, batch...)
		}
		n += len(res.Records)
	}
	return resp, n
}

func (b *fakeBroker) ListOffsets(_ context.Context, req *brokerpb.ListOffsetsRequest) (*brokerpb.ListOffsetsResponse, error) {
	b.cl.mu.Lock()
	defer b.cl.mu.Unlock()
	l, perr := b.checkLocked(req.Topic, req.Partition)
	if perr != nil {
		return nil, rpcerror.Error(codes.Code(perr.Code), perr.Info, perr.Message)
	}
	resp := &brokerpb.ListOffsetsResponse{LogStartOffset: l.start, HighWatermark: l.next, Timestamp: -1}
	switch req.Timestamp {
	case -2:
		resp.Offset = l.start
	case -1:
		resp.Offset = l.next
	default:
		resp.Offset = l.next
		for _, batch := range l.batches {
			_, recs, _ := recordbatch.Decode(batch)
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

func (b *fakeBroker) CreateTopic(_ context.Context, req *brokerpb.CreateTopicRequest) (*brokerpb.CreateTopicResponse, error) {
	b.cl.mu.Lock()
	_, exists := b.cl.topics[req.Name]
	b.cl.mu.Unlock()
	if exists {
		return nil, rpcerror.New(codes.AlreadyExists, rpcerror.ReasonTopicExists, false, "topic exists")
	}
	b.cl.createTopic(req.Name, req.Partitions)
	return &brokerpb.CreateTopicResponse{Topic: &brokerpb.TopicDescription{Name: req.Name, PartitionCount: req.Partitions}}, nil
}

func (b *fakeBroker) ListTopics(context.Context, *brokerpb.ListTopicsRequest) (*brokerpb.ListTopicsResponse, error) {
	b.cl.mu.Lock()
	defer b.cl.mu.Unlock()
	resp := &brokerpb.ListTopicsResponse{}
	for n, p := range b.cl.topics {
		resp.Topics = append(resp.Topics, &brokerpb.TopicSummary{Name: n, Partitions: p})
	}
	return resp, nil
}
