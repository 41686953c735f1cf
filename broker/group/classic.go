package group

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

// This file is the classic machine (doc.go, "Classic groups", C1-C8):
// what a JoinGroup, SyncGroup, Heartbeat, LeaveGroup, a timer or a
// replayed record does to a classic group, whose leader assigns on the
// client side. It does no I/O and reads no clock: the Coordinator feeds it
// the time and the requests, persists what changed and answers the calls
// once what they reveal is durable. Parked calls are answered by closing
// their channel, which is all the machine does to the world.

// classicState is where a classic group is in a round (Kafka's
// ClassicGroupState).
type classicState int

const (
	classicEmpty classicState = iota
	classicPreparingRebalance
	classicCompletingRebalance
	classicStable
)

func (s classicState) String() string {
	switch s {
	case classicPreparingRebalance:
		return "PreparingRebalance"
	case classicCompletingRebalance:
		return "CompletingRebalance"
	case classicStable:
		return "Stable"
	}
	return "Empty"
}

// parked is a call waiting for its group: a Join for the barrier, a Sync
// for the leader's assignments. It is answered once. A result (not an
// error) reveals a step of the group: the coordinator gives it, under the
// same hold of its mutex, the write that makes that step durable (flush;
// nil when it already is), which the caller waits for before answering
// (W6), and which fails if the step is undone (W4).
type parked[T any] struct {
	done   chan struct{}
	result T
	err    error
	flush  *write
}

// flushed is a parked call answered with a result, waiting for its flush.
type flushed interface{ setFlush(*write) }

func (p *parked[T]) setFlush(w *write) { p.flush = w }

func newParked[T any]() *parked[T] { return &parked[T]{done: make(chan struct{})} }

// REQUIRES: the coordinator's mutex held (result and err are read after
// done is closed).
func (p *parked[T]) answer(result T, err error) {
	select {
	case <-p.done:
		return
	default:
	}
	p.result, p.err = result, err
	close(p.done)
}

// classicMember is one member of a classic group.
type classicMember struct {
	id, instanceID, clientID, clientHost string
	sessionTimeout, rebalanceTimeout     time.Duration
	protocols                            []Protocol // in preference order
	assignment                           []byte     // the leader's, for the generation (nil before)
	// deadline: the session ends when no heartbeat arrived by then (not
	// while the member waits in a parked call).
	deadline time.Time
	// joined: the member rejoined in the round being prepared; seq orders
	// the joins (the leader is the first). synced: it sent its SyncGroup
	// for the generation being completed.
	joined, synced bool
	seq            uint64
	join           *parked[JoinResult]
	sync           *parked[SyncResult]
	budget         int
}

// metadata returns the member's metadata for protocol, and whether it
// supports it.
func (m *classicMember) metadata(protocol string) ([]byte, bool) {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata, true
		}
	}
	return nil, false
}

func (m *classicMember) supports(protocol string) bool {
	_, ok := m.metadata(protocol)
	return ok
}

// classicBudget is what a classic member counts against MaxMemberBytes and
// its group's MaxGroupBytes: its ids, every protocol it supports, and its
// assignment.
func classicBudget(id, instanceID, clientID, clientHost string, protocols []Protocol, assignment []byte) int {
	n := memberOverhead + len(id) + len(instanceID) + len(clientID) + len(clientHost) + len(assignment)
	for _, p := range protocols {
		n += len(p.Name) + len(p.Metadata) + topicEntryOverhead
	}
	return n
}

