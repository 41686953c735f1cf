package metad

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/proto/metadpb"
)

// progressInterval is how often a quiet watch gets an empty response with
// the current revision (when the watcher asked for progress).
const progressInterval = 500 * time.Millisecond

// Service returns the gRPC implementation of metadpb.MetadServer.
func (s *Server) Service() metadpb.MetadServer { return &service{s: s} }

type service struct {
	metadpb.UnimplementedMetadServer
	s *Server
}

// read serves a read locally: after a linearizable barrier on the leader,
// forwarded from a follower, or straight from the local replica when stale.
func read[T any](ctx context.Context, s *Server, stale bool,
	remote func(context.Context, metadpb.MetadClient, ...grpc.CallOption) (T, error), local func() T,
) (T, error) {
	if stale {
		return local(), nil
	}
	return forwardOr(ctx, s, remote, func(ctx context.Context) (T, error) {
		if err := s.linearizableRead(ctx); err != nil {
			var zero T
			return zero, err
		}
		return local(), nil
	})
}

func (v *service) Get(ctx context.Context, req *metadpb.GetRequest) (*metadpb.GetResponse, error) {
	if err := v.s.checkKey(ctx, authz.KeyRead, req.Key, false); err != nil {
		return nil, err
	}
	resp, err := read(ctx, v.s, req.Stale,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.GetResponse, error) {
			return c.Get(ctx, req, opts...)
		},
		func() *metadpb.GetResponse {
			kv, found, rev := v.s.store.Get(req.Key)
			return &metadpb.GetResponse{Kv: kv, Found: found, Revision: rev}
		})
	return resp, toStatus(err)
}

func (v *service) List(ctx context.Context, req *metadpb.ListRequest) (*metadpb.ListResponse, error) {
	if req.Limit < 0 {
		return nil, toStatus(invalidf("limit %d is negative", req.Limit))
	}
	if err := v.s.checkKey(ctx, authz.KeyRead, req.Prefix, true); err != nil {
		return nil, err
	}
	resp, err := read(ctx, v.s, req.Stale,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.ListResponse, error) {
			return c.List(ctx, req, opts...)
		},
		func() *metadpb.ListResponse {
			kvs, more, rev := v.s.store.List(req.Prefix, req.StartAfter, int(req.Limit), req.KeysOnly)
			return &metadpb.ListResponse{Kvs: kvs, More: more, Revision: rev}
		})
	return resp, toStatus(err)
}

// txn proposes a transaction on the leader, forwarding when needed, with
// the leader's quotas stamped on the command.
func (v *service) txn(ctx context.Context, req *metadpb.TxnRequest) (*metadpb.TxnResponse, error) {
	if n := max(len(req.GetCompares()), len(req.GetOps())); n > v.s.cfg.MaxTxnOps {
		return nil, fmt.Errorf("%w: %d compares and %d ops, at most %d of each",
			errTooManyOps, len(req.GetCompares()), len(req.GetOps()), v.s.cfg.MaxTxnOps)
	}
	if err := v.s.checkTxn(ctx, req); err != nil {
		return nil, err
	}
	return forwardOr(ctx, v.s,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.TxnResponse, error) {
			return c.Txn(ctx, req, opts...)
		},
		func(ctx context.Context) (*metadpb.TxnResponse, error) {
			msg, err := v.s.propose(ctx, &metadpb.Command{Command: &metadpb.Command_Txn{Txn: req}, Limits: v.s.limits()})
			if err != nil {
				return nil, err
			}
			resp, ok := msg.(*metadpb.TxnResponse)
			if !ok {
				return nil, fmt.Errorf("metad: txn applied with unexpected result %T", msg)
			}
			return resp, nil
		})
}

func (v *service) Txn(ctx context.Context, req *metadpb.TxnRequest) (*metadpb.TxnResponse, error) {
	resp, err := v.txn(ctx, req)
	return resp, toStatus(err)
}

// casTxn builds the one-op transaction behind Put and Delete, with a version
// compare when the request asks for compare-and-set.
func casTxn(key string, hasExpected bool, expected int64, op *metadpb.Op) *metadpb.TxnRequest {
	t := &metadpb.TxnRequest{Ops: []*metadpb.Op{op}}
	if hasExpected {
		t.Compares = []*metadpb.Compare{{Key: key, Version: expected}}
	}
	return t
}

// conflict turns a failed one-key compare into a version conflict error.
func conflict(key string, resp *metadpb.TxnResponse) error {
	var current int64
	if len(resp.Current) > 0 {
		current = resp.Current[0].Version
	}
	return &versionConflictError{key: key, current: current}
}

