package metaclient_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/commonpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// fakeStore is the replicated state that every fakeNode of a test serves:
// a versioned key-value store with a revision, an event history and leases.
type fakeStore struct {
	mu         sync.Mutex
	rev        int64
	kvs        map[string]*metadpb.KeyValue
	events     []*metadpb.Event // every change, in revision order
	compactRev int64            // watches from below this fail COMPACTED
	leases     map[int64]int64  // id → ttl in ms
	nextLease  int64
	changed    chan struct{} // closed and replaced on every change
}

func newFakeStore() *fakeStore {
	return &fakeStore{kvs: map[string]*metadpb.KeyValue{}, leases: map[int64]int64{}, changed: make(chan struct{})}
}

// REQUIRES: s.mu held.
func (s *fakeStore) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *fakeStore) put(key string, value []byte, lease int64) *metadpb.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(key, value, lease)
}

// REQUIRES: s.mu held.
func (s *fakeStore) putLocked(key string, value []byte, lease int64) *metadpb.KeyValue {
	s.rev++
	kv := &metadpb.KeyValue{Key: key, Value: value, CreateRevision: s.rev, ModRevision: s.rev, Version: 1, Lease: lease}
	if old, ok := s.kvs[key]; ok {
		kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
	}
	s.kvs[key] = kv
	s.events = append(s.events, &metadpb.Event{Type: metadpb.Event_PUT, Kv: proto.Clone(kv).(*metadpb.KeyValue)})
	s.notifyLocked()
	return proto.Clone(kv).(*metadpb.KeyValue)
}

// REQUIRES: s.mu held.
func (s *fakeStore) deleteLocked(key string, prefix bool) int64 {
	var keys []string
	for k := range s.kvs {
		if k == key || (prefix && strings.HasPrefix(k, key)) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return 0
	}
	s.rev++
	sort.Strings(keys)
	for _, k := range keys {
		delete(s.kvs, k)
		s.events = append(s.events, &metadpb.Event{Type: metadpb.Event_DELETE, Kv: &metadpb.KeyValue{Key: k, ModRevision: s.rev}})
	}
	s.notifyLocked()
	return int64(len(keys))
}

func (s *fakeStore) leaseCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}

// hookFunc runs at the start of a call; n counts the calls of that method
// on that node from 1. A non-nil error is returned instead of serving.
type hookFunc func(ctx context.Context, n int) error

// fakeNode is one in-process metad member serving a fakeStore on
// a loopback port from proctest.Listen, with per-method error injection and call counters.
type fakeNode struct {
	metadpb.UnimplementedMetadServer
	id    string
	store *fakeStore
	srv   *grpc.Server
	addr  string

	mu              sync.Mutex
	calls           map[string]int
	hooks           map[string]hookFunc
	watchStarts     []int64
	watchBreakAfter int    // > 0: end every watch stream with Unavailable after this many responses
	watchReplayFrom int64  // > 0: ignore start_revision and replay from here, like a confused server
	state           string // Status: "leader", "follower", ...
}

func startNode(t *testing.T, id string, store *fakeStore) *fakeNode {
	t.Helper()
	ln := proctest.Listen(t)
	n := &fakeNode{id: id, store: store, srv: grpc.NewServer(), addr: ln.Addr().String(),
		calls: map[string]int{}, hooks: map[string]hookFunc{}, state: "follower"}
	metadpb.RegisterMetadServer(n.srv, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		n.srv.Stop()
		<-done
	})
	return n
}

// stop kills the node: listener and connections close, in-flight calls fail.
func (n *fakeNode) stop() { n.srv.Stop() }

func (n *fakeNode) hook(method string, f hookFunc) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hooks[method] = f
}

func (n *fakeNode) count(method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[method]
}

func (n *fakeNode) starts() []int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]int64(nil), n.watchStarts...)
}

func (n *fakeNode) enter(ctx context.Context, method string) error {
	n.mu.Lock()
	n.calls[method]++
	c, h := n.calls[method], n.hooks[method]
	n.mu.Unlock()
	if h != nil {
		return h(ctx, c)
	}
	return nil
}

// Errors as metad returns them (see internal/rpcerror and metad/errors.go).
func errNoLeader() error {
	return rpcerror.New(codes.Unavailable, rpcerror.ReasonNoLeader, true, "no leader")
}

