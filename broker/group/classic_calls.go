package group

import (
	"fmt"
	"time"
)

// The classic machine, continued: SyncGroup, Heartbeat, LeaveGroup,
// timers, commit fencing and what Describe shows.

// sync applies a SyncGroup (C4, C5). A follower's sync waits (parked) for
// the leader's; the leader's sets every member's assignment, and the group
// is Stable.
func (g *classicGroup) sync(req SyncRequest, now time.Time, lim limits) (SyncResult, *parked[SyncResult], error) {
	if err := g.checkMember(req.MemberID, req.InstanceID); err != nil {
		return SyncResult{}, nil, err
	}
	m := g.members[req.MemberID]
	switch {
	case req.Generation != g.generation:
		return SyncResult{}, nil, fmt.Errorf("%w: %d, group %q is at %d", ErrIllegalGeneration, req.Generation, g.id, g.generation)
	case req.ProtocolType != "" && req.ProtocolType != g.protocolType,
		req.Protocol != "" && req.Protocol != g.protocol:
		return SyncResult{}, nil, fmt.Errorf("%w: %q/%q, group %q uses %q/%q", ErrInconsistentGroupProtocol,
			req.ProtocolType, req.Protocol, g.id, g.protocolType, g.protocol)
	}
	switch g.state {
	case classicPreparingRebalance:
		return SyncResult{}, nil, fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id)
	case classicStable:
		m.deadline = now.Add(m.sessionTimeout)
		return g.syncResult(m), nil, nil
	case classicEmpty:
		return SyncResult{}, nil, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, m.id, g.id)
	}
	if m.id == g.leader {
		if err := g.checkAssignments(req.Assignments, lim); err != nil {
			return SyncResult{}, nil, err
		}
	}
	if m.sync != nil {
		m.sync.answer(SyncResult{}, fmt.Errorf("%w: a newer sync of member %q replaced this one", ErrRebalanceInProgress, m.id))
	}
	p := newParked[SyncResult]()
	m.sync, m.synced = p, true
	m.deadline = now.Add(m.sessionTimeout)
	if m.id == g.leader {
		g.completeSync(req.Assignments)
	}
	return SyncResult{}, p, nil
}

func (g *classicGroup) syncResult(m *classicMember) SyncResult {
	return SyncResult{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment}
}

// checkAssignments refuses a leader's assignments that would make a member
// count more than MaxMemberBytes, or the group more than maxGroupBytes.
func (g *classicGroup) checkAssignments(assignments []MemberAssignment, lim limits) error {
	sizes := map[string]int{}
	for _, a := range assignments {
		if g.members[a.MemberID] != nil {
			sizes[a.MemberID] = len(a.Assignment)
		}
	}
	total := g.budget
	for id, m := range g.members {
		after := m.budget - len(m.assignment) + sizes[id]
		if after > lim.MaxMemberBytes && after > m.budget {
			return refuse(refusedMemberBytes, ErrLimitExceeded, "member %q's assignment would take it to about %d bytes of group %q's record, at most %d are allowed", id, after, g.id, lim.MaxMemberBytes)
		}
		total += after - m.budget
	}
	if total > lim.maxGroupBytes && total > g.budget {
		return refuse(refusedGroupBytes, ErrLimitExceeded, "group %q's record would grow to about %d bytes, at most %d are allowed", g.id, total, lim.maxGroupBytes)
	}
	return nil
}

// completeSync takes the leader's assignments (C4): every member gets
// exactly the bytes the leader gave it (none: empty), the group is Stable,
// and every parked sync is answered.
func (g *classicGroup) completeSync(assignments []MemberAssignment) {
	given := map[string][]byte{}
	for _, a := range assignments {
		given[a.MemberID] = a.Assignment
	}
	for id, m := range g.members {
		a := given[id]
		if a == nil {
			a = []byte{}
		}
		g.setAssignment(m, a)
	}
	g.state = classicStable
	g.syncDeadline = time.Time{}
	g.setRecord()
	for _, m := range g.members {
		if m.sync != nil {
			m.sync.answer(g.syncResult(m), nil)
			g.toFlush = append(g.toFlush, m.sync)
			m.sync = nil
		}
	}
}

// heartbeat applies a classic Heartbeat: it keeps the member's session,
// and tells it to rejoin while a round is being prepared.
func (g *classicGroup) heartbeat(req HeartbeatRequest, now time.Time) error {
	if g.state == classicEmpty {
		return fmt.Errorf("%w: %q in group %q", ErrUnknownMember, req.MemberID, g.id)
	}
	if err := g.checkMember(req.MemberID, req.InstanceID); err != nil {
		return err
	}
	if req.Generation != g.generation {
		return fmt.Errorf("%w: %d, group %q is at %d", ErrIllegalGeneration, req.Generation, g.id, g.generation)
	}
	m := g.members[req.MemberID]
	m.deadline = now.Add(m.sessionTimeout)
	if g.state == classicPreparingRebalance {
		return fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id)
	}
	return nil
}

