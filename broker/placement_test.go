package broker

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-log/strata/broker/drain"
	"github.com/strata-log/strata/proto/brokerpb"
)

func active(ids ...string) []*brokerpb.BrokerInfo {
	var out []*brokerpb.BrokerInfo
	for _, id := range ids {
		out = append(out, &brokerpb.BrokerInfo{Id: id, State: brokerpb.BrokerState_BROKER_ACTIVE})
	}
	return out
}

func topic(name string, n int32) *brokerpb.TopicRecord {
	return &brokerpb.TopicRecord{Name: name, Partitions: n}
}

// served makes every assignment's owner record match it.
func served(assigns map[tp]current) map[tp]ownerSeen {
	out := map[tp]ownerSeen{}
	for k, c := range assigns {
		out[k] = ownerSeen{ok: true, broker: c.broker, epoch: c.epoch}
	}
	return out
}

// placementInput is what the controller knows at the start of a round,
// for a test.
type placementInput struct {
	brokers []*brokerpb.BrokerInfo // registered brokers (any state)
	drained map[string]bool        // brokers an operator drained (PL5)
	topics  []*brokerpb.TopicRecord
	assigns map[tp]current
	owners  map[tp]ownerSeen
}

// planPlacement plans a round from in, indexed whole.
func planPlacement(in placementInput) placementPlan {
	return newPlacer(topicMap(in.topics), in.assigns, in.owners).plan(in.brokers, in.drained)
}

func topicMap(recs []*brokerpb.TopicRecord) map[string]*brokerpb.TopicRecord {
	out := map[string]*brokerpb.TopicRecord{}
	for _, rec := range recs {
		out[rec.Name] = rec
	}
	return out
}

// planString renders a plan one decision a line, for table tests.
func planString(p placementPlan) string {
	var lines []string
	for _, k := range p.deleteAssignments {
		lines = append(lines, "delete "+k.String())
	}
	for _, name := range p.finishDeletes {
		lines = append(lines, "finish-delete "+name)
	}
	for _, d := range p.assigns {
		s := fmt.Sprintf("assign %s -> %s epoch=%d version=%d", d.tp, d.broker, d.epoch, d.version)
		if d.from != "" {
			s += " from=" + d.from
		}
		lines = append(lines, s)
	}
	return strings.Join(lines, "\n")
}