// classicGroup is the state of a classic group.
type classicGroup struct {
	id           string
	state        classicState
	generation   int32
	protocolType string
	protocol     string // chosen for the generation; "" while Empty
	leader       string
	members      map[string]*classicMember
	// pending: member ids handed out with ErrMemberIDRequired (KIP-394),
	// until when they may be used to join.
	pending map[string]time.Time
	// static: instance id -> member id.
	static map[string]string
	// PreparingRebalance: the barrier completes once every member (and
	// pending id) has joined, but not before notBefore (the initial
	// delay of an empty group), and by rebalanceDeadline in any case.
	// initialDelay: the round started from Empty, each new member pushes
	// notBefore.
	notBefore, rebalanceDeadline time.Time
	initialDelay                 bool
	// syncDeadline: CompletingRebalance ends by then; members that have
	// not synced are removed.
	syncDeadline time.Time
	seq          uint64
	// record is what the log is to hold of the group: the group as of
	// its last completed step (C6). dirty: record changed.
	record *brokerpb.ClassicGroupValue
	dirty  bool
	// rebalances counts completed barriers not yet reported.
	rebalances int
	budget     int
	// toFlush: calls answered with a result since the coordinator last
	// gave them their flush.
	toFlush []flushed
}

func newClassicGroup(id string) *classicGroup {
	return &classicGroup{
		id:      id,
		members: map[string]*classicMember{},
		pending: map[string]time.Time{},
		static:  map[string]string{},
		record:  &brokerpb.ClassicGroupValue{},
	}
}

// joinInput is a Join as the machine takes it.
type joinInput struct {
	req   JoinRequest
	now   time.Time
	lim   limits
	newID func() string
}

// join applies a JoinGroup. It returns either an immediate result (err
// nil, or ErrMemberIDRequired with the member id to use), or a parked call
// that the barrier answers (C2).
func (g *classicGroup) join(in joinInput) (JoinResult, *parked[JoinResult], error) {
	req := in.req
	if req.MemberID == "" && req.InstanceID != "" {
		if old := g.members[g.static[req.InstanceID]]; old != nil {
			return g.replaceStatic(old, in)
		}
	}
	if err := g.checkProtocols(req.ProtocolType, req.Protocols, req.MemberID); err != nil {
		return JoinResult{}, nil, err
	}
	if req.MemberID == "" {
		return g.joinNew(in)
	}
	if _, ok := g.pending[req.MemberID]; ok {
		delete(g.pending, req.MemberID)
		return g.add(req.MemberID, in)
	}
	if err := g.checkMember(req.MemberID, req.InstanceID); err != nil {
		return JoinResult{}, nil, err
	}
	return g.rejoin(g.members[req.MemberID], in)
}

// checkProtocols refuses a join whose protocols the other members
// (all but self) cannot share (C1).
func (g *classicGroup) checkProtocols(protocolType string, protocols []Protocol, self string) error {
	if protocolType == "" || len(protocols) == 0 {
		return fmt.Errorf("%w: a protocol type and at least one protocol are required", ErrInconsistentGroupProtocol)
	}
	others := 0
	for id := range g.members {
		if id != self {
			others++
		}
	}
	if others == 0 {
		return nil
	}
	if protocolType != g.protocolType {
		return fmt.Errorf("%w: protocol type %q, group %q uses %q", ErrInconsistentGroupProtocol, protocolType, g.id, g.protocolType)
	}
	for _, p := range protocols {
		common := true
		for id, m := range g.members {
			if id != self && !m.supports(p.Name) {
				common = false
				break
			}
		}
		if common {
			return nil
		}
	}
	return fmt.Errorf("%w: no protocol in common with the members of group %q", ErrInconsistentGroupProtocol, g.id)
}

// checkMember validates a known member's ids: a static member's instance
// must map to it (C7).
func (g *classicGroup) checkMember(memberID, instanceID string) error {
	if instanceID != "" {
		switch owner, ok := g.static[instanceID]; {
		case !ok:
			return fmt.Errorf("%w: instance %q in group %q", ErrUnknownMember, instanceID, g.id)
		case owner != memberID:
			return fmt.Errorf("%w: instance %q is member %q of group %q, not %q", ErrFencedInstanceID, instanceID, owner, g.id, memberID)
		}
	}
	if g.members[memberID] == nil {
		return fmt.Errorf("%w: %q in group %q", ErrUnknownMember, memberID, g.id)
	}
	return nil
}

