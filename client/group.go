package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Group consumer defaults.
const (
	DefaultSessionTimeout     = 45 * time.Second
	DefaultAutoCommitInterval = 5 * time.Second
	// defaultHeartbeatInterval is used until the coordinator says.
	defaultHeartbeatInterval = 3 * time.Second
)

// GroupConfig configures a GroupConsumer.
type GroupConfig struct {
	// Group is the consumer group's id. Required.
	Group string
	// Topics the member subscribes to. At least one.
	Topics []string
	// SessionTimeout: the coordinator removes the member when no heartbeat
	// arrives within it, and the member gives up its partitions (OnLost)
	// when none succeeded within it. Default 45s; the coordinator accepts
	// [6s, 300s] by default.
	SessionTimeout time.Duration
	// RebalanceTimeout: how long the member may take to revoke partitions
	// before the coordinator removes it. 0: the coordinator's default
	// (300s).
	RebalanceTimeout time.Duration
	// DisableAutoCommit turns off committing the positions of what Poll
	// returned every AutoCommitInterval, before OnRevoked, and on Close.
	// Auto-commit is on by default.
	DisableAutoCommit  bool
	AutoCommitInterval time.Duration // default 5s
	// ResetOffset is where a newly assigned partition starts when the group
	// has no committed offset for it, and where an owned partition restarts
	// when its position falls outside the log. The zero Offset means
	// OffsetLatest (Kafka's auto.offset.reset default); use OffsetEarliest
	// to read everything.
	ResetOffset Offset
	// Rebalance callbacks, run on the consumer's heartbeat goroutine (so
	// they delay the next heartbeat: keep them well under the session
	// timeout; they must not call Close). OnAssigned runs once the partitions' starting positions are
	// known, before Poll returns their records. OnRevoked runs after the
	// partitions stopped being returned by Poll and (with auto-commit)
	// their positions were committed, and before the coordinator is told
	// they are released: a manual committer commits them here (Commit and
	// CommitOffsets still work for them). OnLost runs when the member lost
	// its partitions without revoking them (fenced, removed, or its session
	// ran out): committing them is no longer possible.
	OnAssigned, OnRevoked, OnLost func(ctx context.Context, tps []TopicPartition)
	// ClientHost is reported to the coordinator. Default: the host name.
	ClientHost string
	// Consumer sizes the fetches.
	Consumer ConsumerConfig
}

func (c GroupConfig) withDefaults() GroupConfig {
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.AutoCommitInterval <= 0 {
		c.AutoCommitInterval = DefaultAutoCommitInterval
	}
	if c.ResetOffset == (Offset{}) {
		c.ResetOffset = OffsetLatest()
	}
	if c.ClientHost == "" {
		c.ClientHost, _ = os.Hostname()
	}
	c.Topics = slices.Compact(slices.Sorted(slices.Values(c.Topics)))
	c.Consumer = c.Consumer.withDefaults()
	return c
}

// Validate reports the first problem with c.
func (c GroupConfig) Validate() error {
	switch {
	case c.Group == "":
		return errors.New("client: group config: no group")
	case len(c.Topics) == 0:
		return errors.New("client: group config: no topics")
	case c.SessionTimeout < 0 || c.RebalanceTimeout < 0 || c.AutoCommitInterval < 0:
		return errors.New("client: group config: negative duration")
	}
	for _, t := range c.Topics {
		if t == "" {
			return errors.New("client: group config: empty topic name")
		}
	}
	return c.Consumer.Validate()
}

func (c GroupConfig) String() string {
	return fmt.Sprintf("group=%q topics=%v session_timeout=%s rebalance_timeout=%s auto_commit=%t auto_commit_interval=%s reset=%s %s",
		c.Group, c.Topics, c.SessionTimeout, c.RebalanceTimeout, !c.DisableAutoCommit, c.AutoCommitInterval, c.ResetOffset, c.Consumer)
}

// groupPartState is where an owned partition is in its life.
type groupPartState int8

const (
	partAssigning groupPartState = iota // OnAssigned running: not returned by Poll yet
	partActive                          // returned by Poll
	partRevoking                        // being revoked: not returned by Poll, still committable
)

