package ledgergrpc

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/strata-log/strata/proto/bookiepb"
)

// TestOrderDoesNotGrowWhileAddsStayInFlight: a stream whose adds never all
// end at once (a busy writer always has one in flight) must not keep an
// order slot for every add it ever carried. trimLocked only went back to the
// front of s.order once every add had ended, so under steady load s.order
// grew by one pointer per add, forever (and append copied the dead prefix on
// every growth).
func TestOrderDoesNotGrowWhileAddsStayInFlight(t *testing.T) {
	s := &addStream{pending: map[uint64]*pendingAdd{}}
	const adds = 100_000
	var prev *pendingAdd
	for i := range adds {
		p := &pendingAdd{req: bookiepb.AddRequest{RequestId: uint64(i + 1)}}
		s.order = append(s.order, p) // as bookieConn.add does
		if prev != nil {
			prev.done = true // the previous add's answer, after this one was sent
			s.trimLocked()
		}
		prev = p
	}
	if live := len(s.order) - s.head; live != 1 {
		t.Fatalf("%d adds live in s.order, want 1", live)
	}
	if len(s.order) > 4*maxIdleList || cap(s.order) > 8*maxIdleList {
		t.Errorf("after %d adds with at most 2 in flight: len(s.order) %d (head %d), cap %d: it grows with every add",
			adds, len(s.order), s.head, cap(s.order))
	}
}

// holdBackBookie answers each add only once the next one arrives, so the
// client always has one add in flight.
type holdBackBookie struct {
	bookiepb.UnimplementedBookieServer
}

func (holdBackBookie) AddEntries(stream grpc.BidiStreamingServer[bookiepb.AddRequest, bookiepb.AddResponse]) error {
	var last *bookiepb.AddRequest
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if last != nil {
			if err := stream.Send(&bookiepb.AddResponse{RequestId: last.RequestId, LedgerId: last.LedgerId,
				EntryId: last.EntryId, Status: bookiepb.AddStatus_ADD_OK}); err != nil {
				return err
			}
		}
		last = req
	}
}

// The same through the real client and a gRPC bookie.
func TestClientOrderBoundedUnderSteadyLoad(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bookiepb.RegisterBookieServer(srv, holdBackBookie{})
	go srv.Serve(lis)
	defer srv.Stop()
	c := New(Options{AddTimeout: time.Minute})
	defer c.Close()
	addr := lis.Addr().String()

	const adds = 8192
	answered := make(chan error, adds)
	cb := func(resp *bookiepb.AddResponse, err error) { answered <- err }
	payload := []byte("x")
	c.Add(addr, &bookiepb.AddRequest{LedgerId: 1, EntryId: 0, Lac: -1, Payload: payload}, cb)
	for i := 1; i < adds; i++ {
		c.Add(addr, &bookiepb.AddRequest{LedgerId: 1, EntryId: uint64(i), Lac: -1, Payload: payload}, cb)
		select {
		case err := <-answered: // add i-1's answer, sent when add i arrived
			if err != nil {
				t.Fatalf("add %d: %v", i-1, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no answer to add %d", i-1)
		}
	}
	b, err := c.bookie(addr)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	s := b.mu.stream
	n, head, capacity := len(s.order), s.head, cap(s.order)
	b.mu.Unlock()
	t.Logf("after %d adds, one in flight: len(order) %d, head %d, cap %d", adds, n, head, capacity)
	if n-head > 2 {
		t.Fatalf("%d adds live, want at most 2", n-head)
	}
	if n > adds/2 {
		t.Errorf("after %d adds with one in flight, s.order holds %d slots (head %d, cap %d): it grows with every add",
			adds, n, head, capacity)
	}
}