// joinNew admits a member without id: a dynamic member asked to rejoin
// with the id it is given (KIP-394) or, without RequireMemberID or as a
// static member, added at once.
func (g *classicGroup) joinNew(in joinInput) (JoinResult, *parked[JoinResult], error) {
	if len(g.members)+len(g.pending) >= in.lim.MaxMembers {
		return JoinResult{}, nil, refuse(refusedGroupMaxSize, ErrGroupMaxSize, "group %q has %d members, the most a group may have", g.id, len(g.members)+len(g.pending))
	}
	id := in.newID()
	if in.req.RequireMemberID && in.req.InstanceID == "" {
		if _, err := g.checkGrowth(nil, id, in.req, in.lim); err != nil {
			return JoinResult{}, nil, err
		}
		g.pending[id] = in.now.Add(in.req.SessionTimeout)
		return JoinResult{MemberID: id}, nil, fmt.Errorf("%w: rejoin group %q as %q", ErrMemberIDRequired, g.id, id)
	}
	return g.add(id, in)
}

// add makes id a member with the join's settings and parks its join in a
// round (starting one unless it is being prepared).
func (g *classicGroup) add(id string, in joinInput) (JoinResult, *parked[JoinResult], error) {
	budget, err := g.checkGrowth(nil, id, in.req, in.lim)
	if err != nil {
		return JoinResult{}, nil, err
	}
	m := &classicMember{id: id, instanceID: in.req.InstanceID}
	g.members[id] = m
	g.apply(m, in.req, budget)
	if m.instanceID != "" {
		g.static[m.instanceID] = id
	}
	if len(g.members) == 1 {
		g.protocolType = in.req.ProtocolType
	}
	return JoinResult{}, g.park(m, in.now, in.lim), nil
}

// apply takes a join's settings into member m, counting its budget.
func (g *classicGroup) apply(m *classicMember, req JoinRequest, budget int) {
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
	m.sessionTimeout, m.rebalanceTimeout = req.SessionTimeout, req.RebalanceTimeout
	if m.rebalanceTimeout <= 0 {
		m.rebalanceTimeout = m.sessionTimeout
	}
	m.protocols = slices.Clone(req.Protocols)
	g.budget += budget - m.budget
	m.budget = budget
}

// checkGrowth refuses a join that would make member m (nil: a new member
// id) count more than MaxMemberBytes, or its group more than
// maxGroupBytes; otherwise it returns the member's budget once the join is
// applied. A join that does not grow the member is always accepted.
func (g *classicGroup) checkGrowth(m *classicMember, id string, req JoinRequest, lim limits) (int, error) {
	before := 0
	var assignment []byte
	if m != nil {
		before, assignment = m.budget, m.assignment
	}
	after := classicBudget(id, req.InstanceID, req.ClientID, req.ClientHost, req.Protocols, assignment)
	switch total := g.budget - before + after; {
	case after <= before:
	case after > lim.MaxMemberBytes:
		return 0, refuse(refusedMemberBytes, ErrLimitExceeded, "member %q would take about %d bytes of group %q's record, at most %d are allowed", id, after, g.id, lim.MaxMemberBytes)
	case total > lim.maxGroupBytes:
		return 0, refuse(refusedGroupBytes, ErrLimitExceeded, "group %q's record would grow to about %d bytes, at most %d are allowed", g.id, total, lim.maxGroupBytes)
	}
	return after, nil
}

// rejoin applies a known member's join (C2): it waits in the round being
// prepared, starts one when its protocols changed or it leads, or, a
// follower repeating its join (a lost response), is answered at once.
func (g *classicGroup) rejoin(m *classicMember, in joinInput) (JoinResult, *parked[JoinResult], error) {
	budget, err := g.checkGrowth(m, m.id, in.req, in.lim)
	if err != nil {
		return JoinResult{}, nil, err
	}
	same := sameProtocols(m.protocols, in.req.Protocols)
	switch g.state {
	case classicCompletingRebalance, classicStable:
		if same && (g.state == classicCompletingRebalance || m.id != g.leader) {
			m.deadline = in.now.Add(m.sessionTimeout)
			return g.joinResult(m), nil, nil
		}
	case classicEmpty:
		return JoinResult{}, nil, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, m.id, g.id)
	}
	g.apply(m, in.req, budget)
	return JoinResult{}, g.park(m, in.now, in.lim), nil
}

