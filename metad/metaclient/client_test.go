package metaclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/metadpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor bounds every wait in these tests; nothing sleeps to wait.
const waitFor = 10 * time.Second

func newClient(t *testing.T, endpoints ...string) *metaclient.Client {
	t.Helper()
	c, err := metaclient.New(metaclient.Config{Endpoints: endpoints, RequestTimeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// deadAddress returns an address where nothing listens.
func deadAddress(t *testing.T) string {
	return proctest.FreeAddr(t)
}

func recvResult(t *testing.T, ch <-chan metaclient.WatchResult) metaclient.WatchResult {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return r
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for a watch result")
	}
	panic("unreachable")
}

// recvRevisions receives until it has seen events for want revisions and
// returns the mod revisions of every event received, in order.
func recvRevisions(t *testing.T, ch <-chan metaclient.WatchResult, want int) []int64 {
	t.Helper()
	var revs []int64
	distinct := map[int64]bool{}
	for len(distinct) < want {
		r := recvResult(t, ch)
		if r.Err != nil {
			t.Fatalf("watch error: %v", r.Err)
		}
		for _, ev := range r.Events {
			revs = append(revs, ev.Kv.ModRevision)
			distinct[ev.Kv.ModRevision] = true
		}
	}
	return revs
}

func waitClosed(t *testing.T, ch <-chan metaclient.WatchResult) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("watch channel not closed")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  metaclient.Config
		ok   bool
	}{
		{"ok", metaclient.Config{Endpoints: []string{"127.0.0.1:7001", "host:7002"}}, true},
		{"no endpoints", metaclient.Config{}, false},
		{"no port", metaclient.Config{Endpoints: []string{"127.0.0.1"}}, false},
		{"empty host", metaclient.Config{Endpoints: []string{":7001"}}, false},
		{"duplicate", metaclient.Config{Endpoints: []string{"a:1", "a:1"}}, false},
		{"negative timeout", metaclient.Config{Endpoints: []string{"a:1"}, RequestTimeout: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestKeyValueCalls(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	c := newClient(t, n.addr)
	ctx := testContext(t)

	if _, err := c.Get(ctx, "k"); !errors.Is(err, metaclient.ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	}
	kv, err := c.Put(ctx, "k", []byte("v1"))
	if err != nil || kv.Version != 1 || kv.ModRevision != 1 {
		t.Fatalf("Put = %v, %v", kv, err)
	}
	if _, err := c.Put(ctx, "k", []byte("v2"), metaclient.WithExpectedVersion(1)); err != nil {
		t.Fatalf("CAS put: %v", err)
	}
	_, err = c.Put(ctx, "k", []byte("v3"), metaclient.WithExpectedVersion(1))
	if !errors.Is(err, metaclient.ErrVersionConflict) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale CAS put: err = %v, want ErrVersionConflict", err)
	}
	if _, err := c.Put(ctx, "k", nil, metaclient.WithLease(42)); !errors.Is(err, metaclient.ErrLeaseNotFound) {
		t.Fatalf("put with missing lease: err = %v, want ErrLeaseNotFound", err)
	}
	got, err := c.Get(ctx, "k", metaclient.Stale())
	if err != nil || string(got.Value) != "v2" || got.Version != 2 {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if _, err := c.Delete(ctx, "k", metaclient.WithExpectedVersion(1)); !errors.Is(err, metaclient.ErrVersionConflict) {
		t.Fatalf("stale CAS delete: err = %v", err)
	}
	if d, err := c.Delete(ctx, "k"); err != nil || d != 1 {
		t.Fatalf("Delete = %d, %v", d, err)
	}
	if d, err := c.Delete(ctx, "k"); err != nil || d != 0 {
		t.Fatalf("Delete missing = %d, %v", d, err)
	}
	for _, k := range []string{"p/a", "p/b", "q"} {
		if _, err := c.Put(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := c.Delete(ctx, "p/", metaclient.WithPrefix()); err != nil || d != 2 {
		t.Fatalf("Delete prefix = %d, %v", d, err)
	}
	if _, err := c.Put(ctx, "k", nil, metaclient.WithPrefix()); err == nil {
		t.Fatal("Put WithPrefix: no error")
	}

	resp, err := c.Txn(ctx, []*metadpb.Compare{{Key: "q", Version: 1}},
		[]*metadpb.Op{{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: "q", Value: []byte("x")}}}})
	if err != nil || !resp.Succeeded || resp.Results[0].Kv.Version != 2 {
		t.Fatalf("Txn = %v, %v", resp, err)
	}
	resp, err = c.Txn(ctx, []*metadpb.Compare{{Key: "q", Version: 1}}, nil)
	if err != nil || resp.Succeeded || resp.Current[0].Version != 2 {
		t.Fatalf("failed Txn = %v, %v", resp, err)
	}
}

func TestListFollowsPages(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	c := newClient(t, n.addr)
	ctx := testContext(t)
	for i := range 5 {
		store.put(fmt.Sprintf("t/%d", i), []byte{byte(i)}, 0)
	}
	store.put("u/0", nil, 0)
	// A write between pages must not change the reported revision.
	n.hook("List", func(_ context.Context, call int) error {
		if call == 2 {
			store.put("z", nil, 0)
		}
		return nil
	})
	kvs, rev, err := c.List(ctx, "t/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, kv.Key)
	}
	if want := []string{"t/0", "t/1", "t/2", "t/3", "t/4"}; !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
	if rev != 6 {
		t.Fatalf("revision = %d, want 6 (the first page's)", rev)
	}
	if got := n.count("List"); got != 3 {
		t.Fatalf("List calls = %d, want 3 pages", got)
	}
	kvs, _, err = c.List(ctx, "t/", metaclient.KeysOnly(), metaclient.Stale())
	if err != nil || len(kvs) != 5 || kvs[4].Value != nil {
		t.Fatalf("keys-only List = %v, %v", kvs, err)
	}
}

func TestLeaderRedirect(t *testing.T) {
	store := newFakeStore()
	follower := startNode(t, "a", store)
	leader := startNode(t, "b", store)
	follower.hook("Put", func(context.Context, int) error { return errNotLeader(leader.addr) })
	c := newClient(t, follower.addr) // the leader is not configured
	ctx := testContext(t)

	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if f, l := follower.count("Put"), leader.count("Put"); f != 1 || l != 1 {
		t.Fatalf("Put calls: follower %d, leader %d; want 1, 1", f, l)
	}
	// The leader is now preferred.
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if f, l := follower.count("Get"), leader.count("Get"); f != 0 || l != 1 {
		t.Fatalf("Get calls: follower %d, leader %d; want 0, 1", f, l)
	}
}

func TestNoLeaderRetriedUntilSuccess(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	failFirst := func(k int) hookFunc {
		return func(_ context.Context, call int) error {
			if call <= k {
				return errNoLeader()
			}
			return nil
		}
	}
	n.hook("Put", failFirst(3))
	n.hook("Get", failFirst(3))
	n.hook("LeaseGrant", failFirst(2))
	c := newClient(t, n.addr)
	ctx := testContext(t)
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := c.Grant(ctx, time.Minute); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	if p, g, l := n.count("Put"), n.count("Get"), n.count("LeaseGrant"); p != 4 || g != 4 || l != 3 {
		t.Fatalf("calls: put %d get %d grant %d; want 4 4 3", p, g, l)
	}
}

func TestNoQuorumNotRetriedForWrites(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	n.hook("Put", func(context.Context, int) error { return errNoQuorum() })
	n.hook("Delete", func(context.Context, int) error { return errNoQuorum() })
	c := newClient(t, n.addr)
	ctx := testContext(t)

	_, err := c.Put(ctx, "k", []byte("v"))
	if !errors.Is(err, metaclient.ErrNoQuorum) || !errors.Is(err, metaclient.ErrUnknownOutcome) {
		t.Fatalf("Put err = %v, want ErrNoQuorum and ErrUnknownOutcome", err)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("status code = %v, want the server's Unavailable", status.Code(err))
	}
	if _, err := c.Delete(ctx, "k"); !errors.Is(err, metaclient.ErrNoQuorum) {
		t.Fatalf("Delete err = %v", err)
	}
	if p, d := n.count("Put"), n.count("Delete"); p != 1 || d != 1 {
		t.Fatalf("calls: put %d delete %d; want 1 each (no retry)", p, d)
	}
}

func TestReadsRetryAnyUnavailable(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	n.hook("Get", func(_ context.Context, call int) error {
		if call <= 2 {
			return errNoQuorum() // not retryable for a write; a read may repeat it
		}
		return nil
	})
	n.hook("Status", func(_ context.Context, call int) error {
		if call == 1 {
			return status.Error(codes.Unavailable, "no detail")
		}
		return nil
	})
	c := newClient(t, n.addr)
	ctx := testContext(t)
	if _, err := c.Get(ctx, "k"); !errors.Is(err, metaclient.ErrNotFound) {
		t.Fatalf("Get err = %v, want ErrNotFound after retries", err)
	}
	if st, err := c.Status(ctx); err != nil || st.Id != "a" {
		t.Fatalf("Status = %v, %v", st, err)
	}
	if g, s := n.count("Get"), n.count("Status"); g != 3 || s != 2 {
		t.Fatalf("calls: get %d status %d; want 3 2", g, s)
	}
}

func TestDeadEndpointTriesNext(t *testing.T) {
	n := startNode(t, "b", newFakeStore())
	c := newClient(t, deadAddress(t), n.addr)
	ctx := testContext(t)
	// A write may move on: connection refused means nothing was sent.
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if p, g := n.count("Put"), n.count("Get"); p != 1 || g != 1 {
		t.Fatalf("calls: put %d get %d", p, g)
	}
}

func TestWriteNotRetriedOnceSent(t *testing.T) {
	store := newFakeStore()
	a := startNode(t, "a", store)
	b := startNode(t, "b", store)
	entered := make(chan struct{})
	a.hook("Put", func(ctx context.Context, _ int) error {
		close(entered)
		<-ctx.Done() // hold the request until the node dies
		return ctx.Err()
	})
	c := newClient(t, a.addr, b.addr)
	ctx := testContext(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Put(ctx, "k", []byte("v"))
		errc <- err
	}()
	<-entered
	a.stop()
	err := <-errc
	if !errors.Is(err, metaclient.ErrUnknownOutcome) || errors.Is(err, metaclient.ErrUnavailable) {
		t.Fatalf("Put err = %v, want ErrUnknownOutcome only", err)
	}
	if b.count("Put") != 0 {
		t.Fatal("a write whose outcome is unknown was retried on another endpoint")
	}
}

func TestCallHonoursContext(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	n.hook("Get", func(context.Context, int) error { return errNoLeader() })
	c := newClient(t, n.addr)
	// Long enough that a loaded machine still gets a server answer (the
	// NO_LEADER to keep) before the deadline.
	const timeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err := c.Get(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, metaclient.ErrUnavailable) {
		t.Fatalf("err = %v, want DeadlineExceeded and ErrUnavailable", err)
	}
	if rpcReason(err) != "NO_LEADER" {
		t.Fatalf("err = %v, want the last server error (NO_LEADER) kept", err)
	}
	if d := time.Since(start) - timeout; d > 2*time.Second {
		t.Fatalf("Get took %v after its deadline", d)
	}
	if n.count("Get") < 2 {
		t.Fatalf("Get was not retried (%d calls)", n.count("Get"))
	}
}

func rpcReason(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(interface{ GetReason() string }); ok {
			return info.GetReason()
		}
	}
	return ""
}

func TestWatchResubscribesFromLastRevision(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	n.watchBreakAfter = 1 // every stream dies after one response
	c := newClient(t, n.addr)
	ctx := testContext(t)
	ch := c.Watch(ctx, "k/", 1)
	var got []int64
	for i := 1; i <= 4; i++ {
		store.put(fmt.Sprintf("k/%d", i), []byte("v"), 0)
		got = append(got, recvRevisions(t, ch, 1)...)
	}
	if want := []int64{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("revisions = %v, want %v", got, want)
	}
	testwait.Until(t, waitFor, "fifth subscription", func() bool { return len(n.starts()) == 5 })
	if starts, want := n.starts(), []int64{1, 2, 3, 4, 5}; !slices.Equal(starts, want) {
		t.Fatalf("subscriptions started at %v, want %v", starts, want)
	}
}

func TestWatchDropsRepeatedEvents(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	n.watchBreakAfter = 1
	n.watchReplayFrom = 1 // the server replays history from 1 on every stream
	c := newClient(t, n.addr)
	ctx := testContext(t)
	ch := c.Watch(ctx, "k/", 1)
	var got []int64
	for i := 1; i <= 3; i++ {
		store.put(fmt.Sprintf("k/%d", i), []byte("v"), 0)
		got = append(got, recvRevisions(t, ch, 1)...)
	}
	store.put("other", nil, 0) // revision 4, outside the prefix
	store.put("k/5", nil, 0)
	got = append(got, recvRevisions(t, ch, 1)...)
	if want := []int64{1, 2, 3, 5}; !slices.Equal(got, want) {
		t.Fatalf("revisions = %v, want %v (each once)", got, want)
	}
}

func TestWatchMovesToNextEndpoint(t *testing.T) {
	store := newFakeStore()
	a := startNode(t, "a", store)
	b := startNode(t, "b", store)
	c := newClient(t, a.addr, b.addr)
	ctx := testContext(t)
	ch := c.Watch(ctx, "k/", 1)
	store.put("k/1", nil, 0)
	store.put("k/2", nil, 0)
	if got := recvRevisions(t, ch, 2); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("revisions = %v", got)
	}
	a.stop()
	store.put("k/3", nil, 0)
	if got := recvRevisions(t, ch, 1); !slices.Equal(got, []int64{3}) {
		t.Fatalf("revisions after failover = %v, want [3]", got)
	}
	if starts := b.starts(); !slices.Equal(starts, []int64{3}) {
		t.Fatalf("b's subscriptions = %v, want [3]", starts)
	}
}

func TestWatchFromNow(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	store.put("k/old", nil, 0)
	c := newClient(t, n.addr)
	ctx := testContext(t)
	ch := c.Watch(ctx, "k/", 0)
	testwait.Until(t, waitFor, "subscription", func() bool { return len(n.starts()) == 1 })
	if starts := n.starts(); starts[0] != 2 {
		t.Fatalf("subscribed from %d, want the pinned revision 2", starts[0])
	}
	store.put("k/new", nil, 0)
	r := recvResult(t, ch)
	if len(r.Events) != 1 || r.Events[0].Kv.Key != "k/new" || r.Revision != 2 {
		t.Fatalf("result = %v", r)
	}
}

func TestWatchProgressNotify(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	c := newClient(t, n.addr)
	ctx := testContext(t)
	ch := c.Watch(ctx, "k/", 1)
	store.put("other", nil, 0)
	r := recvResult(t, ch)
	if len(r.Events) != 0 || r.Revision != 1 || r.Err != nil {
		t.Fatalf("progress result = %+v", r)
	}
}

func TestWatchCompacted(t *testing.T) {
	store := newFakeStore()
	for i := range 10 {
		store.put(fmt.Sprintf("k/%d", i), nil, 0)
	}
	store.compactRev = 5
	n := startNode(t, "a", store)
	c := newClient(t, n.addr)
	ch := c.Watch(testContext(t), "k/", 2)
	r := recvResult(t, ch)
	var ce *metaclient.CompactedError
	if !errors.As(r.Err, &ce) || !errors.Is(r.Err, metaclient.ErrCompacted) || ce.CompactRevision != 5 {
		t.Fatalf("final result = %+v, want CompactedError{5}", r)
	}
	waitClosed(t, ch)
	if n.count("Watch") != 1 {
		t.Fatalf("compacted watch was retried (%d calls)", n.count("Watch"))
	}
}

func TestWatchClosesWithContext(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	c := newClient(t, n.addr)
	ctx, cancel := context.WithCancel(context.Background())
	ch := c.Watch(ctx, "k/", 1)
	testwait.Until(t, waitFor, "subscription", func() bool { return len(n.starts()) == 1 })
	cancel()
	waitClosed(t, ch)
}

func TestCloseStopsWatchesAndCalls(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	c, err := metaclient.New(metaclient.Config{Endpoints: []string{n.addr}})
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Watch(context.Background(), "k/", 1)
	testwait.Until(t, waitFor, "subscription", func() bool { return len(n.starts()) == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ch)
	if _, err := c.Get(context.Background(), "k"); !errors.Is(err, metaclient.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	r := <-c.Watch(context.Background(), "k/", 1)
	if !errors.Is(r.Err, metaclient.ErrClosed) {
		t.Fatalf("Watch after Close: %+v", r)
	}
}

func TestSessionKeepsAliveAndRevokes(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	c := newClient(t, n.addr)
	s, err := c.NewSession(testContext(t), 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, waitFor, "three keep-alives", func() bool { return n.count("LeaseKeepAlive") >= 3 })
	select {
	case <-s.Done():
		t.Fatal("healthy session reported lost")
	default:
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if store.leaseCount() != 0 || n.count("LeaseRevoke") != 1 {
		t.Fatalf("Close did not revoke: %d leases, %d revokes", store.leaseCount(), n.count("LeaseRevoke"))
	}
	<-s.Done()
}

func TestSessionLostWhenLeaseNotFound(t *testing.T) {
	store := newFakeStore()
	n := startNode(t, "a", store)
	c := newClient(t, n.addr)
	s, err := c.NewSession(testContext(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	delete(store.leases, s.Lease()) // the lease expired on the server
	store.mu.Unlock()
	select {
	case <-s.Done():
	case <-time.After(waitFor):
		t.Fatal("session not reported lost")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n.count("LeaseRevoke") != 0 {
		t.Fatal("Close revoked a lost lease")
	}
}

func TestSessionLostWithoutKeepAliveForTTL(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	n.hook("LeaseKeepAlive", func(context.Context, int) error { return errNoLeader() })
	c := newClient(t, n.addr)
	const ttl = 300 * time.Millisecond
	start := time.Now()
	s, err := c.NewSession(testContext(t), ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-s.Done():
	case <-time.After(waitFor):
		t.Fatal("session not reported lost")
	}
	if d := time.Since(start); d < ttl {
		t.Fatalf("session lost after %v, before its TTL %v", d, ttl)
	}
	if n.count("LeaseKeepAlive") < 2 {
		t.Fatalf("keep-alive was not retried (%d calls)", n.count("LeaseKeepAlive"))
	}
}

func TestLeaseCalls(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	c := newClient(t, n.addr)
	ctx := testContext(t)
	id, err := c.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ttl, err := c.KeepAlive(ctx, id); err != nil || ttl != 10*time.Second {
		t.Fatalf("KeepAlive = %v, %v", ttl, err)
	}
	if err := c.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeepAlive(ctx, id); !errors.Is(err, metaclient.ErrLeaseNotFound) {
		t.Fatalf("KeepAlive of revoked lease: %v", err)
	}
	if err := c.Revoke(ctx, id); !errors.Is(err, metaclient.ErrLeaseNotFound) {
		t.Fatalf("Revoke of revoked lease: %v", err)
	}
}

func TestStatusOf(t *testing.T) {
	a := startNode(t, "a", newFakeStore())
	b := startNode(t, "b", newFakeStore())
	c := newClient(t, a.addr)
	ctx := testContext(t)
	st, err := c.StatusOf(ctx, b.addr) // not a configured endpoint
	if err != nil || st.Id != "b" {
		t.Fatalf("StatusOf(b) = %v, %v", st, err)
	}
	if _, err := c.StatusOf(ctx, deadAddress(t)); !errors.Is(err, metaclient.ErrUnavailable) {
		t.Fatalf("StatusOf(dead) err = %v, want ErrUnavailable", err)
	}
	if a.count("Status") != 0 {
		t.Fatal("StatusOf went to another endpoint")
	}
}

func TestMemberRemoveNotFound(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	c := newClient(t, n.addr)
	if _, err := c.MemberRemove(testContext(t), "zz"); !errors.Is(err, metaclient.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestWriteAttemptTimeoutNotRetried(t *testing.T) {
	store := newFakeStore()
	a := startNode(t, "a", store)
	b := startNode(t, "b", store)
	a.hook("Put", func(ctx context.Context, _ int) error {
		<-ctx.Done() // never commits: the client's attempt deadline passes
		return ctx.Err()
	})
	c, err := metaclient.New(metaclient.Config{Endpoints: []string{a.addr, b.addr}, RequestTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Put(testContext(t), "k", []byte("v"))
	if !errors.Is(err, metaclient.ErrUnknownOutcome) || !errors.Is(err, metaclient.ErrNoQuorum) {
		t.Fatalf("Put err = %v, want ErrUnknownOutcome and ErrNoQuorum", err)
	}
	if b.count("Put") != 0 {
		t.Fatal("a write that timed out after being sent was retried")
	}
	// A read in the same situation moves on.
	a.hook("Get", func(ctx context.Context, _ int) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if _, err := c.Get(testContext(t), "k"); !errors.Is(err, metaclient.ErrNotFound) {
		t.Fatalf("Get err = %v, want ErrNotFound from b", err)
	}
}

// Valid is true while the last successful keep-alive (or the grant) was
// sent less than a TTL ago, false from then on, never earlier, whether or
// not the keep-alive goroutine has noticed yet.
func TestSessionValid(t *testing.T) {
	n := startNode(t, "a", newFakeStore())
	n.hook("LeaseKeepAlive", func(context.Context, int) error { return errNoLeader() })
	c := newClient(t, n.addr)
	const ttl = 2 * time.Second
	start := time.Now()
	s, err := c.NewSession(testContext(t), ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Valid() && time.Since(start) < ttl {
		t.Fatal("a session just granted is not valid")
	}
	testwait.Until(t, waitFor, "the session without keep-alives stops being valid", func() bool { return !s.Valid() })
	if d := time.Since(start); d < ttl {
		t.Fatalf("invalid after %v, before its TTL %v", d, ttl)
	}
}
