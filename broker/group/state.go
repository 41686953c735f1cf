package group

import (
	"fmt"
	"slices"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

// This file is the coordinator's state machine: what a heartbeat, a timer or a
// replayed record does to a group. It does no I/O and reads no clock; the
// Coordinator feeds it the time, the topics' partition counts and the
// requests, then persists what changed.

// member is one member of a group as the coordinator sees it.
type member struct {
	id, clientID, clientHost string
	// epoch is the member epoch: the group epoch of the target the member
	// has caught up with (it revoked everything that target takes from it).
	// prevEpoch is the one before, still accepted once (a lost response).
	epoch, prevEpoch int32
	subscribed       []string // sorted, no duplicates
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	// deadline: the session expires when a heartbeat has not arrived by
	// then. revokeDeadline: non-zero while the member holds partitions its
	// target does not give it; it is fenced if it still does after it.
	deadline, revokeDeadline time.Time

	// target is what the assignor gives the member at the group epoch.
	// assigned is the assignment the member was last told (what it may own);
	// owned is what it last reported owning. A partition is HELD by the
	// member while it is in assigned or owned: no other member is told it
	// may own a held partition (the invariant of the package).
	target, assigned, owned tpSet
	// budget: what the member counts against the limits (budgetBytes), as
	// of its last heartbeat.
	budget int
}

func (m *member) held() tpSet {
	h := m.assigned.clone()
	for tp := range m.owned {
		h[tp] = struct{}{}
	}
	return h
}

// group is one consumer group: members, epochs and committed offsets.
type group struct {
	id    string
	epoch int32 // group epoch: bumped on membership, subscription or partition-count change
	// members by id.
	members map[string]*member
	// partitionCounts: the subscribed topics' partition counts the current
	// targets were computed with.
	partitionCounts map[string]int32
	offsets         map[TopicPartition]*brokerpb.GroupOffsetValue
	// dirty: the state machine changed the metadata (epochs, members,
	// assignments); the coordinator turns it into a new version.
	dirty bool
	// version counts the metadata's changes in memory; persisted is the
	// version the log holds, durable that metadata (nil: none, or a
	// tombstone). The coordinator's write path (pipeline.go) keeps them.
	version, persisted int64
	durable            *brokerpb.GroupMetadataValue
	// durableCounts: the partition counts durable's targets were computed
	// with (a revert recomputes targets with them: the failed change may
	// have dropped the count of a topic only a leaving member subscribed).
	durableCounts map[string]int32
	// lane: the group's writes to the log, one append at a time.
	lane lane
	// emptySince: when the coordinator first saw the group without
	// members (zero while it has some); in memory only, so it restarts at
	// a coordinator change, which only delays expiry.
	emptySince time.Time
	// rebalances counts epoch bumps not yet reported to the metrics.
	rebalances int
	// budget: the sum of the members' budgets, what Limits.MaxGroupBytes
	// bounds (see budgetBytes).
	budget int
}

func newGroup(id string) *group {
	return &group{
		id:              id,
		members:         map[string]*member{},
		partitionCounts: map[string]int32{},
		offsets:         map[TopicPartition]*brokerpb.GroupOffsetValue{},
	}
}

// limits are the coordinator's settings the state machine needs.
type limits struct {
	sessionTimeout, minSessionTimeout, maxSessionTimeout time.Duration
	rebalanceTimeout                                     time.Duration
	Limits
	// maxGroupBytes is the bound of a group's record now: MaxGroupBytes,
	// or less when the OffsetsLog's batch bound is smaller.
	maxGroupBytes int
}

// subscribedTopics returns the union of the members' subscriptions, sorted.
func (g *group) subscribedTopics() []string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.subscribed...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sortedMembers returns the members in id order.
func (g *group) sortedMembers() []*member {
	out := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *member) int {
		if a.id < b.id {
			return -1
		}
		if a.id > b.id {
			return 1
		}
		return 0
	})
	return out
}

// bump starts a new group epoch and computes its target assignment with
// counts (topic -> partitions; missing topics keep their last known count).
func (g *group) bump(counts map[string]int32, now time.Time) {
	g.epoch++
	g.rebalances++
	g.dirty = true
	g.computeTarget(counts, now)
}

// computeTarget recomputes every member's target with the sticky assignor.
func (g *group) computeTarget(counts map[string]int32, now time.Time) {
	effective := map[string]int32{}
	for _, t := range g.subscribedTopics() {
		if n, ok := counts[t]; ok {
			effective[t] = n
		} else {
			effective[t] = g.partitionCounts[t]
		}
	}
	g.partitionCounts = effective
	subs := make(map[string][]string, len(g.members))
	current := make(map[string]tpSet, len(g.members))
	for id, m := range g.members {
		subs[id] = m.subscribed
		current[id] = m.target
	}
	target := assignSticky(subs, effective, current)
	for id, m := range g.members {
		m.target = target[id]
		m.updateRevokeDeadline(now)
	}
}