func sameProtocols(a, b []Protocol) bool {
	return slices.EqualFunc(a, b, func(x, y Protocol) bool {
		return x.Name == y.Name && bytes.Equal(x.Metadata, y.Metadata)
	})
}

// replaceStatic gives a static member's instance id a new member id (C7):
// the old id is fenced and its calls answered with ErrFencedInstanceID.
// In a Stable group, a follower whose protocols did not change takes over
// the old member's assignment without a rebalance; otherwise the new id
// joins the round.
func (g *classicGroup) replaceStatic(old *classicMember, in joinInput) (JoinResult, *parked[JoinResult], error) {
	if err := g.checkProtocols(in.req.ProtocolType, in.req.Protocols, old.id); err != nil {
		return JoinResult{}, nil, err
	}
	id := in.newID()
	budget, err := g.checkGrowth(old, id, in.req, in.lim)
	if err != nil {
		return JoinResult{}, nil, err
	}
	fenced := fmt.Errorf("%w: instance %q rejoined group %q as %q", ErrFencedInstanceID, old.instanceID, g.id, id)
	g.answerParked(old, fenced)
	m := &classicMember{id: id, instanceID: old.instanceID, assignment: old.assignment, budget: old.budget}
	delete(g.members, old.id)
	g.members[id] = m
	g.static[m.instanceID] = id
	wasLeader := g.leader == old.id
	if wasLeader {
		g.leader = id
	}
	same := sameProtocols(old.protocols, in.req.Protocols)
	g.apply(m, in.req, budget)
	if g.state == classicStable && same && !wasLeader {
		m.deadline = in.now.Add(m.sessionTimeout)
		g.setRecord()
		return g.joinResult(m), nil, nil
	}
	return JoinResult{}, g.park(m, in.now, in.lim), nil
}

// park puts m's join in the round being prepared (starting one if none
// is), and completes the barrier if that was the last join it waited for.
func (g *classicGroup) park(m *classicMember, now time.Time, lim limits) *parked[JoinResult] {
	if g.state != classicPreparingRebalance {
		g.prepareRebalance(now, lim)
	}
	if m.join != nil {
		m.join.answer(JoinResult{}, fmt.Errorf("%w: a newer join of member %q replaced this one", ErrRebalanceInProgress, m.id))
	}
	m.join = newParked[JoinResult]()
	m.joined = true
	g.seq++
	m.seq = g.seq
	if g.initialDelay && now.Before(g.notBefore) {
		g.notBefore = minTime(now.Add(lim.initialRebalanceDelay), g.rebalanceDeadline)
	}
	p := m.join
	g.maybeCompleteJoin(now)
	return p
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// prepareRebalance starts a round (C3): every member must rejoin by the
// rebalance deadline. Syncs parked for the generation being completed are
// answered with ErrRebalanceInProgress.
func (g *classicGroup) prepareRebalance(now time.Time, lim limits) {
	if g.state == classicCompletingRebalance {
		for _, m := range g.members {
			g.setAssignment(m, nil)
			if m.sync != nil {
				m.sync.answer(SyncResult{}, fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id))
				m.sync = nil
			}
		}
	}
	g.initialDelay = g.state == classicEmpty && lim.initialRebalanceDelay > 0
	g.state = classicPreparingRebalance
	for _, m := range g.members {
		m.joined, m.synced = false, false
	}
	g.rebalanceDeadline = now.Add(g.maxRebalanceTimeout())
	g.notBefore = now
	if g.initialDelay {
		g.notBefore = minTime(now.Add(lim.initialRebalanceDelay), g.rebalanceDeadline)
	}
	g.syncDeadline = time.Time{}
}

