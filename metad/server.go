package metad

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/bytebudget"
	"github.com/strata-log/strata/internal/connlimit"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/metad/raftstore"
	"github.com/strata-log/strata/proto/metadpb"
)

// Server is one metad member: a Raft node over the key-value store, plus the
// leader-only duties (lease expiry) and the forwarding that lets any member
// accept any request. Register its gRPC service with Service.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   *kv.Store
	raft    *raft.Raft
	logs    *raftstore.Store
	trans   *raft.NetworkTransport
	raftLn  *connlimit.Listener // the transport's, for its metrics
	metrics *metrics
	peers   *peerConns
	// creds is the member's TLS (nil: plaintext), for its gRPC server,
	// its forwarding connections and the Raft transport.
	creds *mtls.Credentials
	// keys decides which keys a caller's certificate may touch (nil
	// without TLS: no identities, nothing checked).
	keys *authz.KeyAuthorizer
	// proposals bounds the bytes of commands proposed and not yet applied
	// on this member (leader), so a flood of large writes waits instead of
	// queueing in raft without limit.
	proposals *bytebudget.Budget

	// leaderReady is true while this member is leader and has applied every
	// entry committed before it became leader (its barrier completed).
	leaderReady atomic.Bool

	mu struct {
		sync.Mutex
		lessor *lessor // non-nil while leaderReady
		// barrierWaiters are linearizable reads waiting for the next barrier.
		barrierWaiters []chan error
		barrierRunning bool
	}

	leaderCh chan bool
	closing  chan struct{}
	wg       sync.WaitGroup
	closed   atomic.Bool
}

// Open starts a member: opens its stores, starts Raft (bootstrapping a new
// cluster from cfg.Peers when there is no state and cfg.Join is false) and
// the background loops. reg may be nil.
func Open(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("metad: data dir: %w", err)
	}
	log = log.With("component", "metad", "member", cfg.ID)
	creds, err := mtls.Load(cfg.Security.Files())
	if err != nil {
		return nil, fmt.Errorf("metad: %w", err)
	}
	var keys *authz.KeyAuthorizer
	if creds.Enabled() {
		if keys, err = authz.NewKeyAuthorizer(authz.DefaultKeyPolicy(), log, reg); err != nil {
			return nil, fmt.Errorf("metad: %w", err)
		}
	}
	s := &Server{
		creds:     creds,
		keys:      keys,
		cfg:       cfg,
		log:       log,
		store:     kv.New(kv.Options{HistoryRevisions: cfg.HistoryRevisions, HistoryBytes: cfg.HistoryBytes}),
		leaderCh:  make(chan bool, 16),
		closing:   make(chan struct{}),
		peers:     newPeerConns(creds),
		proposals: bytebudget.New(maxProposalBytes),
	}
	if s.logs, err = raftstore.Open(filepath.Join(cfg.DataDir, "raft"), raftstore.Options{NoSync: cfg.NoSync, Logger: log}); err != nil {
		return nil, err
	}
	if err := s.startRaft(); err != nil {
		s.logs.Close()
		return nil, err
	}
	s.metrics = newMetrics(s)
	if reg != nil {
		if err := s.metrics.register(reg, s.raftLn); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.goLoop(s.leadershipLoop)
	s.goLoop(s.registrationLoop)
	return s, nil
}

func (s *Server) startRaft() error {
	cfg := s.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = 2 * cfg.SnapshotThreshold
	rc.NotifyCh = s.leaderCh
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.Logger = hclog.New(&hclog.LoggerOptions{
		Name: "raft", Level: hclog.Info, Output: os.Stderr,
		JSONFormat: cfg.LogFormat == "json",
	})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, rc.Logger)
	if err != nil {
		return fmt.Errorf("metad: snapshot store: %w", err)
	}
	trans, raftLn, err := newRaftTransport(cfg, s.creds, rc.Logger, s.log)
	if err != nil {
		return fmt.Errorf("metad: raft transport on %s: %w", cfg.RaftListen, err)
	}
	// Recent entries stay in memory for replication, but only small ones:
	// raft.LogCache pinned its 1024 last entries whatever their size.
	logCache := raftstore.NewLogCache(s.logs, logCacheSlots, logCacheMaxEntryBytes)
	existing, err := raft.HasExistingState(logCache, s.logs, snaps)
	if err != nil {
		trans.Close()
		return fmt.Errorf("metad: inspect raft state: %w", err)
	}
	r, err := raft.NewRaft(rc, &fsm{store: s.store}, logCache, s.logs, snaps, trans)
	if err != nil {
		trans.Close()
		return fmt.Errorf("metad: start raft: %w", err)
	}
	s.raft, s.trans, s.raftLn = r, trans, raftLn
	if !existing && !cfg.Join {
		peers, _ := ParsePeers(cfg.Peers)
		var conf raft.Configuration
		for _, id := range sortedIDs(peers) {
			conf.Servers = append(conf.Servers, raft.Server{
				Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(peers[id]),
			})
		}
		if err := r.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("metad: bootstrap: %w", err)
		}
		s.log.Info("bootstrapped cluster", "peers", cfg.Peers)
	}
	return nil
}