// countsChanged says whether counts disagree with the counts the targets were
// computed with, for a subscribed topic counts knows.
func (g *group) countsChanged(counts map[string]int32) bool {
	for _, t := range g.subscribedTopics() {
		if n, ok := counts[t]; ok && n != g.partitionCounts[t] {
			return true
		}
	}
	return false
}

// updateRevokeDeadline starts the rebalance timer when the member holds
// partitions its target does not give it, and stops it when it holds none.
func (m *member) updateRevokeDeadline(now time.Time) {
	if len(m.held().minus(m.target)) == 0 {
		m.revokeDeadline = time.Time{}
	} else if m.revokeDeadline.IsZero() {
		m.revokeDeadline = now.Add(m.rebalanceTimeout)
	}
}

// heldByOthers returns the partitions held by members other than id.
func (g *group) heldByOthers(id string) tpSet {
	out := tpSet{}
	for oid, o := range g.members {
		if oid == id {
			continue
		}
		for tp := range o.assigned {
			out[tp] = struct{}{}
		}
		for tp := range o.owned {
			out[tp] = struct{}{}
		}
	}
	return out
}

// reconcile moves the member towards its target after a heartbeat told the
// coordinator what it owns, and returns what to tell it: the assignment
// (what it may own now) and pending (target partitions it will get once
// their previous holder releases them).
//
// The member advances to the group epoch once it owns nothing outside its
// target. Until then it is told to keep only what it owns of its target
// (so it revokes the rest) and gets nothing new. Once at the group epoch it
// gets every target partition no other member holds; the others are pending.
func (g *group) reconcile(m *member, now time.Time) (assignment, pending tpSet) {
	if m.epoch != g.epoch && len(m.owned.minus(m.target)) == 0 {
		m.prevEpoch, m.epoch = m.epoch, g.epoch
		g.dirty = true
	}
	others := g.heldByOthers(m.id)
	if m.epoch == g.epoch {
		assignment = m.target.minus(others)
	} else {
		assignment = m.target.intersect(m.held()).minus(others)
	}
	if !assignment.equal(m.assigned) {
		m.assigned = assignment
		g.dirty = true
	}
	m.updateRevokeDeadline(now)
	return assignment, m.target.minus(assignment)
}

// remove drops a member: everything it held is free at once.
func (g *group) remove(id string) {
	if m := g.members[id]; m != nil {
		g.budget -= m.budget
	}
	delete(g.members, id)
	g.dirty = true
}

// expire removes members whose session timed out or that did not revoke
// within their rebalance timeout, and starts a new epoch if it removed any.
func (g *group) expire(now time.Time) (expired, fenced int) {
	for id, m := range g.members {
		switch {
		case now.After(m.deadline):
			expired++
		case !m.revokeDeadline.IsZero() && now.After(m.revokeDeadline):
			fenced++
		default:
			continue
		}
		g.remove(id)
	}
	if expired+fenced > 0 {
		g.bump(nil, now)
	}
	return expired, fenced
}