func TestPlanPlacement(t *testing.T) {
	a := func(broker string, epoch, version int64) current {
		return current{broker: broker, epoch: epoch, version: version}
	}
	balanced := map[tp]current{{"t", 0}: a("k1", 1, 1), {"t", 1}: a("k2", 1, 1)}
	for _, tc := range []struct {
		name string
		in   placementInput
		want string
	}{{
		name: "new topic spreads over the least loaded, ties by id (PL1, PL2)",
		in:   placementInput{brokers: active("k2", "k1"), topics: []*brokerpb.TopicRecord{topic("t", 3)}},
		want: "assign t/0 -> k1 epoch=1 version=0\nassign t/1 -> k2 epoch=1 version=0\nassign t/2 -> k1 epoch=1 version=0",
	}, {
		name: "no active broker: nothing assigned",
		in: placementInput{brokers: []*brokerpb.BrokerInfo{{Id: "k1", State: brokerpb.BrokerState_BROKER_DRAINING}},
			topics: []*brokerpb.TopicRecord{topic("t", 1)}},
		want: "",
	}, {
		name: "a dead broker's partition moves with epoch+1 on the version seen (PL1, PL2)",
		in: placementInput{brokers: active("k1", "k2"), topics: []*brokerpb.TopicRecord{topic("t", 2)},
			assigns: map[tp]current{{"t", 0}: a("k1", 1, 3), {"t", 1}: a("gone", 4, 7)}},
		want: "assign t/1 -> k2 epoch=5 version=7",
	}, {
		name: "a draining broker's partition moves",
		in: placementInput{brokers: append(active("k1"), &brokerpb.BrokerInfo{Id: "k2", State: brokerpb.BrokerState_BROKER_DRAINING}),
			topics: []*brokerpb.TopicRecord{topic("t", 2)}, assigns: balanced, owners: served(balanced)},
		want: "assign t/1 -> k1 epoch=2 version=1",
	}, {
		name: "a drained broker gets nothing new (PL1, D1)",
		in: placementInput{brokers: active("k1", "k2"), drained: map[string]bool{"k1": true},
			topics: []*brokerpb.TopicRecord{topic("t", 2)}},
		want: "assign t/0 -> k2 epoch=1 version=0\nassign t/1 -> k2 epoch=1 version=0",
	}, {
		name: "a drained broker's served partitions move one hand-over at a time each, to the least loaded (PL5)",
		in: placementInput{brokers: active("k1", "k2", "k3"), drained: map[string]bool{"k2": true},
			topics:  []*brokerpb.TopicRecord{topic("t", 3)},
			assigns: map[tp]current{{"t", 0}: a("k2", 1, 1), {"t", 1}: a("k2", 3, 4), {"t", 2}: a("k1", 1, 1)},
			owners:  served(map[tp]current{{"t", 0}: a("k2", 1, 1), {"t", 1}: a("k2", 3, 4), {"t", 2}: a("k1", 1, 1)})},
		want: "assign t/0 -> k3 epoch=2 version=1 from=k2\nassign t/1 -> k1 epoch=4 version=4 from=k2",
	}, {
		name: "a drained broker's unserved partition moves at once (PL1)",
		in: func() placementInput {
			as := map[tp]current{{"t", 0}: a("k2", 2, 3), {"t", 1}: a("k1", 1, 1)}
			owners := served(as)
			delete(owners, tp{"t", 0}) // k2 is still taking it over
			return placementInput{brokers: active("k1", "k2"), drained: map[string]bool{"k2": true},
				topics: []*brokerpb.TopicRecord{topic("t", 2)}, assigns: as, owners: owners}
		}(),
		want: "assign t/0 -> k1 epoch=3 version=3",
	}, {
		name: "a drained broker that is gone or shutting down: everything moves at once (PL1)",
		in: placementInput{brokers: append(active("k1"), &brokerpb.BrokerInfo{Id: "k2", State: brokerpb.BrokerState_BROKER_DRAINING}),
			drained: map[string]bool{"k2": true, "k3": true},
			topics:  []*brokerpb.TopicRecord{topic("t", 2)}, assigns: map[tp]current{{"t", 0}: a("k2", 1, 1), {"t", 1}: a("k3", 1, 1)},
			owners: served(map[tp]current{{"t", 0}: a("k2", 1, 1), {"t", 1}: a("k3", 1, 1)})},
		want: "assign t/0 -> k1 epoch=2 version=1\nassign t/1 -> k1 epoch=2 version=1",
	}, {
		name: "only drained brokers: their partitions stay where they are",
		in: placementInput{brokers: active("k1"), drained: map[string]bool{"k1": true},
			topics: []*brokerpb.TopicRecord{topic("t", 1)}, assigns: map[tp]current{{"t", 0}: a("k1", 1, 1)},
			owners: served(map[tp]current{{"t", 0}: a("k1", 1, 1)})},
		want: "",
	}, {
		name: "balanced: nothing to do",
		in: placementInput{brokers: active("k1", "k2"), topics: []*brokerpb.TopicRecord{topic("t", 2)},
			assigns: balanced, owners: served(balanced)},
		want: "",
	}, {
		name: "a joining broker gets one partition per round, first of the most loaded (PL3)",
		in: func() placementInput {
			as := map[tp]current{{"t", 0}: a("k1", 1, 1), {"t", 1}: a("k1", 1, 1), {"t", 2}: a("k1", 2, 5), {"t", 3}: a("k2", 1, 1)}
			return placementInput{brokers: active("k1", "k2", "k3"), topics: []*brokerpb.TopicRecord{topic("t", 4)},
				assigns: as, owners: served(as)}
		}(),
		want: "assign t/0 -> k3 epoch=2 version=1 from=k1",
	}, {
		// By the lowest partition of the most loaded broker, k3 got
		// _o/0 (say __consumer_offsets, idle) and then more of _o before
		// any of t, which carries the traffic.
		name: "a joining broker gets a partition of the topic the most loaded holds most more of (PL3)",
		in: func() placementInput {
			as := map[tp]current{}
			for i := range int32(8) {
				as[tp{"t", i}] = a([]string{"k1", "k2"}[i/4], 1, 1)
			}
			for i := range int32(4) {
				as[tp{"_o", i}] = a([]string{"k1", "k2"}[i/2], 1, 1)
			}
			return placementInput{brokers: active("k1", "k2", "k3"), topics: []*brokerpb.TopicRecord{topic("t", 8), topic("_o", 4)},
				assigns: as, owners: served(as)}
		}(),
		want: "assign t/0 -> k3 epoch=2 version=1 from=k1",
	}, {
		// By total load alone all four went to k2, and k2 served the
		// new topic's traffic alone.
		name: "a new topic spreads over the brokers whatever else they hold (PL1)",
		in: func() placementInput {
			x := map[tp]current{{"x", 0}: a("k1", 1, 1), {"x", 1}: a("k1", 1, 1), {"x", 2}: a("k1", 1, 1), {"x", 3}: a("k1", 1, 1)}
			return placementInput{brokers: active("k1", "k2"), topics: []*brokerpb.TopicRecord{topic("x", 4), topic("y", 4)},
				assigns: x, owners: served(x)}
		}(),
		want: "assign y/0 -> k2 epoch=1 version=0\nassign y/1 -> k1 epoch=1 version=0\nassign y/2 -> k2 epoch=1 version=0\nassign y/3 -> k1 epoch=1 version=0",
	}, {
		// By total load alone both went to k2.
		name: "a drained broker's partitions spread by their topic (PL5)",
		in: func() placementInput {
			as := map[tp]current{{"t", 0}: a("k1", 1, 1), {"t", 1}: a("k1", 1, 1), {"t", 2}: a("k2", 1, 1),
				{"o", 0}: a("k2", 1, 1), {"o", 1}: a("k2", 1, 1), {"o", 2}: a("k3", 1, 1), {"o", 3}: a("k3", 1, 1),
				{"o", 4}: a("k3", 1, 1), {"o", 5}: a("k3", 1, 1)}
			return placementInput{brokers: active("k1", "k2", "k3"), drained: map[string]bool{"k1": true},
				topics: []*brokerpb.TopicRecord{topic("t", 3), topic("o", 6)}, assigns: as, owners: served(as)}
		}(),
		want: "assign t/0 -> k3 epoch=2 version=1 from=k1\nassign t/1 -> k2 epoch=2 version=1 from=k1",
	}, {
		name: "no balancing while a takeover runs (PL3)",
		in: func() placementInput {
			as := map[tp]current{{"t", 0}: a("k1", 1, 1), {"t", 1}: a("k1", 1, 1), {"t", 2}: a("k1", 1, 1)}
			owners := served(as)
			owners[tp{"t", 2}] = ownerSeen{ok: true, broker: "k1", epoch: 0}
			return placementInput{brokers: active("k1", "k2"), topics: []*brokerpb.TopicRecord{topic("t", 3)},
				assigns: as, owners: owners}
		}(),
		want: "",
	}, {
		name: "an undecodable owner record counts as not served",
		in: func() placementInput {
			as := map[tp]current{{"t", 0}: a("k1", 1, 1), {"t", 1}: a("k1", 1, 1), {"t", 2}: a("k1", 1, 1)}
			owners := served(as)
			owners[tp{"t", 1}] = ownerSeen{}
			return placementInput{brokers: active("k1", "k2"), topics: []*brokerpb.TopicRecord{topic("t", 3)},
				assigns: as, owners: owners}
		}(),
		want: "",
	}, {
		name: "deleted topic: assignments deleted, data removed once no owner (PL4)",
		in: placementInput{brokers: active("k1"),
			topics:  []*brokerpb.TopicRecord{{Name: "gone", Partitions: 2, Deleting: true}, {Name: "held", Partitions: 1, Deleting: true}},
			assigns: map[tp]current{{"gone", 1}: a("k1", 1, 1), {"gone", 0}: a("k1", 1, 1), {"held", 0}: a("k1", 1, 1)},
			owners:  map[tp]ownerSeen{{"held", 0}: {}}},
		want: "delete gone/0\ndelete gone/1\ndelete held/0\nfinish-delete gone",
	}, {
		name: "deleted topic is finished even without an active broker",
		in: placementInput{topics: []*brokerpb.TopicRecord{{Name: "gone", Partitions: 1, Deleting: true}},
			assigns: map[tp]current{{"gone", 0}: a("k1", 1, 1)}},
		want: "delete gone/0\nfinish-delete gone",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planString(planPlacement(tc.in)); got != tc.want {
				t.Errorf("plan:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestPlanPlacementDrainPace: a drain moves at most maxDrainInFlight
// partitions that are then between owners, counting those already between
// owners for another reason; the next round moves more once they are served.
func TestPlanPlacementDrainPace(t *testing.T) {
	const n = 40
	as := map[tp]current{}
	for p := range int32(n) {
		as[tp{"t", p}] = current{broker: "k1", epoch: 1, version: 1}
	}
	as[tp{"u", 0}] = current{broker: "k2", epoch: 1, version: 1}
	in := placementInput{brokers: active("k1", "k2", "k3"), drained: map[string]bool{"k1": true},
		topics: []*brokerpb.TopicRecord{topic("t", n), topic("u", 1)}, assigns: as, owners: served(as)}
	moves := func(plan placementPlan) map[string]int {
		to := map[string]int{}
		for _, d := range plan.assigns {
			if d.from != "k1" {
				t.Fatalf("unexpected decision %+v", d)
			}
			to[d.broker]++
		}
		return to
	}
	if got := moves(planPlacement(in)); got["k2"] != 8 || got["k3"] != 8 {
		t.Fatalf("first round moved %v, want 16 to the least loaded in turn: k2 8, k3 8", got)
	}
	// Three partitions already between owners leave room for 13.
	owners := served(as)
	delete(owners, tp{"u", 0})
	owners[tp{"t", 0}] = ownerSeen{}
	owners[tp{"t", 1}] = ownerSeen{ok: true, broker: "k1", epoch: 0}
	in.owners = owners
	plan := planPlacement(in)
	if got := len(plan.assigns); got != 2+13 { // t/0 and t/1 are unserved on k1: moved at once (PL1)
		t.Fatalf("with 3 unserved: %d decisions, want 15:\n%s", got, planString(plan))
	}
	// Sixteen between owners: only the unserved ones of the drained broker move.
	owners = served(as)
	for p := int32(20); p < 36; p++ {
		owners[tp{"t", p}] = ownerSeen{}
	}
	in.owners = owners
	plan = planPlacement(in)
	for _, d := range plan.assigns {
		if d.tp.partition < 20 || d.tp.partition >= 36 {
			t.Fatalf("moved served %s with 16 partitions between owners:\n%s", d.tp, planString(plan))
		}
	}
}

// TestPlanPlacementConverges runs the controller's rounds against a
// simulated cluster (every assignment is served before the next round) over
// random broker sets and topics: every partition ends on an active broker,
// counts differ by at most one, and every write keeps PL2.
func TestPlanPlacementConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		var brokers []*brokerpb.BrokerInfo
		drained := map[string]bool{}
		for i := range 1 + rng.IntN(5) {
			if rng.IntN(4) == 0 {
				drained[fmt.Sprint("k", i)] = true
			}
			state := brokerpb.BrokerState_BROKER_ACTIVE
			if rng.IntN(4) == 0 {
				state = brokerpb.BrokerState_BROKER_DRAINING
			}
			brokers = append(brokers, &brokerpb.BrokerInfo{Id: fmt.Sprint("k", i), State: state})
		}
		var topics []*brokerpb.TopicRecord
		for i := range 1 + rng.IntN(3) {
			topics = append(topics, topic(fmt.Sprint("t", i), int32(1+rng.IntN(8))))
		}
		assigns := map[tp]current{}
		for _, rec := range topics {
			for p := range rec.Partitions {
				if rng.IntN(2) == 0 {
					assigns[tp{rec.Name, p}] = current{broker: fmt.Sprint("k", rng.IntN(7)), epoch: int64(rng.IntN(3)), version: 1}
				}
			}
		}
		in := placementInput{brokers: brokers, drained: drained, topics: topics, assigns: assigns, owners: served(assigns)}
		isActive := func(id string) bool {
			return !drained[id] && slices.ContainsFunc(brokers, func(b *brokerpb.BrokerInfo) bool {
				return b.Id == id && b.State == brokerpb.BrokerState_BROKER_ACTIVE
			})
		}
		anyActive := slices.ContainsFunc(brokers, func(b *brokerpb.BrokerInfo) bool { return isActive(b.Id) })
		for round := 0; ; round++ {
			if round > 100 {
				t.Fatalf("iteration %d: no convergence after 100 rounds", iter)
			}
			plan := planPlacement(in)
			if len(plan.assigns) == 0 {
				break
			}
			seen := map[tp]current{}
			for _, d := range plan.assigns {
				prev, ok := seen[d.tp]
				if !ok {
					prev = in.assigns[d.tp]
				}
				if d.epoch != prev.epoch+1 {
					t.Fatalf("iteration %d: %s epoch %d after %d (PL2)", iter, d.tp, d.epoch, prev.epoch)
				}
				if !isActive(d.broker) {
					t.Fatalf("iteration %d: %s assigned to inactive %s (PL1)", iter, d.tp, d.broker)
				}
				seen[d.tp] = current{broker: d.broker, epoch: d.epoch, version: prev.version + 1}
				in.assigns[d.tp] = seen[d.tp]
			}
			in.owners = served(in.assigns) // the owners take them over
		}
		if !anyActive {
			continue
		}
		load := map[string]int{}
		for _, b := range brokers {
			if isActive(b.Id) {
				load[b.Id] = 0
			}
		}
		for _, rec := range topics {
			for p := range rec.Partitions {
				c, ok := in.assigns[tp{rec.Name, p}]
				if !ok || !isActive(c.broker) {
					t.Fatalf("iteration %d: %s/%d not on an active broker: %+v", iter, rec.Name, p, c)
				}
				load[c.broker]++
			}
		}
		if d := load[mostLoaded(load)] - load[leastLoaded(load)]; d > 1 {
			t.Fatalf("iteration %d: unbalanced after convergence: %v", iter, load)
		}
	}
}

// The drain package reads the broker's keys under its own names.
func TestDrainKeysAgree(t *testing.T) {
	for _, k := range [][2]string{{drain.BrokersPrefix, brokersPrefix}, {drain.AssignmentsPrefix, assignmentsPrefix},
		{drain.OwnersPrefix, ownersPrefix}} {
		if k[0] != k[1] {
			t.Errorf("broker/drain has %q, broker %q", k[0], k[1])
		}
	}
}

// TestPlacerFollowsChanges: a placer told of each change as the controller
// tells it (topicChanged, refresh) holds the same index and makes the same
// plan as one indexed whole from the same records, through random topic
// creations, growth, deletions, assignment and owner changes, and the
// rounds' own decisions carried out.
func TestPlacerFollowsChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	for iter := range 200 {
		topics, assigns, owners := map[string]*brokerpb.TopicRecord{}, map[tp]current{}, map[tp]ownerSeen{}
		p := newPlacer(topics, assigns, owners)
		anyTP := func() tp { return tp{pick("a", "b", "c"), int32(rng.IntN(8)) - 1} }
		for step := range 60 {
			for range 1 + rng.IntN(4) {
				switch k := anyTP(); rng.IntN(7) {
				case 0: // a topic created, grown or deleted, or its record gone
					switch rec := topics[k.topic]; {
					case rec == nil:
						topics[k.topic] = topic(k.topic, int32(1+rng.IntN(6)))
					case rng.IntN(3) == 0:
						delete(topics, k.topic)
					case rng.IntN(2) == 0:
						topics[k.topic] = &brokerpb.TopicRecord{Name: k.topic, Partitions: rec.Partitions, Deleting: true}
					default:
						topics[k.topic] = topic(k.topic, rec.Partitions+int32(rng.IntN(3)))
					}
					p.topicChanged(k.topic)
				case 1, 2:
					assigns[k] = current{broker: pick("k1", "k2", "k3", "gone"), epoch: int64(rng.IntN(4)), version: int64(1 + rng.IntN(9))}
					p.refresh(k)
				case 3:
					delete(assigns, k)
					p.refresh(k)
				case 4:
					c := assigns[k]
					owners[k] = ownerSeen{ok: rng.IntN(5) > 0, broker: c.broker, epoch: c.epoch}
					p.refresh(k)
				case 5:
					owners[k] = ownerSeen{ok: true, broker: pick("k1", "k2", "k3"), epoch: int64(rng.IntN(4))}
					p.refresh(k)
				case 6:
					delete(owners, k)
					p.refresh(k)
				}
			}
			brokers := active("k1", "k2", "k3")[:1+rng.IntN(3)]
			var drained map[string]bool
			if rng.IntN(4) == 0 {
				drained = map[string]bool{pick("k1", "k2"): true}
			}
			whole := newPlacer(topics, assigns, owners)
			for _, f := range []struct {
				name      string
				got, want any
			}{{"wantN", p.wantN, whole.wantN}, {"deleting", p.deleting, whole.deleting},
				{"placedAt", p.placedAt, whole.placedAt}, {"byBroker", p.byBroker, whole.byBroker}, {"byTopic", p.byTopic, whole.byTopic},
				{"unassigned", p.unassigned, whole.unassigned}, {"unwanted", p.unwanted, whole.unwanted},
				{"unserved", p.unserved, whole.unserved}} {
				if !reflect.DeepEqual(f.got, f.want) {
					t.Fatalf("iteration %d step %d: %s\n%v\nindexed whole:\n%v", iter, step, f.name, f.got, f.want)
				}
			}
			plan := p.plan(brokers, drained)
			if got, want := planString(plan), planString(whole.plan(brokers, drained)); got != want {
				t.Fatalf("iteration %d step %d: plan\n%s\nindexed whole:\n%s", iter, step, got, want)
			}
			// Carry out some of the decisions; the new owners serve them.
			for _, d := range plan.assigns {
				if rng.IntN(3) > 0 {
					assigns[d.tp] = current{broker: d.broker, epoch: d.epoch, version: assigns[d.tp].version + 1}
					owners[d.tp] = ownerSeen{ok: true, broker: d.broker, epoch: d.epoch}
					p.refresh(d.tp)
				}
			}
		}
	}
}

// BenchmarkPlacementRound: one controller round at 50,000 partitions after
// one assignment and one owner record changed (a takeover), followed
// incrementally and, for comparison, indexed whole.
func BenchmarkPlacementRound(b *testing.B) {
	const n = 50_000
	topics := map[string]*brokerpb.TopicRecord{"t": topic("t", n)}
	assigns, owners := map[tp]current{}, map[tp]ownerSeen{}
	for i := range int32(n) {
		c := current{broker: fmt.Sprint("k", 1+i%2), epoch: 1, version: 1}
		assigns[tp{"t", i}] = c
		owners[tp{"t", i}] = ownerSeen{ok: true, broker: c.broker, epoch: c.epoch}
	}
	brokers := active("k1", "k2")
	change := func(i int) tp {
		k := tp{"t", int32(i % n)}
		c := assigns[k]
		c.epoch++
		assigns[k] = c
		owners[k] = ownerSeen{ok: true, broker: c.broker, epoch: c.epoch}
		return k
	}
	b.Run("incremental", func(b *testing.B) {
		p := newPlacer(topics, assigns, owners)
		for i := 0; b.Loop(); i++ {
			p.refresh(change(i))
			if plan := p.plan(brokers, nil); len(plan.assigns) != 0 {
				b.Fatalf("plan: %s", planString(plan))
			}
		}
	})
	b.Run("whole", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			change(i)
			if plan := newPlacer(topics, assigns, owners).plan(brokers, nil); len(plan.assigns) != 0 {
				b.Fatalf("plan: %s", planString(plan))
			}
		}
	})
}
