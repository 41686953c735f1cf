package broker

import (
	"maps"
	"slices"
	"strings"

	"github.com/strata-log/strata/proto/brokerpb"
)

// Partition placement: which broker is assigned which partition. A placer's
// plan is the controller's decision for one round, made from the decoded
// records it mirrors; it does no I/O and reads no clock, so a test feeds it
// records and checks the plan (placement_test.go). The controller
// (controller.go) only follows the mirrors, plans and writes the plan in
// order.
//
// Invariants (with B1 in doc.go):
//
//   - PL1 Every partition of a topic that is not being deleted gets an
//     assignment to a live ACTIVE broker that is not drained (an eligible
//     broker), if there is one: the eligible broker holding the fewest
//     partitions of its topic, then the fewest in all, then the lowest id
//     (so a topic spreads over the brokers whatever else they hold); an
//     assignment to such a broker is left alone unless balancing moves it
//     (PL3). A partition of a live, ACTIVE, drained broker that it serves
//     is left to PL5; one it does not serve moves at once.
//   - PL2 A new or moved assignment's epoch is the previous one plus one
//     (1 for a partition never assigned) and its write names the version
//     the controller saw (0: the key must not exist), so it never
//     overwrites a change the controller did not see.
//   - PL3 Balancing moves a partition only while every partition is served
//     at its current assignment (owner record = assignment): from the most
//     to the least loaded eligible broker (ties by id), only while they
//     differ by more than one, at most maxMovesPerRound per round. The
//     partition moved is the lowest of the topic with the most partitions
//     on the most loaded broker more than on the least loaded (ties by
//     topic name), so a joining broker gets a share of every topic, not
//     the lowest-named topic's partitions first. A move makes the
//     partition unserved at its new epoch, so in practice one per round.
//   - PL4 Assignments of partitions that no longer exist are deleted; a
//     deleting topic is finished (its data removed) only once no partition
//     of it has an owner record.
//   - PL5 A partition served by a drained broker (an operator's drain,
//     package broker/drain) moves to an eligible broker chosen as in PL1
//     while fewer than maxDrainInFlight wanted partitions are not served
//     at their assignment, counting the moves already decided; in
//     partition order. Drained brokers count in no load (PL1, PL3 never
//     pick them).

// current is an assignment as the controller last saw it, with its key's
// version for the next compare-and-set.
type current struct {
	broker         string
	epoch, version int64
}

// ownerSeen is a partition's ownership record as mirrored: present always,
// broker and epoch only when it decoded (ok).
type ownerSeen struct {
	ok     bool
	broker string
	epoch  int64
}

// maxMovesPerRound bounds how many healthy partitions one balancing round
// moves, so a new broker fills up gradually instead of everything moving at
// once.
const maxMovesPerRound = 2

// maxDrainInFlight bounds how many partitions of the cluster may be
// between owners (assignment moved, new owner not serving yet) while the
// controller moves drained brokers' partitions (PL5). A hand-over is
// mostly waiting (metad round trips, fencing the old ledger, creating the
// new one), so several at once cost little more than one; balancing's
// pace (one at a time, PL3) would make a drain of thousands of partitions
// take as many hand-over times. The bound keeps the partitions answering
// NOT_OWNER at once, and the takeovers landing on the receiving brokers
// at once, few. Measured on a loaded 2-core machine (3 brokers, 3
// bookies, idle partitions): 86 partitions drained in 3.5 s, where
// balancing's pace moved 83 in 8.3 s; 64 in flight was no faster, the
// controller's one metad write per move binding first.
const maxDrainInFlight = 16

// assignDecision is one assignment to write (PL2): version >= 0 is the
// expected version (0: must not exist), -1 writes unconditionally.
type assignDecision struct {
	tp      tp
	broker  string
	epoch   int64
	version int64
	// from is the broker a balancing move takes the partition from, "" for
	// an assignment of an unassigned or orphaned partition.
	from string
}

// placementPlan is one round's decisions, to be carried out in order:
// deletions, topic deletions, then assignments. The controller stops at the
// first write that fails; the next round decides again from what it sees.
type placementPlan struct {
	deleteAssignments []tp     // PL4, sorted
	finishDeletes     []string // PL4, sorted
	assigns           []assignDecision
}