func (v *service) Put(ctx context.Context, req *metadpb.PutRequest) (*metadpb.PutResponse, error) {
	op := &metadpb.Op{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: req.Key, Value: req.Value, Lease: req.Lease}}}
	resp, err := v.txn(ctx, casTxn(req.Key, req.HasExpectedVersion, req.ExpectedVersion, op))
	if err != nil {
		return nil, toStatus(err)
	}
	if !resp.Succeeded {
		return nil, toStatus(conflict(req.Key, resp))
	}
	return &metadpb.PutResponse{Kv: resp.Results[0].Kv, Revision: resp.Revision}, nil
}

func (v *service) Delete(ctx context.Context, req *metadpb.DeleteRequest) (*metadpb.DeleteResponse, error) {
	if req.Prefix && req.HasExpectedVersion {
		return nil, toStatus(invalidf("expected_version cannot be combined with prefix"))
	}
	op := &metadpb.Op{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: req.Key, Prefix: req.Prefix}}}
	resp, err := v.txn(ctx, casTxn(req.Key, req.HasExpectedVersion, req.ExpectedVersion, op))
	if err != nil {
		return nil, toStatus(err)
	}
	if !resp.Succeeded {
		return nil, toStatus(conflict(req.Key, resp))
	}
	return &metadpb.DeleteResponse{Deleted: resp.Results[0].Deleted, Revision: resp.Revision}, nil
}

// Watch is served from the local replica: events come out in revision
// order whichever member serves them, so a client that resumes at
// revision+1 on another member misses and repeats nothing.
func (v *service) Watch(req *metadpb.WatchRequest, stream grpc.ServerStreamingServer[metadpb.WatchResponse]) error {
	s := v.s
	ctx := stream.Context()
	if err := s.checkKey(ctx, authz.KeyWatch, req.Prefix, true); err != nil {
		return err
	}
	from := req.StartRevision
	if from < 0 {
		return toStatus(invalidf("start_revision %d is negative", from))
	}
	if from == 0 {
		from = s.store.Revision() + 1
	}
	s.metrics.watchers.Inc()
	defer s.metrics.watchers.Dec()
	lastSent := time.Now()
	progress := time.NewTicker(progressInterval)
	defer progress.Stop()
	for {
		changed := s.store.Changed() // before reading, so no change is missed
		resps, current, err := s.store.Events(req.Prefix, from, 256)
		if err != nil {
			return toStatus(err)
		}
		for _, r := range resps {
			if err := stream.Send(r); err != nil {
				return err
			}
			from = r.Revision + 1
			lastSent = time.Now()
		}
		if len(resps) == 256 {
			continue // more history to send
		}
		// Nothing else matched up to current: a resume point of current+1
		// loses nothing.
		if current >= from {
			if req.ProgressNotify && time.Since(lastSent) >= progressInterval {
				if err := stream.Send(&metadpb.WatchResponse{Revision: current}); err != nil {
					return err
				}
				lastSent = time.Now()
			}
			from = current + 1
		}
		select {
		case <-changed:
		case <-progress.C:
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return toStatus(ErrShutdown)
		}
	}
}

func (v *service) LeaseGrant(ctx context.Context, req *metadpb.LeaseGrantRequest) (*metadpb.LeaseGrantResponse, error) {
	if req.TtlMs < 100 || req.TtlMs > int64(24*time.Hour/time.Millisecond) {
		return nil, toStatus(invalidf("ttl_ms %d: want 100ms to 24h", req.TtlMs))
	}
	resp, err := forwardOr(ctx, v.s,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.LeaseGrantResponse, error) {
			return c.LeaseGrant(ctx, req, opts...)
		},
		func(ctx context.Context) (*metadpb.LeaseGrantResponse, error) {
			// A random id, written in the command: unpredictable, yet every
			// replica and every replay grants the same one. An id that
			// exists already is refused by every replica alike (nothing
			// applied), and another is drawn.
			for attempt := 1; ; attempt++ {
				msg, err := v.s.propose(ctx, &metadpb.Command{Command: &metadpb.Command_LeaseGrant{
					LeaseGrant: &metadpb.LeaseGrantCommand{Id: randomLeaseID(), TtlMs: req.TtlMs},
				}, Limits: v.s.limits()})
				if errors.Is(err, kv.ErrInvalidCommand) && attempt < maxLeaseIDDraws {
					continue // the TTL was checked above: the id was taken
				}
				if err != nil {
					return nil, err
				}
				resp, _ := msg.(*metadpb.LeaseGrantResponse)
				if resp == nil {
					return nil, fmt.Errorf("metad: lease grant applied with unexpected result %T", msg)
				}
				if _, err := v.s.keepAlive(resp.Id); err != nil && !errors.Is(err, ErrNotLeader) {
					return nil, err
				}
				return resp, nil
			}
		})
	return resp, toStatus(err)
}