func (g *classicGroup) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// maybeCompleteJoin completes the barrier when every member and pending id
// has joined and the initial delay is over, or when the rebalance deadline
// has passed (C3).
func (g *classicGroup) maybeCompleteJoin(now time.Time) {
	if g.state != classicPreparingRebalance {
		return
	}
	all := len(g.pending) == 0
	for _, m := range g.members {
		all = all && m.joined
	}
	if (all && !now.Before(g.notBefore)) || !now.Before(g.rebalanceDeadline) {
		g.completeJoin(now)
	}
}

// completeJoin ends the round (C4): members that did not rejoin are
// removed, the generation is bumped, a protocol and a leader are chosen,
// and every parked join is answered; the group waits for the leader's
// assignments (or is Empty).
func (g *classicGroup) completeJoin(now time.Time) {
	for _, m := range g.members {
		if !m.joined {
			g.removeMember(m, fmt.Errorf("%w: member %q did not rejoin group %q in time", ErrUnknownMember, m.id, g.id))
		}
	}
	g.generation++
	g.rebalances++
	g.initialDelay = false
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader = classicEmpty, "", ""
		g.setRecord()
		return
	}
	g.protocol = g.selectProtocol()
	byJoin := g.membersByJoin()
	if g.members[g.leader] == nil {
		g.leader = byJoin[0].id
	}
	g.state = classicCompletingRebalance
	g.syncDeadline = now.Add(g.maxRebalanceTimeout())
	for _, m := range byJoin {
		g.setAssignment(m, nil)
		m.joined, m.synced = false, false
		m.deadline = now.Add(m.sessionTimeout)
	}
	g.setRecord()
	for _, m := range byJoin {
		if m.join != nil {
			m.join.answer(g.joinResult(m), nil)
			g.toFlush = append(g.toFlush, m.join)
			m.join = nil
		}
	}
}