func errNoQuorum() error {
	return rpcerror.New(codes.Unavailable, rpcerror.ReasonNoQuorum, false, "no quorum")
}

func errNotLeader(leader string) error {
	return rpcerror.Error(codes.Unavailable, &commonpb.ErrorInfo{
		Reason: rpcerror.ReasonNotLeader, Retryable: true, Redirect: leader}, "not the leader")
}

func errNotFound() error {
	return rpcerror.New(codes.NotFound, rpcerror.ReasonNotFound, false, "lease not found")
}

func (n *fakeNode) Get(ctx context.Context, req *metadpb.GetRequest) (*metadpb.GetResponse, error) {
	if err := n.enter(ctx, "Get"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	kv, ok := s.kvs[req.Key]
	if !ok {
		return &metadpb.GetResponse{Revision: s.rev}, nil
	}
	return &metadpb.GetResponse{Kv: proto.Clone(kv).(*metadpb.KeyValue), Found: true, Revision: s.rev}, nil
}

func (n *fakeNode) List(ctx context.Context, req *metadpb.ListRequest) (*metadpb.ListResponse, error) {
	if err := n.enter(ctx, "List"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.kvs {
		if strings.HasPrefix(k, req.Prefix) && k > req.StartAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	limit := int(req.Limit)
	if limit <= 0 || limit > 2 {
		limit = 2 // small pages, so tests exercise paging
	}
	resp := &metadpb.ListResponse{Revision: s.rev}
	if len(keys) > limit {
		keys, resp.More = keys[:limit], true
	}
	for _, k := range keys {
		kv := proto.Clone(s.kvs[k]).(*metadpb.KeyValue)
		if req.KeysOnly {
			kv.Value = nil
		}
		resp.Kvs = append(resp.Kvs, kv)
	}
	return resp, nil
}

func (n *fakeNode) Put(ctx context.Context, req *metadpb.PutRequest) (*metadpb.PutResponse, error) {
	if err := n.enter(ctx, "Put"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.HasExpectedVersion {
		var cur int64
		if kv, ok := s.kvs[req.Key]; ok {
			cur = kv.Version
		}
		if cur != req.ExpectedVersion {
			return nil, rpcerror.New(codes.FailedPrecondition, rpcerror.ReasonVersionConflict, false, "version conflict")
		}
	}
	if req.Lease != 0 {
		if _, ok := s.leases[req.Lease]; !ok {
			return nil, errNotFound()
		}
	}
	kv := s.putLocked(req.Key, req.Value, req.Lease)
	return &metadpb.PutResponse{Kv: kv, Revision: kv.ModRevision}, nil
}

func (n *fakeNode) Delete(ctx context.Context, req *metadpb.DeleteRequest) (*metadpb.DeleteResponse, error) {
	if err := n.enter(ctx, "Delete"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.HasExpectedVersion {
		var cur int64
		if kv, ok := s.kvs[req.Key]; ok {
			cur = kv.Version
		}
		if cur != req.ExpectedVersion {
			return nil, rpcerror.New(codes.FailedPrecondition, rpcerror.ReasonVersionConflict, false, "version conflict")
		}
	}
	deleted := s.deleteLocked(req.Key, req.Prefix)
	return &metadpb.DeleteResponse{Deleted: deleted, Revision: s.rev}, nil
}

func (n *fakeNode) Txn(ctx context.Context, req *metadpb.TxnRequest) (*metadpb.TxnResponse, error) {
	if err := n.enter(ctx, "Txn"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &metadpb.TxnResponse{Succeeded: true}
	for _, c := range req.Compares {
		cur := &metadpb.KeyValue{Key: c.Key}
		if kv, ok := s.kvs[c.Key]; ok {
			cur = proto.Clone(kv).(*metadpb.KeyValue)
		}
		resp.Current = append(resp.Current, cur)
		if cur.Version != c.Version {
			resp.Succeeded = false
		}
	}
	if !resp.Succeeded {
		resp.Revision = s.rev
		return resp, nil
	}
	resp.Current = nil
	for _, o := range req.Ops {
		switch {
		case o.GetPut() != nil:
			resp.Results = append(resp.Results, &metadpb.OpResult{Kv: s.putLocked(o.GetPut().Key, o.GetPut().Value, o.GetPut().Lease)})
		case o.GetDelete() != nil:
			resp.Results = append(resp.Results, &metadpb.OpResult{Deleted: s.deleteLocked(o.GetDelete().Key, o.GetDelete().Prefix)})
		}
	}
	resp.Revision = s.rev
	return resp, nil
}

func (n *fakeNode) Watch(req *metadpb.WatchRequest, stream metadpb.Metad_WatchServer) error {
	ctx := stream.Context()
	if err := n.enter(ctx, "Watch"); err != nil {
		return err
	}
	n.mu.Lock()
	n.watchStarts = append(n.watchStarts, req.StartRevision)
	breakAfter, replay := n.watchBreakAfter, n.watchReplayFrom
	n.mu.Unlock()

	s := n.store
	s.mu.Lock()
	next := req.StartRevision
	if next == 0 {
		next = s.rev + 1
	}
	if next < s.compactRev {
		compact := s.compactRev
		s.mu.Unlock()
		return rpcerror.Error(codes.OutOfRange, &commonpb.ErrorInfo{
			Reason: rpcerror.ReasonCompacted, CompactRevision: compact}, "revision compacted")
	}
	s.mu.Unlock()
	if replay > 0 {
		next = replay
	}
	sent := 0
	for {
		s.mu.Lock()
		cur, changed := s.rev, s.changed
		var events []*metadpb.Event
		for _, ev := range s.events {
			if ev.Kv.ModRevision >= next && strings.HasPrefix(ev.Kv.Key, req.Prefix) {
				events = append(events, proto.Clone(ev).(*metadpb.Event))
			}
		}
		s.mu.Unlock()
		if cur >= next {
			if len(events) > 0 || req.ProgressNotify {
				if err := stream.Send(&metadpb.WatchResponse{Events: events, Revision: cur}); err != nil {
					return err
				}
				sent++
				if breakAfter > 0 && sent >= breakAfter {
					return status.Error(codes.Unavailable, "injected stream break")
				}
			}
			next = cur + 1
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (n *fakeNode) LeaseGrant(ctx context.Context, req *metadpb.LeaseGrantRequest) (*metadpb.LeaseGrantResponse, error) {
	if err := n.enter(ctx, "LeaseGrant"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextLease++
	s.leases[s.nextLease] = req.TtlMs
	return &metadpb.LeaseGrantResponse{Id: s.nextLease, TtlMs: req.TtlMs}, nil
}

func (n *fakeNode) LeaseKeepAlive(ctx context.Context, req *metadpb.LeaseKeepAliveRequest) (*metadpb.LeaseKeepAliveResponse, error) {
	if err := n.enter(ctx, "LeaseKeepAlive"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	ttl, ok := s.leases[req.Id]
	if !ok {
		return nil, errNotFound()
	}
	return &metadpb.LeaseKeepAliveResponse{Id: req.Id, TtlMs: ttl}, nil
}

func (n *fakeNode) LeaseRevoke(ctx context.Context, req *metadpb.LeaseRevokeRequest) (*metadpb.LeaseRevokeResponse, error) {
	if err := n.enter(ctx, "LeaseRevoke"); err != nil {
		return nil, err
	}
	s := n.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.leases[req.Id]; !ok {
		return nil, errNotFound()
	}
	delete(s.leases, req.Id)
	return &metadpb.LeaseRevokeResponse{Revision: s.rev}, nil
}

func (n *fakeNode) Status(ctx context.Context, _ *metadpb.StatusRequest) (*metadpb.StatusResponse, error) {
	if err := n.enter(ctx, "Status"); err != nil {
		return nil, err
	}
	n.mu.Lock()
	state := n.state
	n.mu.Unlock()
	n.store.mu.Lock()
	defer n.store.mu.Unlock()
	return &metadpb.StatusResponse{Id: n.id, State: state, Revision: n.store.rev,
		Members: []*metadpb.Member{{Id: n.id, ClientAddress: n.addr, Voter: true}}}, nil
}

func (n *fakeNode) MemberRemove(ctx context.Context, req *metadpb.MemberRemoveRequest) (*metadpb.MemberRemoveResponse, error) {
	if err := n.enter(ctx, "MemberRemove"); err != nil {
		return nil, err
	}
	if req.Id != n.id {
		return nil, rpcerror.New(codes.NotFound, rpcerror.ReasonNotFound, false, "no such member")
	}
	return &metadpb.MemberRemoveResponse{}, nil
}