// maxLeaseIDDraws bounds the draws of one grant: random 63-bit ids
// colliding with granted leases twice in a row is next to impossible.
const maxLeaseIDDraws = 3

// randomLeaseID draws a lease id in [1, 2^63-1] from crypto/rand.
func randomLeaseID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		if id := int64(binary.LittleEndian.Uint64(b[:]) & math.MaxInt64); id != 0 {
			return id
		}
	}
}

func (v *service) LeaseKeepAlive(ctx context.Context, req *metadpb.LeaseKeepAliveRequest) (*metadpb.LeaseKeepAliveResponse, error) {
	if err := v.s.checkLease(ctx, req.Id); err != nil {
		return nil, err
	}
	resp, err := forwardOr(ctx, v.s,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.LeaseKeepAliveResponse, error) {
			return c.LeaseKeepAlive(ctx, req, opts...)
		},
		func(ctx context.Context) (*metadpb.LeaseKeepAliveResponse, error) {
			// The lessor starts when the new leader's barrier is applied;
			// until then the lease table may be behind.
			if !v.s.leaderReady.Load() {
				if err := v.s.linearizableRead(ctx); err != nil {
					return nil, err
				}
			}
			ttl, err := v.s.keepAlive(req.Id)
			if errors.Is(err, ErrNotLeader) {
				return nil, ErrNoLeader // not ready yet: retry
			}
			if err != nil {
				return nil, err
			}
			return &metadpb.LeaseKeepAliveResponse{Id: req.Id, TtlMs: ttl.Milliseconds()}, nil
		})
	return resp, toStatus(err)
}

func (v *service) LeaseRevoke(ctx context.Context, req *metadpb.LeaseRevokeRequest) (*metadpb.LeaseRevokeResponse, error) {
	if err := v.s.checkLease(ctx, req.Id); err != nil {
		return nil, err
	}
	resp, err := forwardOr(ctx, v.s,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.LeaseRevokeResponse, error) {
			return c.LeaseRevoke(ctx, req, opts...)
		},
		func(ctx context.Context) (*metadpb.LeaseRevokeResponse, error) {
			msg, err := v.s.propose(ctx, &metadpb.Command{Command: &metadpb.Command_LeaseRevoke{
				LeaseRevoke: &metadpb.LeaseRevokeCommand{Id: req.Id},
			}})
			if err != nil {
				return nil, err
			}
			resp, _ := msg.(*metadpb.LeaseRevokeResponse)
			if resp == nil {
				return nil, fmt.Errorf("metad: lease revoke applied with unexpected result %T", msg)
			}
			return resp, nil
		})
	return resp, toStatus(err)
}

func (v *service) RegisterMember(ctx context.Context, req *metadpb.MemberInfo) (*metadpb.RegisterMemberResponse, error) {
	if err := ValidateMemberID(req.Id); err != nil {
		return nil, toStatus(invalidf("%v", err))
	}
	return &metadpb.RegisterMemberResponse{}, toStatus(v.s.registerMember(ctx, req))
}

func (v *service) Status(ctx context.Context, _ *metadpb.StatusRequest) (*metadpb.StatusResponse, error) {
	s := v.s
	_, leaderID := s.raft.LeaderWithID()
	resp := &metadpb.StatusResponse{
		Id:           s.cfg.ID,
		State:        stateName(s.raft.State()),
		LeaderId:     string(leaderID),
		Term:         s.raft.CurrentTerm(),
		CommitIndex:  s.raft.CommitIndex(),
		AppliedIndex: s.raft.AppliedIndex(),
		LastLogIndex: s.raft.LastIndex(),
		Revision:     s.store.Revision(),
		Keys:         int64(s.store.KeyCount()),
		Leases:       int64(s.store.LeaseCount()),
	}
	if leaderID != "" {
		if m, ok := s.store.Member(string(leaderID)); ok {
			resp.LeaderAddress = m.ClientAddress
		}
		if resp.LeaderAddress == "" && leaderID == raft.ServerID(s.cfg.ID) {
			resp.LeaderAddress = s.cfg.AdvertiseAddress()
		}
	}
	if resp.State != "leader" {
		if last := s.raft.LastContact(); !last.IsZero() {
			resp.LastContactMs = time.Since(last).Milliseconds()
		}
	}
	members, err := s.members()
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Members = members
	return resp, nil
}