// membersByJoin returns the members in the order they joined the round.
func (g *classicGroup) membersByJoin() []*classicMember {
	out := make([]*classicMember, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *classicMember) int {
		if c := cmp.Compare(a.seq, b.seq); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return out
}

// selectProtocol chooses the protocol of the generation (C4): among those
// every member supports, the one most members prefer (each votes for the
// first of them in its own order); ties go to the smaller name. Joins
// keep at least one protocol common to all (C1).
func (g *classicGroup) selectProtocol() string {
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.supportedByAll(p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for name, n := range votes {
		if best == "" || n > votes[best] || (n == votes[best] && name < best) {
			best = name
		}
	}
	return best
}

func (g *classicGroup) supportedByAll(protocol string) bool {
	for _, m := range g.members {
		if !m.supports(protocol) {
			return false
		}
	}
	return true
}

// joinResult is what m is told of the generation: the leader also gets
// every member's metadata, in join order.
func (g *classicGroup) joinResult(m *classicMember) JoinResult {
	r := JoinResult{
		MemberID: m.id, Generation: g.generation, ProtocolType: g.protocolType,
		Protocol: g.protocol, Leader: g.leader,
	}
	if m.id == g.leader {
		for _, o := range g.membersByJoin() {
			md, _ := o.metadata(g.protocol)
			r.Members = append(r.Members, JoinMember{MemberID: o.id, InstanceID: o.instanceID, Metadata: md})
		}
	}
	return r
}

// setAssignment gives m assignment a, keeping the budgets.
func (g *classicGroup) setAssignment(m *classicMember, a []byte) {
	g.budget += len(a) - len(m.assignment)
	m.budget += len(a) - len(m.assignment)
	m.assignment = a
}

// removeMember drops m, answering its parked calls with err.
func (g *classicGroup) removeMember(m *classicMember, err error) {
	g.answerParked(m, err)
	delete(g.members, m.id)
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	g.budget -= m.budget
}

func (g *classicGroup) answerParked(m *classicMember, err error) {
	if m.join != nil {
		m.join.answer(JoinResult{}, err)
		m.join = nil
	}
	if m.sync != nil {
		m.sync.answer(SyncResult{}, err)
		m.sync = nil
	}
}

// afterRemoval starts a round after members left a Stable or completing
// group, or completes the barrier the leavers held up (C5).
func (g *classicGroup) afterRemoval(now time.Time, lim limits) {
	switch g.state {
	case classicStable, classicCompletingRebalance:
		g.prepareRebalance(now, lim)
		g.maybeCompleteJoin(now)
	case classicPreparingRebalance:
		g.maybeCompleteJoin(now)
	}
}

// setRecord makes the group as it is now the record to persist (C6).
func (g *classicGroup) setRecord() {
	state := brokerpb.ClassicGroupState_CLASSIC_GROUP_STATE_EMPTY
	switch g.state {
	case classicCompletingRebalance:
		state = brokerpb.ClassicGroupState_CLASSIC_GROUP_STATE_COMPLETING_REBALANCE
	case classicStable:
		state = brokerpb.ClassicGroupState_CLASSIC_GROUP_STATE_STABLE
	}
	v := &brokerpb.ClassicGroupValue{
		ProtocolType: g.protocolType, Generation: g.generation, Protocol: g.protocol,
		Leader: g.leader, State: state,
	}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := g.members[id]
		md, _ := m.metadata(g.protocol)
		v.Members = append(v.Members, &brokerpb.ClassicGroupMember{
			MemberId: m.id, InstanceId: m.instanceID, ClientId: m.clientID, ClientHost: m.clientHost,
			SessionTimeoutMs:   int32(m.sessionTimeout.Milliseconds()),
			RebalanceTimeoutMs: int32(m.rebalanceTimeout.Milliseconds()),
			Subscription:       md, Assignment: m.assignment,
		})
	}
	g.record, g.dirty = v, true
}

// restore replaces the group with a replayed record (C8): members keep
// their ids, timeouts, subscription (as their one protocol) and
// assignment; sessions, and a completing round's sync deadline, restart
// at now.
func (g *classicGroup) restore(v *brokerpb.ClassicGroupValue, now time.Time) {
	*g = *newClassicGroup(g.id)
	g.record = v
	g.protocolType, g.generation, g.protocol, g.leader = v.GetProtocolType(), v.GetGeneration(), v.GetProtocol(), v.GetLeader()
	switch v.GetState() {
	case brokerpb.ClassicGroupState_CLASSIC_GROUP_STATE_COMPLETING_REBALANCE:
		g.state = classicCompletingRebalance
	case brokerpb.ClassicGroupState_CLASSIC_GROUP_STATE_STABLE:
		g.state = classicStable
	}
	for _, pm := range v.GetMembers() {
		m := &classicMember{
			id: pm.GetMemberId(), instanceID: pm.GetInstanceId(), clientID: pm.GetClientId(), clientHost: pm.GetClientHost(),
			sessionTimeout:   time.Duration(pm.GetSessionTimeoutMs()) * time.Millisecond,
			rebalanceTimeout: time.Duration(pm.GetRebalanceTimeoutMs()) * time.Millisecond,
			protocols:        []Protocol{{Name: g.protocol, Metadata: pm.GetSubscription()}},
			assignment:       pm.GetAssignment(),
		}
		m.deadline = now.Add(m.sessionTimeout)
		m.budget = classicBudget(m.id, m.instanceID, m.clientID, m.clientHost, m.protocols, m.assignment)
		g.budget += m.budget
		g.members[m.id] = m
		if m.instanceID != "" {
			g.static[m.instanceID] = m.id
		}
	}
	if len(g.members) == 0 {
		g.state = classicEmpty
	}
	if g.state == classicCompletingRebalance {
		g.syncDeadline = now.Add(g.maxRebalanceTimeout())
	}
}

// failParked answers every parked call with err (the group is reverted or
// its coordinator closed).
func (g *classicGroup) failParked(err error) {
	for _, m := range g.members {
		g.answerParked(m, err)
	}
}