// heartbeat applies one GroupHeartbeat request at now. counts holds fresh
// partition counts for (at least some of) the subscribed topics; newID makes
// a member id. On error the group is unchanged except that a fenced member
// stays (it may rejoin with epoch 0 under the same id).
func (g *group) heartbeat(req *brokerpb.GroupHeartbeatRequest, counts map[string]int32, now time.Time, lim limits, newID func() string) (*brokerpb.GroupHeartbeatResponse, error) {
	sessionTimeout, rebalanceTimeout, err := requestTimeouts(req, lim)
	if err != nil {
		return nil, err
	}
	subscribed := slices.Compact(slices.Sorted(slices.Values(req.GetSubscribedTopics())))
	for _, t := range subscribed {
		if t == "" {
			return nil, fmt.Errorf("%w: empty topic name in subscribed_topics", ErrInvalid)
		}
	}
	owned := tpSetFromProto(req.GetOwned())
	id := req.GetMemberId()
	m := g.members[id]
	bump := false
	budget := 0 // the member's, once the request is applied

	switch epoch := req.GetMemberEpoch(); {
	case epoch == -1: // leave
		if m != nil {
			g.remove(id)
			g.bump(counts, now)
		}
		return &brokerpb.GroupHeartbeatResponse{MemberId: id, MemberEpoch: -1}, nil
	case epoch < -1:
		return nil, fmt.Errorf("%w: member_epoch %d (static membership is not supported)", ErrInvalid, epoch)
	case epoch == 0: // join, or rejoin after being fenced
		if m == nil {
			if len(subscribed) == 0 {
				return nil, fmt.Errorf("%w: subscribed_topics is required to join", ErrInvalid)
			}
			if len(g.members) >= lim.MaxMembers {
				return nil, refuse(refusedGroupMaxSize, ErrGroupMaxSize, "group %q has %d members, the most a group may have", g.id, len(g.members))
			}
			if id == "" {
				id = newID()
			}
			if budget, err = g.checkGrowth(nil, id, req, subscribed, owned, lim); err != nil {
				return nil, err
			}
			m = &member{id: id, target: tpSet{}, assigned: tpSet{}, owned: tpSet{}}
			g.members[id] = m
			g.dirty = true
			bump = true
		} else {
			// The same member starting over (or retrying a join whose
			// response was lost): it owns nothing from before (the
			// protocol makes it drop everything), so release it all.
			// Its target stays: no rebalance.
			if budget, err = g.checkGrowth(m, id, req, subscribed, owned, lim); err != nil {
				return nil, err
			}
			m.prevEpoch, m.epoch = 0, 0
			m.assigned = tpSet{}
			g.dirty = true
		}
	default:
		if m == nil {
			return nil, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, id, g.id)
		}
		lostResponse := epoch == m.prevEpoch && owned.subsetOf(m.held())
		if epoch != m.epoch && !lostResponse {
			return nil, fmt.Errorf("%w: member %q sent epoch %d, its epoch is %d", ErrFencedMemberEpoch, id, epoch, m.epoch)
		}
		if budget, err = g.checkGrowth(m, id, req, subscribed, owned, lim); err != nil {
			return nil, err
		}
	}
	g.budget += budget - m.budget
	m.budget = budget

	if len(subscribed) > 0 && !slices.Equal(subscribed, m.subscribed) {
		m.subscribed = subscribed
		g.dirty = true
		bump = true
	}
	if c := req.GetClientId(); c != "" && c != m.clientID {
		m.clientID = c
		g.dirty = true
	}
	if h := req.GetClientHost(); h != "" && h != m.clientHost {
		m.clientHost = h
		g.dirty = true
	}
	m.sessionTimeout, m.rebalanceTimeout = sessionTimeout, rebalanceTimeout
	m.deadline = now.Add(sessionTimeout)
	if !owned.equal(m.owned) {
		m.owned = owned
		g.dirty = true
	}
	if bump || g.countsChanged(counts) {
		g.bump(counts, now)
	}
	assignment, pending := g.reconcile(m, now)
	return &brokerpb.GroupHeartbeatResponse{
		MemberId:    id,
		MemberEpoch: m.epoch,
		Assignment:  assignment.toProto(),
		Pending:     pending.toProto(),
	}, nil
}

// checkGrowth refuses a heartbeat that would make member m (nil: a new
// member id) count more than MaxMemberBytes, or its group more than
// maxGroupBytes, and otherwise returns the member's budget once the request
// is applied. Only growth the client causes is refused: a request that
// changes none of its ids and subscription, and reports owned only
// partitions it holds, is always accepted, so a group stored over the
// limits keeps working. It changes nothing.
func (g *group) checkGrowth(m *member, id string, req *brokerpb.GroupHeartbeatRequest, subscribed []string, owned tpSet, lim limits) (int, error) {
	clientID, clientHost := req.GetClientId(), req.GetClientHost()
	var assigned tpSet // a (re)join starts with no assignment
	before, counted, checkedOwned := 0, 0, owned
	if m != nil {
		counted = m.budget
		if len(subscribed) == 0 {
			subscribed = m.subscribed
		}
		if clientID == "" {
			clientID = m.clientID
		}
		if clientHost == "" {
			clientHost = m.clientHost
		}
		if req.GetMemberEpoch() != 0 {
			assigned = m.assigned
		}
		// Owning what the coordinator handed out is not the client's
		// growth: then compare the rest.
		oldOwned := m.owned
		if owned.subsetOf(m.held()) {
			oldOwned, checkedOwned = nil, nil
		}
		before = budgetBytes(m.id, m.clientID, m.clientHost, m.subscribed, m.assigned, oldOwned)
	}
	after := budgetBytes(id, clientID, clientHost, subscribed, assigned, owned)
	if budgetBytes(id, clientID, clientHost, subscribed, assigned, checkedOwned) <= before {
		return after, nil
	}
	switch total := g.budget - counted + after; {
	case after > lim.MaxMemberBytes:
		return 0, refuse(refusedMemberBytes, ErrLimitExceeded, "member %q would take about %d bytes of group %q's record, at most %d are allowed", id, after, g.id, lim.MaxMemberBytes)
	case total > lim.maxGroupBytes:
		return 0, refuse(refusedGroupBytes, ErrLimitExceeded, "group %q's record would grow to about %d bytes, at most %d are allowed", g.id, total, lim.maxGroupBytes)
	}
	return after, nil
}