// placer decides the controller's rounds (PL1-PL5) from the decoded
// records it mirrors, and keeps what a decision needs indexed between
// rounds: the wanted partitions by assigned broker, and the few that need
// something (no assignment, no topic, no owner at their assignment). A
// round then costs what changed since the last one and what is left to
// do, not the cluster's size: at 50,000 partitions, walking and sorting
// every partition made each round of a failover 50-100 ms of CPU.
//
// The maps of records are the controller's (recordMap.vals), read only;
// after they change, the placer is told which keys did (topicChanged,
// refresh) before the next plan. It does no I/O and reads no clock, so a
// test feeds it records and checks the plan (placement_test.go). Not safe
// for concurrent use.
type placer struct {
	topics  map[string]*brokerpb.TopicRecord
	assigns map[tp]current
	owners  map[tp]ownerSeen

	wantN    map[string]int32 // partitions wanted of each topic (absent: none, deleting or gone)
	deleting map[string]int32 // topics being deleted, with their partitions
	// placedAt, byBroker and byTopic index the wanted, assigned
	// partitions (byTopic: broker -> topic -> how many of its partitions).
	placedAt   map[tp]string
	byBroker   map[string]map[tp]struct{}
	byTopic    map[string]map[string]int
	unassigned map[tp]struct{} // wanted, with no assignment
	unwanted   map[tp]struct{} // assigned, of no topic that wants them (PL4)
	unserved   map[tp]struct{} // wanted, no owner record at their assignment
	// sorted holds a broker's partitions in order, from when PL3 last
	// needed them; dropped when one is placed there. Entries moved away
	// since are skipped.
	sorted map[string][]tp
}

// newPlacer indexes the records whole.
func newPlacer(topics map[string]*brokerpb.TopicRecord, assigns map[tp]current, owners map[tp]ownerSeen) *placer {
	p := &placer{topics: topics, assigns: assigns, owners: owners,
		wantN: map[string]int32{}, deleting: map[string]int32{}, placedAt: map[tp]string{},
		byBroker: map[string]map[tp]struct{}{}, byTopic: map[string]map[string]int{}, unassigned: map[tp]struct{}{}, unwanted: map[tp]struct{}{},
		unserved: map[tp]struct{}{}, sorted: map[string][]tp{}}
	for name := range topics {
		p.topicChanged(name)
	}
	for k := range assigns {
		p.refresh(k)
	}
	return p
}

// topicChanged follows a change of name's topic record: the partitions
// that became wanted or stopped being wanted are indexed again.
func (p *placer) topicChanged(name string) {
	was := p.wantN[name]
	var now int32
	delete(p.deleting, name)
	if rec := p.topics[name]; rec != nil {
		if rec.Deleting {
			p.deleting[name] = rec.Partitions
		} else {
			now = max(rec.Partitions, 0)
		}
	}
	if now == 0 {
		delete(p.wantN, name)
	} else {
		p.wantN[name] = now
	}
	for i := min(was, now); i < max(was, now); i++ {
		p.refresh(tp{name, i})
	}
}

func (p *placer) wanted(k tp) bool { return k.partition >= 0 && k.partition < p.wantN[k.topic] }

// refresh indexes k again from the records, after its assignment, its
// owner record or its topic changed.
func (p *placer) refresh(k tp) {
	delete(p.unassigned, k)
	delete(p.unwanted, k)
	delete(p.unserved, k)
	c, assigned := p.assigns[k]
	was, placed := p.placedAt[k]
	if placed && (!assigned || was != c.broker || !p.wanted(k)) {
		delete(p.placedAt, k)
		delete(p.byBroker[was], k)
		if p.byTopic[was][k.topic]--; p.byTopic[was][k.topic] == 0 {
			delete(p.byTopic[was], k.topic)
		}
		if len(p.byBroker[was]) == 0 {
			delete(p.byBroker, was)
			delete(p.byTopic, was)
			delete(p.sorted, was)
		}
		placed = false
	}
	switch {
	case !p.wanted(k):
		if assigned {
			p.unwanted[k] = struct{}{}
		}
		return
	case !assigned:
		p.unassigned[k] = struct{}{}
	case !placed:
		p.placedAt[k] = c.broker
		if p.byBroker[c.broker] == nil {
			p.byBroker[c.broker] = map[tp]struct{}{}
			p.byTopic[c.broker] = map[string]int{}
		}
		p.byBroker[c.broker][k] = struct{}{}
		p.byTopic[c.broker][k.topic]++
		delete(p.sorted, c.broker)
	}
	if !p.servedAt(k, c) {
		p.unserved[k] = struct{}{}
	}
}