// Memory bounds of the Raft plumbing: with values up to 1 MiB, counts
// alone let a client pin gigabytes on every member.
const (
	// logCacheSlots and logCacheMaxEntryBytes bound the in-memory log
	// cache to 16 MiB of command data.
	logCacheSlots         = 1024
	logCacheMaxEntryBytes = 16 << 10
	// maxProposalBytes bounds the command bytes proposed and not yet
	// applied; one command larger than that is let in alone.
	maxProposalBytes = 32 << 20
)

// limits are the quotas the leader stamps on the commands it proposes
// (kv rule L1).
func (s *Server) limits() *metadpb.Limits {
	return &metadpb.Limits{MaxKeys: s.cfg.QuotaKeys, MaxDataBytes: s.cfg.QuotaBytes, MaxLeases: s.cfg.QuotaLeases}
}

// goLoop runs fn in a goroutine that Close waits for.
func (s *Server) goLoop(fn func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
}

// Credentials are the member's TLS (nil: plaintext), for its gRPC server.
func (s *Server) Credentials() *mtls.Credentials { return s.creds }

// Close stops the member. Requests in flight fail with ErrShutdown.
func (s *Server) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.closing)
	var errs []error
	if s.raft != nil {
		errs = append(errs, s.raft.Shutdown().Error())
	}
	s.wg.Wait()
	if s.trans != nil {
		errs = append(errs, s.trans.Close())
	}
	errs = append(errs, s.logs.Close(), s.peers.close())
	return errors.Join(errs...)
}

// Ready reports nil when the member can serve linearizable requests: it is
// the leader with its barrier applied, or a follower in touch with a leader.
func (s *Server) Ready() error {
	if s.closed.Load() {
		return ErrShutdown
	}
	switch s.raft.State() {
	case raft.Leader:
		if !s.leaderReady.Load() {
			return errors.New("leader still applying its log")
		}
		return nil
	case raft.Follower:
		if _, id := s.raft.LeaderWithID(); id == "" {
			return ErrNoLeader
		}
		if since := time.Since(s.raft.LastContact()); since > 4*s.cfg.HeartbeatTimeout {
			return fmt.Errorf("no contact with the leader for %s", since.Round(time.Millisecond))
		}
		return nil
	}
	return fmt.Errorf("raft state %s", s.raft.State())
}

// leadershipLoop reacts to leadership changes: on gaining it, wait for a
// barrier (so the store holds everything committed before) and start the
// lessor; on losing it, stop the lessor.
func (s *Server) leadershipLoop() {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-s.closing:
			return
		case isLeader := <-s.leaderCh:
			s.setLeader(isLeader)
		case <-ticker.C:
			if s.leaderReady.Load() {
				s.expireLeases(time.Now())
			} else if s.raft.State() == raft.Leader {
				// A barrier failed earlier (e.g. lost quorum); try again.
				s.setLeader(true)
			}
		}
	}
}

func (s *Server) setLeader(isLeader bool) {
	if !isLeader {
		s.leaderReady.Store(false)
		s.mu.Lock()
		s.mu.lessor = nil
		s.mu.Unlock()
		s.log.Info("lost leadership")
		return
	}
	if s.leaderReady.Load() {
		return
	}
	start := time.Now()
	if err := s.raft.Barrier(s.cfg.RequestTimeout).Error(); err != nil {
		s.log.Warn("leader barrier failed", "err", err)
		return
	}
	s.mu.Lock()
	s.mu.lessor = newLessor()
	// Start every clock afresh, an election timeout late: the deposed
	// leader may have acknowledged keep-alives until it stepped down
	// (LeaderLeaseTimeout, at most about this long after it last heard a
	// quorum), and each such session counts its TTL from then (etcd
	// extends leases on promotion alike).
	s.mu.lessor.expired(s.store.Leases(), time.Now().Add(s.cfg.ElectionTimeout))
	s.mu.Unlock()
	s.leaderReady.Store(true)
	s.log.Info("became leader", "term", s.raft.CurrentTerm(), "barrier", time.Since(start).Round(time.Millisecond))
}

// expireLeases proposes a revoke for every lease whose TTL ran out.
func (s *Server) expireLeases(now time.Time) {
	s.mu.Lock()
	if s.mu.lessor == nil {
		s.mu.Unlock()
		return
	}
	expired := s.mu.lessor.expired(s.store.Leases(), now)
	s.mu.Unlock()
	for _, id := range expired {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		_, err := s.propose(ctx, &metadpb.Command{Command: &metadpb.Command_LeaseRevoke{
			LeaseRevoke: &metadpb.LeaseRevokeCommand{Id: id},
		}})
		cancel()
		switch {
		case err == nil:
			s.metrics.leasesExpired.Inc()
			s.log.Info("lease expired", "lease", id)
		case errors.Is(err, kv.ErrLeaseNotFound):
		default:
			s.log.Warn("lease expiry not applied; will retry", "lease", id, "err", err)
		}
	}
}

