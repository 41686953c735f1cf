package group

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

// This file is the KIP-848 machine: what a GroupHeartbeat, a timer or a
// replayed record does to a consumer group with server-side assignment.
// It does no I/O and reads no clock; the Coordinator feeds it the time, the
// topics' partition counts, the topics a regex matches and the requests,
// then persists what changed.

// member is one member of a KIP-848 group as the coordinator sees it.
type member struct {
	id, instanceID, clientID, clientHost string
	// epoch is the member epoch: the group epoch of the target the member
	// has caught up with (it revoked everything that target takes from it).
	// prevEpoch is the one before, still accepted once (a lost response).
	epoch, prevEpoch int32
	// away: a static member that left with epoch -2. It keeps what it was
	// assigned until it rejoins under its instance id or its session
	// expires.
	away bool
	// names: the topics subscribed by name; regex: the subscription by
	// regular expression ("" for none). subscribed is their union with
	// what regex matches: what the assignor sees. All sorted.
	names, subscribed []string
	regex             string
	// assignor: the server assignor the member asked for ("" for none).
	assignor         string
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

// idBytes is what the member's strings count against the limits.
func (m *member) idBytes() int {
	return len(m.id) + len(m.instanceID) + len(m.clientID) + len(m.clientHost) + len(m.regex)
}

// consumerGroup is the KIP-848 state of a group: members, epochs and
// targets. A classic group has an empty one.
type consumerGroup struct {
	id    string
	epoch int32 // group epoch: bumped on membership, subscription or partition-count change
	// members by id; static maps instance ids to member ids.
	members map[string]*member
	static  map[string]string
	// partitionCounts: the subscribed topics' partition counts the current
	// targets were computed with.
	partitionCounts map[string]int32
	// matches: the topics each subscribed regex matches (sorted), as of
	// resolvedAt; compiled: the regexes.
	matches    map[string][]string
	compiled   map[string]*regexp.Regexp
	resolvedAt time.Time
	// dirty: the machine changed the metadata (epochs, members,
	// assignments); the coordinator turns it into a new version.
	dirty bool
	// rebalances counts epoch bumps not yet reported to the metrics.
	rebalances int
	// budget: the sum of the members' budgets, what Limits.MaxGroupBytes
	// bounds (see budgetBytes).
	budget int
}

func newConsumerGroup(id string) *consumerGroup {
	return &consumerGroup{
		id:              id,
		members:         map[string]*member{},
		static:          map[string]string{},
		partitionCounts: map[string]int32{},
		matches:         map[string][]string{},
		compiled:        map[string]*regexp.Regexp{},
	}
}

// limits are the coordinator's settings the machines need.
type limits struct {
	sessionTimeout, minSessionTimeout, maxSessionTimeout time.Duration
	rebalanceTimeout                                     time.Duration
	initialRebalanceDelay                                time.Duration
	Limits
	// maxGroupBytes is the bound of a group's record now: MaxGroupBytes,
	// or less when the OffsetsLog's batch bound is smaller.
	maxGroupBytes int
}

// subscribedTopics returns the union of the members' subscriptions, sorted.
func (g *consumerGroup) subscribedTopics() []string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.subscribed...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// regexes returns the regexes members subscribe with, sorted.
func (g *consumerGroup) regexes() []string {
	var out []string
	for _, m := range g.members {
		if m.regex != "" {
			out = append(out, m.regex)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sortedMembers returns the members in id order.
func (g *consumerGroup) sortedMembers() []*member {
	out := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *member) int { return compareStrings(a.id, b.id) })
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// bump starts a new group epoch and computes its target assignment with
// counts (topic -> partitions; missing topics keep their last known count).
func (g *consumerGroup) bump(counts map[string]int32, now time.Time) {
	g.epoch++
	g.rebalances++
	g.dirty = true
	g.computeTarget(counts, now)
}

// computeTarget recomputes every member's target with the group's
// assignor.
func (g *consumerGroup) computeTarget(counts map[string]int32, now time.Time) {
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
	var target map[string]tpSet
	if g.assignor() == RangeAssignor {
		target = assignRange(subs, effective)
	} else {
		target = assignSticky(subs, effective, current)
	}
	for id, m := range g.members {
		m.target = target[id]
		m.updateRevokeDeadline(now)
	}
}

// countsChanged says whether counts disagree with the counts the targets were
// computed with, for a subscribed topic counts knows.
func (g *consumerGroup) countsChanged(counts map[string]int32) bool {
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
func (g *consumerGroup) heldByOthers(id string) tpSet {
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
func (g *consumerGroup) reconcile(m *member, now time.Time) (assignment, pending tpSet) {
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
func (g *consumerGroup) remove(id string) {
	if m := g.members[id]; m != nil {
		g.budget -= m.budget
		if m.instanceID != "" && g.static[m.instanceID] == id {
			delete(g.static, m.instanceID)
		}
	}
	delete(g.members, id)
	g.dirty = true
}

// expire removes members whose session timed out or that did not revoke
// within their rebalance timeout, and starts a new epoch if it removed any.
func (g *consumerGroup) expire(now time.Time) (expired, fenced int) {
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

// heartbeatInput is what the coordinator gathered for a heartbeat, outside
// the machine: fresh partition counts for (at least some of) the topics
// involved, the topics the request's regex matches (when it has one), the
// time, the limits and a maker of member ids.
type heartbeatInput struct {
	counts  map[string]int32
	matches []string
	now     time.Time
	lim     limits
	newID   func() string
}

// heartbeat applies one GroupHeartbeat request. On error the group is
// unchanged except that a fenced member stays (it may rejoin with epoch 0
// under the same id).
func (g *consumerGroup) heartbeat(req *brokerpb.GroupHeartbeatRequest, in heartbeatInput) (*brokerpb.GroupHeartbeatResponse, error) {
	if a := req.GetServerAssignor(); a != "" && a != UniformAssignor && a != RangeAssignor {
		return nil, fmt.Errorf("%w: %q (the coordinator assigns with %q or %q)", ErrUnsupportedAssignor, a, UniformAssignor, RangeAssignor)
	}
	id := req.GetMemberId()
	var m *member
	var bump bool
	var err error
	switch epoch := req.GetMemberEpoch(); {
	case epoch == -1 || (epoch == -2 && req.GetInstanceId() == ""):
		return g.leave(id, in), nil
	case epoch == -2:
		return g.leaveTemporarily(id, in.now)
	case epoch < -2:
		return nil, fmt.Errorf("%w: member_epoch %d", ErrInvalid, epoch)
	case epoch == 0:
		m, bump, err = g.join(req, in)
	default:
		m, err = g.known(req, in)
	}
	if err != nil {
		return nil, err
	}
	if g.update(m, req, in) || bump || g.countsChanged(in.counts) {
		g.bump(in.counts, in.now)
	}
	assignment, pending := g.reconcile(m, in.now)
	return &brokerpb.GroupHeartbeatResponse{
		MemberId:    m.id,
		MemberEpoch: m.epoch,
		Assignment:  assignment.toProto(),
		Pending:     pending.toProto(),
	}, nil
}

// leave removes member id (epoch -1) and starts a new epoch.
func (g *consumerGroup) leave(id string, in heartbeatInput) *brokerpb.GroupHeartbeatResponse {
	if g.members[id] != nil {
		g.remove(id)
		g.bump(in.counts, in.now)
	}
	return &brokerpb.GroupHeartbeatResponse{MemberId: id, MemberEpoch: -1}
}

// leaveTemporarily marks a static member away (epoch -2): it keeps what
// it was assigned, and nothing is rebalanced, until it rejoins under its
// instance id or its session expires.
func (g *consumerGroup) leaveTemporarily(id string, now time.Time) (*brokerpb.GroupHeartbeatResponse, error) {
	m := g.members[id]
	if m == nil {
		return nil, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, id, g.id)
	}
	m.away = true
	m.owned = tpSet{} // the client stopped: it owns nothing
	m.updateRevokeDeadline(now)
	g.dirty = true
	return &brokerpb.GroupHeartbeatResponse{MemberId: id, MemberEpoch: -2}, nil
}

// join admits a member with epoch 0: a new member, a static member taking
// over its instance id, or the same member starting over (or retrying a
// join whose response was lost). bump: the membership changed.
func (g *consumerGroup) join(req *brokerpb.GroupHeartbeatRequest, in heartbeatInput) (m *member, bump bool, err error) {
	id, inst := req.GetMemberId(), req.GetInstanceId()
	var old *member // the away static member this join replaces
	if oldID, ok := g.static[inst]; inst != "" && ok && oldID != id {
		old = g.members[oldID]
		if old != nil && !old.away {
			return nil, false, fmt.Errorf("%w: instance %q is member %q of group %q", ErrUnreleasedInstanceID, inst, oldID, g.id)
		}
	}
	if m = g.members[id]; m != nil {
		// The same member starting over: it owns nothing from before
		// (the protocol makes it drop everything), so release it all.
		// Its target stays: no rebalance.
		if err := g.admit(m, id, req, in); err != nil {
			return nil, false, err
		}
		m.prevEpoch, m.epoch, m.away = 0, 0, false
		m.assigned = tpSet{}
		g.dirty = true
		return m, false, nil
	}
	if len(req.GetSubscribedTopics()) == 0 && req.GetSubscribedTopicRegex() == "" && old == nil {
		return nil, false, fmt.Errorf("%w: a subscription is required to join", ErrInvalid)
	}
	if old == nil && len(g.members) >= in.lim.MaxMembers {
		return nil, false, refuse(refusedGroupMaxSize, ErrGroupMaxSize, "group %q has %d members, the most a group may have", g.id, len(g.members))
	}
	if id == "" {
		id = in.newID()
	}
	m = &member{id: id, instanceID: inst, target: tpSet{}, assigned: tpSet{}, owned: tpSet{}}
	if old != nil {
		// It takes over what the away member was assigned: no
		// rebalance unless its subscription differs.
		m.names, m.regex, m.subscribed = old.names, old.regex, old.subscribed
		m.target, m.assigned = old.target, old.assigned
		m.clientID, m.clientHost = old.clientID, old.clientHost
		m.sessionTimeout, m.rebalanceTimeout = old.sessionTimeout, old.rebalanceTimeout
	}
	if err := g.admit(m, id, req, in); err != nil {
		return nil, false, err
	}
	if old != nil {
		g.remove(old.id)
	}
	g.members[id] = m
	g.budget += m.budget
	if inst != "" {
		g.static[inst] = id
	}
	g.dirty = true
	return m, old == nil, nil
}

// known checks a heartbeat of a member at work (epoch > 0).
func (g *consumerGroup) known(req *brokerpb.GroupHeartbeatRequest, in heartbeatInput) (*member, error) {
	id, epoch := req.GetMemberId(), req.GetMemberEpoch()
	m := g.members[id]
	if m == nil {
		if inst := req.GetInstanceId(); inst != "" && g.static[inst] != "" {
			return nil, fmt.Errorf("%w: instance %q is member %q of group %q", ErrFencedInstanceID, inst, g.static[inst], g.id)
		}
		return nil, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, id, g.id)
	}
	owned := requestOwned(req, m)
	lostResponse := epoch == m.prevEpoch && owned.subsetOf(m.held())
	if m.away || (epoch != m.epoch && !lostResponse) {
		return nil, fmt.Errorf("%w: member %q sent epoch %d, its epoch is %d", ErrFencedMemberEpoch, id, epoch, m.epoch)
	}
	if err := g.admit(m, id, req, in); err != nil {
		return nil, err
	}
	return m, nil
}

// requestOwned is what the request says the member owns: what it last
// reported when the request leaves it out.
func requestOwned(req *brokerpb.GroupHeartbeatRequest, m *member) tpSet {
	if req.GetOwnedOmitted() && m != nil && req.GetMemberEpoch() != 0 {
		return m.owned
	}
	return tpSetFromProto(req.GetOwned())
}

// admit checks the request's timeouts and the growth it causes (checkGrowth)
// for member m (not yet in the group when new), and counts its new budget.
// It changes nothing else of m.
func (g *consumerGroup) admit(m *member, id string, req *brokerpb.GroupHeartbeatRequest, in heartbeatInput) error {
	if _, _, err := requestTimeouts(req, m, in.lim); err != nil {
		return err
	}
	for _, t := range req.GetSubscribedTopics() {
		if t == "" {
			return fmt.Errorf("%w: empty topic name in subscribed_topics", ErrInvalid)
		}
	}
	names, subscribed := g.requestSubscription(req, m, in)
	budget, err := g.checkGrowth(m, id, req, names, subscribed, requestOwned(req, m), in.lim)
	if err != nil {
		return err
	}
	if g.members[m.id] == m {
		g.budget += budget - m.budget
	}
	m.budget = budget
	return nil
}

// requestSubscription returns the member's subscription once the request
// is applied: by name, and with what its regex matches.
func (g *consumerGroup) requestSubscription(req *brokerpb.GroupHeartbeatRequest, m *member, in heartbeatInput) (names, subscribed []string) {
	names, regex := m.names, m.regex
	if t := req.GetSubscribedTopics(); len(t) > 0 {
		names = slices.Compact(slices.Sorted(slices.Values(t)))
	}
	matches := g.matches[regex]
	if r := req.GetSubscribedTopicRegex(); r != "" {
		regex, matches = r, in.matches
		if m, ok := g.matches[r]; ok && in.matches == nil {
			matches = m
		}
	}
	return names, union(names, matches)
}

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// update applies the request's subscription, client, timeouts and owned
// partitions to m (admitted). It reports whether the subscription changed.
func (g *consumerGroup) update(m *member, req *brokerpb.GroupHeartbeatRequest, in heartbeatInput) (subscriptionChanged bool) {
	session, rebalance, _ := requestTimeouts(req, m, in.lim)
	names, subscribed := g.requestSubscription(req, m, in)
	if r := req.GetSubscribedTopicRegex(); r != "" && r != m.regex {
		m.regex = r
		g.dirty = true
	}
	if r := req.GetSubscribedTopicRegex(); r != "" && in.matches != nil {
		g.matches[r] = in.matches
		if g.resolvedAt.IsZero() {
			g.resolvedAt = in.now
		}
	}
	if !slices.Equal(names, m.names) {
		m.names = names
		g.dirty = true
	}
	if a := req.GetServerAssignor(); a != "" && a != m.assignor {
		// The group's assignor may change with it: recompute.
		m.assignor = a
		g.dirty = true
		subscriptionChanged = true
	}
	if !slices.Equal(subscribed, m.subscribed) {
		m.subscribed = subscribed
		g.dirty = true
		subscriptionChanged = true
	}
	for _, f := range []struct {
		field *string
		v     string
	}{{&m.clientID, req.GetClientId()}, {&m.clientHost, req.GetClientHost()}} {
		if f.v != "" && f.v != *f.field {
			*f.field = f.v
			g.dirty = true
		}
	}
	if rebalance != m.rebalanceTimeout {
		g.dirty = true
	}
	m.sessionTimeout, m.rebalanceTimeout = session, rebalance
	m.deadline = in.now.Add(session)
	if owned := requestOwned(req, m); !owned.equal(m.owned) {
		m.owned = owned
		g.dirty = true
	}
	return subscriptionChanged
}

// checkGrowth refuses a heartbeat that would make member m (not yet in the
// group when new) count more than MaxMemberBytes, or its group more than
// maxGroupBytes, and otherwise returns the member's budget once the
// request is applied. Only growth the client causes is refused: a request
// that changes none of its ids and subscription, and reports owned only
// partitions it holds, is always accepted, so a group stored over the
// limits keeps working. It changes nothing.
func (g *consumerGroup) checkGrowth(m *member, id string, req *brokerpb.GroupHeartbeatRequest, names, subscribed []string, owned tpSet, lim limits) (int, error) {
	after := *m
	after.id = id
	if c := req.GetClientId(); c != "" {
		after.clientID = c
	}
	if h := req.GetClientHost(); h != "" {
		after.clientHost = h
	}
	if r := req.GetSubscribedTopicRegex(); r != "" {
		after.regex = r
	}
	var assigned tpSet // a (re)join starts with no assignment
	if req.GetMemberEpoch() != 0 {
		assigned = m.assigned
	}
	counted, before, checkedOwned := 0, 0, owned
	if g.members[m.id] == m {
		counted = m.budget
		// Owning what the coordinator handed out is not the client's
		// growth: then compare the rest.
		oldOwned := m.owned
		if owned.subsetOf(m.held()) {
			oldOwned, checkedOwned = nil, nil
		}
		before = budgetBytes(m.idBytes(), m.subscribed, m.assigned, oldOwned)
	}
	budget := budgetBytes(after.idBytes(), subscribed, assigned, owned)
	if budgetBytes(after.idBytes(), subscribed, assigned, checkedOwned) <= before {
		return budget, nil
	}
	switch total := g.budget - counted + budget; {
	case budget > lim.MaxMemberBytes:
		return 0, refuse(refusedMemberBytes, ErrLimitExceeded, "member %q would take about %d bytes of group %q's record, at most %d are allowed", id, budget, g.id, lim.MaxMemberBytes)
	case total > lim.maxGroupBytes:
		return 0, refuse(refusedGroupBytes, ErrLimitExceeded, "group %q's record would grow to about %d bytes, at most %d are allowed", g.id, total, lim.maxGroupBytes)
	}
	return budget, nil
}

// requestTimeouts returns the member's timeouts once the request is
// applied: a timeout the request does not set (0) stays as it is, or takes
// the default for a new member.
func requestTimeouts(req *brokerpb.GroupHeartbeatRequest, m *member, lim limits) (session, rebalance time.Duration, err error) {
	session, rebalance = m.sessionTimeout, m.rebalanceTimeout
	if session == 0 {
		session = lim.sessionTimeout
	}
	if rebalance == 0 {
		rebalance = lim.rebalanceTimeout
	}
	if ms := req.GetSessionTimeoutMs(); ms != 0 {
		session = time.Duration(ms) * time.Millisecond
		if session < lim.minSessionTimeout || session > lim.maxSessionTimeout {
			return 0, 0, fmt.Errorf("%w (%w): session_timeout_ms %d outside [%d, %d]", ErrInvalidSessionTimeout, ErrInvalid, ms,
				lim.minSessionTimeout.Milliseconds(), lim.maxSessionTimeout.Milliseconds())
		}
	}
	if ms := req.GetRebalanceTimeoutMs(); ms > 0 {
		rebalance = time.Duration(ms) * time.Millisecond
	}
	return session, rebalance, nil
}

// state is the group state DescribeGroup and ListGroups report: EMPTY (no
// members), STABLE (every member at the group epoch, owning exactly its
// target), otherwise RECONCILING. ASSIGNING is never reported: the target is
// computed synchronously with the epoch bump. Members away (epoch -2) do
// not count.
func (g *consumerGroup) state() string {
	if len(g.members) == 0 {
		return "EMPTY"
	}
	for _, m := range g.members {
		if !m.away && (m.epoch != g.epoch || !m.assigned.equal(m.target) || !m.owned.equal(m.target)) {
			return "RECONCILING"
		}
	}
	return "STABLE"
}

// describeMembers renders the members for DescribeGroup: what is
// persisted, with each member's target.
func (g *consumerGroup) describeMembers() []*brokerpb.GroupMember {
	out := g.metadata().GetMembers()
	for _, pm := range out {
		pm.Target = g.members[pm.MemberId].target.toProto()
	}
	return out
}

// metadata renders what is persisted of the group: epochs,
// subscriptions, assignments, owned partitions.
func (g *consumerGroup) metadata() *brokerpb.GroupMetadataValue {
	v := &brokerpb.GroupMetadataValue{GroupEpoch: g.epoch}
	for _, m := range g.sortedMembers() {
		epoch := m.epoch
		if m.away {
			epoch = -2
		}
		v.Members = append(v.Members, &brokerpb.GroupMember{
			MemberId:             m.id,
			MemberEpoch:          epoch,
			ClientId:             m.clientID,
			ClientHost:           m.clientHost,
			SubscribedTopics:     slices.Clone(m.names),
			Assignment:           m.assigned.toProto(),
			Owned:                m.owned.toProto(),
			InstanceId:           m.instanceID,
			SubscribedTopicRegex: m.regex,
			RebalanceTimeoutMs:   int32(m.rebalanceTimeout.Milliseconds()),
			ServerAssignor:       m.assignor,
		})
	}
	return v
}

// restore replaces the group's state with a replayed record. Sessions
// and timers restart at now (the coordinator's load time) with the default
// session timeout; targets are recomputed by the caller once partition
// counts and regex matches are known.
func (g *consumerGroup) restore(v *brokerpb.GroupMetadataValue, now time.Time, lim limits) {
	g.epoch = v.GetGroupEpoch()
	g.members = map[string]*member{}
	g.static = map[string]string{}
	g.budget = 0
	for _, pm := range v.GetMembers() {
		m := &member{
			id:               pm.GetMemberId(),
			instanceID:       pm.GetInstanceId(),
			clientID:         pm.GetClientId(),
			clientHost:       pm.GetClientHost(),
			epoch:            max(pm.GetMemberEpoch(), 0),
			prevEpoch:        max(pm.GetMemberEpoch(), 0),
			away:             pm.GetMemberEpoch() == -2,
			names:            slices.Compact(slices.Sorted(slices.Values(pm.GetSubscribedTopics()))),
			regex:            pm.GetSubscribedTopicRegex(),
			assignor:         pm.GetServerAssignor(),
			sessionTimeout:   lim.sessionTimeout,
			rebalanceTimeout: lim.rebalanceTimeout,
			deadline:         now.Add(lim.sessionTimeout),
			assigned:         tpSetFromProto(pm.GetAssignment()),
			owned:            tpSetFromProto(pm.GetOwned()),
		}
		if ms := pm.GetRebalanceTimeoutMs(); ms > 0 {
			m.rebalanceTimeout = time.Duration(ms) * time.Millisecond
		}
		m.subscribed = union(m.names, g.matches[m.regex])
		// The last target is not persisted: the member's assignment is the
		// best base for stickiness.
		m.target = m.assigned.clone()
		m.budget = budgetBytes(m.idBytes(), m.subscribed, m.assigned, m.owned)
		g.budget += m.budget
		g.members[m.id] = m
		if m.instanceID != "" {
			g.static[m.instanceID] = m.id
		}
	}
	g.dirty = false
}

// revert puts the group's state back to durable after a write of newer
// metadata failed: members and epochs as the log has them. Members that
// stay keep their sessions; the others start one at now. Targets are
// recomputed with counts, then the last known ones.
func (g *consumerGroup) revert(durable *brokerpb.GroupMetadataValue, counts map[string]int32, now time.Time, lim limits) {
	live := g.members
	g.restore(durable, now, lim)
	for id, m := range g.members {
		if old := live[id]; old != nil {
			m.sessionTimeout, m.rebalanceTimeout, m.deadline = old.sessionTimeout, old.rebalanceTimeout, old.deadline
		}
	}
	g.computeTarget(counts, now)
	g.dirty = false
}

// assignor is the group's assignor: the one most members asked for
// (UniformAssignor when none did; ties go to UniformAssignor, then by
// name), so a group of one client library agrees on one.
func (g *consumerGroup) assignor() string {
	votes := map[string]int{}
	for _, m := range g.members {
		if m.assignor != "" {
			votes[m.assignor]++
		}
	}
	best, most := UniformAssignor, votes[UniformAssignor]
	for _, a := range slices.Sorted(maps.Keys(votes)) {
		if votes[a] > most {
			best, most = a, votes[a]
		}
	}
	return best
}