// groupPart is one owned partition. Guarded by GroupConsumer.mu.
type groupPart struct {
	state groupPartState
	// next is the offset of the next record Poll returns: everything
	// before it was returned (consumed), so it is what Commit commits.
	next int64
	// reset: the position left the log and its move to ResetOffset has
	// not succeeded yet (the fetcher reports that once): every Poll tries
	// again.
	reset *OffsetOutOfRangeError
}

// GroupConsumer is a member of a consumer group (KIP-848 style, DESIGN §6):
// a background goroutine heartbeats to the group's coordinator, reports the
// partitions the member owns and takes the assignment it is given —
// revoking first (stop returning, commit, OnRevoked, report) and only then
// taking new partitions (committed offset or ResetOffset, OnAssigned,
// fetch). Poll returns records of owned partitions only. Methods are safe
// for concurrent use.
type GroupConsumer struct {
	c   *Client
	cfg GroupConfig
	log *slog.Logger
	f   *fetcher
	cc  coordinatorCache

	ctx    context.Context // the background goroutines'; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // heartbeat now

	// fatal is cancelled with a cause when the member cannot go on (e.g.
	// the coordinator refused its configuration); Poll returns the cause.
	fatal       context.Context
	fatalCancel context.CancelCauseFunc

	// commitMu orders commits: a commit's positions are read and sent
	// under it, so a later commit never carries older positions.
	commitMu sync.Mutex
	// hbPaused (tests) makes the heartbeat loop skip heartbeats, as if the
	// process were paused.
	hbPaused atomic.Bool

	mu struct {
		sync.Mutex
		closed    bool
		memberID  string
		epoch     int32
		interval  time.Duration
		lastOK    time.Time // send time of the last successful heartbeat
		owned     map[TopicPartition]*groupPart
		committed map[TopicPartition]int64 // last committed by this member
	}
}

// NewGroupConsumer joins cfg.Group and starts heartbeating in the
// background; partitions arrive with the first heartbeats (OnAssigned).
func (c *Client) NewGroupConsumer(cfg GroupConfig) (*GroupConsumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.mu.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	g := &GroupConsumer{c: c, cfg: cfg, f: newFetcher(c, cfg.Consumer), wake: make(chan struct{}, 1)}
	g.log = c.log.With("component", "group-consumer", "group", cfg.Group)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.fatal, g.fatalCancel = context.WithCancelCause(context.Background())
	g.mu.interval = defaultHeartbeatInterval
	g.mu.owned = map[TopicPartition]*groupPart{}
	g.mu.committed = map[TopicPartition]int64{}
	g.wg.Add(1)
	go g.heartbeatLoop()
	if !cfg.DisableAutoCommit {
		g.wg.Add(1)
		go g.autoCommitLoop()
	}
	return g, nil
}

// MemberID is the id the coordinator gave this member ("" before joining).
func (g *GroupConsumer) MemberID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.memberID
}

// MemberEpoch is the member's current epoch (0 while joining).
func (g *GroupConsumer) MemberEpoch() int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.epoch
}

// Assignment returns the partitions the member owns, sorted.
func (g *GroupConsumer) Assignment() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return sortedTPs(g.mu.owned)
}

// Position returns the offset of the next record Poll returns for an owned
// partition.
func (g *GroupConsumer) Position(tp TopicPartition) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.mu.owned[tp]; p != nil {
		return p.next, true
	}
	return 0, false
}

// HighWatermark is tp's high watermark from the last fetch response.
func (g *GroupConsumer) HighWatermark(tp TopicPartition) (int64, bool) {
	return g.f.highWatermark(tp)
}

// Poll returns records of the partitions the member owns, in offset order
// per partition, waiting until there is at least one or ctx is done. Each
// record returned counts as consumed: Commit (and auto-commit) commit the
// offset after it. A partition whose position left the log restarts at
// ResetOffset. After Close it returns ErrClosed.
func (g *GroupConsumer) Poll(ctx context.Context) ([]*Record, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.fatal, cancel)
	defer stop()
	for {
		if err := g.retryResets(ctx); err != nil {
			return nil, err
		}
		recs, err := g.f.poll(ctx)
		if g.fatal.Err() != nil {
			return nil, context.Cause(g.fatal)
		}
		var oor *OffsetOutOfRangeError
		if errors.As(err, &oor) && g.resetOutOfRange(ctx, oor) {
			err = nil
		}
		g.mu.Lock()
		out := recs[:0]
		for _, r := range recs {
			p := g.mu.owned[TopicPartition{r.Topic, r.Partition}]
			// Records of partitions revoked meanwhile, and of an old
			// assignment that came back (fetched again from the committed
			// offset), are dropped.
			if p == nil || p.state != partActive || r.Offset < p.next {
				continue
			}
			p.next = r.Offset + 1
			out = append(out, r)
		}
		g.mu.Unlock()
		if len(out) > 0 || err != nil {
			return out, err
		}
	}
}