func stateName(st raft.RaftState) string {
	switch st {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

// members merges the Raft configuration with the registered addresses.
func (s *Server) members() ([]*metadpb.Member, error) {
	future := s.raft.GetConfiguration()
	if err := future.Error(); err != nil {
		return nil, err
	}
	var out []*metadpb.Member
	for _, srv := range future.Configuration().Servers {
		m := &metadpb.Member{Id: string(srv.ID), RaftAddress: string(srv.Address), Voter: srv.Suffrage == raft.Voter}
		if info, ok := s.store.Member(string(srv.ID)); ok {
			m.ClientAddress, m.AdminAddress = info.ClientAddress, info.AdminAddress
		}
		out = append(out, m)
	}
	return out, nil
}

func (v *service) MemberAdd(ctx context.Context, req *metadpb.MemberAddRequest) (*metadpb.MemberAddResponse, error) {
	if err := ValidateMemberID(req.Id); err != nil {
		return nil, toStatus(invalidf("%v", err))
	}
	if req.RaftAddress == "" {
		return nil, toStatus(invalidf("raft_address is required"))
	}
	resp, err := forwardOr(ctx, v.s,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.MemberAddResponse, error) {
			return c.MemberAdd(ctx, req, opts...)
		},
		func(ctx context.Context) (*metadpb.MemberAddResponse, error) {
			s := v.s
			f := s.raft.AddVoter(raft.ServerID(req.Id), raft.ServerAddress(req.RaftAddress), 0, time.Until(deadline(ctx, s.cfg.RequestTimeout)))
			if err := f.Error(); err != nil {
				return nil, err
			}
			s.log.Info("member added", "id", req.Id, "raft", req.RaftAddress)
			members, err := s.members()
			return &metadpb.MemberAddResponse{Members: members}, err
		})
	return resp, toStatus(err)
}

func (v *service) MemberRemove(ctx context.Context, req *metadpb.MemberRemoveRequest) (*metadpb.MemberRemoveResponse, error) {
	if err := ValidateMemberID(req.Id); err != nil {
		return nil, toStatus(invalidf("%v", err))
	}
	resp, err := forwardOr(ctx, v.s,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.MemberRemoveResponse, error) {
			return c.MemberRemove(ctx, req, opts...)
		},
		func(ctx context.Context) (*metadpb.MemberRemoveResponse, error) {
			s := v.s
			members, err := s.members()
			if err != nil {
				return nil, err
			}
			known := false
			for _, m := range members {
				known = known || m.Id == req.Id
			}
			if !known {
				return nil, invalidf("member %s is not in the configuration", req.Id)
			}
			// Forget the addresses first: once the leader removes itself it
			// can no longer propose.
			if _, err := s.propose(ctx, &metadpb.Command{Command: &metadpb.Command_MemberInfo{
				MemberInfo: &metadpb.MemberInfo{Id: req.Id},
			}}); err != nil {
				return nil, err
			}
			f := s.raft.RemoveServer(raft.ServerID(req.Id), 0, time.Until(deadline(ctx, s.cfg.RequestTimeout)))
			if err := f.Error(); err != nil {
				return nil, err
			}
			s.log.Info("member removed", "id", req.Id)
			if members, err = s.members(); err != nil {
				return nil, err
			}
			return &metadpb.MemberRemoveResponse{Members: members}, nil
		})
	return resp, toStatus(err)
}

// snapshotChunkBytes is the data size of one SnapshotChunk.
const snapshotChunkBytes = 1 << 20

// Snapshot streams this member's copy of the state once it holds
// everything committed before the call (a linearizable read gives the
// revision to wait for; the leader or a forwarding follower answers it),
// without the watch history.
func (v *service) Snapshot(_ *metadpb.SnapshotRequest, stream metadpb.Metad_SnapshotServer) error {
	ctx := stream.Context()
	cur, err := v.Get(ctx, &metadpb.GetRequest{Key: "/strata"})
	if err != nil {
		return err
	}
	for {
		changed := v.s.store.Changed()
		if v.s.store.Revision() >= cur.Revision {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return toStatus(ctx.Err())
		}
	}
	snap := v.s.store.Snapshot()
	snap.History = nil
	data, err := proto.Marshal(snap)
	if err != nil {
		return toStatus(fmt.Errorf("metad: snapshot: %w", err))
	}
	sum := sha256.Sum256(data)
	first := true
	for off := 0; first || off < len(data); off += snapshotChunkBytes {
		chunk := &metadpb.SnapshotChunk{Data: data[off:min(off+snapshotChunkBytes, len(data))]}
		if first {
			chunk.TotalBytes, chunk.Revision, first = int64(len(data)), snap.Revision, false
		}
		if off+snapshotChunkBytes >= len(data) {
			chunk.Sha256 = sum[:]
		}
		if err := stream.Send(chunk); err != nil {
			return err
		}
	}
	return nil
}
