package client

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/commonpb"
	"github.com/strata-log/strata/recordbatch"
)

// realCluster is n real brokers in-process (broker/brokertest): what every
// client test runs against. The fields are fault hooks and counters its
// interceptor applies to every broker's calls.
type realCluster struct {
	*brokertest.Cluster
	t testing.TB

	down []atomic.Bool // per broker: every call fails with Unavailable

	mu           sync.Mutex
	dropProduce  int           // apply the next n Produce requests, then fail them (unknown outcome)
	holdProduce  chan struct{} // when set, Produce waits for it to close
	heldProduces int           // Produce calls that waited on holdProduce
	moveAfter    int           // after this many produce requests, moveTo takes over moveTP
	moveTP       TopicPartition
	moveTo       int
	rejectValue  string // batches holding a record with this value are TOO_LARGE
	fenced       bool   // answer PRODUCER_FENCED
	// forgetProducers answers UNKNOWN_PRODUCER_ID, once, to every
	// idempotent batch past sequence 0, as a broker whose producer state
	// expired does.
	forgetProducers bool
	produceCalls    int
	batchesPerCall  []int
	notOwnerAnswers int
	nextPID         int64                  // 1000 + InitProducerID calls answered
	metaOwnr        map[TopicPartition]int // what Metadata claims, when set
	// staleFind: FindCoordinator names a broker that is not the
	// coordinator (which redirects) this many times first.
	staleFind int
	// redirects counts the group calls answered NOT_COORDINATOR.
	redirects int
	// failListOffsets: the next n ListOffsets calls fail (Internal).
	failListOffsets int
	// sink, when set, answers every Produce itself and stores nothing
	// (see produceSink).
	sink *produceSink
}

// Group coordinator timers for tests (broker.Config's group fields): a
// session may be as short as 500ms, members heartbeat every 100ms and
// expiries are seen within 50ms, so a fenced member is removed in about a
// second, not the production minimum of 6s.
const (
	testGroupMinSessionTimeout = 500 * time.Millisecond
	testGroupSessionTimeout    = 2 * time.Second
	testGroupHeartbeatInterval = 100 * time.Millisecond
	testGroupTickInterval      = 50 * time.Millisecond
)

func startRealCluster(t testing.TB, brokers int) *realCluster {
	t.Helper()
	c := &realCluster{t: t, down: make([]atomic.Bool, brokers), nextPID: 1000, metaOwnr: map[TopicPartition]int{}}
	c.Cluster = brokertest.Start(t, brokertest.Options{Brokers: brokers, Interceptor: c.intercept,
		Configure: func(_ int, cfg *broker.Config) {
			cfg.GroupMinSessionTimeout, cfg.GroupSessionTimeout = testGroupMinSessionTimeout, testGroupSessionTimeout
			cfg.GroupHeartbeatInterval, cfg.GroupTickInterval = testGroupHeartbeatInterval, testGroupTickInterval
		}})
	return c
}

// waitCoordinator waits until __consumer_offsets (created by the
// controller once elected) is served, so group tests start with a
// coordinator to find.
func (c *realCluster) waitCoordinator() {
	c.t.Helper()
	c.WaitServed(broker.OffsetsTopic)
}

// intercept applies the hooks to broker i's calls.
func (c *realCluster) intercept(i int) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if c.down[i].Load() {
			return nil, status.Error(codes.Unavailable, "test: broker down")
		}
		switch r := req.(type) {
		case *brokerpb.InitProducerIDRequest:
			resp, err := h(ctx, req)
			if err == nil {
				c.mu.Lock()
				c.nextPID++
				c.mu.Unlock()
			}
			return resp, err
		case *brokerpb.MetadataRequest:
			resp, err := h(ctx, req)
			if err == nil {
				c.rewriteMetadata(resp.(*brokerpb.MetadataResponse))
			}
			return resp, err
		case *brokerpb.ProduceRequest:
			return c.produce(ctx, r, h)
		case *brokerpb.ListOffsetsRequest:
			c.mu.Lock()
			fail := c.failListOffsets > 0
			if fail {
				c.failListOffsets--
			}
			c.mu.Unlock()
			if fail {
				return nil, status.Error(codes.Internal, "test: list offsets fails")
			}
		case *brokerpb.FindCoordinatorRequest:
			resp, err := h(ctx, req)
			if err == nil {
				c.staleCoordinator(resp.(*brokerpb.FindCoordinatorResponse))
			}
			return resp, err
		case *brokerpb.GroupHeartbeatRequest, *brokerpb.CommitOffsetsRequest, *brokerpb.FetchOffsetsRequest,
			*brokerpb.DescribeGroupRequest, *brokerpb.DeleteGroupRequest:
			resp, err := h(ctx, req)
			if rpcerror.Reason(err) == rpcerror.ReasonNotCoordinator {
				c.mu.Lock()
				c.redirects++
				c.mu.Unlock()
			}
			return resp, err
		}
		return h(ctx, req)
	}
}