// resetOutOfRange moves an owned partition whose position left the log to
// ResetOffset; false when it is not owned or the reset failed, which the
// partition remembers for the next Poll to try again (retryResets): the
// fetcher reports the position once and the partition would otherwise
// stay stopped until the next rebalance.
func (g *GroupConsumer) resetOutOfRange(ctx context.Context, oor *OffsetOutOfRangeError) bool {
	tp := oor.TopicPartition
	if _, ok := g.Position(tp); !ok {
		return false
	}
	g.log.Warn("position out of range, resetting", "partition", tp.String(), "offset", oor.Offset, "reset", g.cfg.ResetOffset.String())
	if err := g.Seek(ctx, tp, g.cfg.ResetOffset); err != nil {
		g.mu.Lock()
		if p := g.mu.owned[tp]; p != nil {
			p.reset = oor
		}
		g.mu.Unlock()
		return false
	}
	return true
}

// retryResets tries again the resets that failed (resetOutOfRange); it
// returns ctx's error once ctx is done.
func (g *GroupConsumer) retryResets(ctx context.Context) error {
	g.mu.Lock()
	var pending []*OffsetOutOfRangeError
	for _, p := range g.mu.owned {
		if p.reset != nil {
			pending = append(pending, p.reset)
		}
	}
	g.mu.Unlock()
	for _, oor := range pending {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.resetOutOfRange(ctx, oor)
	}
	return nil
}

// Seek moves an owned partition to off: Poll returns records from there and
// Commit commits it until then. Call it from the goroutine that polls (or
// from OnAssigned): records a concurrent Poll already holds may overtake it.
func (g *GroupConsumer) Seek(ctx context.Context, tp TopicPartition, off Offset) error {
	if _, ok := g.Position(tp); !ok {
		return fmt.Errorf("client: seek %s: not owned by this member of group %q", tp, g.cfg.Group)
	}
	n, err := g.c.resolveOffset(ctx, tp, off)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.mu.owned[tp]
	if p == nil || p.state == partRevoking {
		return fmt.Errorf("client: seek %s: not owned by this member of group %q", tp, g.cfg.Group)
	}
	if err := g.f.set(tp, n); err != nil {
		return err
	}
	p.next, p.reset = n, nil
	return nil
}

// Commit commits, for every owned partition, the offset after the last
// record Poll returned (what changed since the last commit). It fails with
// ErrMemberFenced when the coordinator no longer accepts the member: the
// offsets were not committed.
func (g *GroupConsumer) Commit(ctx context.Context) error {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	g.mu.Lock()
	offsets := map[TopicPartition]int64{}
	for tp, p := range g.mu.owned {
		if p.state != partAssigning && g.mu.committed[tp] != p.next {
			offsets[tp] = p.next
		}
	}
	g.mu.Unlock()
	return g.commitLocked(ctx, offsets)
}

// CommitOffsets commits the given offsets (the offset of the next record
// to read, per partition) with the member's epoch. Partitions the member
// does not hold are refused (ErrStaleMemberEpoch); ErrMemberFenced means
// nothing was committed.
func (g *GroupConsumer) CommitOffsets(ctx context.Context, offsets map[TopicPartition]int64) error {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	return g.commitLocked(ctx, offsets)
}

