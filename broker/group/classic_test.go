package group

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// The classic machine driven directly: no coordinator, no log, no clock
// but the one the test advances. Tests cite doc.go's C1-C9.

type machine struct {
	t      *testing.T
	g      *classicGroup
	now    time.Time
	lim    limits
	ids    int
	nextID string
	// raw: join sends member ids as they are (unknown ones too).
	raw bool
}

func newMachine(t *testing.T) *machine {
	return &machine{
		t: t, g: newClassicGroup("g"), now: time.Unix(1_700_000_000, 0),
		lim: limits{initialRebalanceDelay: 0, Limits: DefaultLimits(), maxGroupBytes: DefaultLimits().MaxGroupBytes},
	}
}

// newID names a new member nextID when set (tests name their members),
// else id1, id2, ...
func (m *machine) newID() string {
	if id := m.nextID; id != "" {
		m.nextID = ""
		return id
	}
	m.ids++
	return fmt.Sprintf("id%d", m.ids)
}

func joinReq(member string, protocols ...string) JoinRequest {
	req := JoinRequest{GroupID: "g", MemberID: member, SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, ProtocolType: "consumer"}
	for _, p := range protocols {
		req.Protocols = append(req.Protocols, Protocol{Name: p, Metadata: []byte("md-" + p)})
	}
	return req
}

// join applies req; a MemberID the group does not know yet is the name
// of a new member (joining without id, named so).
func (m *machine) join(req JoinRequest) (JoinResult, *parked[JoinResult], error) {
	_, pending := m.g.pending[req.MemberID]
	if req.MemberID != "" && m.g.members[req.MemberID] == nil && !pending && !m.raw {
		m.nextID, req.MemberID = req.MemberID, ""
	}
	return m.g.join(joinInput{req: req, now: m.now, lim: m.lim, newID: m.newID})
}

// answered returns a parked call's answer, failing if it is still parked.
func answered[T any](t *testing.T, p *parked[T]) (T, error) {
	t.Helper()
	select {
	case <-p.done:
		return p.result, p.err
	default:
		t.Fatal("call still parked")
		panic("unreachable")
	}
}

func stillParked[T any](t *testing.T, p *parked[T]) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("call answered: %v %v", p.result, p.err)
	default:
	}
}

// stable brings members (in this order) through one round: each joins,
// the first one leads, assigns "a-<id>" to each, and everyone syncs.
func (m *machine) stable(members ...string) int32 {
	m.t.Helper()
	// Join everyone; whoever a later join's round left out rejoins (as
	// clients do when told REBALANCE_IN_PROGRESS), until one round holds
	// them all.
	parkedJoins := map[string]*parked[JoinResult]{}
	for len(parkedJoins) < len(members) || m.g.state != classicCompletingRebalance {
		for _, id := range members {
			if g := m.g.members[id]; g != nil && (g.joined || m.g.state != classicPreparingRebalance) && parkedJoins[id] != nil {
				continue
			}
			_, p, err := m.join(joinReq(id, "range"))
			if err != nil || p == nil {
				m.t.Fatalf("join %s: %v", id, err)
			}
			parkedJoins[id] = p
		}
	}
	var ps []*parked[JoinResult]
	for _, id := range members {
		ps = append(ps, parkedJoins[id])
	}
	var gen int32
	var syncs []*parked[SyncResult]
	for i, p := range ps {
		r, err := answered(m.t, p)
		if err != nil {
			m.t.Fatalf("join %s: %v", members[i], err)
		}
		gen = r.Generation
		req := SyncRequest{GroupID: "g", MemberID: r.MemberID, Generation: r.Generation}
		if r.Leader == r.MemberID {
			for _, o := range r.Members {
				req.Assignments = append(req.Assignments, MemberAssignment{o.MemberID, []byte("a-" + o.MemberID)})
			}
		}
		res, sp, err := m.g.sync(req, m.now, m.lim)
		if err != nil {
			m.t.Fatalf("sync %s: %v", r.MemberID, err)
		}
		if sp == nil { // the leader synced first: answered at once
			sp = newParked[SyncResult]()
			sp.answer(res, nil)
		}
		syncs = append(syncs, sp)
	}
	for i, sp := range syncs {
		r, err := answered(m.t, sp)
		if err != nil || !bytes.Equal(r.Assignment, []byte("a-"+members[i])) {
			m.t.Fatalf("sync %s: %q %v", members[i], r.Assignment, err)
		}
	}
	if m.g.state != classicStable {
		m.t.Fatalf("state %s after a round", m.g.state)
	}
	return gen
}

