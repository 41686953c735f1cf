package bookie

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/proto/bookiepb"
)

// The gate trusts the replicator leader it read for leaderTrust when the
// caller is that leader (a deposed leader may add and fence that long
// after losing the election), and reads it again for any other caller
// once the last read is leaderRecheck old (a refused caller makes at most
// one metad read per leaderRecheck; a newly elected leader waits at most
// that long to be recognized).
const (
	leaderTrust   = time.Second
	leaderRecheck = 100 * time.Millisecond
)

// replicatorGate lets a bookie's certificate add entries or fence a
// ledger only when it names the elected replicator (G1 in the package
// doc): the replicator copies entries and recovers the open ledgers of
// lost bookies, and no other bookie has a reason to write to or fence a
// ledger on another bookie.
type replicatorGate struct {
	leader func(ctx context.Context) (string, error) // the elected replicator's id, "" for none
	now    func() time.Time

	// refresh serializes metad reads, so callers refused together share one.
	refresh sync.Mutex
	mu      struct {
		sync.Mutex
		leader string
		readAt time.Time // zero: never read
	}
}

// newReplicatorGate returns a gate reading the leader from kv.
func newReplicatorGate(kv replication.KV) *replicatorGate {
	return &replicatorGate{
		leader: func(ctx context.Context) (string, error) {
			r, err := replication.Leader(ctx, kv)
			if r == nil || err != nil {
				return "", err
			}
			return r.ID, nil
		},
		now: time.Now,
	}
}

// cached returns the leader last read and how long ago (ok false: never).
func (g *replicatorGate) cached() (leader string, age time.Duration, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.leader, g.now().Sub(g.mu.readAt), !g.mu.readAt.IsZero()
}

// read returns the elected replicator, from metad unless another caller
// read it less than leaderRecheck ago.
func (g *replicatorGate) read(ctx context.Context) (string, error) {
	g.refresh.Lock()
	defer g.refresh.Unlock()
	if leader, age, ok := g.cached(); ok && age < leaderRecheck {
		return leader, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	leader, err := g.leader(rctx)
	if err != nil {
		return "", err
	}
	g.mu.Lock()
	g.mu.leader, g.mu.readAt = leader, g.now()
	g.mu.Unlock()
	return leader, nil
}

// check returns nil when id may add and fence: any role but bookie (the
// method table of internal/authz decided those), or the elected
// replicator's bookie.
func (g *replicatorGate) check(ctx context.Context, id pki.Identity, what string) error {
	if id.Role != pki.RoleBookie {
		return nil
	}
	leader, age, ok := g.cached()
	if ok && leader == id.Name && age < leaderTrust {
		return nil
	}
	if !ok || age >= leaderRecheck {
		var err error
		if leader, err = g.read(ctx); err != nil {
			return rpcerror.New(codes.Unavailable, rpcerror.ReasonUnavailable, true,
				fmt.Sprintf("bookie: cannot read the elected replicator to check %s's %s: %v", id, what, err))
		}
	}
	if leader == id.Name {
		return nil
	}
	if leader == "" {
		leader = "none"
	}
	return rpcerror.New(codes.PermissionDenied, rpcerror.ReasonDenied, false,
		fmt.Sprintf("permission denied: %s: a bookie certificate may do this only as the elected replicator (now %s); caller %s",
			what, leader, id))
}

// gated reports whether a call of method with req adds or fences: those a
// bookie's certificate makes only as the replicator.
func gated(method string, req any) bool {
	switch method {
	case bookiepb.Bookie_Fence_FullMethodName, bookiepb.Bookie_AddEntries_FullMethodName:
		return true
	case bookiepb.Bookie_ReadEntry_FullMethodName:
		r, ok := req.(*bookiepb.ReadEntryRequest)
		return ok && r.GetFence()
	}
	return false
}

// interceptors apply the gate to unary calls and to AddEntries streams
// (when they open). They run after internal/authz's, so the caller has a
// verified identity.
func (g *replicatorGate) interceptors() []grpc.ServerOption {
	checkCall := func(ctx context.Context, method string) error {
		id, err := mtls.PeerIdentity(ctx)
		if err != nil {
			return rpcerror.New(codes.PermissionDenied, rpcerror.ReasonDenied, false,
				fmt.Sprintf("permission denied: %s: the client certificate names no Strata role (%v)", method, err))
		}
		return g.check(ctx, id, method)
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if gated(info.FullMethod, req) {
				if err := checkCall(ctx, info.FullMethod); err != nil {
					return nil, err
				}
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if gated(info.FullMethod, nil) {
				if err := checkCall(ss.Context(), info.FullMethod); err != nil {
					return err
				}
			}
			return h(srv, ss)
		}),
	}
}
