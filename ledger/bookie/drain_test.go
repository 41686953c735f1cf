package bookie

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/bookiepb"
)

// addStream is an AddEntries stream driven by a test: adds sent on in,
// answers read from out; closing in is the writer's EOF.
type addStream struct {
	grpc.ServerStream
	ctx context.Context
	in  chan *bookiepb.AddRequest
	out chan *bookiepb.AddResponse
}

func (s *addStream) Context() context.Context { return s.ctx }

func (s *addStream) RecvMsg(m any) error {
	req, ok := <-s.in
	if !ok {
		return io.EOF
	}
	proto.Merge(&m.(*pooledAdd).AddRequest, req)
	return nil
}

func (s *addStream) Recv() (*bookiepb.AddRequest, error) { panic("the service reads with RecvMsg") }

func (s *addStream) Send(r *bookiepb.AddResponse) error {
	s.out <- r
	return nil
}

// TestDrainEndsLongCalls: once the bookie drains for shutdown, an add
// stream ends at its next add, with UNAVAILABLE (retryable) after the adds
// it took are answered, and a long-polled LAC read returns at once with
// what it has; so the gRPC server can stop without waiting for them.
func TestDrainEndsLongCalls(t *testing.T) {
	st := memStorage(t)
	draining, drain := context.WithCancel(context.Background())
	s := &service{store: st, info: func() *bookiepb.BookieInfo { return &bookiepb.BookieInfo{} }, draining: draining}

	stream := &addStream{ctx: context.Background(), in: make(chan *bookiepb.AddRequest), out: make(chan *bookiepb.AddResponse, 8)}
	ended := make(chan error, 1)
	go func() { ended <- s.AddEntries(stream) }()
	stream.in <- &bookiepb.AddRequest{RequestId: 1, LedgerId: 5, EntryId: 0, Lac: -1, Payload: []byte("taken")}
	if r := testwait.Recv(t, 10*time.Second, "the first add's answer", stream.out); r.Status != bookiepb.AddStatus_ADD_OK {
		t.Fatalf("add before the drain: %v", r)
	}
	polled := make(chan *bookiepb.ReadLACResponse, 1)
	go func() {
		resp, err := s.ReadLAC(context.Background(), &bookiepb.ReadLACRequest{LedgerId: 5, PreviousLac: 5, WaitMs: 60_000})
		if err != nil {
			t.Errorf("ReadLAC after the drain: %v", err)
		}
		polled <- resp
	}()

	drain()
	if resp := testwait.Recv(t, 10*time.Second, "the long poll to return", polled); resp.GetLastEntryId() != 0 {
		t.Errorf("long poll after the drain: %v, want the ledger's state", resp)
	}
	stream.in <- &bookiepb.AddRequest{RequestId: 2, LedgerId: 5, EntryId: 1, Lac: 0, Payload: []byte("refused")}
	err := testwait.Recv(t, 10*time.Second, "the add stream to end", ended)
	if status.Code(err) != codes.Unavailable || !rpcerror.Retryable(err) {
		t.Fatalf("add stream after the drain ended with %v, want UNAVAILABLE, retryable", err)
	}
	if st, _ := st.State(5); st.LastEntryID != 0 {
		t.Fatalf("the add after the drain was stored: %+v", st)
	}
}