// C3, C4: the barrier waits for every member; the generation goes up by
// one; the leader stays and alone gets the members, in join order; each
// member gets exactly the bytes the leader gave it, none for one the
// leader left out.
func TestClassicRound(t *testing.T) {
	m := newMachine(t)
	if gen := m.stable("a"); gen != 1 {
		t.Fatalf("generation %d", gen)
	}
	// b joins: a round starts, a is told to rejoin by its heartbeat.
	_, pb, err := m.join(joinReq("b", "range"))
	if err != nil {
		t.Fatal(err)
	}
	stillParked(t, pb)
	if err := m.g.heartbeat(HeartbeatRequest{GroupID: "g", MemberID: "a", Generation: 1}, m.now); !errors.Is(err, ErrRebalanceInProgress) {
		t.Fatalf("heartbeat during the round: %v", err)
	}
	_, pa, _ := m.join(joinReq("a", "range"))
	ra, _ := answered(t, pa)
	rb, _ := answered(t, pb)
	if ra.Generation != 2 || rb.Generation != 2 || ra.Leader != "a" || rb.Leader != "a" || ra.Protocol != "range" {
		t.Fatalf("join results %+v %+v", ra, rb)
	}
	if len(ra.Members) != 2 || ra.Members[0].MemberID != "b" || ra.Members[1].MemberID != "a" || len(rb.Members) != 0 {
		t.Fatalf("members: leader %+v follower %+v", ra.Members, rb.Members)
	}
	if string(ra.Members[0].Metadata) != "md-range" {
		t.Fatalf("metadata %q", ra.Members[0].Metadata)
	}
	// The follower syncs first and waits; the leader's sync answers both.
	_, sb, err := m.g.sync(SyncRequest{GroupID: "g", MemberID: "b", Generation: 2}, m.now, m.lim)
	if err != nil {
		t.Fatal(err)
	}
	stillParked(t, sb)
	if err := m.g.checkCommit("b", "", 2); !errors.Is(err, ErrRebalanceInProgress) {
		t.Fatalf("commit while completing: %v", err)
	}
	_, sa, _ := m.g.sync(SyncRequest{GroupID: "g", MemberID: "a", Generation: 2, Assignments: []MemberAssignment{{"a", []byte{1, 2}}}}, m.now, m.lim)
	resA, _ := answered(t, sa)
	resB, _ := answered(t, sb)
	if !bytes.Equal(resA.Assignment, []byte{1, 2}) || resB.Assignment == nil || len(resB.Assignment) != 0 {
		t.Fatalf("assignments %v %v", resA.Assignment, resB.Assignment)
	}
	if err := m.g.checkCommit("b", "", 2); err != nil {
		t.Fatalf("commit when stable: %v", err)
	}
	if err := m.g.checkCommit("b", "", 1); !errors.Is(err, ErrIllegalGeneration) {
		t.Fatalf("commit of generation 1: %v", err)
	}
}