// servedAt reports whether k's owner record matches assignment c.
func (p *placer) servedAt(k tp, c current) bool {
	o, ok := p.owners[k]
	return ok && o.ok && o.broker == c.broker && o.epoch == c.epoch
}

// hasOwner reports whether any partition of a deleting topic of n
// partitions has an owner record.
func (p *placer) hasOwner(topic string, n int32) bool {
	for i := range n {
		if _, ok := p.owners[tp{topic, i}]; ok {
			return true
		}
	}
	return false
}

// round is one plan's decisions so far, over the placer's records.
type round struct {
	p    *placer
	plan placementPlan
	load map[string]int // eligible broker id -> assigned partitions
	// moved: broker -> topic -> partitions of it the round's decisions
	// gave the broker (negative: took away), on top of placer.byTopic.
	moved   map[string]map[string]int
	decided map[tp]current // the partitions decided on, as the round left them
	// unserved counts the wanted partitions not served at their
	// assignment as the round left it.
	unserved int
}

func (r *round) cur(k tp) current {
	if c, ok := r.decided[k]; ok {
		return c
	}
	return r.p.assigns[k]
}

// count is how many partitions of topic broker holds as the round left
// them.
func (r *round) count(broker, topic string) int {
	return r.p.byTopic[broker][topic] + r.moved[broker][topic]
}

// move counts n partitions of topic onto broker in the round.
func (r *round) move(broker, topic string, n int) {
	if r.moved[broker] == nil {
		r.moved[broker] = map[string]int{}
	}
	r.moved[broker][topic] += n
}

// spreadTarget is the eligible broker a partition of topic goes to (PL1,
// PL5): the fewest of the topic, then the fewest in all, then the lowest
// id.
func (r *round) spreadTarget(topic string) string {
	best, bestN := "", 0
	for id, load := range r.load {
		n := r.count(id, topic)
		if best == "" || n < bestN || (n == bestN && (load < r.load[best] || (load == r.load[best] && id < best))) {
			best, bestN = id, n
		}
	}
	return best
}

// assign decides k onto broker to; next is the version the round then
// holds for k (as PL1 and PL3-PL5 always have).
func (r *round) assign(k tp, from, to string, next int64) {
	c := r.cur(k)
	r.plan.assigns = append(r.plan.assigns, assignDecision{tp: k, broker: to, epoch: c.epoch + 1, version: c.version, from: from})
	r.load[to]++
	r.move(to, k.topic, 1)
	if _, ok := r.load[from]; ok {
		r.load[from]-- // a drained broker counts in no load (PL5)
	}
	if c.broker != "" {
		r.move(c.broker, k.topic, -1)
	}
	n := current{broker: to, epoch: c.epoch + 1, version: next}
	if r.p.servedAt(k, c) {
		r.unserved++
	}
	if r.p.servedAt(k, n) {
		r.unserved--
	}
	r.decided[k] = n
}

// balanceTopic is the topic PL3 moves a partition of from most to least:
// the one most has the most partitions of more than least (ties by name).
func (r *round) balanceTopic(most, least string) string {
	best, bestD := "", 0
	consider := func(topic string) {
		if d := r.count(most, topic) - r.count(least, topic); d > 0 && (best == "" || d > bestD || (d == bestD && topic < best)) {
			best, bestD = topic, d
		}
	}
	for topic := range r.p.byTopic[most] {
		consider(topic)
	}
	for topic := range r.moved[most] {
		consider(topic)
	}
	return best
}

