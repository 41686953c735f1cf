package group

import (
	"cmp"
	"slices"
)

// assignSticky computes a target assignment: for every topic some member
// subscribes to, the topic's partitions are split among its subscribers so
// that their counts differ by at most one, keeping every partition with the
// member current gives it whenever balance allows (a join or a leave moves
// only the partitions it must). It is a pure function: the same inputs give
// the same output whatever the maps' iteration order.
//
// subscriptions: member id -> subscribed topics. partitions: topic ->
// partition count (a topic missing or with 0 partitions is assigned to
// nobody). current: the previous target (member id -> partitions); entries for
// members or partitions that no longer exist are ignored.
//
// Balance is per topic (a member subscribed to several topics gets a fair
// share of each). Which subscribers of a topic get the one extra partition
// when the count does not divide evenly: those holding most of it already,
// then those with the least load from the topics assigned before (topics are
// taken in name order), then the smallest member id.
func assignSticky(subscriptions map[string][]string, partitions map[string]int32, current map[string]tpSet) map[string]tpSet {
	members := make([]string, 0, len(subscriptions))
	subscribers := map[string][]string{} // topic -> member ids, sorted
	for m, topics := range subscriptions {
		members = append(members, m)
		for _, t := range topics {
			subscribers[t] = append(subscribers[t], m)
		}
	}
	slices.Sort(members)
	out := make(map[string]tpSet, len(members))
	for _, m := range members {
		out[m] = tpSet{}
	}
	topics := make([]string, 0, len(subscribers))
	for t := range subscribers {
		topics = append(topics, t)
	}
	slices.Sort(topics)

	load := map[string]int{}
	for _, t := range topics {
		assignTopic(t, partitions[t], slices.Compact(slices.Sorted(slices.Values(subscribers[t]))), current, load, out)
	}
	return out
}

// assignTopic splits topic t's n partitions among its subscribers subs
// (sorted) into out, as assignSticky says, and adds each one's share to
// load.
func assignTopic(t string, n int32, subs []string, current map[string]tpSet, load map[string]int, out map[string]tpSet) {
	if n <= 0 || len(subs) == 0 {
		return
	}
	// What each subscriber holds of t now (valid partitions only, each
	// partition credited to one member: the first in id order).
	taken := make([]bool, n)
	held := map[string][]int32{}
	for _, m := range subs {
		for _, tp := range current[m].sorted() {
			if tp.Topic == t && tp.Partition >= 0 && tp.Partition < n && !taken[tp.Partition] {
				taken[tp.Partition] = true
				held[m] = append(held[m], tp.Partition)
			}
		}
	}
	base, extra := int(n)/len(subs), int(n)%len(subs)
	order := slices.Clone(subs)
	slices.SortStableFunc(order, func(a, b string) int {
		if c := cmp.Compare(len(held[b]), len(held[a])); c != 0 {
			return c
		}
		if c := cmp.Compare(load[a], load[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	quota := map[string]int{}
	for i, m := range order {
		quota[m] = base
		if i < extra {
			quota[m]++
		}
	}
	free := make([]bool, n)
	for p := range free {
		free[p] = true
	}
	for _, m := range subs {
		keep := held[m][:min(len(held[m]), quota[m])]
		for _, p := range keep {
			out[m][TopicPartition{t, p}] = struct{}{}
			free[p] = false
		}
	}
	next := int32(0)
	for _, m := range subs {
		for count := len(out[m].ofTopic(t)); count < quota[m]; count++ {
			for !free[next] {
				next++
			}
			free[next] = false
			out[m][TopicPartition{t, next}] = struct{}{}
		}
		load[m] += quota[m]
	}
}

// ofTopic returns the partitions of topic t in s.
func (s tpSet) ofTopic(t string) []int32 {
	var out []int32
	for tp := range s {
		if tp.Topic == t {
			out = append(out, tp.Partition)
		}
	}
	return out
}

// assignRange computes a target assignment with Kafka's range rule: for
// every topic, its subscribers in member-id order take contiguous ranges
// of its partitions, the first n%k of them one more. It is not sticky: a
// join or a leave may move every partition (the hand-over rule still
// makes each move wait for its revocation). A pure function.
func assignRange(subscriptions map[string][]string, partitions map[string]int32) map[string]tpSet {
	out := make(map[string]tpSet, len(subscriptions))
	subscribers := map[string][]string{}
	for m, topics := range subscriptions {
		out[m] = tpSet{}
		for _, t := range topics {
			subscribers[t] = append(subscribers[t], m)
		}
	}
	for t, subs := range subscribers {
		subs = slices.Compact(slices.Sorted(slices.Values(subs)))
		n := partitions[t]
		if n <= 0 {
			continue
		}
		base, extra := int(n)/len(subs), int(n)%len(subs)
		next := int32(0)
		for i, m := range subs {
			count := base
			if i < extra {
				count++
			}
			for range count {
				out[m][TopicPartition{t, next}] = struct{}{}
				next++
			}
		}
	}
	return out
}