// REQUIRES: g.commitMu held.
func (g *GroupConsumer) commitLocked(ctx context.Context, offsets map[TopicPartition]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	g.mu.Lock()
	id, epoch := g.mu.memberID, g.mu.epoch
	g.mu.Unlock()
	if id == "" || epoch <= 0 {
		return fmt.Errorf("client: commit offsets of group %q: %w: not a member (joining)", g.cfg.Group, ErrMemberFenced)
	}
	err := g.c.commit(ctx, g.cfg.Group, &g.cc, id, epoch, offsets)
	if errors.Is(err, ErrStaleMemberEpoch) && rpcerror.Reason(err) == rpcerror.ReasonStaleMemberEpoch {
		// The whole request raced a heartbeat that bumped the epoch twice;
		// once more with the current one.
		g.mu.Lock()
		id, epoch = g.mu.memberID, g.mu.epoch
		g.mu.Unlock()
		if id != "" && epoch > 0 {
			err = g.c.commit(ctx, g.cfg.Group, &g.cc, id, epoch, offsets)
		}
	}
	if err == nil {
		g.mu.Lock()
		for tp, off := range offsets {
			g.mu.committed[tp] = off
		}
		g.mu.Unlock()
	}
	return err
}

// Close leaves the group: it stops heartbeating, commits what was consumed
// (with auto-commit), calls OnRevoked for the partitions it owned, and
// sends the leave heartbeat (epoch -1) so they move at once. Close does
// not close the Client.
func (g *GroupConsumer) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.mu.closed {
		g.mu.Unlock()
		return nil
	}
	g.mu.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()

	var errs []error
	g.mu.Lock()
	owned := sortedTPs(g.mu.owned)
	for _, p := range g.mu.owned {
		if p.state == partActive {
			p.state = partRevoking
		}
	}
	id := g.mu.memberID
	g.mu.Unlock()
	if len(owned) > 0 {
		if !g.cfg.DisableAutoCommit {
			if err := g.Commit(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if g.cfg.OnRevoked != nil {
			g.cfg.OnRevoked(ctx, owned)
		}
	}
	g.f.close()
	if id != "" {
		err := g.c.onCoordinator(ctx, g.cfg.Group, &g.cc, g.attemptTimeout(), false, func(ctx context.Context, b brokerpb.BrokerClient) error {
			_, err := b.GroupHeartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: g.cfg.Group, MemberId: id, MemberEpoch: -1})
			return err
		})
		if err != nil && !errors.Is(err, ErrMemberFenced) {
			errs = append(errs, fmt.Errorf("client: leave group %q: %w", g.cfg.Group, err))
		}
	}
	g.mu.Lock()
	g.mu.owned = map[TopicPartition]*groupPart{}
	g.mu.memberID, g.mu.epoch = "", 0
	g.mu.Unlock()
	g.fatalCancel(ErrClosed)
	return errors.Join(errs...)
}

// attemptTimeout bounds one heartbeat: well within the session.
func (g *GroupConsumer) attemptTimeout() time.Duration {
	return min(g.c.cfg.RequestTimeout, max(g.cfg.SessionTimeout/3, time.Second))
}

func (g *GroupConsumer) autoCommitLoop() {
	defer g.wg.Done()
	t := time.NewTicker(g.cfg.AutoCommitInterval)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(g.ctx, max(g.cfg.AutoCommitInterval, g.c.cfg.RequestTimeout))
		if err := g.Commit(ctx); err != nil && g.ctx.Err() == nil {
			g.log.Warn("auto-commit failed", "err", err)
		}
		cancel()
	}
}

// heartbeatLoop heartbeats every interval (at once after a change) and
// reconciles the member's partitions with each response, until Close.
func (g *GroupConsumer) heartbeatLoop() {
	defer g.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	bo := newBackoff(100*time.Millisecond, 2*time.Second)
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-timer.C:
		case <-g.wake:
		}
		if g.hbPaused.Load() {
			timer.Reset(50 * time.Millisecond)
			continue
		}
		g.checkSession()
		again, err := g.heartbeat()
		switch {
		case g.ctx.Err() != nil:
			return
		case errors.Is(err, ErrClosed):
			// The Client was closed under us: stop without leaving.
			g.fatalCancel(err)
			return
		case g.fatal.Err() != nil:
			return // Poll reports why
		case err != nil:
			g.log.Debug("heartbeat failed", "err", err)
			wait := bo.next()
			g.mu.Lock()
			if g.mu.epoch > 0 && !g.mu.lastOK.IsZero() {
				wait = min(wait, max(time.Until(g.mu.lastOK.Add(g.cfg.SessionTimeout)), 0)+time.Millisecond)
			}
			g.mu.Unlock()
			timer.Reset(wait)
			continue
		}
		bo = newBackoff(100*time.Millisecond, 2*time.Second)
		g.mu.Lock()
		interval := g.mu.interval
		g.mu.Unlock()
		if again {
			interval = 0
		}
		timer.Reset(interval)
	}
}

