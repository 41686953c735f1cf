package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Sentinel errors of consumer groups. They wrap the broker's status, so
// rpcerror.Reason works on them too.
var (
	// ErrMemberFenced: the coordinator no longer accepts this member (its
	// session expired, it was removed, or its epoch is not current:
	// reasons FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID). A commit that
	// fails with it was not applied; the group consumer gives up its
	// partitions (OnLost) and rejoins.
	ErrMemberFenced = errors.New("client: group member fenced")
	// ErrStaleMemberEpoch: a commit carried an epoch older than the
	// member's, or named a partition the member does not hold (reason
	// STALE_MEMBER_EPOCH). Not applied.
	ErrStaleMemberEpoch = errors.New("client: stale member epoch")
	// ErrGroupNotEmpty: the group has members (DeleteGroup, admin commits).
	ErrGroupNotEmpty = errors.New("client: group not empty")
	// ErrUnknownGroup: no such group (DescribeGroup, DeleteGroup).
	ErrUnknownGroup = errors.New("client: unknown group")
)

// groupError wraps a coordinator's error with the matching group sentinel.
// groupCall: NOT_FOUND means the group, not a topic.
func groupError(err error, groupCall bool) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch rpcerror.Reason(err) {
	case rpcerror.ReasonFencedMemberEpoch, rpcerror.ReasonUnknownMemberID:
		sentinel = ErrMemberFenced
	case rpcerror.ReasonStaleMemberEpoch:
		sentinel = ErrStaleMemberEpoch
	case rpcerror.ReasonGroupNotEmpty:
		sentinel = ErrGroupNotEmpty
	case rpcerror.ReasonNotFound:
		if groupCall {
			sentinel = ErrUnknownGroup
		}
	}
	if sentinel == nil {
		return classify(err)
	}
	if errors.Is(err, sentinel) {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// coordinatorCache remembers the address of one group's coordinator.
type coordinatorCache struct {
	mu   sync.Mutex
	addr string
}

func (cc *coordinatorCache) get() string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.addr
}

func (cc *coordinatorCache) set(addr string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.addr = addr
}

// findCoordinator asks any broker where group's coordinator is.
func (c *Client) findCoordinator(ctx context.Context, group string) (string, error) {
	var resp *brokerpb.FindCoordinatorResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.FindCoordinator(ctx, &brokerpb.FindCoordinatorRequest{GroupId: group})
		return err
	})
	if err != nil {
		return "", err
	}
	if resp.Address == "" {
		return "", fmt.Errorf("client: group %q: coordinator %q has no address", group, resp.BrokerId)
	}
	return resp.Address, nil
}

// onCoordinator runs call at group's coordinator: it finds it with
// FindCoordinator (cached in cc when not nil), follows NOT_COORDINATOR
// redirects and retries COORDINATOR_LOADING and connection failures with
// backoff until ctx is done. attempt bounds one try (0: RequestTimeout).
// retryUnknown also retries writes whose outcome is unknown (commits are
// idempotent). Errors are wrapped by groupError.
func (c *Client) onCoordinator(ctx context.Context, group string, cc *coordinatorCache, attempt time.Duration, retryUnknown bool,
	call func(context.Context, brokerpb.BrokerClient) error) error {
	if cc == nil {
		cc = &coordinatorCache{}
	}
	if attempt <= 0 {
		attempt = c.cfg.RequestTimeout
	}
	bo := newBackoff(50*time.Millisecond, time.Second)
	for {
		addr := cc.get()
		if addr == "" {
			var err error
			if addr, err = c.findCoordinator(ctx, group); err != nil {
				return groupError(err, true)
			}
			cc.set(addr)
		}
		stub, err := c.broker(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, attempt)
		err = call(actx, stub)
		cancel()
		if err == nil {
			return nil
		}
		reason := rpcerror.Reason(err)
		unknown := reason == rpcerror.ReasonUnknownOutcome
		retry := reason == rpcerror.ReasonNotCoordinator || reason == rpcerror.ReasonCoordinatorLoading ||
			(retryableCall(err) && reason != rpcerror.ReasonStaleMemberEpoch) || (retryUnknown && unknown)
		if !retry {
			return groupError(err, true)
		}
		if e := ctxErr(ctx, err); e != nil {
			return e
		}
		c.log.Debug("retrying coordinator call", "group", group, "coordinator", addr, "err", err)
		switch info := rpcerror.Info(err); {
		case info != nil && info.Redirect != "":
			cc.set(info.Redirect)
			continue
		case reason == rpcerror.ReasonCoordinatorLoading:
		default:
			cc.set("") // ask again where it lives
		}
		if err := ctxtime.Sleep(ctx, bo.next()); err != nil {
			return ctxErr(ctx, err)
		}
	}
}