// C1: protocol type and protocols must be shareable with the others; the
// vote picks what most members prefer among the common ones.
func TestClassicProtocols(t *testing.T) {
	m := newMachine(t)
	m.stable("a")
	for _, tc := range []struct {
		name string
		req  JoinRequest
		err  error
	}{
		{"no protocols", JoinRequest{GroupID: "g", ProtocolType: "consumer", SessionTimeout: time.Second}, ErrInconsistentGroupProtocol},
		{"other type", func() JoinRequest { r := joinReq("", "range"); r.ProtocolType = "connect"; return r }(), ErrInconsistentGroupProtocol},
		{"nothing in common", joinReq("", "roundrobin"), ErrInconsistentGroupProtocol},
	} {
		if _, _, err := m.join(tc.req); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	// b and c prefer sticky, a supports only range... so range is the
	// only candidate; once a leaves, sticky wins 2 to 0.
	_, pb, _ := m.join(joinReq("b", "sticky", "range"))
	_, pc, _ := m.join(joinReq("c", "sticky", "range"))
	_, pa, _ := m.join(joinReq("a", "range"))
	for _, p := range []*parked[JoinResult]{pa, pb, pc} {
		if r, _ := answered(t, p); r.Protocol != "range" {
			t.Fatalf("protocol %q", r.Protocol)
		}
	}
	m.g.leave([]LeavingMember{{MemberID: "a"}}, m.now, m.lim)
	_, pb, _ = m.join(joinReq("b", "sticky", "range"))
	_, pc, _ = m.join(joinReq("c", "sticky", "range"))
	for _, p := range []*parked[JoinResult]{pb, pc} {
		if r, _ := answered(t, p); r.Protocol != "sticky" || r.Generation != 3 {
			t.Fatalf("after a left: %+v", r)
		}
	}
}

// C2: KIP-394: a first join gets a member id to come back with; the id is
// pending (and holds the barrier) until it joins or its session ends.
func TestClassicMemberIDRequired(t *testing.T) {
	m := newMachine(t)
	m.stable("a")
	req := joinReq("", "range")
	req.RequireMemberID = true
	r, p, err := m.join(req)
	if !errors.Is(err, ErrMemberIDRequired) || p != nil || r.MemberID == "" {
		t.Fatalf("first join: %+v %v", r, err)
	}
	if m.g.state != classicStable {
		t.Fatalf("a pending id started a round: %s", m.g.state)
	}
	// Another member's join starts a round, which waits for the pending id.
	_, pa, _ := m.join(joinReq("a", "sticky", "range"))
	m.now = m.now.Add(time.Second)
	m.g.advance(m.now, m.lim)
	stillParked(t, pa)
	_, pn, err := m.join(joinReq(r.MemberID, "range"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := answered(t, pn); got.MemberID != r.MemberID || got.Generation != 2 {
		t.Fatalf("rejoin with the given id: %+v", got)
	}
	// An id that is never used is forgotten after the session timeout.
	r2, _, _ := m.join(req)
	m.now = m.now.Add(11 * time.Second)
	m.g.advance(m.now, m.lim)
	m.raw = true
	if _, _, err := m.join(joinReq(r2.MemberID, "range")); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("expired pending id: %v", err)
	}
}

// C3, C5: the rebalance deadline completes the barrier without the
// members that did not rejoin; the sync deadline removes members that did
// not sync; a session ends only for a member not waiting in a call.
func TestClassicTimeouts(t *testing.T) {
	m := newMachine(t)
	gen := m.stable("a", "b")
	_, pa, _ := m.join(joinReq("a", "range")) // b never rejoins
	m.now = m.now.Add(19 * time.Second)
	m.g.advance(m.now, m.lim) // b's session ended: removed, the barrier completes
	r, err := answered(t, pa)
	if err != nil || r.Generation != gen+1 || len(r.Members) != 1 {
		t.Fatalf("after b's session: %+v %v", r, err)
	}
	// a never syncs: at the sync deadline it is removed, the group empties.
	m.now = m.now.Add(5 * time.Second)
	if err := m.g.heartbeat(HeartbeatRequest{GroupID: "g", MemberID: "a", Generation: gen + 1}, m.now); err != nil {
		t.Fatalf("heartbeat while completing: %v", err)
	}
	m.now = m.now.Add(16 * time.Second)
	m.g.advance(m.now, m.lim)
	if m.g.state != classicEmpty || len(m.g.members) != 0 || m.g.generation != gen+2 {
		t.Fatalf("after the sync deadline: %s %d members, generation %d", m.g.state, len(m.g.members), m.g.generation)
	}
	// A parked join outlives its session; the rebalance deadline ends it.
	m.stable("c", "d")
	m.stable("c", "d") // a second generation of the same members
	_, pc, _ := m.join(joinReq("c", "range"))
	m.now = m.now.Add(15 * time.Second) // c's session, d's too
	m.g.advance(m.now, m.lim)
	if r, err := answered(t, pc); err != nil || len(r.Members) != 1 {
		t.Fatalf("c: %+v %v", r, err)
	}
}

// C7: a static member rejoining under its instance id replaces its old
// member id: in a Stable group a follower with the same protocols keeps
// its assignment without a round; the old id is fenced.
func TestClassicStaticMembers(t *testing.T) {
	m := newMachine(t)
	m.stable("a")
	sreq := joinReq("", "range")
	sreq.InstanceID = "i1"
	_, ps, err := m.join(sreq)
	if err != nil {
		t.Fatal(err)
	}
	_, pa, _ := m.join(joinReq("a", "range"))
	ra, _ := answered(t, pa)
	rs, _ := answered(t, ps)
	old := rs.MemberID
	_, s1, _ := m.g.sync(SyncRequest{GroupID: "g", MemberID: old, InstanceID: "i1", Generation: ra.Generation}, m.now, m.lim)
	m.g.sync(SyncRequest{GroupID: "g", MemberID: "a", Generation: ra.Generation,
		Assignments: []MemberAssignment{{"a", []byte("A")}, {old, []byte("S")}}}, m.now, m.lim)
	answered(t, s1)
	gen := m.g.generation

	r, p, err := m.join(sreq) // the instance restarts
	if err != nil || p != nil || r.MemberID == old || r.Generation != gen || len(r.Members) != 0 {
		t.Fatalf("static rejoin: %+v %v %v", r, p, err)
	}
	if m.g.state != classicStable {
		t.Fatalf("static follower rejoin rebalanced: %s", m.g.state)
	}
	if res, _, err := m.g.sync(SyncRequest{GroupID: "g", MemberID: r.MemberID, InstanceID: "i1", Generation: gen}, m.now, m.lim); err != nil || string(res.Assignment) != "S" {
		t.Fatalf("new id's assignment: %q %v", res.Assignment, err)
	}
	for _, err := range []error{
		m.g.heartbeat(HeartbeatRequest{GroupID: "g", MemberID: old, InstanceID: "i1", Generation: gen}, m.now),
		m.g.checkCommit(old, "i1", gen),
	} {
		if !errors.Is(err, ErrFencedInstanceID) {
			t.Fatalf("old id: %v", err)
		}
	}
	// Changed protocols: a round.
	sreq.Protocols = append(sreq.Protocols, Protocol{Name: "sticky"})
	if _, p, _ := m.join(sreq); p == nil || m.g.state != classicPreparingRebalance {
		t.Fatalf("static rejoin with new protocols: parked %v, state %s", p != nil, m.g.state)
	}
	// Leave by instance id.
	res := m.g.leave([]LeavingMember{{InstanceID: "i1"}, {InstanceID: "nope"}, {MemberID: "zz"}}, m.now, m.lim)
	if res[0].Err != nil || res[0].MemberID == "" || !errors.Is(res[1].Err, ErrUnknownMember) || !errors.Is(res[2].Err, ErrUnknownMember) {
		t.Fatalf("leave: %+v", res)
	}
}

// C4, C9: the errors of a sync, heartbeat and commit by state.
func TestClassicFencing(t *testing.T) {
	m := newMachine(t)
	gen := m.stable("a")
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"sync old generation", func() error {
			_, _, err := m.g.sync(SyncRequest{GroupID: "g", MemberID: "a", Generation: gen - 1}, m.now, m.lim)
			return err
		}(), ErrIllegalGeneration},
		{"sync other protocol", func() error {
			_, _, err := m.g.sync(SyncRequest{GroupID: "g", MemberID: "a", Generation: gen, Protocol: "sticky"}, m.now, m.lim)
			return err
		}(), ErrInconsistentGroupProtocol},
		{"sync unknown", func() error {
			_, _, err := m.g.sync(SyncRequest{GroupID: "g", MemberID: "x", Generation: gen}, m.now, m.lim)
			return err
		}(), ErrUnknownMember},
		{"heartbeat unknown", m.g.heartbeat(HeartbeatRequest{MemberID: "x", Generation: gen}, m.now), ErrUnknownMember},
		{"heartbeat old", m.g.heartbeat(HeartbeatRequest{MemberID: "a", Generation: gen - 1}, m.now), ErrIllegalGeneration},
		{"heartbeat stable", m.g.heartbeat(HeartbeatRequest{MemberID: "a", Generation: gen}, m.now), nil},
		{"commit unknown", m.g.checkCommit("x", "", gen), ErrUnknownMember},
		{"standalone commit to a group with members", m.g.checkCommit("", "", -1), ErrUnknownMember},
		{"commit with an unknown instance", m.g.checkCommit("a", "i9", gen), ErrUnknownMember},
	} {
		if !errors.Is(tc.err, tc.want) || (tc.want == nil && tc.err != nil) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	m.g.leave([]LeavingMember{{MemberID: "a"}}, m.now, m.lim)
	if m.g.state != classicEmpty {
		t.Fatalf("state after the last member left: %s", m.g.state)
	}
	if err := m.g.checkCommit("", "", -1); err != nil {
		t.Fatalf("standalone commit to an empty group: %v", err)
	}
	if _, _, err := m.g.sync(SyncRequest{GroupID: "g", MemberID: "a", Generation: m.g.generation}, m.now, m.lim); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("sync of a member that left: %v", err)
	}
}