// checkSession gives up the partitions when no heartbeat succeeded within
// the session timeout: the coordinator may have handed them to another
// member already. The member rejoins with epoch 0 under the same id.
func (g *GroupConsumer) checkSession() {
	g.mu.Lock()
	expired := g.mu.epoch > 0 && !g.mu.lastOK.IsZero() && time.Since(g.mu.lastOK) > g.cfg.SessionTimeout
	g.mu.Unlock()
	if expired {
		g.log.Warn("session lost: no heartbeat succeeded within the session timeout", "session_timeout", g.cfg.SessionTimeout)
		g.lose(false)
	}
}

// heartbeat sends one heartbeat (with retries within one attempt budget)
// and applies the response. again: something changed, heartbeat at once.
func (g *GroupConsumer) heartbeat() (again bool, err error) {
	g.mu.Lock()
	req := &brokerpb.GroupHeartbeatRequest{
		GroupId:            g.cfg.Group,
		MemberId:           g.mu.memberID,
		MemberEpoch:        g.mu.epoch,
		ClientId:           g.c.cfg.ClientID,
		ClientHost:         g.cfg.ClientHost,
		SessionTimeoutMs:   int32(g.cfg.SessionTimeout.Milliseconds()),
		RebalanceTimeoutMs: int32(g.cfg.RebalanceTimeout.Milliseconds()),
		SubscribedTopics:   g.cfg.Topics,
		Owned:              tpsToProto(sortedTPs(g.mu.owned)),
	}
	deadline := time.Now().Add(g.attemptTimeout())
	if g.mu.epoch > 0 && !g.mu.lastOK.IsZero() {
		// Give up in time to notice the session ran out (checkSession).
		deadline = minTime(deadline, g.mu.lastOK.Add(g.cfg.SessionTimeout))
	}
	g.mu.Unlock()
	sent := time.Now()
	ctx, cancel := context.WithDeadline(g.ctx, deadline)
	var resp *brokerpb.GroupHeartbeatResponse
	err = g.c.onCoordinator(ctx, g.cfg.Group, &g.cc, g.attemptTimeout(), false, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.GroupHeartbeat(ctx, req)
		return err
	})
	cancel()
	switch {
	case err == nil:
	case errors.Is(err, ErrMemberFenced):
		g.log.Warn("fenced by the coordinator: giving up partitions and rejoining", "err", err)
		g.lose(rpcerror.Reason(err) == rpcerror.ReasonUnknownMemberID)
		return true, nil
	case rpcerror.Reason(err) == rpcerror.ReasonInvalid:
		// The coordinator refuses the member's configuration: no retry
		// can help.
		g.fatalCancel(fmt.Errorf("client: group %q: %w", g.cfg.Group, err))
		return false, err
	default:
		return false, err
	}
	g.mu.Lock()
	g.mu.memberID, g.mu.epoch, g.mu.lastOK = resp.MemberId, resp.MemberEpoch, sent
	if resp.HeartbeatIntervalMs > 0 {
		g.mu.interval = time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond
	}
	g.mu.Unlock()
	return g.reconcile(tpsFromProto(resp.Assignment)), nil
}