// ListGroups lists every group of the cluster: each broker answers for the
// groups it coordinates, so every broker DescribeCluster names is asked.
// Brokers that do not answer are skipped (their groups are missing); it
// fails only when none answers.
func (c *Client) ListGroups(ctx context.Context) ([]*brokerpb.GroupSummary, error) {
	cl, err := c.DescribeCluster(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]*brokerpb.GroupSummary{}
	var errs []error
	answered := 0
	for _, b := range cl.GetBrokers() {
		addr := b.GetInfo().GetAddress()
		if addr == "" {
			continue
		}
		stub, err := c.broker(addr)
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		resp, err := stub.ListGroups(actx, &brokerpb.ListGroupsRequest{})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("broker %s: %w", b.GetInfo().GetId(), err))
			continue
		}
		answered++
		for _, g := range resp.GetGroups() {
			if _, dup := seen[g.GetGroupId()]; !dup {
				seen[g.GetGroupId()] = g
			}
		}
	}
	if answered == 0 && len(errs) > 0 {
		return nil, classify(errors.Join(errs...))
	}
	out := make([]*brokerpb.GroupSummary, 0, len(seen))
	for _, g := range seen {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *brokerpb.GroupSummary) int {
		switch {
		case a.GetGroupId() < b.GetGroupId():
			return -1
		case a.GetGroupId() > b.GetGroupId():
			return 1
		}
		return 0
	})
	return out, nil
}

// DescribeGroup returns a group's state, members and committed offsets
// (ErrUnknownGroup when there is no such group).
func (c *Client) DescribeGroup(ctx context.Context, group string) (*brokerpb.DescribeGroupResponse, error) {
	var resp *brokerpb.DescribeGroupResponse
	err := c.onCoordinator(ctx, group, nil, 0, false, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.DescribeGroup(ctx, &brokerpb.DescribeGroupRequest{GroupId: group})
		return err
	})
	return resp, err
}

// DeleteGroup deletes a group without members and its committed offsets
// (ErrGroupNotEmpty while it has members, ErrUnknownGroup when there is no
// such group).
func (c *Client) DeleteGroup(ctx context.Context, group string) error {
	return c.onCoordinator(ctx, group, nil, 0, false, func(ctx context.Context, b brokerpb.BrokerClient) error {
		_, err := b.DeleteGroup(ctx, &brokerpb.DeleteGroupRequest{GroupId: group})
		return err
	})
}

// FetchOffsets returns group's committed offsets of tps (offset -1 where
// nothing is committed), or of every committed partition when tps is empty.
func (c *Client) FetchOffsets(ctx context.Context, group string, tps ...TopicPartition) ([]*brokerpb.CommittedOffset, error) {
	return c.fetchOffsets(ctx, group, nil, tps)
}

func (c *Client) fetchOffsets(ctx context.Context, group string, cc *coordinatorCache, tps []TopicPartition) ([]*brokerpb.CommittedOffset, error) {
	req := &brokerpb.FetchOffsetsRequest{GroupId: group, Partitions: tpsToProto(tps)}
	var resp *brokerpb.FetchOffsetsResponse
	err := c.onCoordinator(ctx, group, cc, 0, false, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.FetchOffsets(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Offsets, nil
}

// CommitGroupOffsets commits offsets for group as an administrator (no
// member): the coordinator allows it only while the group has no members
// (ErrGroupNotEmpty otherwise). Per-partition refusals are joined into the
// error.
func (c *Client) CommitGroupOffsets(ctx context.Context, group string, offsets map[TopicPartition]int64) error {
	return c.commit(ctx, group, nil, "", -1, offsets)
}

// commit sends one CommitOffsets request (retried while its outcome is
// unknown: a commit is idempotent).
func (c *Client) commit(ctx context.Context, group string, cc *coordinatorCache, memberID string, epoch int32, offsets map[TopicPartition]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	req := &brokerpb.CommitOffsetsRequest{GroupId: group, MemberId: memberID, MemberEpoch: epoch}
	for _, tp := range sortedTPs(offsets) {
		req.Offsets = append(req.Offsets, &brokerpb.OffsetCommit{Topic: tp.Topic, Partition: tp.Partition, Offset: offsets[tp]})
	}
	var resp *brokerpb.CommitOffsetsResponse
	err := c.onCoordinator(ctx, group, cc, 0, true, func(ctx context.Context, b brokerpb.BrokerClient) (err error) {
		resp, err = b.CommitOffsets(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("client: commit offsets of group %q: %w", group, err)
	}
	var errs []error
	for _, r := range resp.GetResults() {
		if r.GetError() != nil {
			perr := groupError(partitionError(r.GetError()), false)
			errs = append(errs, fmt.Errorf("client: commit %s/%d of group %q: %w", r.GetTopic(), r.GetPartition(), group, perr))
		}
	}
	return errors.Join(errs...)
}

func sortedTPs[V any](m map[TopicPartition]V) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	slices.SortFunc(out, compareTP)
	return out
}

func compareTP(a, b TopicPartition) int {
	switch {
	case a.Topic < b.Topic:
		return -1
	case a.Topic > b.Topic:
		return 1
	}
	return int(a.Partition) - int(b.Partition)
}

// tpsToProto groups partitions by topic, sorted.
func tpsToProto(tps []TopicPartition) []*brokerpb.TopicPartitions {
	if len(tps) == 0 {
		return nil
	}
	sorted := slices.Clone(tps)
	slices.SortFunc(sorted, compareTP)
	sorted = slices.Compact(sorted)
	var out []*brokerpb.TopicPartitions
	for _, tp := range sorted {
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			out = append(out, &brokerpb.TopicPartitions{Topic: tp.Topic})
		}
		last := out[len(out)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return out
}

func tpsFromProto(in []*brokerpb.TopicPartitions) map[TopicPartition]bool {
	out := map[TopicPartition]bool{}
	for _, t := range in {
		for _, p := range t.GetPartitions() {
			out[TopicPartition{t.GetTopic(), p}] = true
		}
	}
	return out
}
