package group

import (
	"context"
	"fmt"
	"slices"

	"github.com/strata-log/strata/proto/brokerpb"
)

// Heartbeat serves GroupHeartbeat (KIP-848): join with epoch 0, leave with
// -1 (a static member away for a while: -2), otherwise report owned
// partitions and get the assignment. See doc.go for the epochs and the
// hand-over rule. A member of a classic group with members is refused with
// ErrInconsistentGroupProtocol. The response is sent only once the group's
// state it reflects is durable in the log (W6): at once when the heartbeat
// changed nothing and the log is up to date, otherwise after the group's
// lane wrote the metadata.
func (c *Coordinator) Heartbeat(ctx context.Context, req *brokerpb.GroupHeartbeatRequest) (*brokerpb.GroupHeartbeatResponse, error) {
	id := req.GetGroupId()
	if id == "" {
		return nil, fmt.Errorf("%w: group_id is required", ErrInvalid)
	}
	if err := checkHeartbeat(req, c.lim.Limits); err != nil {
		return nil, c.refused(err)
	}
	counts, matches, err := c.heartbeatTopics(ctx, req)
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	now := c.cfg.Now()
	g := c.mu.groups[id]
	created := false
	switch epoch := req.GetMemberEpoch(); {
	case g != nil:
	case epoch == -1 || epoch == -2:
		c.mu.Unlock()
		return &brokerpb.GroupHeartbeatResponse{MemberId: req.GetMemberId(), MemberEpoch: epoch}, nil
	case epoch != 0:
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %q (no group %q)", ErrUnknownMember, req.GetMemberId(), id)
	default:
		if g, created, err = c.groupLocked(id, true); err != nil {
			c.mu.Unlock()
			return nil, err
		}
	}
	classic := g.classic
	if err := g.asConsumer(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.expireLocked(g, now)
	resp, hbErr := g.consumer.heartbeat(req, heartbeatInput{counts: counts, matches: matches, now: now, lim: c.limitsNow(), newID: newMemberID})
	hbErr = c.refused(hbErr)
	if classic != nil && hbErr != nil {
		// A refused join changes nothing: the empty classic group stays.
		g.classic, g.consumer.dirty = classic, false
	}
	if created && hbErr != nil {
		c.w.dropGroupLocked(g)
		c.mu.Unlock()
		return nil, hbErr
	}
	c.reportLocked(g)
	// Answered once what it saw of the group is durable: at once for a
	// heartbeat that changed nothing of a group whose log is up to date
	// (W6), after its lane's next batch otherwise.
	w := c.w.flushLocked(g)
	c.mu.Unlock()
	if w != nil {
		if err := c.w.wait(ctx, w); err != nil {
			return nil, err
		}
	}
	if hbErr != nil {
		return nil, hbErr
	}
	resp.HeartbeatIntervalMs = int32(c.cfg.HeartbeatInterval.Milliseconds())
	return resp, nil
}

// heartbeatTopics asks the TopicSource, without the mutex held, what a
// heartbeat needs: the partition counts of the topics involved (the
// request's and the group's), and, for a regex the group has not resolved
// yet, the topics it matches (nil otherwise).
func (c *Coordinator) heartbeatTopics(ctx context.Context, req *brokerpb.GroupHeartbeatRequest) (map[string]int32, []string, error) {
	if e := req.GetMemberEpoch(); e == -1 || e == -2 {
		return nil, nil, nil // a leave needs no fresh counts
	}
	regex := req.GetSubscribedTopicRegex()
	if regex != "" {
		if _, err := compileRegex(regex); err != nil {
			return nil, nil, err
		}
	}
	c.mu.Lock()
	if err := c.checkStateLocked(); err != nil {
		c.mu.Unlock()
		return nil, nil, err
	}
	topics := slices.Clone(req.GetSubscribedTopics())
	resolved := false
	if g := c.mu.groups[req.GetGroupId()]; g != nil {
		topics = append(topics, g.consumer.subscribedTopics()...)
		_, resolved = g.consumer.matches[regex]
	}
	c.mu.Unlock()
	var matches []string
	if regex != "" && !resolved {
		names, err := c.cfg.Topics.TopicNames(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("group: listing topics for regex %q: %w", regex, err)
		}
		re, _ := compileRegex(regex)
		matches = append([]string{}, matchTopics(re, names)...) // non-nil: resolved
		topics = append(topics, matches...)
	}
	counts, err := c.partitionCounts(ctx, topics)
	return counts, matches, err
}
