package group

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkAssignment verifies the assignor's contract: every partition of a
// topic with subscribers is assigned exactly once, to a subscriber, and the
// subscribers' counts differ by at most one.
func checkAssignment(t *testing.T, subs map[string][]string, parts map[string]int32, out map[string]tpSet) {
	t.Helper()
	owner := map[TopicPartition]string{}
	for m, set := range out {
		if _, ok := subs[m]; !ok {
			t.Fatalf("assignment for non-member %q", m)
		}
		for tp := range set {
			if o, dup := owner[tp]; dup {
				t.Fatalf("%v assigned to %q and %q", tp, o, m)
			}
			owner[tp] = m
			if !slices.Contains(subs[m], tp.Topic) {
				t.Fatalf("%v assigned to %q, not subscribed", tp, m)
			}
			if tp.Partition < 0 || tp.Partition >= parts[tp.Topic] {
				t.Fatalf("%v out of range", tp)
			}
		}
	}
	for topic, n := range parts {
		var members []string
		for m, ts := range subs {
			if slices.Contains(ts, topic) {
				members = append(members, m)
			}
		}
		if len(members) == 0 {
			continue
		}
		for p := int32(0); p < n; p++ {
			if _, ok := owner[TopicPartition{topic, p}]; !ok {
				t.Fatalf("%s/%d unassigned", topic, p)
			}
		}
		lo, hi := int(n), 0
		for _, m := range members {
			c := len(out[m].ofTopic(topic))
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Fatalf("topic %s unbalanced: min %d max %d", topic, lo, hi)
		}
	}
}

func moved(before, after map[string]tpSet) int {
	n := 0
	for m, set := range after {
		n += len(set.minus(before[m]))
	}
	return n
}

func TestAssignStickyTable(t *testing.T) {
	parts := map[string]int32{"a": 6, "b": 3}
	subs := map[string][]string{"m1": {"a", "b"}, "m2": {"a"}}
	out := assignSticky(subs, parts, nil)
	checkAssignment(t, subs, parts, out)
	if got := out["m1"]; !got.equal(tps("a", 0, 1, 2, "b", 0, 1, 2)) {
		t.Errorf("m1 = %v", got.sorted())
	}
	if got := out["m2"]; !got.equal(tps("a", 3, 4, 5)) {
		t.Errorf("m2 = %v", got.sorted())
	}

	// m3 joins subscribed to a: it takes 2 of a, one from each.
	subs["m3"] = []string{"a"}
	out2 := assignSticky(subs, parts, out)
	checkAssignment(t, subs, parts, out2)
	if n := moved(out, out2); n != 2 {
		t.Errorf("join moved %d partitions, want 2: %v", n, out2)
	}

	// m1 leaves: only its partitions move.
	delete(subs, "m1")
	out3 := assignSticky(subs, parts, out2)
	checkAssignment(t, subs, parts, out3)
	for m := range subs {
		if !out2[m].subsetOf(out3[m]) {
			t.Errorf("leave took partitions from %s: %v -> %v", m, out2[m].sorted(), out3[m].sorted())
		}
	}
	// Nobody subscribes to b now: it is assigned to nobody.
	for m, set := range out3 {
		if len(set.ofTopic("b")) > 0 {
			t.Errorf("%s got b", m)
		}
	}
}

func TestAssignStickyEmptyAndMissingTopics(t *testing.T) {
	subs := map[string][]string{"m1": {"gone"}, "m2": {"gone", "a"}}
	out := assignSticky(subs, map[string]int32{"a": 1}, map[string]tpSet{"m1": tps("gone", 0, "a", 0)})
	checkAssignment(t, subs, map[string]int32{"a": 1}, out)
	if len(out["m1"]) != 0 || !out["m2"].equal(tps("a", 0)) {
		t.Errorf("got %v", out)
	}
	if got := assignSticky(nil, nil, nil); len(got) != 0 {
		t.Errorf("empty: %v", got)
	}
}

// TestAssignStickyRandomized checks the contract, determinism and minimal
// movement on random joins and leaves.
func TestAssignStickyRandomized(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		topics := []string{"a", "b", "c", "d"}
		parts := map[string]int32{}
		for _, tp := range topics {
			parts[tp] = int32(rng.IntN(12))
		}
		subs := map[string][]string{}
		var current map[string]tpSet
		for step := 0; step < 30; step++ {
			before := current
			var leaver string
			if len(subs) > 0 && rng.IntN(3) == 0 {
				ids := slices.Sorted(mapKeys(subs))
				leaver = ids[rng.IntN(len(ids))]
				delete(subs, leaver)
			} else {
				var ts []string
				for _, tp := range topics {
					if rng.IntN(2) == 0 {
						ts = append(ts, tp)
					}
				}
				subs[fmt.Sprintf("m%02d", step)] = ts
			}
			current = assignSticky(subs, parts, before)
			checkAssignment(t, subs, parts, current)
			if again := assignSticky(subs, parts, before); !sameAssignment(again, current) {
				t.Fatalf("seed %d step %d: not deterministic", seed, step)
			}
			// Minimal movement per topic: after a join or a leave, a member
			// keeps min(what it had, its new count) of each topic.
			for m := range subs {
				for _, tp := range topics {
					had := len(before[m].intersect(current[m]).ofTopic(tp))
					want := min(len(before[m].ofTopic(tp)), len(current[m].ofTopic(tp)))
					if had != want {
						t.Fatalf("seed %d step %d: %s kept %d of %s, want %d (before %v after %v)",
							seed, step, m, had, tp, want, before[m].sorted(), current[m].sorted())
					}
				}
			}
		}
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func sameAssignment(a, b map[string]tpSet) bool {
	if len(a) != len(b) {
		return false
	}
	for m, s := range a {
		if !s.equal(b[m]) {
			return false
		}
	}
	return true
}

// assignRange: contiguous ranges per topic in member-id order, the first
// n%k members one more; topics subscribed by some members only go to them.
func TestAssignRange(t *testing.T) {
	got := assignRange(map[string][]string{"b": {"t", "u"}, "a": {"t"}, "c": {"t", "u"}}, map[string]int32{"t": 7, "u": 2, "v": 3})
	want := map[string][]TopicPartition{
		"a": {{"t", 0}, {"t", 1}, {"t", 2}},
		"b": {{"t", 3}, {"t", 4}, {"u", 0}},
		"c": {{"t", 5}, {"t", 6}, {"u", 1}},
	}
	for m, tps := range want {
		if s := got[m].sorted(); !slices.Equal(s, tps) {
			t.Errorf("%s: %v, want %v", m, s, tps)
		}
	}
}