// leave removes members (C5): by member id, or by instance id.
func (g *classicGroup) leave(leaving []LeavingMember, now time.Time, lim limits) []LeaveResult {
	out := make([]LeaveResult, 0, len(leaving))
	removed := false
	for _, l := range leaving {
		r := LeaveResult{MemberID: l.MemberID, InstanceID: l.InstanceID}
		id := l.MemberID
		if l.InstanceID != "" {
			owner, ok := g.static[l.InstanceID]
			switch {
			case !ok:
				r.Err = fmt.Errorf("%w: instance %q in group %q", ErrUnknownMember, l.InstanceID, g.id)
			case id != "" && id != owner:
				r.Err = fmt.Errorf("%w: instance %q is member %q of group %q, not %q", ErrFencedInstanceID, l.InstanceID, owner, g.id, id)
			}
			id, r.MemberID = owner, owner
		}
		_, isPending := g.pending[id]
		switch m := g.members[id]; {
		case r.Err != nil:
		case isPending:
			delete(g.pending, id)
		case m == nil:
			r.Err = fmt.Errorf("%w: %q in group %q", ErrUnknownMember, id, g.id)
		default:
			g.removeMember(m, fmt.Errorf("%w: member %q left group %q", ErrUnknownMember, id, g.id))
			removed = true
		}
		out = append(out, r)
	}
	if removed || g.state == classicPreparingRebalance {
		g.afterRemoval(now, lim)
	}
	return out
}

// advance applies the group's timers at now (C3, C5): pending ids and
// sessions that ended, the barrier's deadlines, and the sync deadline. It
// returns how many members it removed for their session.
func (g *classicGroup) advance(now time.Time, lim limits) (expired int) {
	for id, until := range g.pending {
		if now.After(until) {
			delete(g.pending, id)
		}
	}
	for _, m := range g.members {
		if m.join == nil && m.sync == nil && now.After(m.deadline) {
			g.removeMember(m, nil)
			expired++
		}
	}
	if expired > 0 {
		g.afterRemoval(now, lim)
	}
	switch g.state {
	case classicPreparingRebalance:
		g.maybeCompleteJoin(now)
	case classicCompletingRebalance:
		if now.Before(g.syncDeadline) {
			break
		}
		for _, m := range g.members {
			if !m.synced {
				g.removeMember(m, fmt.Errorf("%w: member %q did not sync group %q in time", ErrUnknownMember, m.id, g.id))
			}
		}
		g.prepareRebalance(now, lim)
		g.maybeCompleteJoin(now)
	}
	return expired
}

// nextDeadline is when advance has something to do for a round in
// progress (zero: nothing); parked calls wake then.
func (g *classicGroup) nextDeadline() time.Time {
	switch g.state {
	case classicPreparingRebalance:
		return minTime(g.notBefore, g.rebalanceDeadline)
	case classicCompletingRebalance:
		return g.syncDeadline
	}
	return time.Time{}
}

// checkCommit fences an OffsetCommit of a classic group (C9), as Kafka's
// ClassicGroup.validateOffsetCommit: a standalone commit (generation < 0)
// needs an Empty group; otherwise the member and its generation must be
// the group's, and not while the group waits for the leader's
// assignments.
func (g *classicGroup) checkCommit(memberID, instanceID string, generation int32) error {
	if generation < 0 && g.state == classicEmpty {
		return nil
	}
	if generation >= 0 || memberID != "" || instanceID != "" {
		if err := g.checkMember(memberID, instanceID); err != nil {
			return err
		}
		if generation != g.generation {
			return fmt.Errorf("%w: commit with generation %d, group %q is at %d", ErrIllegalGeneration, generation, g.id, g.generation)
		}
	} else if g.state != classicEmpty {
		return fmt.Errorf("%w: a commit without member id to group %q, which has members", ErrUnknownMember, g.id)
	}
	if g.state == classicCompletingRebalance {
		return fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id)
	}
	return nil
}

// subscribedTopics returns the topics a "consumer" group's members
// subscribe to, read from their metadata for the group's protocol (or any
// protocol before one is chosen); ok is false when a member's metadata
// cannot be read (then every topic counts as subscribed).
func (g *classicGroup) subscribedTopics() (topics map[string]bool, ok bool) {
	topics = map[string]bool{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.protocol != "" && p.Name != g.protocol {
				continue
			}
			names, err := subscriptionTopics(p.Metadata)
			if err != nil {
				return nil, false
			}
			for _, t := range names {
				topics[t] = true
			}
		}
	}
	return topics, true
}

// describe renders the group for Describe: members' metadata and
// assignments only while Stable, as Kafka's DescribeGroups.
func (g *classicGroup) describe() GroupDescription {
	d := GroupDescription{
		GroupListing: GroupListing{GroupID: g.id, Type: TypeClassic, ProtocolType: g.protocolType, State: g.state.String()},
		Protocol:     g.protocol, Generation: g.generation, Leader: g.leader,
	}
	for _, m := range g.membersByJoin() {
		md := ClassicMemberDescription{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost}
		if g.state == classicStable {
			md.Metadata, _ = m.metadata(g.protocol)
			md.Assignment = m.assignment
		}
		d.Members = append(d.Members, md)
	}
	return d
}

// unpark drops a parked call whose caller went away: the member stays in
// the round (a join still counts for the barrier, a sync as sent), only
// the answer is not given.
func (g *classicGroup) unpark(join *parked[JoinResult], sync *parked[SyncResult]) {
	for _, m := range g.members {
		if join != nil && m.join == join {
			m.join = nil
		}
		if sync != nil && m.sync == sync {
			m.sync = nil
		}
	}
}