// C3: an empty group's first round waits for the initial delay, pushed by
// each new member within the rebalance timeout.
func TestClassicInitialDelay(t *testing.T) {
	m := newMachine(t)
	m.lim.initialRebalanceDelay = 3 * time.Second
	_, pa, _ := m.join(joinReq("a", "range"))
	m.now = m.now.Add(2 * time.Second)
	m.g.advance(m.now, m.lim)
	stillParked(t, pa)
	_, pb, _ := m.join(joinReq("b", "range")) // pushes the delay to +5 s
	m.now = m.now.Add(2 * time.Second)
	m.g.advance(m.now, m.lim)
	stillParked(t, pa)
	m.now = m.now.Add(time.Second)
	m.g.advance(m.now, m.lim)
	ra, _ := answered(t, pa)
	rb, _ := answered(t, pb)
	if ra.Generation != 1 || rb.Generation != 1 || len(ra.Members) != 2 {
		t.Fatalf("%+v %+v", ra, rb)
	}
}

// C6, C8: the record is the group as of its last completed step, and a
// restore brings back generation, protocol, leader, members, their
// subscription and assignment.
func TestClassicRecordAndRestore(t *testing.T) {
	m := newMachine(t)
	gen := m.stable("a", "b")
	rec := m.g.record
	_, _, _ = m.join(joinReq("c", "range")) // a round in progress: not a step
	if m.g.record != rec {
		t.Fatal("PreparingRebalance changed the record")
	}
	r := newClassicGroup("g")
	r.restore(rec, m.now)
	if r.state != classicStable || r.generation != gen || r.protocol != "range" || r.leader != "a" || len(r.members) != 2 {
		t.Fatalf("restored %+v", r)
	}
	if md, _ := r.members["b"].metadata("range"); string(md) != "md-range" || string(r.members["b"].assignment) != "a-b" {
		t.Fatalf("restored member %+v", r.members["b"])
	}
	if err := r.heartbeat(HeartbeatRequest{MemberID: "b", Generation: gen}, m.now); err != nil {
		t.Fatalf("heartbeat after restore: %v", err)
	}
	if err := r.checkCommit("b", "", gen); err != nil {
		t.Fatalf("commit after restore: %v", err)
	}
}