// staleCoordinator makes FindCoordinator name another broker while
// staleFind lasts, as a lookup racing a coordinator move would.
func (c *realCluster) staleCoordinator(resp *brokerpb.FindCoordinatorResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.staleFind == 0 {
		return
	}
	for _, b := range c.Brokers {
		if b.ID != resp.BrokerId {
			c.staleFind--
			resp.BrokerId, resp.Address = b.ID, b.Addr
			return
		}
	}
}

// rewriteMetadata makes Metadata claim the owners in metaOwnr.
func (c *realCluster) rewriteMetadata(resp *brokerpb.MetadataResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tm := range resp.Topics {
		for _, pm := range tm.Partitions {
			if o, ok := c.metaOwnr[TopicPartition{tm.Name, pm.Partition}]; ok {
				pm.OwnerId, pm.OwnerAddress = c.Brokers[o].ID, c.Brokers[o].Addr
			}
		}
	}
}

// holdProduces makes Produce calls wait until release runs (once; later
// calls do nothing): it stops holding new calls and lets the held ones go.
func (c *realCluster) holdProduces() (release func()) {
	hold := make(chan struct{})
	c.mu.Lock()
	c.holdProduce = hold
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.mu.Lock()
		c.holdProduce = nil
		c.mu.Unlock()
		close(hold)
	})
}