// keepAlive restarts a lease's clock on the leader.
func (s *Server) keepAlive(id int64) (time.Duration, error) {
	lease, ok := s.store.Lease(id) // a map lookup: keep-alives are frequent
	if !ok {
		return 0, fmt.Errorf("%w: %d", kv.ErrLeaseNotFound, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.lessor == nil {
		return 0, ErrNotLeader
	}
	now := time.Now()
	// A lease whose deadline passed is being revoked (expireLeases decided
	// it, or will at its next tick): renewing it would answer a full TTL
	// for a lease that is about to go, as etcd's lessor refuses to.
	if left, ok := s.mu.lessor.remaining(id, now); ok && left <= 0 {
		return 0, fmt.Errorf("%w: %d (expired)", kv.ErrLeaseNotFound, id)
	}
	s.mu.lessor.renew(lease, now)
	return time.Duration(lease.TtlMs) * time.Millisecond, nil
}

// registrationLoop publishes this member's client and admin addresses in
// the store whenever they are missing or stale.
func (s *Server) registrationLoop() {
	want := &metadpb.MemberInfo{Id: s.cfg.ID, ClientAddress: s.cfg.AdvertiseAddress(), AdminAddress: s.cfg.AdminListen}
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-ticker.C:
		}
		if have, ok := s.store.Member(s.cfg.ID); ok && proto.Equal(have, want) {
			continue
		}
		if _, id := s.raft.LeaderWithID(); id == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		err := s.registerMember(ctx, want)
		cancel()
		if err != nil {
			s.log.Debug("member registration not yet applied", "err", err)
		}
	}
}

// registerMember proposes info on the leader, forwarding when needed.
func (s *Server) registerMember(ctx context.Context, info *metadpb.MemberInfo) error {
	_, err := forwardOr(ctx, s,
		func(ctx context.Context, c metadpb.MetadClient, opts ...grpc.CallOption) (*metadpb.RegisterMemberResponse, error) {
			return c.RegisterMember(ctx, info, opts...)
		},
		func(ctx context.Context) (*metadpb.RegisterMemberResponse, error) {
			_, err := s.propose(ctx, &metadpb.Command{Command: &metadpb.Command_MemberInfo{MemberInfo: info}})
			return &metadpb.RegisterMemberResponse{}, err
		})
	return err
}

// propose replicates cmd and returns the store's result once applied.
// REQUIRES: called on the leader (forwardOr decides).
func (s *Server) propose(ctx context.Context, cmd *metadpb.Command) (proto.Message, error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("metad: encode command: %w", err)
	}
	if err := s.proposals.Acquire(ctx, int64(len(data))); err != nil {
		return nil, fmt.Errorf("%w: %d bytes of writes in flight", ErrBusy, maxProposalBytes)
	}
	defer s.proposals.Release(int64(len(data)))
	start := time.Now()
	future := s.raft.Apply(data, time.Until(deadline(ctx, s.cfg.RequestTimeout)))
	done := make(chan error, 1)
	go func() { done <- future.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return nil, ErrNoQuorum
	case <-s.closing:
		// Proposed: the entry may still commit (on a new leader).
		return nil, fmt.Errorf("%w: %w", ErrLeadershipLost, ErrShutdown)
	}
	s.metrics.applyDuration.Observe(time.Since(start).Seconds())
	if errors.Is(err, raft.ErrRaftShutdown) {
		err = fmt.Errorf("%w: %w", ErrLeadershipLost, err) // proposed, outcome unknown
	}
	if err != nil {
		return nil, err
	}
	res, _ := future.Response().(applyResult)
	return res.msg, res.err
}

// linearizableRead returns once the store reflects every write committed
// before the call: it waits for a Raft barrier issued after the call began.
// Concurrent reads share one barrier, so reads cost one replicated no-op per
// batch, not per read.
// REQUIRES: called on the leader.
func (s *Server) linearizableRead(ctx context.Context) error {
	ch := make(chan error, 1)
	s.mu.Lock()
	s.mu.barrierWaiters = append(s.mu.barrierWaiters, ch)
	if !s.mu.barrierRunning {
		s.mu.barrierRunning = true
		s.goLoop(s.runBarriers)
	}
	s.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ErrNoQuorum
	case <-s.closing:
		return ErrShutdown
	}
}

func (s *Server) runBarriers() {
	for {
		s.mu.Lock()
		batch := s.mu.barrierWaiters
		s.mu.barrierWaiters = nil
		if len(batch) == 0 {
			s.mu.barrierRunning = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		err := s.raft.Barrier(s.cfg.RequestTimeout).Error()
		for _, ch := range batch {
			ch <- err
		}
	}
}

// deadline is ctx's deadline, or now+fallback when it has none.
func deadline(ctx context.Context, fallback time.Duration) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(fallback)
}