func requestTimeouts(req *brokerpb.GroupHeartbeatRequest, lim limits) (session, rebalance time.Duration, err error) {
	session, rebalance = lim.sessionTimeout, lim.rebalanceTimeout
	if ms := req.GetSessionTimeoutMs(); ms != 0 {
		session = time.Duration(ms) * time.Millisecond
		if session < lim.minSessionTimeout || session > lim.maxSessionTimeout {
			return 0, 0, fmt.Errorf("%w: session_timeout_ms %d outside [%d, %d]", ErrInvalid, ms,
				lim.minSessionTimeout.Milliseconds(), lim.maxSessionTimeout.Milliseconds())
		}
	}
	if ms := req.GetRebalanceTimeoutMs(); ms != 0 {
		if ms < 0 {
			return 0, 0, fmt.Errorf("%w: rebalance_timeout_ms %d < 0", ErrInvalid, ms)
		}
		rebalance = time.Duration(ms) * time.Millisecond
	}
	return session, rebalance, nil
}

// state is the group state DescribeGroup and ListGroups report: EMPTY (no
// members), STABLE (every member at the group epoch, owning exactly its
// target), otherwise RECONCILING. ASSIGNING is never reported: the target is
// computed synchronously with the epoch bump.
func (g *group) state() string {
	if len(g.members) == 0 {
		return "EMPTY"
	}
	for _, m := range g.members {
		if m.epoch != g.epoch || !m.assigned.equal(m.target) || !m.owned.equal(m.target) {
			return "RECONCILING"
		}
	}
	return "STABLE"
}

// metadata renders what is persisted of the group (and shown by
// DescribeGroup): epochs, subscriptions, assignments, owned partitions.
func (g *group) metadata() *brokerpb.GroupMetadataValue {
	v := &brokerpb.GroupMetadataValue{GroupEpoch: g.epoch}
	for _, m := range g.sortedMembers() {
		v.Members = append(v.Members, &brokerpb.GroupMember{
			MemberId:         m.id,
			MemberEpoch:      m.epoch,
			ClientId:         m.clientID,
			ClientHost:       m.clientHost,
			SubscribedTopics: slices.Clone(m.subscribed),
			Assignment:       m.assigned.toProto(),
			Owned:            m.owned.toProto(),
		})
	}
	return v
}

// revert puts the group's metadata back to durable (nil: none) after a
// write of newer metadata failed: members and epochs as the log has them.
// Members that stay keep their sessions; the others start one at now.
// Targets are recomputed with counts, then the last known ones.
func (g *group) revert(durable *brokerpb.GroupMetadataValue, counts map[string]int32, now time.Time, lim limits) {
	live := g.members
	if durable == nil {
		durable = &brokerpb.GroupMetadataValue{}
	}
	g.restore(durable, now, lim)
	for id, m := range g.members {
		if old := live[id]; old != nil {
			m.sessionTimeout, m.rebalanceTimeout, m.deadline = old.sessionTimeout, old.rebalanceTimeout, old.deadline
		}
	}
	g.computeTarget(counts, now)
	g.dirty = false
}

// restore replaces the group's metadata with a replayed record. Sessions
// and timers restart at now (the coordinator's load time) with the default
// timeouts; targets are recomputed by the caller once partition counts are
// known.
func (g *group) restore(v *brokerpb.GroupMetadataValue, now time.Time, lim limits) {
	g.epoch = v.GetGroupEpoch()
	g.members = map[string]*member{}
	g.budget = 0
	for _, pm := range v.GetMembers() {
		m := &member{
			id:               pm.GetMemberId(),
			clientID:         pm.GetClientId(),
			clientHost:       pm.GetClientHost(),
			epoch:            pm.GetMemberEpoch(),
			prevEpoch:        pm.GetMemberEpoch(),
			subscribed:       slices.Compact(slices.Sorted(slices.Values(pm.GetSubscribedTopics()))),
			sessionTimeout:   lim.sessionTimeout,
			rebalanceTimeout: lim.rebalanceTimeout,
			deadline:         now.Add(lim.sessionTimeout),
			target:           tpSet{},
			assigned:         tpSetFromProto(pm.GetAssignment()),
			owned:            tpSetFromProto(pm.GetOwned()),
		}
		// The last target is not persisted: the member's assignment is the
		// best base for stickiness.
		m.target = m.assigned.clone()
		m.budget = budgetBytes(m.id, m.clientID, m.clientHost, m.subscribed, m.assigned, m.owned)
		g.budget += m.budget
		g.members[m.id] = m
	}
	g.dirty = false
}