// reconcile moves the owned partitions to assignment: revoke first, then
// take the new ones. It reports whether anything changed.
func (g *GroupConsumer) reconcile(assignment map[TopicPartition]bool) bool {
	g.mu.Lock()
	var revoked, added []TopicPartition
	for tp, p := range g.mu.owned {
		if !assignment[tp] {
			revoked = append(revoked, tp)
			p.state = partRevoking // Poll stops returning it
		}
	}
	for tp := range assignment {
		if g.mu.owned[tp] == nil {
			added = append(added, tp)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(revoked, compareTP)
	slices.SortFunc(added, compareTP)
	if len(revoked) > 0 {
		g.revoke(revoked)
	}
	taken := 0
	if len(added) > 0 {
		taken = g.assign(added)
	}
	// Partitions that could not be taken are offered again by the next
	// regular heartbeat, not in a tight loop.
	return len(revoked) > 0 || taken > 0
}

// revoke stops fetching tps, commits them (auto-commit), calls OnRevoked
// and forgets them; the next heartbeat reports them released.
func (g *GroupConsumer) revoke(tps []TopicPartition) {
	g.f.remove(tps...)
	if !g.cfg.DisableAutoCommit {
		g.mu.Lock()
		offsets := map[TopicPartition]int64{}
		for _, tp := range tps {
			if p := g.mu.owned[tp]; p != nil && g.mu.committed[tp] != p.next {
				offsets[tp] = p.next
			}
		}
		g.mu.Unlock()
		// Not cut short by Close (which cancels g.ctx and then commits
		// only what is still owned): a revoke that began is committed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(g.ctx), g.attemptTimeout())
		if err := g.CommitOffsets(ctx, offsets); err != nil {
			g.log.Warn("commit on revoke failed", "partitions", len(offsets), "err", err)
		}
		cancel()
	}
	if g.cfg.OnRevoked != nil {
		g.cfg.OnRevoked(g.ctx, tps)
	}
	g.mu.Lock()
	for _, tp := range tps {
		delete(g.mu.owned, tp)
		delete(g.mu.committed, tp)
	}
	g.mu.Unlock()
	g.log.Info("revoked", "partitions", fmt.Sprint(tps))
}

// assign takes newly assigned partitions: their committed offsets (or
// ResetOffset), OnAssigned, then fetching. Partitions whose position
// cannot be found now are left out; the next heartbeat offers them again.
// It returns how many it took.
func (g *GroupConsumer) assign(tps []TopicPartition) int {
	ctx, cancel := context.WithTimeout(g.ctx, g.attemptTimeout())
	defer cancel()
	start := map[TopicPartition]int64{}
	committed, err := g.c.fetchOffsets(ctx, g.cfg.Group, &g.cc, tps)
	if err != nil {
		g.log.Warn("fetching committed offsets failed", "err", err)
		return 0
	}
	for _, co := range committed {
		if co.Offset >= 0 {
			start[TopicPartition{co.Topic, co.Partition}] = co.Offset
		}
	}
	var taken []TopicPartition
	g.mu.Lock()
	for tp, off := range start {
		g.mu.committed[tp] = off
	}
	g.mu.Unlock()
	for _, tp := range tps {
		off, ok := start[tp]
		if !ok {
			n, err := g.c.resolveOffset(ctx, tp, g.cfg.ResetOffset)
			if err != nil {
				g.log.Warn("resolving the reset offset failed", "partition", tp.String(), "err", err)
				continue
			}
			off = n
		}
		g.mu.Lock()
		g.mu.owned[tp] = &groupPart{state: partAssigning, next: off}
		g.mu.Unlock()
		taken = append(taken, tp)
	}
	if len(taken) == 0 {
		return 0
	}
	if g.cfg.OnAssigned != nil {
		g.cfg.OnAssigned(g.ctx, taken)
	}
	g.mu.Lock()
	for _, tp := range taken {
		if p := g.mu.owned[tp]; p != nil {
			p.state = partActive
			_ = g.f.set(tp, p.next)
		}
	}
	g.mu.Unlock()
	g.log.Info("assigned", "partitions", fmt.Sprint(taken))
	return len(taken)
}

// lose drops every partition without committing (OnLost) and makes the
// member rejoin with epoch 0; forget also drops the member id.
func (g *GroupConsumer) lose(forget bool) {
	g.mu.Lock()
	lost := sortedTPs(g.mu.owned)
	for _, p := range g.mu.owned {
		p.state = partRevoking
	}
	g.mu.Unlock()
	g.f.remove(lost...)
	if len(lost) > 0 && g.cfg.OnLost != nil {
		g.cfg.OnLost(g.ctx, lost)
	}
	g.mu.Lock()
	g.mu.owned = map[TopicPartition]*groupPart{}
	g.mu.committed = map[TopicPartition]int64{}
	g.mu.epoch = 0
	g.mu.lastOK = time.Time{}
	if forget {
		g.mu.memberID = ""
	}
	g.mu.Unlock()
	if len(lost) > 0 {
		g.log.Warn("lost partitions", "partitions", fmt.Sprint(lost))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
