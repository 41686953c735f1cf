package metad

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/metadpb"
)

// forwardedKey marks a request a member forwarded to the leader, so that a
// member that is no longer leader answers NOT_LEADER instead of forwarding
// again (no loops).
const forwardedKey = "strata-metad-forwarded"

// forwardOr runs local when this member is the leader, and otherwise sends
// the request to the leader with remote. It waits (within the request's
// deadline) for a leader to be known.
//
// A forward that fails without an answer from the leader is classified here,
// because only this member knows whether the request left it: never sent
// (the leader was unreachable) is NO_LEADER and safe to retry; sent and then
// lost is an unknown outcome.
func forwardOr[T any](ctx context.Context, s *Server,
	remote func(context.Context, metadpb.MetadClient, ...grpc.CallOption) (T, error),
	local func(context.Context) (T, error),
) (T, error) {
	var zero T
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
	}
	leaderAddr, err := s.waitForLeader(ctx)
	if err != nil {
		return zero, err
	}
	if leaderAddr == "" {
		return local(ctx)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedKey)) > 0 {
		return zero, &notLeaderError{leader: leaderAddr}
	}
	conn, err := s.peers.get(leaderAddr)
	if err != nil {
		return zero, err
	}
	var p peer.Peer
	out := metadata.AppendToOutgoingContext(ctx, forwardedKey, s.cfg.ID)
	resp, err := remote(out, metadpb.NewMetadClient(conn), grpc.Peer(&p))
	// Best effort: internal callers have no incoming stream to set it on.
	_ = grpc.SetHeader(ctx, metadata.Pairs(rpcerror.LeaderHeader, leaderAddr))
	if err == nil || rpcerror.Info(err) != nil {
		return resp, err // the leader's own answer
	}
	if p.Addr == nil {
		return zero, fmt.Errorf("%w: leader %s unreachable: %v", ErrNoLeader, leaderAddr, err)
	}
	return zero, fmt.Errorf("%w: forwarded to leader %s: %v", errForwardLost, leaderAddr, err)
}

// errForwardLost: a forwarded request reached the leader but no answer came
// back. Its outcome is unknown.
var errForwardLost = errors.New("metad: no answer from the leader (outcome unknown)")

// waitForLeader returns "" when this member is the leader, or the leader's
// client address; ErrNoLeader when none is known shortly before ctx's
// deadline (answering before the deadline lets the client tell "not applied"
// from "timed out").
func (s *Server) waitForLeader(ctx context.Context) (string, error) {
	var ticker *time.Ticker
	giveUp := time.Until(deadline(ctx, s.cfg.RequestTimeout))
	giveUp -= min(giveUp/5, 200*time.Millisecond)
	timeout := time.NewTimer(giveUp)
	defer timeout.Stop()
	for {
		if s.closed.Load() {
			return "", ErrShutdown
		}
		if s.raft.State() == raft.Leader {
			return "", nil
		}
		if _, id := s.raft.LeaderWithID(); id != "" {
			if m, ok := s.store.Member(string(id)); ok && m.ClientAddress != "" {
				return m.ClientAddress, nil
			}
		}
		if ticker == nil {
			ticker = time.NewTicker(10 * time.Millisecond)
			defer ticker.Stop()
		}
		select {
		case <-ctx.Done():
			return "", ErrNoLeader
		case <-timeout.C:
			return "", ErrNoLeader
		case <-s.closing:
			return "", ErrShutdown
		case <-ticker.C:
		}
	}
}

// peerConns keeps one client connection per peer address.
type peerConns struct {
	creds *mtls.Credentials // nil: plaintext
	mu    struct {
		sync.Mutex
		conns  map[string]*grpc.ClientConn
		closed bool
	}
}

func newPeerConns(creds *mtls.Credentials) *peerConns {
	p := &peerConns{creds: creds}
	p.mu.conns = map[string]*grpc.ClientConn{}
	return p
}

func (p *peerConns) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, ErrShutdown
	}
	if c, ok := p.mu.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr,
		p.creds.DialOption(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcopts.MaxMessageBytes)))
	if err != nil {
		return nil, err
	}
	p.mu.conns[addr] = c
	return c, nil
}

func (p *peerConns) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.closed = true
	var errs []error
	for _, c := range p.mu.conns {
		errs = append(errs, c.Close())
	}
	p.mu.conns = nil
	return errors.Join(errs...)
}