func (c *realCluster) produce(ctx context.Context, req *brokerpb.ProduceRequest, h grpc.UnaryHandler) (any, error) {
	c.mu.Lock()
	hold := c.holdProduce
	if hold != nil {
		c.heldProduces++
	}
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.mu.Lock()
	sink := c.sink
	c.mu.Unlock()
	if sink != nil {
		return sink.produce(ctx, req)
	}
	c.mu.Lock()
	c.produceCalls++
	c.batchesPerCall = append(c.batchesPerCall, len(req.Partitions))
	move := c.moveAfter > 0 && c.produceCalls == c.moveAfter
	fenced, reject, forget := c.fenced, c.rejectValue, c.forgetProducers
	c.forgetProducers = false
	c.mu.Unlock()
	if move {
		if err := c.MovePartition(c.moveTP.Topic, c.moveTP.Partition, c.moveTo); err != nil {
			return nil, status.Errorf(codes.Internal, "test: moving %s: %v", c.moveTP, err)
		}
	}
	// Batches the hooks answer themselves stay out of the request.
	answered := map[int]*brokerpb.PartitionError{}
	for i, pp := range req.Partitions {
		hdr, _ := recordbatch.ParseHeader(pp.Records)
		switch {
		case forget && hdr.ProducerID >= 0 && hdr.BaseSequence != 0:
			answered[i] = &brokerpb.PartitionError{Code: int32(codes.FailedPrecondition),
				Info: &commonpb.ErrorInfo{Reason: rpcerror.ReasonUnknownProducerID}, Message: "unknown producer"}
		case fenced:
			answered[i] = &brokerpb.PartitionError{Code: int32(codes.FailedPrecondition),
				Info: &commonpb.ErrorInfo{Reason: rpcerror.ReasonProducerFenced}, Message: "fenced"}
		case reject != "":
			_, recs, _ := recordbatch.Decode(pp.Records)
			if slices.ContainsFunc(recs, func(r recordbatch.Record) bool { return string(r.Value) == reject }) {
				answered[i] = &brokerpb.PartitionError{Code: int32(codes.InvalidArgument),
					Info: &commonpb.ErrorInfo{Reason: rpcerror.ReasonTooLarge}, Message: "too large"}
			}
		}
	}
	out := &brokerpb.ProduceResponse{}
	if len(answered) < len(req.Partitions) {
		sub := proto.Clone(req).(*brokerpb.ProduceRequest)
		sub.Partitions = nil
		for i, pp := range req.Partitions {
			if answered[i] == nil {
				sub.Partitions = append(sub.Partitions, pp)
			}
		}
		resp, err := h(ctx, sub)
		if err != nil {
			return nil, err
		}
		out = resp.(*brokerpb.ProduceResponse)
	}
	for i, pp := range req.Partitions {
		if perr := answered[i]; perr != nil {
			out.Partitions = append(out.Partitions, &brokerpb.ProducePartitionResult{Topic: pp.Topic, Partition: pp.Partition,
				BaseOffset: -1, Error: perr})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, res := range out.Partitions {
		if res.Error.GetInfo().GetReason() == rpcerror.ReasonNotOwner {
			c.notOwnerAnswers++
		}
	}
	if c.dropProduce > 0 {
		c.dropProduce--
		return nil, status.Error(codes.Unavailable, "test: response lost")
	}
	return out, nil
}

// produceSink answers Produce requests in place of the broker, for
// measuring the producer alone: the in-memory bookies would keep every
// produced byte in the heap the producer's memory is measured in, and the
// broker's own allocations would count with the producer's. It numbers
// each partition's records from 0 and drops the request's batches before
// answering, so that the server holds none of the producer's bytes.
type produceSink struct {
	// latency delays every answer (a broker's quorum write).
	latency time.Duration

	mu      sync.Mutex
	next    map[TopicPartition]int64
	held    chan struct{} // when set, answers wait for it to close
	waiting int           // batches received and not yet answered
}

// unanswered is how many batches the sink has received (and let go of)
// and not answered yet.
func (s *produceSink) unanswered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

func newProduceSink(latency time.Duration) *produceSink {
	return &produceSink{latency: latency, next: map[TopicPartition]int64{}}
}

// hold makes answers wait until release runs.
func (s *produceSink) hold() (release func()) {
	held := make(chan struct{})
	s.mu.Lock()
	s.held = held
	s.mu.Unlock()
	return sync.OnceFunc(func() {
		s.mu.Lock()
		s.held = nil
		s.mu.Unlock()
		close(held)
	})
}

func (s *produceSink) produce(ctx context.Context, req *brokerpb.ProduceRequest) (*brokerpb.ProduceResponse, error) {
	out := &brokerpb.ProduceResponse{Partitions: make([]*brokerpb.ProducePartitionResult, len(req.Partitions))}
	s.mu.Lock()
	for i, pp := range req.Partitions {
		hdr, err := recordbatch.ParseHeader(pp.Records)
		if err != nil {
			s.mu.Unlock()
			return nil, status.Errorf(codes.InvalidArgument, "test: sink: %v", err)
		}
		tp := TopicPartition{pp.Topic, pp.Partition}
		out.Partitions[i] = &brokerpb.ProducePartitionResult{Topic: pp.Topic, Partition: pp.Partition, BaseOffset: s.next[tp]}
		s.next[tp] += int64(hdr.RecordCount)
		pp.Records = nil
	}
	held := s.held
	s.waiting += len(req.Partitions)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.waiting -= len(req.Partitions)
		s.mu.Unlock()
	}()
	var wait <-chan time.Time
	if s.latency > 0 {
		t := time.NewTimer(s.latency)
		defer t.Stop()
		wait = t.C
	}
	for held != nil || wait != nil {
		select {
		case <-held:
			held = nil
		case <-wait:
			wait = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func (c *realCluster) addrs() []string { return c.Addrs() }

// ownerIndex is the index of the broker serving tp, per its ownership
// record (-1 when none).
func (c *realCluster) ownerIndex(tp TopicPartition) int {
	id, _ := c.Owner(tp.Topic, tp.Partition)
	for i, b := range c.Brokers {
		if b.ID == id {
			return i
		}
	}
	return -1
}

// createTopic creates a topic and waits until every partition is served.
func (c *realCluster) createTopic(name string, partitions int32) {
	c.t.Helper()
	c.CreateTopic(name, partitions, nil)
}

// records returns every record of tp's log, read from its owner.
func (c *realCluster) records(tp TopicPartition) []recordbatch.Record {
	c.t.Helper()
	var out []recordbatch.Record
	for _, b := range c.batches(tp) {
		_, recs, err := recordbatch.Decode(b)
		if err != nil {
			c.t.Fatalf("fetch %s: %v", tp, err)
		}
		out = append(out, recs...)
	}
	return out
}

// batchCount is how many batches tp's log holds.
func (c *realCluster) batchCount(tp TopicPartition) int {
	c.t.Helper()
	return len(c.batches(tp))
}

// batches returns tp's log, batch by batch, read from its owner.
func (c *realCluster) batches(tp TopicPartition) [][]byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, addr := c.Owner(tp.Topic, tp.Partition)
	i := 0
	for j, b := range c.Brokers {
		if b.Addr == addr {
			i = j
		}
	}
	cl := c.Client(i)
	var out [][]byte
	next := int64(0)
	for {
		resp, err := cl.Fetch(ctx, &brokerpb.FetchRequest{Partitions: []*brokerpb.FetchPartition{
			{Topic: tp.Topic, Partition: tp.Partition, Offset: next, MaxBytes: 1 << 20}}})
		if err != nil {
			c.t.Fatalf("fetch %s: %v", tp, err)
		}
		res := resp.Partitions[0]
		if res.Error != nil {
			c.t.Fatalf("fetch %s: %s", tp, res.Error.Message)
		}
		batches, err := recordbatch.Split(res.Records)
		if err != nil {
			c.t.Fatalf("fetch %s: %v", tp, err)
		}
		progress := false
		for _, b := range batches {
			hdr, err := recordbatch.ParseHeader(b)
			if err != nil {
				c.t.Fatalf("fetch %s: %v", tp, err)
			}
			if hdr.LastOffset() >= next {
				out = append(out, b)
				next, progress = hdr.LastOffset()+1, true
			}
		}
		if !progress {
			return out
		}
	}
}
