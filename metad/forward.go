package metad

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/strata-log/strata/internal/grpcserve"
	"github.com/strata-log/strata/proto/metadpb"
)

// forwardedKey marks a request a member forwarded to the leader, so that a
// member that is no longer leader answers NOT_LEADER instead of forwarding
// again (no loops).
const forwardedKey = "strata-metad-forwarded"

// forwardOr runs local when this member is the leader, and otherwise sends
// the request to the leader with remote. It waits (within the request's
// deadline) for a leader to be known.
func forwardOr[T any](ctx context.Context, s *Server,
	remote func(context.Context, metadpb.MetadClient) (T, error),
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
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, s.cfg.ID)
	return remote(ctx, metadpb.NewMetadClient(conn))
}

// waitForLeader returns "" when this member is the leader, or the leader's
// client address; ErrNoLeader when none is known before ctx ends.
func (s *Server) waitForLeader(ctx context.Context) (string, error) {
	var ticker *time.Ticker
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
		case <-s.closing:
			return "", ErrShutdown
		case <-ticker.C:
		}
	}
}

// peerConns keeps one client connection per peer address.
type peerConns struct {
	mu struct {
		sync.Mutex
		conns  map[string]*grpc.ClientConn
		closed bool
	}
}

func newPeerConns() *peerConns {
	p := &peerConns{}
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
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcserve.MaxMessageBytes)))
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
