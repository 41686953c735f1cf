package bookie

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/bookiepb"
)

// fakeLeader is the gate's view of metad: the elected replicator, how
// often it was read, and a fake clock.
type fakeLeader struct {
	leader string
	err    error
	reads  int
	now    time.Time
}

func (f *fakeLeader) gate() *replicatorGate {
	return &replicatorGate{
		leader: func(context.Context) (string, error) { f.reads++; return f.leader, f.err },
		now:    func() time.Time { return f.now },
	}
}

// G1: a bookie's certificate adds and fences only as the elected
// replicator; other roles pass (the method table decided them).
func TestReplicatorGate(t *testing.T) {
	ctx := context.Background()
	f := &fakeLeader{leader: "b1", now: time.Unix(1000, 0)}
	g := f.gate()
	b1 := pki.Identity{Role: pki.RoleBookie, Name: "b1"}
	b2 := pki.Identity{Role: pki.RoleBookie, Name: "b2"}
	fence := bookiepb.Bookie_Fence_FullMethodName

	for _, role := range []string{pki.RoleBroker, pki.RoleAdmin} {
		if err := g.check(ctx, pki.Identity{Role: role, Name: "x"}, fence); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
	}
	if f.reads != 0 {
		t.Fatalf("other roles read the leader %d times", f.reads)
	}
	for range 3 {
		if err := g.check(ctx, b1, fence); err != nil {
			t.Fatalf("the elected replicator fencing: %v", err)
		}
	}
	if f.reads != 1 {
		t.Fatalf("the leader was read %d times for 3 calls within %v, want 1", f.reads, leaderTrust)
	}

	// Another bookie is refused; refusals within leaderRecheck share the
	// read that refused the first.
	f.now = f.now.Add(leaderRecheck)
	for range 5 {
		err := g.check(ctx, b2, fence)
		if status.Code(err) != codes.PermissionDenied || rpcerror.Reason(err) != rpcerror.ReasonDenied {
			t.Fatalf("another bookie fencing: %v", err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "elected replicator (now b1)") || !strings.Contains(msg, "bookie:b2") {
			t.Fatalf("message %q names neither the replicator nor the caller", msg)
		}
	}
	if f.reads != 2 {
		t.Fatalf("%d reads after 5 refusals, want 2", f.reads)
	}

	// The election moves to b2: recognized once the last read is
	// leaderRecheck old; b1, deposed, is refused once its trust ends.
	f.leader = "b2"
	f.now = f.now.Add(leaderRecheck)
	if err := g.check(ctx, b2, fence); err != nil {
		t.Fatalf("the new replicator: %v", err)
	}
	f.now = f.now.Add(leaderTrust)
	if err := g.check(ctx, b1, fence); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the deposed replicator: %v", err)
	}

	// No replicator elected; metad unreachable.
	f.leader = ""
	f.now = f.now.Add(leaderTrust)
	if err := g.check(ctx, b1, fence); !strings.Contains(status.Convert(err).Message(), "(now none)") {
		t.Fatalf("no replicator: %v", err)
	}
	f.err = errors.New("metad down")
	f.now = f.now.Add(leaderTrust)
	if err := g.check(ctx, b1, fence); status.Code(err) != codes.Unavailable || !rpcerror.Retryable(err) {
		t.Fatalf("metad down: %v, want a retryable UNAVAILABLE", err)
	}
}

// The calls the gate applies to: adds, fences, and reads that fence.
func TestReplicatorGateCalls(t *testing.T) {
	for _, tc := range []struct {
		method string
		req    any
		want   bool
	}{
		{bookiepb.Bookie_Fence_FullMethodName, &bookiepb.FenceRequest{}, true},
		{bookiepb.Bookie_AddEntries_FullMethodName, nil, true},
		{bookiepb.Bookie_ReadEntry_FullMethodName, &bookiepb.ReadEntryRequest{Fence: true}, true},
		{bookiepb.Bookie_ReadEntry_FullMethodName, &bookiepb.ReadEntryRequest{}, false},
		{bookiepb.Bookie_ReadLAC_FullMethodName, &bookiepb.ReadLACRequest{}, false},
		{bookiepb.Bookie_Info_FullMethodName, &bookiepb.InfoRequest{}, false},
	} {
		if got := gated(tc.method, tc.req); got != tc.want {
			t.Errorf("%s %v: gated %t, want %t", tc.method, tc.req, got, tc.want)
		}
	}
}