// first is the lowest partition of topic that broker holds as the round
// left them.
func (r *round) first(broker, topic string) (tp, bool) {
	p := r.p
	s, ok := p.sorted[broker]
	if !ok {
		s = slices.SortedFunc(maps.Keys(p.byBroker[broker]), compareTP)
		p.sorted[broker] = s
	}
	var best tp
	found := false
	i, _ := slices.BinarySearchFunc(s, tp{topic, 0}, compareTP)
	for ; i < len(s) && s[i].topic == topic; i++ {
		if k := s[i]; p.placedAt[k] == broker && r.cur(k).broker == broker {
			best, found = k, true
			break
		}
	}
	for k, c := range r.decided {
		if k.topic == topic && c.broker == broker && (!found || compareTP(k, best) < 0) {
			best, found = k, true
		}
	}
	return best, found
}

// plan decides one controller round (PL1-PL5) for brokers, drained naming
// those an operator drained.
func (p *placer) plan(brokers []*brokerpb.BrokerInfo, drained map[string]bool) placementPlan {
	r := &round{p: p, load: map[string]int{}, moved: map[string]map[string]int{}, decided: map[tp]current{}, unserved: len(p.unserved)}
	drainedLive := map[string]bool{}
	for _, info := range brokers {
		switch {
		case info.State != brokerpb.BrokerState_BROKER_ACTIVE:
		case drained[info.Id]:
			drainedLive[info.Id] = true
		default:
			r.load[info.Id] = len(p.byBroker[info.Id])
		}
	}
	r.plan.deleteAssignments = slices.SortedFunc(maps.Keys(p.unwanted), compareTP)
	for name, n := range p.deleting {
		if !p.hasOwner(name, n) {
			r.plan.finishDeletes = append(r.plan.finishDeletes, name)
		}
	}
	slices.Sort(r.plan.finishDeletes)
	if len(r.load) == 0 {
		return r.plan
	}
	// PL1: partitions without a live, active broker.
	orphans := slices.Collect(maps.Keys(p.unassigned))
	for broker, ks := range p.byBroker {
		if _, live := r.load[broker]; live {
			continue
		}
		for k := range ks {
			if drainedLive[broker] && p.servedAt(k, p.assigns[k]) {
				continue // PL5 moves it, at its pace
			}
			orphans = append(orphans, k)
		}
	}
	slices.SortFunc(orphans, compareTP)
	for _, k := range orphans {
		r.assign(k, "", r.spreadTarget(k.topic), 0)
	}
	// PL5: drain, a bounded number of hand-overs at a time.
	var draining []tp
	for broker := range drainedLive {
		for k := range p.byBroker[broker] {
			if _, moved := r.decided[k]; !moved {
				draining = append(draining, k)
			}
		}
	}
	slices.SortFunc(draining, compareTP)
	inFlight := r.unserved
	for _, k := range draining {
		if inFlight >= maxDrainInFlight {
			break
		}
		r.assign(k, r.cur(k).broker, r.spreadTarget(k.topic), -1)
		inFlight++
	}
	// PL3: balance, only while every partition is served (no takeover
	// running): move one from the most to the least loaded broker at a
	// time, of the topic most over-represented there.
	for moves := 0; moves < maxMovesPerRound && r.unserved == 0; moves++ {
		most, least := mostLoaded(r.load), leastLoaded(r.load)
		if r.load[most]-r.load[least] <= 1 {
			break
		}
		k, ok := r.first(most, r.balanceTopic(most, least))
		if !ok {
			break
		}
		r.assign(k, most, least, -1)
	}
	return r.plan
}

func compareTP(x, y tp) int {
	if c := strings.Compare(x.topic, y.topic); c != 0 {
		return c
	}
	return int(x.partition - y.partition)
}

func leastLoaded(load map[string]int) string {
	best := ""
	for id, n := range load {
		if best == "" || n < load[best] || (n == load[best] && id < best) {
			best = id
		}
	}
	return best
}

func mostLoaded(load map[string]int) string {
	best := ""
	for id, n := range load {
		if best == "" || n > load[best] || (n == load[best] && id < best) {
			best = id
		}
	}
	return best
}