func TestSubscriptionTopics(t *testing.T) {
	enc := func(version int16, topics ...string) []byte {
		b := []byte{byte(version >> 8), byte(version), 0, 0, 0, byte(len(topics))}
		for _, t := range topics {
			b = append(b, 0, byte(len(t)))
			b = append(b, t...)
		}
		return append(b, 0xff, 0xff, 0xff, 0xff) // user data: null
	}
	got, err := subscriptionTopics(enc(3, "a", "bb"))
	if err != nil || len(got) != 2 || got[0] != "a" || got[1] != "bb" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {0, 0}, enc(-1, "a"), {0, 0, 0x7f, 0, 0, 0}, {0, 0, 0, 0, 0, 1, 0, 9, 'a'}} {
		if _, err := subscriptionTopics(bad); err == nil {
			t.Errorf("%v decoded", bad)
		}
	}
}

// The group's budget is the sum of its members' as they are, round after
// round (a drift would refuse joins of a group that does not grow).
func TestClassicBudgetDoesNotDrift(t *testing.T) {
	m := newMachine(t)
	for round := 0; round < 5; round++ {
		a, b := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		m.stable(a, b)
		_, _, _ = m.join(joinReq(a, "range")) // the leader starts a round ...
		_, _, _ = m.join(joinReq(b, "range")) // ... completed, never synced
		m.now = m.now.Add(21 * time.Second)
		m.g.advance(m.now, m.lim) // the sync deadline: gone
	}
	m.stable("c", "d")
	m.stable("c", "d") // a second generation of the same members
	sum := 0
	for _, mb := range m.g.members {
		if want := classicBudget(mb.id, mb.instanceID, mb.clientID, mb.clientHost, mb.protocols, mb.assignment); mb.budget != want {
			t.Fatalf("member %s counts %d, is %d", mb.id, mb.budget, want)
		}
		sum += mb.budget
	}
	if m.g.budget != sum {
		t.Fatalf("group counts %d, its members %d", m.g.budget, sum)
	}
}
